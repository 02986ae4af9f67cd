"""A checkpoint's fingerprint: what tells whether two folders translate alike."""

from __future__ import annotations

import hashlib
from pathlib import Path

from gmlm.checkpoint.meta import DECODING_FILE, MODEL_FILE, TOKENIZER_DIR


def checkpoint_fingerprint(folder: Path) -> str:
    """A digest of what decides a checkpoint's translations: its weights, its tokenizer and its
    decoding defaults (decoding.json, if any); equal digests, equal outputs."""
    digest = hashlib.sha256()
    for name in (MODEL_FILE, f"{TOKENIZER_DIR}/tokenizer.model", DECODING_FILE):
        path = folder / name
        digest.update(name.encode() + b"\0")
        if path.is_file():
            with path.open("rb") as handle:
                for block in iter(lambda: handle.read(1 << 20), b""):
                    digest.update(block)
        digest.update(b"\0")
    return "sha256:" + digest.hexdigest()
