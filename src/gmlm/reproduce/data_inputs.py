"""What the data stage of `gmlm reproduce` prepares from, and whether it changed since.

The data stage turns the `data` settings into a `gmlm data prepare` config
(:func:`data_config`) and a corpus (:func:`data_corpus`: the corpus itself, only some of its
splits, or gmlm's example sentences standing in for a missing Multi30k test set). Its record
keeps the size and modification time of every file those read (:func:`data_files`, the
corpus's and the tokenizer's: :func:`file_signature`). A later run of the pipeline compares
them (:func:`check_data_inputs`): when a file changed, it works out the content hash the
dataset would have now. The same hash (the file was only touched) updates the record.
Another means the stages that read the dataset used pairs that are gone: the data stage and
they are redone when none of them trained a model or distilled (a run of given checkpoints,
as the demo's: minutes). Otherwise the run stops with an error, `--redo data` included: a
training run refuses to resume on other data (gmlm.training.trainer), and gmlm removes no
trained model, so the corpus as it is now is for a new run folder.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from gmlm.errors import GmlmError
from gmlm.reproduce.config import ReproduceConfig
from gmlm.reproduce.stage_record import INPUTS, StageRecord
from gmlm.reproduce.stand_in import EXAMPLES, needs_multi30k

if TYPE_CHECKING:
    from gmlm.data.parallel import Corpus
    from gmlm.data.prepare import DataConfig

Signature = dict[str, list[int] | None]
"""File path -> [size in bytes, modification time in ns], None where there is no file."""


def data_config(cfg: ReproduceConfig) -> DataConfig:
    """The `gmlm data prepare` config of the run's data stage: its prepare settings, then its
    DataConfig `overrides`, its `tokenizer`, and the run's `threads` unless it sets its own."""
    from gmlm.config import deep_update, from_dict, parse_override
    from gmlm.data.prepare import DataConfig
    from gmlm.data.settings import PrepareSettings, config_values

    d = cfg.data
    prepare = {f.name: getattr(d, f.name) for f in dataclasses.fields(PrepareSettings)}
    values = {"corpus": d.corpus, **config_values(prepare)}
    for text in d.overrides:
        values = deep_update(values, parse_override(text))
    config = from_dict(DataConfig, values)
    if d.tokenizer:
        config.tokenizer.path = d.tokenizer
    if cfg.threads > 0 and not d.threads:
        config.threads = cfg.threads
    return config


def stand_in_missing(cfg: ReproduceConfig) -> str | None:
    """Why the example sentences stand in for the run's Multi30k test set (they do when
    `data.examples_if_missing` is on and its test files are not on this machine), or None."""
    from gmlm.data.corpora import multi30k_test_missing, parse_spec

    d = cfg.data
    if d.examples_if_missing and parse_spec(d.corpus).kind == "multi30k":
        return multi30k_test_missing(d.corpus)
    return None


def data_corpus(cfg: ReproduceConfig, log: Callable[[str], None]) -> Corpus | None:
    """The corpus the data stage gives `gmlm data prepare`: the example sentences as the test
    split (saying why to `log`), the corpus cut to `data.splits`, or None (prepare reads
    `data.corpus` itself)."""
    from gmlm.data.corpora import multi30k_pair, read_corpus
    from gmlm.data.parallel import Corpus, ParallelText
    from gmlm.data.textfiles import read_parallel_files

    d = cfg.data
    missing = stand_in_missing(cfg)
    if missing:
        src_lang, tgt_lang = multi30k_pair(d.corpus)
        log(
            f"  {needs_multi30k('scoring quality', missing)}; until then the run "
            f"translates and times gmlm's own example sentences ({EXAMPLES}.{src_lang})"
        )
        files = _example_files(cfg)
        if not all(path.is_file() for path in files):
            raise GmlmError(
                f"data.examples_if_missing: gmlm's example sentences are German and English "
                f"only, not {src_lang}-{tgt_lang}; {needs_multi30k('this run', missing)}"
            )
        src, tgt = read_parallel_files(*files)
        name = f"files:{files[0]},{files[1]}"
        return Corpus(name, {"test": ParallelText(src, tgt)}, src_lang, tgt_lang)
    if not d.splits:
        return None
    corpus = read_corpus(d.corpus)
    unknown = [s for s in d.splits if s not in corpus.splits]
    if unknown:
        raise GmlmError(
            f"data.splits: {', '.join(unknown)} not in corpus '{d.corpus}', which has "
            f"{', '.join(corpus.splits)}"
        )
    return dataclasses.replace(
        corpus, splits={k: v for k, v in corpus.splits.items() if k in d.splits}
    )


def _example_files(cfg: ReproduceConfig) -> tuple[Path, Path]:
    from gmlm.data.corpora import multi30k_pair

    src_lang, tgt_lang = multi30k_pair(cfg.data.corpus)
    return EXAMPLES.with_suffix(f".{src_lang}"), EXAMPLES.with_suffix(f".{tgt_lang}")


def data_files(cfg: ReproduceConfig) -> list[Path] | None:
    """The files the data stage reads (`gmlm.data.corpora.corpus_files`, or the example
    sentences standing in, and the tokenizer's folder when it reuses one), or None when the
    corpus is a Hugging Face hub dataset, whose files are the `datasets` library's."""
    from gmlm.data.corpora import corpus_files

    config = data_config(cfg)
    if stand_in_missing(cfg):
        files: list[Path] | None = list(_example_files(cfg))
    else:
        files = corpus_files(config.corpus, valid=config.valid, test=config.test)
    if files is None:
        return None
    return files + ([Path(config.tokenizer.path)] if config.tokenizer.path else [])


def file_signature(paths: list[Path]) -> Signature:
    """The size and modification time of each of `paths`, and of every file under those that
    are folders but hidden ones (a lock, a half-written temporary); None for a path that is
    not there."""
    signature: Signature = {}
    for path in paths:
        found = [path]
        if path.is_dir():
            found = sorted(
                p
                for p in path.rglob("*")
                if p.is_file()
                and not any(part.startswith(".") for part in p.relative_to(path).parts)
            )
        for file in found:
            try:
                stat = file.stat()
            except OSError:
                signature[str(file)] = None
                continue
            signature[str(file)] = [stat.st_size, stat.st_mtime_ns]
    return signature


COSTLY = ("teacher", "distill", "ar", "ar1", "padir", "tune", "train_ablation")
"""The stages that read the prepared data and cost hours to redo: the trainings (unless given
a checkpoint) and the distillation."""


def costly_done(cfg: ReproduceConfig, out: Path) -> list[str]:
    """The finished stages of run folder `out` that trained a model or distilled."""
    done = []
    for name in COSTLY:
        settings: object = getattr(cfg, name)
        enabled = bool(getattr(settings, "enabled", True))
        given = bool(getattr(settings, "checkpoint", ""))
        if not (out / "stages" / f"{name}.json").is_file() or not enabled or given:
            continue
        if name == "teacher" and not cfg.distill.enabled:  # no teacher was trained
            continue
        done.append(name)
    return done


def check_data_inputs(cfg: ReproduceConfig, out: Path, log: Callable[[str], None]) -> bool:
    """Whether the files the finished data stage of run folder `out` read now make another
    dataset than it prepared, so that it and the stages that read it must be redone (True),
    when no model was trained or distilled from it; an error when one was (whether or not
    the data stage is to be redone: the trainings could not resume on the new pairs). When the files
    were only touched, their new times are recorded. Nothing to check (False) before the data
    stage has run, for a hub dataset, or when the corpus cannot be read now (the prepared
    dataset stays what the stages read)."""
    from gmlm.data import load_dataset
    from gmlm.data.prepare import planned_content_hash

    path = out / "stages" / "data.json"
    record = StageRecord.read_if_present(path)
    if record is None:
        return False
    files = data_files(cfg)
    if files is None:
        return False
    now = file_signature(files)
    if record.inputs == now:
        return False
    try:
        prepared = load_dataset(out / "data").content_hash
        planned = planned_content_hash(data_config(cfg), data_corpus(cfg, lambda _msg: None))
    except GmlmError as err:
        log(f"[data] cannot check its corpus against the prepared dataset ({err}); going on")
        return False
    if planned == prepared:
        if record.inputs is not None:
            log(
                "[data] its corpus files were touched since it ran, but make the same dataset "
                f"(content hash {prepared[:12]}): nothing to redo"
            )
        summary = {**record.summary, INPUTS: now}
        dataclasses.replace(record, summary=summary).write(path)
        return False
    costly = costly_done(cfg, out)
    if costly:
        raise GmlmError(
            f"[data] the corpus or tokenizer changed since the data stage prepared "
            f"{out / 'data'} (content hash {prepared[:12]} then, {planned[:12]} now), and "
            f"{', '.join(costly)} learned from the pairs as they were: put the files back "
            "as they were, or train on the corpus as it is now in a new run folder (--out)"
        )
    return True
