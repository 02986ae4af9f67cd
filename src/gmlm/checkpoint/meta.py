"""A checkpoint folder's file names, and its meta.json as a typed record (:class:`Meta`).

Every module that writes or reads a checkpoint's files takes their names from here, and reads
meta.json through :class:`Meta` (step, kind, languages, the tokenizer's fingerprint, the
weights' digest, an export's source), never as an untyped dict.

A meta.json read and written again is the same file to the byte: :class:`Meta` keeps the
order of the file's entries (a checkpoint exported by an earlier gmlm orders them otherwise
than training does today), and the entries it does not know, as they are. An entry set by
:meth:`Meta.updated` keeps its place where the record has it and comes last where not, as
``{**meta, key: value}`` did.
"""

from __future__ import annotations

import dataclasses
import json
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gmlm.errors import GmlmError
from gmlm.io import MODEL_FILE, atomic_write_json

__all__ = [
    "CONFIG_FILE",
    "DECODING_FILE",
    "META_FILE",
    "MODEL_FILE",
    "TOKENIZER_DIR",
    "Meta",
    "load_json",
]

# The files of a checkpoint folder (gmlm.checkpoint's docstring says what each holds).
CONFIG_FILE = "config.yaml"
TOKENIZER_DIR = "tokenizer"
META_FILE = "meta.json"
DECODING_FILE = "decoding.json"


def load_json(path: Path) -> dict[str, Any]:
    """The JSON object in the checkpoint file `path`; a missing, corrupt or non-object file
    is a GmlmError naming it."""
    if not path.is_file():
        raise GmlmError(f"{path}: missing; the checkpoint is incomplete")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise GmlmError(f"{path}: corrupt JSON ({err})") from None
    if not isinstance(data, dict):
        raise GmlmError(f"{path}: corrupt checkpoint metadata")
    return data


@dataclass(frozen=True)
class Meta:
    """A checkpoint's meta.json. Each entry is None where the file has none (or null).

    Training writes step, kind, torch (its version), parameters, src_lang and tgt_lang (where
    the data records them), averaged (the history files an `averaged` checkpoint averages)
    tokenizer_sha256 (the fingerprint of the tokenizer the weights were made with) and
    weights_sha256 (the digest of model.safetensors as written, checked on loading); `gmlm
    export` adds exported_from and exported_from_fingerprint (its source:
    gmlm.checkpoint.source) and weights_dtype. `other`: entries this gmlm does not know, as
    read; `order`: the entries' order in the file (see the module docstring)."""

    step: int | None = None
    kind: str | None = None
    torch: str | None = None
    parameters: int | None = None
    src_lang: str | None = None
    tgt_lang: str | None = None
    averaged: tuple[str, ...] | None = None
    exported_from: str | None = None
    exported_from_fingerprint: str | None = None
    weights_dtype: str | None = None
    tokenizer_sha256: str | None = None
    weights_sha256: str | None = None
    other: Mapping[str, Any] = field(default_factory=dict)
    order: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        # The entries as written: those of `order` still there (a null read stays null), then
        # any other entry set, in field order.
        present = [k for k in self.order if k in _TYPES or k in self.other]
        present += [k for k in _TYPES if getattr(self, k) is not None and k not in present]
        present += [k for k in self.other if k not in present]
        object.__setattr__(self, "order", tuple(present))

    @classmethod
    def from_json(cls, data: Mapping[str, Any], where: str = META_FILE) -> Meta:
        """The record of the meta.json entries `data`; an entry of the wrong type is a
        GmlmError naming `where`."""
        known: dict[str, Any] = {}
        for key, value in data.items():
            if key in _TYPES and value is not None:
                known[key] = _checked(key, value, where)
        other = {key: value for key, value in data.items() if key not in _TYPES}
        return cls(**known, other=other, order=tuple(data))

    @classmethod
    def read(cls, path: Path) -> Meta:
        """The meta.json at `path` (a missing or corrupt one is a GmlmError naming it)."""
        return cls.from_json(load_json(path), str(path))

    @classmethod
    def of(cls, folder: Path) -> Meta:
        """The meta.json of the checkpoint in `folder`; an empty record where it has none."""
        path = Path(folder) / META_FILE
        return cls.read(path) if path.is_file() else cls()

    def to_json(self) -> dict[str, Any]:
        """The entries as meta.json holds them, in order."""
        out = {}
        for key in self.order:
            value = getattr(self, key) if key in _TYPES else self.other[key]
            out[key] = list(value) if isinstance(value, tuple) else value
        return out

    def updated(self, **entries: Any) -> Meta:
        """This record with `entries` set: each keeps its place where the record has it, and
        comes after the others, in the order given, where not."""
        return Meta.from_json({**self.to_json(), **entries})

    def write(self, folder: Path) -> None:
        """Write `folder`/meta.json (atomically), indented as every gmlm JSON file is."""
        atomic_write_json(Path(folder) / META_FILE, self.to_json())

    @property
    def pair(self) -> tuple[str, str] | None:
        """The (source, target) languages, or None where either is missing or empty."""
        src, tgt = self.src_lang, self.tgt_lang
        return (src, tgt) if src and tgt else None


def _entry_types() -> dict[str, type]:
    """The type each known entry holds as JSON reads it, from Meta's fields (a tuple field:
    a list)."""
    hints = typing.get_type_hints(Meta)
    types = {}
    for f in dataclasses.fields(Meta):
        if f.name in ("other", "order"):
            continue
        (held,) = (arg for arg in typing.get_args(hints[f.name]) if arg is not type(None))
        types[f.name] = list if typing.get_origin(held) is tuple else held
    return types


_TYPES = _entry_types()


def _checked(key: str, value: Any, where: str) -> Any:
    wanted = _TYPES[key]
    fits = isinstance(value, wanted) and not isinstance(value, bool)
    if wanted is list:
        fits = fits and all(isinstance(item, str) for item in value)
    if not fits:
        what = "a list of file names" if wanted is list else f"a {wanted.__name__}"
        raise GmlmError(f"{where}: corrupt checkpoint metadata: {key} {value!r} is not {what}")
    return tuple(value) if wanted is list else value
