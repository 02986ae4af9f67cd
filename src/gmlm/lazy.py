"""Package names imported when first used (PEP 562), so that importing a package's light
modules (its torch-free settings, for `gmlm --help`) does not load its heavy ones."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any


def lazy_names(package: str, homes: Mapping[str, str]) -> Callable[[str], Any]:
    """The module ``__getattr__`` of `package` that imports each name of `homes` (name ->
    the module defining it) on first use and keeps it in the package."""

    def __getattr__(name: str) -> Any:
        if name not in homes:
            raise AttributeError(f"module '{package}' has no attribute '{name}'")
        value = getattr(importlib.import_module(homes[name]), name)
        setattr(sys.modules[package], name, value)
        return value

    return __getattr__
