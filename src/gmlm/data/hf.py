"""Hugging Face `datasets` adapter, so that WMT14/16/17 are prepared like any other corpus.

`datasets` is an optional dependency (`pip install 'gmlm[hf]'`), imported only when an
`hf:` corpus is used. The spec is `hf:NAME:PAIR[:CONFIG]`: NAME is a hub dataset (wmt/wmt14,
wmt/wmt16, ...), a local copy of one (a folder laid out as the hub serves it: parquet or json
files per config and split, with the README.md that maps them), or a folder written by
`DatasetDict.save_to_disk`; PAIR (de-en, en-de, ...)
picks the two languages and their direction; CONFIG defaults to the pair with English last,
which is how the WMT datasets name theirs (`wmt14` has `de-en`, not `en-de`).

Examples hold either a `translation` mapping (`{"translation": {"de": ..., "en": ...}}`, the
WMT layout) or one column per language. Splits `train`, `validation` (or `valid`/`dev`) and
`test` become train, valid and test.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gmlm.data.parallel import Corpus, ParallelText, parse_pair
from gmlm.errors import GmlmError

SPLIT_NAMES: dict[str, str] = {
    "train": "train",
    "validation": "valid",
    "valid": "valid",
    "dev": "valid",
    "test": "test",
}


# The files by which `save_to_disk` folders (DatasetDict, Dataset) are told from hub copies.
SAVED_MARKERS = ("dataset_dict.json", "state.json")


def import_datasets() -> Any:
    try:
        return importlib.import_module("datasets")
    except ImportError:
        raise GmlmError(
            "hf: corpora need the optional Hugging Face extra: pip install 'gmlm[hf]' "
            "(or pip install datasets)"
        ) from None


def default_config(src_lang: str, tgt_lang: str) -> str:
    if src_lang == "en" and tgt_lang != "en":
        return f"{tgt_lang}-{src_lang}"
    return f"{src_lang}-{tgt_lang}"


def read_hf(arg: str, spec: str) -> Corpus:
    """Load `NAME:PAIR[:CONFIG]` with `datasets` and convert it."""
    parts = arg.split(":")
    if len(parts) not in (2, 3) or not all(parts):
        raise GmlmError(f"corpus '{spec}': expected hf:NAME:PAIR[:CONFIG], e.g. hf:wmt/wmt14:de-en")
    name, pair = parts[0], parts[1]
    src_lang, tgt_lang = parse_pair(pair, spec)
    config = parts[2] if len(parts) == 3 else default_config(src_lang, tgt_lang)
    datasets = import_datasets()
    try:
        if any((Path(name) / marker).is_file() for marker in SAVED_MARKERS):
            data = datasets.load_from_disk(name)
        else:
            data = datasets.load_dataset(name, config)
    except Exception as err:  # the library raises many types (network, missing config, ...)
        raise GmlmError(f"corpus '{spec}': datasets could not load it: {err}") from None
    return corpus_from_hf(data, src_lang, tgt_lang, name=spec)


def corpus_from_hf(data: Mapping[str, Any], src_lang: str, tgt_lang: str, *, name: str) -> Corpus:
    """Convert a `DatasetDict` (or any mapping split -> dataset-like object) into a Corpus."""
    splits: dict[str, ParallelText] = {}
    for hf_split, dataset in data.items():
        split = SPLIT_NAMES.get(hf_split)
        if split is None:
            continue
        splits[split] = _pairs(dataset, src_lang, tgt_lang, f"{name} [{hf_split}]")
    if "train" not in splits:
        raise GmlmError(f"corpus '{name}': no 'train' split (found {sorted(data)})")
    return Corpus(name, splits, src_lang, tgt_lang)


def _pairs(dataset: Any, src_lang: str, tgt_lang: str, where: str) -> ParallelText:
    columns = list(dataset.column_names)
    if "translation" in columns:
        rows = dataset["translation"]
        try:
            return ParallelText(
                [r[src_lang] or "" for r in rows], [r[tgt_lang] or "" for r in rows]
            )
        except (KeyError, TypeError):
            raise GmlmError(
                f"{where}: 'translation' entries lack '{src_lang}' or '{tgt_lang}'"
            ) from None
    if src_lang in columns and tgt_lang in columns:
        return ParallelText(
            [s or "" for s in dataset[src_lang]], [t or "" for t in dataset[tgt_lang]]
        )
    raise GmlmError(
        f"{where}: expected a 'translation' column or columns '{src_lang}' and '{tgt_lang}', "
        f"found {columns}"
    )
