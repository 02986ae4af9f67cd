"""Safetensors files that carry a digest of their own content, checked whenever they are read.

Every safetensors file gmlm writes (a checkpoint's model.safetensors, a run's optimizer and RNG
state, the history weights kept for averaging, which are byte copies of model.safetensors)
records in its header's `__metadata__` the SHA-256 of its tensor entries (names, dtypes,
shapes, offsets) and of its data bytes (DIGEST_KEY). A file whose header is intact still loads
after its bytes are changed (a bad disk, a partial copy over it, an edit), and would resume a
run or average weights from garbage without any other error; reading checks the digest
instead. Files written without it (by an earlier gmlm, or by another tool) are not checked.
"""

from __future__ import annotations

import hashlib
import json
import struct
from pathlib import Path
from typing import IO, Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save

from gmlm.errors import GmlmError

DIGEST_KEY = "gmlm_content_sha256"
_METADATA = "__metadata__"
_LENGTH = struct.Struct("<Q")  # a safetensors file opens with its header's length in bytes


def save_tensors(tensors: dict[str, torch.Tensor], path: Path) -> None:
    """Write `tensors` as the safetensors file `path`, its content digest in its header."""
    plain = {k: v.detach().contiguous() for k, v in tensors.items()}
    unsigned = save(plain)
    header, start = _header(unsigned, len(unsigned), Path("<memory>"))
    digest = _digest(header)
    digest.update(memoryview(unsigned)[start:])
    del unsigned  # one serialized copy in memory at a time
    path.write_bytes(save(plain, metadata={DIGEST_KEY: digest.hexdigest()}))


def load_tensors(path: Path) -> dict[str, torch.Tensor]:
    """The tensors of the safetensors file `path`; a file missing, unreadable, or whose bytes
    are not those its recorded digest says, is a GmlmError naming it."""
    if not path.is_file():
        raise GmlmError(f"{path}: missing; the checkpoint is incomplete")
    try:
        tensors = load_file(str(path))
    except (SafetensorError, OSError, ValueError) as err:
        raise GmlmError(f"{path}: corrupt or truncated safetensors file ({err})") from None
    check_content_digest(path)
    return tensors


def check_content_digest(path: Path) -> None:
    """Refuse the safetensors file `path` where its content is not what its header's digest
    records (DIGEST_KEY); a file without one is not checked."""
    with path.open("rb") as handle:  # left at the data's start
        header, _start = _header(handle, path.stat().st_size, path)
        metadata = header.get(_METADATA)
        recorded = metadata.get(DIGEST_KEY) if isinstance(metadata, dict) else None
        if recorded is None:
            return
        digest = _digest(header)
        actual = hashlib.file_digest(handle, lambda: digest).hexdigest()
    if actual != recorded:
        raise GmlmError(
            f"{path}: its content (sha256 {actual[:12]}...) is not the {str(recorded)[:12]}... "
            "its header records: the file was damaged or changed after gmlm wrote it; restore "
            "it from a copy, or write it again"
        )


def _digest(header: dict[str, Any]) -> Any:
    """A SHA-256 started with the tensor entries of `header` (everything but its metadata)."""
    entries = {k: v for k, v in header.items() if k != _METADATA}
    return hashlib.sha256(json.dumps(entries, sort_keys=True, separators=(",", ":")).encode())


def _header(source: bytes | IO[bytes], size: int, path: Path) -> tuple[dict[str, Any], int]:
    """The parsed header of a safetensors file of `size` bytes (its bytes, or an open file at
    its start) and where its data begins; a header that is not one is a GmlmError naming
    `path`."""
    raw = source[: _LENGTH.size] if isinstance(source, bytes) else source.read(_LENGTH.size)
    bad = f"{path}: corrupt or truncated safetensors file"
    if len(raw) != _LENGTH.size:
        raise GmlmError(f"{bad} (shorter than its header)")
    (length,) = _LENGTH.unpack(raw)
    if length > size - _LENGTH.size:
        raise GmlmError(f"{bad} (its header claims {length:,} bytes of {size:,})")
    end = _LENGTH.size + length
    text = source[_LENGTH.size : end] if isinstance(source, bytes) else source.read(length)
    try:
        header = json.loads(text) if len(text) == length else None
    except (UnicodeDecodeError, json.JSONDecodeError):
        header = None
    if not isinstance(header, dict):
        raise GmlmError(f"{bad} (its header is not a JSON object of {length} bytes)")
    return header, end
