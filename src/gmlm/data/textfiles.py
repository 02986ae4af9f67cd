"""Reading corpus files: plain or gzip text, one sentence per line, TSV pairs, JSON lines.

Every reader checks the encoding and shape of its input and raises `GmlmError` naming the
file, the line and the fix, never a traceback from deep inside. Files are read whole: the
corpora gmlm targets (up to a few million pairs) fit in memory comfortably.
"""

from __future__ import annotations

import gzip
import json
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gmlm.errors import GmlmError


def read_bytes(path: Path) -> bytes:
    """The (decompressed, for `.gz`) content of `path`, with clear errors."""
    path = Path(path)
    if not path.is_file():
        raise GmlmError(f"{path}: file not found")
    try:
        if path.suffix == ".gz":
            with gzip.open(path, "rb") as handle:
                return handle.read()
        return path.read_bytes()
    except (gzip.BadGzipFile, EOFError, zlib.error) as err:
        raise GmlmError(
            f"{path}: not a valid gzip file ({err}); decompress it or rename it without .gz"
        ) from None
    except OSError as err:
        raise GmlmError(f"{path}: cannot read: {err.strerror or err}") from None


def decode_utf8(data: bytes, path: Path) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        column = err.start - (data.rfind(b"\n", 0, err.start) + 1) + 1
        raise GmlmError(
            f"{path}:{line}: invalid UTF-8 (byte 0x{data[err.start]:02x} at column {column}); "
            "convert the file to UTF-8, e.g. `iconv -f latin1 -t utf-8 IN > OUT`"
        ) from None


def read_lines(path: Path) -> list[str]:
    """The lines of a UTF-8 text file (`.gz` allowed), without line terminators.

    Only `\\n` ends a line (a trailing `\\r` is whitespace that cleaning removes); other
    Unicode line separators inside a line are kept, so line numbers match `wc -l` and editors.
    """
    path = Path(path)
    text = decode_utf8(read_bytes(path), path)
    if text.startswith("\ufeff"):
        text = text[1:]
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def read_parallel_files(src_path: Path, tgt_path: Path) -> tuple[list[str], list[str]]:
    """Two line-aligned files: line i of one translates line i of the other."""
    src = read_lines(src_path)
    tgt = read_lines(tgt_path)
    if len(src) != len(tgt):
        raise GmlmError(
            f"line counts differ: {src_path} has {len(src):,} lines but {tgt_path} has "
            f"{len(tgt):,}; parallel files must be line-aligned (one sentence per line, "
            "line i of one translating line i of the other)"
        )
    return src, tgt


def read_tsv(path: Path) -> tuple[list[str], list[str]]:
    """`source<TAB>target` per line; any other number of tabs is an error naming the line."""
    path = Path(path)
    src: list[str] = []
    tgt: list[str] = []
    for number, line in enumerate(read_lines(path), start=1):
        fields = line.rstrip("\r").split("\t")
        if len(fields) != 2:
            raise GmlmError(
                f"{path}:{number}: expected 2 tab-separated fields (source<TAB>target), found "
                f"{len(fields)}; remove stray tabs inside sentences"
            )
        src.append(fields[0])
        tgt.append(fields[1])
    return src, tgt


def read_jsonl(path: Path, keys: Sequence[str] = ("src", "tgt")) -> tuple[list[str], list[str]]:
    """One JSON object per line holding the two sentences under `keys`.

    A key may also be found under a `translation` object, the Hugging Face layout
    (`{"translation": {"de": "...", "en": "..."}}`). Blank lines are skipped.
    """
    path = Path(path)
    src: list[str] = []
    tgt: list[str] = []
    for number, line in enumerate(read_lines(path), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as err:
            raise GmlmError(
                f"{path}:{number}: invalid JSON ({err.msg}); one object per line"
            ) from None
        pair = [_json_field(obj, key, path, number) for key in keys]
        src.append(pair[0])
        tgt.append(pair[1])
    return src, tgt


def _json_field(obj: Any, key: str, path: Path, number: int) -> str:
    if isinstance(obj, dict):
        value = obj.get(key)
        if value is None and isinstance(obj.get("translation"), dict):
            value = obj["translation"].get(key)
        if isinstance(value, str):
            return value
        if value is not None:
            raise GmlmError(f"{path}:{number}: field '{key}' is not a string")
    raise GmlmError(
        f"{path}:{number}: no string field '{key}' (looked at the top level and under "
        "'translation'); name the keys with jsonl:FILE:SRCKEY,TGTKEY"
    )
