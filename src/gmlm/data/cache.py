"""Where downloaded inputs are kept between runs: `$GMLM_CACHE`, default `~/.cache/gmlm`.

The cache lives outside the repository so that downloaded corpora (some of them not ours to
redistribute) can never be committed by accident.
"""

from __future__ import annotations

import os
from pathlib import Path

CACHE_ENV = "GMLM_CACHE"


def cache_dir() -> Path:
    """The gmlm cache folder (not created here); `$GMLM_CACHE` overrides the default."""
    env = os.environ.get(CACHE_ENV, "").strip()
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME", "").strip()
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "gmlm"
