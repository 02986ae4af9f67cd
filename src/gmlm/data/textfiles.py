"""Reading corpus files: plain or gzip text, one sentence per line, TSV pairs, JSON lines.

Every reader checks the encoding and shape of its input and raises `GmlmError` naming the
file, the line and the fix, never a traceback from deep inside. Files are read whole: the
corpora gmlm targets (up to a few million pairs) fit in memory comfortably. What does not fit
is refused before it is read (a file's size, a gzip file's recorded size) or, where the size
is not known in advance (standard input, a pipe, a gzip file of several members), as soon as
what was read and its decoded text would outgrow the memory free
(:func:`gmlm.memory.check_memory`), never by the kernel's out-of-memory killer.
"""

from __future__ import annotations

import gzip
import json
import stat
import struct
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any, AnyStr, Protocol

from gmlm.errors import GmlmError
from gmlm.memory import check_memory, format_bytes

# Read in blocks of this size, the memory checked after each.
READ_BLOCK = 64 * 2**20
# Bytes held at once per byte read: the bytes and their decoded text (a lower bound, as
# gmlm.memory's estimates are: the lines split from the text come on top).
HELD_PER_BYTE = 2


def read_bytes(path: Path) -> bytes:
    """The (decompressed, for `.gz`) content of `path`, with clear errors; refused before it
    is opened where its known size would not fit in memory, and as it is read otherwise."""
    path = Path(path)
    if path.is_dir():
        raise GmlmError(f"{path} is a folder; give the path of a file inside it")
    if not path.exists():
        raise GmlmError(f"{path}: file not found")
    try:  # not only regular files: a pipe such as bash's <(zcat corpus.gz) reads fine
        _check_room(_known_size(path), path)
        if path.suffix == ".gz":
            with gzip.open(path, "rb") as handle:
                return read_bounded(handle, path)
        with path.open("rb") as raw:
            return read_bounded(raw, path)
    except (gzip.BadGzipFile, EOFError, zlib.error) as err:
        raise GmlmError(
            f"{path}: not a valid gzip file ({err}); decompress it or rename it without .gz"
        ) from None
    except OSError as err:
        raise GmlmError(f"{path}: cannot read: {err.strerror or err}") from None


class Readable(Protocol):
    """A binary file or stream: standard input's buffer, an open file, a gzip file."""

    def read(self, size: int = -1, /) -> bytes: ...


def read_bounded(handle: Readable, origin: Path) -> bytes:
    """All of `handle` (named `origin` in messages), refused with a MemoryLimitError once
    what it holds would outgrow the memory free (checked after each block read)."""
    blocks = []
    read = 0
    while block := handle.read(READ_BLOCK):
        blocks.append(block)
        read += len(block)
        _check_room(read, origin)
    return b"".join(blocks)


def _check_room(size: int, origin: Path) -> None:
    check_memory(
        HELD_PER_BYTE * size,
        f"reading {origin} ({format_bytes(size)} or more, held whole with its decoded text)",
        "split it into smaller files (e.g. `split -l 1000000 FILE part-`) and run the command "
        "on each, or run it where more memory is free",
    )


def _known_size(path: Path) -> int:
    """The bytes `path` holds, decompressed for `.gz` (a lower bound: the last member's size,
    modulo 4 GiB, as the gzip trailer records it); 0 where it is not a regular file."""
    info = path.stat()
    if not stat.S_ISREG(info.st_mode):
        return 0
    if path.suffix != ".gz" or info.st_size < 4:
        return info.st_size
    with path.open("rb") as handle:
        handle.seek(-4, 2)
        (size,) = struct.unpack("<I", handle.read(4))
    return int(size)


# Byte-order marks of the encodings a text file not in UTF-8 is most often in, longest first
# (UTF-32LE's starts with UTF-16LE's), as iconv names them.
BOMS = (
    (b"\xff\xfe\x00\x00", "utf-32"),
    (b"\x00\x00\xfe\xff", "utf-32"),
    (b"\xff\xfe", "utf-16"),
    (b"\xfe\xff", "utf-16"),
)


def decode_utf8(data: bytes, path: Path) -> str:
    """`data`, the content of `path`, decoded as UTF-8; other text is a GmlmError that names
    where and says how to convert it: from UTF-16 or UTF-32 (a byte-order mark at the start,
    or every other byte a NUL: UTF-16 in the byte order the NULs show), else from Latin-1, the
    usual single-byte encoding. A NUL byte is an error too, though valid UTF-8: no text holds
    one, and UTF-16 text of ASCII characters alone, without a byte-order mark, decodes as
    UTF-8 with a NUL after (or before) every character."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        _raise_if_wide(data, path)
        line, column = _place(data, err.start, b"\n")
        raise GmlmError(
            f"{path}:{line}: invalid UTF-8 (byte 0x{data[err.start]:02x} at column {column}); "
            "convert the file to UTF-8, e.g. `iconv -f latin1 -t utf-8 IN > OUT`"
        ) from None
    nul = text.find("\x00")
    if nul >= 0:
        _raise_if_wide(data, path)
        line, column = _place(text, nul, "\n")
        raise GmlmError(
            f"{path}:{line}: a NUL byte at column {column}; text holds none (is it a binary "
            "file, or text in another encoding?): remove them, e.g. `tr -d '\\000' < IN > OUT`"
        )
    return text


def _raise_if_wide(data: bytes, path: Path) -> None:
    """The error for UTF-16 or UTF-32 `data` (see :func:`decode_utf8`), if it is."""
    encoding = next((name for bom, name in BOMS if data.startswith(bom)), None)
    head = data[:4096]
    if encoding is None and head.count(0) * 3 >= len(head):  # ASCII in UTF-16, no BOM
        # the NUL of an ASCII character comes second in little-endian order
        encoding = "utf-16le" if head[1::2].count(0) > head[::2].count(0) else "utf-16be"
    if encoding is not None:
        raise GmlmError(
            f"{path}: {encoding.upper()} text, not UTF-8; convert the file to UTF-8, e.g. "
            f"`iconv -f {encoding} -t utf-8 IN > OUT`"
        )


def _place(text: AnyStr, index: int, newline: AnyStr) -> tuple[int, int]:
    """The line and column (both from 1) of position `index` of `text`."""
    return text.count(newline, 0, index) + 1, index - (text.rfind(newline, 0, index) + 1) + 1


def read_lines(path: Path) -> list[str]:
    """The lines of a UTF-8 text file (`.gz` allowed), without line terminators; see
    :func:`split_lines`."""
    path = Path(path)
    return split_lines(decode_utf8(read_bytes(path), path), path)


def split_lines(text: str, origin: Path) -> list[str]:
    """The lines of decoded `text` from `origin` (named in errors), without terminators.

    Only `\\n` ends a line, as for sacrebleu and `wc -l`, so line numbers and BLEU match
    theirs: a `\\r` before it (Windows line ends) is whitespace that cleaning removes, and
    other Unicode line separators inside a line are kept. Text those rules would misread is
    an error: CR line ends (more lone `\\r` than `\\n`: an old Mac file would be one line),
    and a byte-order mark anywhere but at the start (usually two files joined by `cat`),
    which would otherwise be translated or scored as text. A BOM at the start is dropped.
    """
    text = text.removeprefix("\ufeff")
    bom = text.find("\ufeff")
    if bom >= 0:
        line, column = _place(text, bom, "\n")
        raise GmlmError(
            f"{origin}:{line}: a byte-order mark (U+FEFF) at column {column}, inside the text; "
            "it usually comes from joining files that each start with one (`cat a b`): remove "
            "it, e.g. `sed -i 's/\\xEF\\xBB\\xBF//g' FILE`"
        )
    feeds = text.count("\n")
    lone_returns = text.count("\r") - text.count("\r\n")
    if lone_returns > feeds:
        raise GmlmError(
            f"{origin}: ends its lines with carriage returns (CR, old Mac style: {lone_returns:,} "
            f"CR without a line feed, {feeds:,} line feeds); gmlm, like sacrebleu and `wc -l`, "
            "breaks lines only at line feeds, so convert the file, e.g. "
            "`tr '\\r' '\\n' < IN > OUT`"
        )
    lines = text.split("\n")
    if lines[-1] == "":
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
