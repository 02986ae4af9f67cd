"""`prepare_dataset`: corpus -> cleaned splits -> tokenizer -> binarized, filtered dataset.

Steps (timed, reported in `stats.json`):

1. read the corpus (`gmlm.data.corpora`) and clean every sentence (`gmlm.data.cleaning`);
2. carve missing valid/test splits out of train by key hash (`gmlm.data.splits`);
3. hash the cleaned pairs, the settings and the tokenizer: when the output folder already
   holds a complete dataset with that hash it is reused as is;
4. train the joint SentencePiece model on the training split (or reuse `tokenizer.path`);
5. encode every split and filter it: training drops empty, too-long and length-ratio outliers,
   valid/test drop only what the models cannot take (empty, too long) from the binarized rows
   (their text files keep every pair, as evaluation references);
6. write everything into a temporary sibling folder, `manifest.json` last, then rename it
   into place, so an interrupted run never leaves a dataset that a later run would trust.
   Files of someone else's in a dataset folder being rebuilt are hard-linked (or copied) into
   the new folder first: only what prepare writes is replaced, and at every moment the old or
   the new folder holds them. The output folder is locked from the start (`gmlm.locking`):
   a second prepare into it fails at once; the lock ends with the rename, the last write.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal, NamedTuple

import numpy as np
import sentencepiece as spm
from tqdm import tqdm

from gmlm import provenance
from gmlm.config import (
    SEED,
    Range,
    bounds,
    check_settings,
    field_range,
    save_config,
    to_dict,
)
from gmlm.data.binarized import (
    CONFIG,
    DATASET_FILES,
    FORMAT,
    FORMAT_VERSION,
    MANIFEST,
    STATS,
    load_dataset,
    split_digests,
    token_dtype,
    write_split,
    write_text,
)
from gmlm.data.cleaning import filter_pairs, normalize
from gmlm.data.corpora import carve_splits, parse_spec, read_corpus
from gmlm.data.parallel import Corpus, ParallelText
from gmlm.data.settings import PrepareSettings
from gmlm.data.stats import DatasetStats, SplitStats, TokenizerStats, split_stats
from gmlm.data.tokenizer import MIN_COVERAGE, SPECIAL_IDS, Tokenizer
from gmlm.errors import GmlmError
from gmlm.io import (
    atomic_write_json,
    check_output_folder,
    make_dirs,
    replace_dir,
    restore_replaced,
    share_permissions,
    writing,
)
from gmlm.locking import LOCK_FILE, folder_lock

ENCODE_CHUNK = 50_000
# The settings the command line sets (gmlm.data.settings) declare their defaults and ranges.
PREPARE = PrepareSettings()


def prepared(name: str) -> dict[str, Range]:
    """The range metadata of the PrepareSettings field `name`, for the DataConfig field that
    holds it (CONFIG_KEYS)."""
    return bounds(field_range(PrepareSettings, name))


@dataclass
class TokenizerConfig:
    path: str = ""  # reuse the tokenizer in this folder instead of training one
    vocab_size: int = field(default=PREPARE.vocab_size, metadata=prepared("vocab_size"))
    model_type: Literal["unigram", "bpe"] = "unigram"
    character_coverage: float = field(
        default=0.9995, metadata=bounds(ge=MIN_COVERAGE, le=1, note="SentencePiece's least")
    )
    byte_fallback: bool = True
    # sentences sampled for training, bounds the time
    input_sentence_size: int = field(default=1_000_000, metadata=bounds(ge=1, le=10**9))
    seed: int = field(default=1, metadata=bounds(SEED))


@dataclass
class FilterConfig:
    # longest sequence the models take, counting the EOS batches append
    max_len: int = field(default=PREPARE.max_len, metadata=prepared("max_len"))
    # longer side / shorter side, in tokens; 0 disables (train only)
    max_ratio: float = field(default=3.0, metadata=bounds(ge=0, note="0 disables it"))


# A fraction of the training data carved out as a split.
FRACTION = bounds(ge=0, lt=0.5)


@dataclass
class DataConfig:
    corpus: str = "bible:de-en"
    valid: str = ""  # files/tsv/jsonl spec for the valid split; empty: carve it from train
    test: str = ""  # same for test
    valid_fraction: float = field(default=0.03, metadata=FRACTION)  # of train, when carving
    test_fraction: float = field(default=0.03, metadata=FRACTION)
    threads: int = field(default=PREPARE.threads, metadata=prepared("threads"))  # 0: all cores
    tokenizer: TokenizerConfig = field(default_factory=TokenizerConfig)
    filter: FilterConfig = field(default_factory=FilterConfig)


def validate_config(cfg: DataConfig) -> None:
    check_settings(cfg)
    if cfg.filter.max_len < 2:
        raise GmlmError(
            f"filter.max_len must be at least 2 (one token + EOS), got {cfg.filter.max_len}"
        )
    fractions = (cfg.valid_fraction, cfg.test_fraction)
    if sum(fractions) >= 0.5:
        raise GmlmError(f"valid_fraction + test_fraction must be < 0.5, got {fractions}")
    if cfg.tokenizer.vocab_size < 300 and not cfg.tokenizer.path:
        raise GmlmError(
            f"tokenizer.vocab_size={cfg.tokenizer.vocab_size} is too small: byte fallback alone "
            "takes 256 ids; use at least 300 (8000-16000 for real corpora)"
        )


def clean_corpus(corpus: Corpus, progress: bool = False) -> Corpus:
    splits = {}
    for name, text in corpus.splits.items():
        src = [
            normalize(s)
            for s in tqdm(text.src, desc=f"clean {name}", disable=None if progress else True)
        ]
        splits[name] = ParallelText(src, [normalize(t) for t in text.tgt], text.keys)
    return dataclasses.replace(corpus, splits=splits)


def content_hash(
    splits: dict[str, ParallelText], settings: dict[str, Any], tokenizer: Tokenizer | None
) -> str:
    """SHA-256 over the cleaned pairs, the settings, versions and a reused tokenizer."""
    h = hashlib.sha256()
    header = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "sentencepiece": spm.__version__,
        "settings": settings,
        "tokenizer": tokenizer.fingerprint if tokenizer else None,
    }
    h.update(json.dumps(header, sort_keys=True).encode())
    for name, text in splits.items():
        h.update(f"\x00{name}\x00{len(text)}\x00".encode())
        for start in range(0, len(text), ENCODE_CHUNK):
            end = start + ENCODE_CHUNK
            chunk = "".join(
                f"{s}\t{t}\n" for s, t in zip(text.src[start:end], text.tgt[start:end], strict=True)
            )
            h.update(chunk.encode("utf-8"))
    return h.hexdigest()


def _settings(cfg: DataConfig, corpus: Corpus) -> dict[str, Any]:
    """What shapes the output besides the pairs (paths and thread counts do not)."""
    data = to_dict(cfg)
    for key in ("corpus", "valid", "test", "threads"):
        data.pop(key)
    data["tokenizer"].pop("path")
    data["langs"] = [corpus.src_lang, corpus.tgt_lang]
    return data


class _Plan(NamedTuple):
    """What preparing would write, before anything is: the corpus as cleaned, its splits
    (carved where missing), the reused tokenizer, and their content hash. (A NamedTuple: the
    dataclasses of this module are its settings.)"""

    corpus: Corpus
    splits: dict[str, ParallelText]
    tokenizer: Tokenizer | None
    digest: str


def _plan(
    cfg: DataConfig,
    corpus: Corpus | None,
    progress: bool,
    say: Callable[[str], None],
    lap: Callable[[str], None],
) -> _Plan:
    """Read (unless given), clean and carve the corpus of `cfg`; `lap` marks the read."""
    if corpus is None:
        parse_spec(cfg.corpus)  # a mistyped spec fails before anything else happens
        say(f"reading {cfg.corpus}")
        corpus = read_corpus(cfg.corpus, valid=cfg.valid, test=cfg.test)
    lap("read")
    corpus = clean_corpus(corpus, progress)
    reused = Tokenizer.load(cfg.tokenizer.path) if cfg.tokenizer.path else None
    if reused is not None and reused.vocab_size != cfg.tokenizer.vocab_size:
        say(
            f"note: reusing the tokenizer of {cfg.tokenizer.path} ({reused.vocab_size:,} pieces); "
            f"tokenizer.vocab_size={cfg.tokenizer.vocab_size:,} applies only to a tokenizer "
            "trained here"
        )
    if "train" in corpus.splits or reused is None:
        splits = carve_splits(
            corpus, valid_fraction=cfg.valid_fraction, test_fraction=cfg.test_fraction
        )
        if "train" not in splits:
            raise GmlmError(f"corpus '{corpus.name}': the training split is empty")
    else:  # e.g. a test set to encode for released checkpoints: nothing to train or carve
        splits = {name: text for name, text in corpus.splits.items() if len(text) > 0}
        if not splits:
            raise GmlmError(f"corpus '{corpus.name}': every split is empty")
    digest = content_hash(splits, _settings(cfg, corpus), reused)
    return _Plan(corpus, splits, reused, digest)


def planned_content_hash(cfg: DataConfig, corpus: Corpus | None = None) -> str:
    """The content hash a dataset prepared now from `cfg` (and `corpus`, as
    `prepare_dataset` takes it) would have: the corpus read and cleaned, nothing written. A
    prepared dataset with another hash was made from other pairs, settings or tokenizer."""
    validate_config(cfg)
    return _plan(cfg, corpus, False, lambda _msg: None, lambda _name: None).digest


def _holds_dataset(out: Path) -> bool:
    """Whether `out` holds a (possibly outdated) dataset, which preparing again reuses or
    rebuilds; refuses to replace anything else (`gmlm.io.check_output_folder`)."""
    return check_output_folder(
        out, "--out", "a gmlm dataset", lambda folder: (folder / MANIFEST).is_file()
    )


def _remove_stale(out: Path) -> None:
    """Leftovers of runs killed before they could clean up (never trusted, just removed; a
    previous dataset that a kill left in `.NAME.old-*` instead of `out` was put back first)."""
    for pattern in (f".{out.name}.tmp-*", f".{out.name}.old-*"):
        for stale in out.parent.glob(pattern):
            shutil.rmtree(stale, ignore_errors=True)


def _keep_other_files(out: Path, tmp: Path) -> list[str]:
    """Hard-link (or copy) into the new dataset folder `tmp` every entry of the dataset folder
    `out` that is not a dataset file, so that replacing `out` by `tmp` keeps it; their names.

    `out` is not touched: until the rename, a crash leaves it as it was."""
    others = sorted(p.name for p in out.iterdir() if p.name not in {*DATASET_FILES, LOCK_FILE})
    for name in others:
        try:
            _link_or_copy(out / name, tmp / name)
        except OSError as err:
            raise GmlmError(
                f"--out {out}: cannot keep {name}, which is not a dataset file, in the rebuilt "
                f"folder ({err}); nothing was replaced: move {name} out of {out} and run again"
            ) from None
    return others


def _link_or_copy(source: Path, target: Path) -> None:
    """`target` becomes `source` again: folders recreated, symbolic links recreated, files
    hard-linked (copied where the file system cannot link)."""

    def link(src: str, dst: str) -> str:
        try:
            os.link(src, dst, follow_symlinks=False)
        except OSError:
            shutil.copy2(src, dst, follow_symlinks=False)
        return dst

    if source.is_dir() and not source.is_symlink():
        shutil.copytree(source, target, symlinks=True, copy_function=link)
    else:
        link(str(source), str(target))


def _up_to_date(out: Path, digest: str) -> bool:
    try:
        prepared = load_dataset(out)
        if prepared.content_hash != digest:
            return False
        for split in prepared.splits:
            prepared.split(split)  # checks file sizes
        return True
    except GmlmError:
        return False


def prepare_dataset(
    cfg: DataConfig,
    out_dir: str | Path,
    *,
    force: bool = False,
    progress: bool = False,
    corpus: Corpus | None = None,
    log: Callable[[str], None] | None = None,
) -> Path:
    """Build (or reuse) the prepared dataset for `cfg` in `out_dir`; returns `out_dir`.

    `corpus` replaces reading `cfg.corpus` (e.g. a Hugging Face dataset already in memory).
    `force` rebuilds even when an identical dataset exists. `log` receives progress messages.
    """
    say = log or (lambda _msg: None)
    validate_config(cfg)
    out = Path(out_dir)
    restore_replaced(out)  # a dataset a kill left aside goes back before the folder is locked
    with folder_lock(out, f"--out {out}"):
        return _prepare(cfg, out, force, progress, corpus, say)


def _prepare(
    cfg: DataConfig,
    out: Path,
    force: bool,
    progress: bool,
    corpus: Corpus | None,
    say: Callable[[str], None],
) -> Path:
    """`prepare_dataset` in the folder `out`, locked by this process."""
    _remove_stale(out)
    existing = _holds_dataset(out)
    seconds: dict[str, float] = {}
    t_start = clock = time.perf_counter()

    def lap(name: str) -> None:
        nonlocal clock
        now = time.perf_counter()
        seconds[name] = round(now - clock, 3)
        clock = now

    plan = _plan(cfg, corpus, progress, say, lap)
    corpus, splits, reused, digest = plan.corpus, plan.splits, plan.tokenizer, plan.digest
    lap("clean")
    if existing and not force and _up_to_date(out, digest):
        say(f"{out}: up to date (content hash {digest[:12]}), reusing it")
        return out

    make_dirs(out.parent, f"--out {out}")
    with writing(out):
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
        try:
            tokenizer = reused or _train_tokenizer(cfg, splits["train"], say)
            lap("tokenizer")
            stats, entries = _write_splits(cfg, splits, tokenizer, tmp, progress)
            lap("encode_write")
            seconds["total"] = round(time.perf_counter() - t_start, 3)
            _write_metadata(cfg, corpus, splits, tokenizer, tmp, stats, entries, digest, seconds)
            share_permissions(tmp)
            kept = _keep_other_files(out, tmp) if existing else []
            replace_dir(tmp, out)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    say(
        f"{out}: written (content hash {digest[:12]})"
        + (f"; kept what prepare did not write: {', '.join(kept)}" if kept else "")
    )
    return out


def _train_tokenizer(cfg: DataConfig, train: ParallelText, say: Callable[[str], None]) -> Tokenizer:
    tc = cfg.tokenizer
    say(f"training a {tc.vocab_size}-piece {tc.model_type} SentencePiece model on the train split")
    sentences = [s for s in train.src if s] + [t for t in train.tgt if t]
    return Tokenizer.train(
        sentences,
        vocab_size=tc.vocab_size,
        model_type=tc.model_type,
        character_coverage=tc.character_coverage,
        byte_fallback=tc.byte_fallback,
        input_sentence_size=tc.input_sentence_size,
        seed=tc.seed,
        threads=cfg.threads,
    )


def _encode(
    tokenizer: Tokenizer, texts: Sequence[str], threads: int, desc: str, progress: bool
) -> list[list[int]]:
    ids: list[list[int]] = []
    with tqdm(total=len(texts), desc=desc, unit="sent", disable=None if progress else True) as bar:
        for start in range(0, len(texts), ENCODE_CHUNK):
            chunk = texts[start : start + ENCODE_CHUNK]
            ids.extend(tokenizer.encode_batch(chunk, threads))
            bar.update(len(chunk))
    return ids


def _write_splits(
    cfg: DataConfig,
    splits: dict[str, ParallelText],
    tokenizer: Tokenizer,
    tmp: Path,
    progress: bool,
) -> tuple[dict[str, SplitStats], dict[str, dict[str, int]]]:
    """Encode, filter and write each split; returns (stats per split, manifest entries)."""
    dtype = token_dtype(tokenizer.vocab_size)
    stats: dict[str, SplitStats] = {}
    entries: dict[str, dict[str, int]] = {}
    for name, text in splits.items():
        src_ids = _encode(tokenizer, text.src, cfg.threads, f"encode {name} src", progress)
        tgt_ids = _encode(tokenizer, text.tgt, cfg.threads, f"encode {name} tgt", progress)
        src_len = np.fromiter(map(len, src_ids), dtype=np.int64, count=len(src_ids))
        tgt_len = np.fromiter(map(len, tgt_ids), dtype=np.int64, count=len(tgt_ids))
        ratio = cfg.filter.max_ratio if name == "train" else None
        keep, dropped = filter_pairs(src_len, tgt_len, max_len=cfg.filter.max_len, max_ratio=ratio)
        if name == "train" and not keep.any():
            raise GmlmError(
                f"corpus '{cfg.corpus}': no training pairs left after filtering "
                f"({len(keep):,} read; dropped {dropped}); check the corpus, or relax "
                f"filter.max_len={cfg.filter.max_len} / filter.max_ratio={cfg.filter.max_ratio}"
            )
        rows = np.flatnonzero(keep)
        kept_src = [src_ids[i] for i in rows]
        kept_tgt = [tgt_ids[i] for i in rows]
        entries[name] = write_split(tmp, name, kept_src, kept_tgt, rows, dtype)
        entries[name]["text_lines"] = len(text)
        write_text(tmp, name, "src", text.src)
        write_text(tmp, name, "tgt", text.tgt)
        stats[name] = split_stats(
            pairs=len(text),
            dropped=dropped,
            src_lengths=src_len[rows],
            tgt_lengths=tgt_len[rows],
            src_unk=sum(x.count(tokenizer.unk_id) for x in kept_src),
            tgt_unk=sum(x.count(tokenizer.unk_id) for x in kept_tgt),
        )
    return stats, entries


def _write_metadata(
    cfg: DataConfig,
    corpus: Corpus,
    splits: dict[str, ParallelText],
    tokenizer: Tokenizer,
    tmp: Path,
    stats: dict[str, SplitStats],
    entries: dict[str, dict[str, int]],
    digest: str,
    seconds: dict[str, float],
) -> None:
    notes = list(corpus.notes)
    carved = [s for s in ("valid", "test") if s not in corpus.splits and s in splits]
    if carved:
        key = "verse id" if splits["train"].keys is not None else "source sentence"
        notes.append(
            f"{' and '.join(carved)} carved from the corpus by hash of the {key} "
            f"(valid_fraction={cfg.valid_fraction}, test_fraction={cfg.test_fraction})"
        )
    tokenizer.save(tmp)
    save_config(cfg, tmp / CONFIG)
    name = cfg.corpus if corpus.name == cfg.corpus else corpus.name
    DatasetStats(
        corpus=name,
        src_lang=corpus.src_lang,
        tgt_lang=corpus.tgt_lang,
        max_len=cfg.filter.max_len,
        tokenizer=TokenizerStats(
            vocab_size=tokenizer.vocab_size,
            model_type=cfg.tokenizer.model_type if not cfg.tokenizer.path else "reused",
            sha256=tokenizer.fingerprint,
        ),
        splits=stats,
        notes=tuple(notes),
        seconds=seconds,
    ).write(tmp / STATS)
    manifest = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "content_hash": digest,
        "created_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "gmlm_version": provenance.gmlm_version(),
        "sentencepiece_version": spm.__version__,
        "corpus": name,
        "src_lang": corpus.src_lang,
        "tgt_lang": corpus.tgt_lang,
        "max_len": cfg.filter.max_len,
        "token_dtype": token_dtype(tokenizer.vocab_size).name,
        "vocab_size": tokenizer.vocab_size,
        "special_ids": dict(SPECIAL_IDS),
        "tokenizer_sha256": tokenizer.fingerprint,
        "splits": {
            split: {**entry, "sha256": split_digests(tmp, split)}
            for split, entry in entries.items()
        },
        "notes": notes,
    }
    atomic_write_json(tmp / MANIFEST, manifest)
