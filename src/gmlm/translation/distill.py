"""Sequence-level knowledge distillation (Kim & Rush 2016): the AR teacher's beam search
output replaces the training targets.

    from gmlm.translation.distill import distill
    from gmlm.translation.distill_settings import DEFAULT_SETTINGS, DistillSettings

    distill("runs/teacher", "runs/data", "runs/distilled", DistillSettings(beam=5))
    # -> Path("runs/distilled")

The result is a prepared dataset (see :mod:`gmlm.data.prepare`) whose training pairs are
(original cleaned source, teacher translation); valid and test are the original splits with
their references unchanged, and the tokenizer is the original one (reused, not retrained), so
models trained on either dataset are comparable. ``distill.json`` beside the manifest says
how it was made (teacher, step, weights hash, settings, counts, time, sentences/s).

How the work is organised, so that nothing is wasted and nothing is half-written:

* The training sources are encoded once and sorted by length (longest first), so that every
  decoder batch holds sentences of similar length, cut like :meth:`Translator.translate`'s
  (by a budget of padded tokens, beams x source length, and/or a count); beam search already
  drops a sentence from the computation once its k hypotheses are finished.
* The sorted order is cut into chunks of ``chunk_sentences`` (:class:`DistillSettings`);
  each finished chunk is written atomically to ``OUT/work/chunk-NNNNN.txt`` (temporary
  file, then rename). An interrupted run (Ctrl-C, ``kill -9``, power loss) resumes by
  skipping the chunks already there.
  ``OUT/work/settings.json`` holds what the chunks depend on (teacher weights hash, data
  hash, beam, precision, ...); chunks made under other settings are discarded, never mixed.
* Once every chunk is there, the dataset is prepared in ``OUT/work/dataset`` and its files
  are moved into ``OUT`` with ``manifest.json`` last: a folder with a manifest is complete
  (any old manifest is removed before the first file moves). Then ``work/`` is removed.
* A later call with the same teacher weights, data and settings finds ``OUT`` complete and
  returns at once.
* ``OUT`` is locked throughout (:mod:`gmlm.locking`): a second distillation into it, which
  would translate the same chunks and mix the two runs' files, fails at once.
* Under ``torchrun`` (several processes, on one machine or several sharing ``OUT``), process r
  of W translates the chunks i with i % W == r, each resumable as above; rank 0 holds the lock,
  waits for all, reads every chunk back and builds the dataset, so the result is the one
  process's, byte for byte.

Sources that are empty or longer than the teacher's ``max_source_len`` are not translated
(their target stays empty, so the data filter drops the pair); teacher outputs that decode
to nothing are counted. All of these are reported in ``distill.json``.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import shutil
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from gmlm import provenance
from gmlm.checkpoint.languages import check_dataset
from gmlm.checkpoint.loading import resolve_checkpoint
from gmlm.checkpoint.meta import Meta
from gmlm.config import load_saved_config
from gmlm.data.batching import cut_batches
from gmlm.data.binarized import CONFIG, MANIFEST, PreparedDataset, load_dataset
from gmlm.data.cleaning import normalize
from gmlm.data.lengths import encode_inputs
from gmlm.data.parallel import Corpus, ParallelText
from gmlm.data.prepare import DataConfig, prepare_dataset
from gmlm.distributed import (
    DistInfo,
    all_reduce_sum,
    barrier,
    bf16_by_default,
    shutdown,
)
from gmlm.errors import GmlmError
from gmlm.io import check_output_folder
from gmlm.locking import folder_lock
from gmlm.translation.chunks import (
    chunk_path,
    join_shards,
    my_chunks,
    on_every_process,
    prepare_work,
    read_chunk,
    recorded_time,
    shard_device,
    write_chunk,
)
from gmlm.translation.distill_record import (
    ChunkTiming,
    DistillCounts,
    DistillRecord,
    RecordedRate,
)
from gmlm.translation.distill_settings import DEFAULT_SETTINGS, DistillSettings
from gmlm.translation.translator import Translator, batch_limits, load

DISTILL_FILE = "distill.json"
WORK = "work"
DATASET = "dataset"
FORMAT_VERSION = 1

Log = Callable[[str], None]


@dataclass(frozen=True)
class Teacher:
    """A loaded teacher and what identifies it: the checkpoint folder it was read from, its
    step (from meta.json) and the SHA-256 of its weights as loaded."""

    translator: Translator
    path: Path
    step: int | None
    weights_sha256: str


def weights_sha256(model: torch.nn.Module) -> str:
    """SHA-256 over the parameter and buffer values (names, dtypes, shapes and bytes) of the
    model as loaded, so it identifies exactly the weights that produced the outputs."""
    h = hashlib.sha256()
    for name, tensor in model.state_dict().items():
        flat = tensor.detach().cpu().contiguous()
        h.update(f"{name}|{flat.dtype}|{tuple(flat.shape)}\n".encode())
        h.update(flat.view(torch.uint8).numpy().tobytes() if flat.numel() else b"")
    return h.hexdigest()


def load_teacher(path: str | Path, device: str = "auto") -> Teacher:
    """Load an autoregressive checkpoint (or run folder) as a teacher; any other kind is a
    :class:`GmlmError`."""
    folder = resolve_checkpoint(path)
    translator = load(folder, device=device)
    if translator.kind != "ar":
        raise GmlmError(
            f"{path}: is a {translator.kind} checkpoint (kind '{translator.kind}'), but the "
            "teacher of sequence-level distillation must be an autoregressive model (kind "
            "'ar'): pass the AR teacher's run or checkpoint folder as --teacher"
        )
    try:
        step = Meta.of(folder).step
    except GmlmError:  # a meta.json that records no step it can read: the teacher is unnamed
        step = None
    return Teacher(translator, folder.resolve(), step, weights_sha256(translator.model))


@dataclass(frozen=True)
class Plan:
    """The training sources in decoding order.

    sources: every cleaned training source (corpus order); order: the indices to translate,
    longest first; chunks: `order` cut into consecutive runs of `chunk_sentences`;
    empty / over_length: sources left untranslated."""

    sources: list[str]
    lengths: list[int]
    order: list[int]
    chunk_sentences: int
    empty: list[int]
    over_length: list[int]

    @property
    def chunks(self) -> list[list[int]]:
        size = self.chunk_sentences
        return [self.order[i : i + size] for i in range(0, len(self.order), size)]


def make_plan(sources: list[str], translator: Translator, chunk_sentences: int) -> Plan:
    encoded = encode_inputs(
        translator.tokenizer,
        sources,
        translator.config.max_source_len,
        on_over_length="report",
    )
    over = set(encoded.over_length)
    empty = [i for i, ids in enumerate(encoded.ids) if not ids]
    skip = over | set(empty)
    todo = [i for i in range(len(sources)) if i not in skip]
    # Longest first: batches of similar length, and the slowest work (and any memory
    # problem) shows at the start.
    order = sorted(todo, key=lambda i: -encoded.lengths[i])
    return Plan(sources, encoded.lengths, order, chunk_sentences, empty, sorted(over))


def batches(
    indices: Sequence[int],
    lengths: Sequence[int],
    beam: int,
    batch_size: int | None,
    max_tokens: int | None,
) -> Iterator[list[int]]:
    """`indices` (longest first; `lengths` with EOS by index) in decoder batches: `beam` rows
    per sentence at its length, bounded as :func:`gmlm.data.batching.cut_batches` says."""
    widths = [lengths[i] for i in indices]
    for cut in cut_batches(widths, [beam] * len(indices), max_tokens, batch_size):
        yield [indices[j] for j in cut]


def distill_settings(
    teacher: Teacher, data: PreparedDataset, beam: int, bf16: bool, chunk_sentences: int
) -> dict[str, Any]:
    """Everything the teacher outputs depend on (batch size, threads and device only change
    the speed; in bf16 they may move a near-tie, which we accept)."""
    return {
        "format_version": FORMAT_VERSION,
        "teacher_weights_sha256": teacher.weights_sha256,
        "teacher_tokenizer_sha256": teacher.translator.tokenizer.fingerprint,
        "data_content_hash": data.content_hash,
        "data_tokenizer_sha256": data.tokenizer.fingerprint,
        "search": asdict(teacher.translator.options(beam=beam)),
        # bf16 weights, formerly bf16 autocast: a new key, so that chunks of the
        # old arithmetic are discarded rather than mixed.
        "precision": "bf16" if bf16 else "fp32",
        "chunk_sentences": chunk_sentences,
    }


def _prepare_work(work: Path, settings: dict[str, Any], say: Log) -> None:
    """Make `work` hold only chunks made with `settings`, and no dataset built from others."""
    what = "teacher, data, beam or precision"
    if prepare_work(work, settings, say, flag=f"--out {work.parent}", depends_on=what):
        shutil.rmtree(work / DATASET, ignore_errors=True)


def _check_out(out: Path, data: Path, teacher: Path) -> None:
    """`out` is new, empty, or a distillation's (complete or in progress: reused or resumed);
    never the data, the teacher or anything else (`gmlm.io.check_output_folder`)."""
    check_output_folder(
        out,
        "--out",
        "a distilled dataset (done or in progress)",
        lambda folder: (folder / WORK).is_dir() or (folder / DISTILL_FILE).is_file(),
        inputs={"--data": data, "--teacher": teacher},
    )


def _complete(out: Path, settings: dict[str, Any]) -> bool:
    try:
        if DistillRecord.recorded_settings(out / DISTILL_FILE) != settings:
            return False
        prepared = load_dataset(out)
        for split in prepared.splits:
            prepared.split(split)  # checks file sizes
        return True
    except (OSError, GmlmError):
        return False


def _translate_chunks(
    teacher: Teacher,
    plan: Plan,
    work: Path,
    *,
    beam: int,
    bf16: bool,
    batch_size: int | None,
    max_tokens: int | None,
    progress: bool,
    say: Log,
    shard: DistInfo,
) -> tuple[list[str], ChunkTiming]:
    """Translate every chunk of this process's share (all of them in one process) not already
    in `work`; returns the outputs of that share (corpus order, "" elsewhere) and timing."""
    outputs = [""] * len(plan.sources)
    chunks = plan.chunks
    mine = my_chunks(len(chunks), shard)
    todo = []
    for index in mine:
        chunk = chunks[index]
        done = read_chunk(chunk_path(work, index), len(chunk))
        if done is None:
            todo.append(index)
            continue
        for i, text in zip(chunk, done, strict=True):
            outputs[i] = text
    resumed = len(mine) - len(todo)
    if resumed:
        say(f"resuming: {resumed} of {len(mine)} chunks already translated in {work}")
    translated_now = 0
    start = time.perf_counter()
    share = sum(len(chunks[i]) for i in mine)
    with tqdm(
        total=share,
        initial=share - sum(len(chunks[i]) for i in todo),
        desc="distill",
        unit="sent",
        dynamic_ncols=True,
        disable=not progress,
    ) as bar:
        for index in todo:
            chunk = chunks[index]
            chunk_start = time.perf_counter()
            for batch in batches(chunk, plan.lengths, beam, batch_size, max_tokens):
                texts = teacher.translator.translate(
                    [plan.sources[i] for i in batch],
                    batch_size=len(batch),
                    precision="bf16" if bf16 else "fp32",
                    beam=beam,
                    origin="train.src.txt",
                )
                for i, text in zip(batch, texts, strict=True):
                    outputs[i] = normalize(text)  # what the prepared dataset will hold
                bar.update(len(batch))
            seconds = time.perf_counter() - chunk_start
            write_chunk(work, index, [outputs[i] for i in chunk], seconds)
            translated_now += len(chunk)
    session = time.perf_counter() - start
    timing = ChunkTiming(
        chunks=len(chunks),
        chunks_resumed=resumed,
        sentences_this_run=translated_now,
        seconds_this_run=round(session, 3),
        rate=_recorded_rate(work),
    )
    return outputs, timing


def _recorded_rate(work: Path) -> RecordedRate:
    """Teacher time and sentences/s over every chunk whose time was recorded (all runs)."""
    seconds, sentences = recorded_time(work)
    return RecordedRate(
        teacher_seconds=round(seconds, 3),
        timed_sentences=sentences,
        sentences_per_s=round(sentences / seconds, 2) if seconds else None,
    )


def _install(built: Path, out: Path) -> None:
    """Move the files of the finished dataset `built` into `out`, manifest last; any old
    manifest goes first, so `out` is never trusted while it holds a mix."""
    (out / MANIFEST).unlink(missing_ok=True)
    for path in sorted(built.iterdir()):
        if path.name != MANIFEST:
            os.replace(path, out / path.name)
    os.replace(built / MANIFEST, out / MANIFEST)


def distill(
    teacher: str | Path,
    data: str | Path,
    out: str | Path,
    settings: DistillSettings = DEFAULT_SETTINGS,
    *,
    batch_size: int | None = None,
    max_tokens: int | None = None,
    device: str = "auto",
    progress: bool = True,
    log: Log | None = print,
) -> Path:
    """Distill the training split of the prepared dataset `data` with the AR checkpoint (or
    run folder) `teacher` into a new prepared dataset `out`; returns `out`.

    settings: the teacher's beam size (the paper: 5), its precision, the threads and the
    chunk size (:class:`DistillSettings`, each field's help says what). max_tokens,
    batch_size: what bounds a decoder batch, as in :meth:`Translator.translate` (neither: its
    default token budget). progress: a tqdm bar with sentences/s. log: receives progress
    messages (None: quiet).
    Returns at once when `out` is already complete for the same teacher weights, data and
    settings; resumes from the chunks of an interrupted run (see the module docstring).
    """
    say: Log = log or (lambda _msg: None)
    batch_size, max_tokens = batch_limits(batch_size, max_tokens)
    settings.validate()
    out, data = Path(out), Path(data)
    prepared = load_dataset(data)
    if "train" not in prepared.splits:
        raise GmlmError(f"{data}: has no train split to distill")
    shard = join_shards(device)
    here = shard_device(device, shard)
    run = functools.partial(
        _distill,
        teacher,
        data,
        out,
        prepared,
        settings,
        batch_size=batch_size,
        max_tokens=max_tokens,
        device=here,
        progress=progress and shard.is_main,
        say=say if shard.is_main else (lambda _msg: None),
        shard=shard,
    )
    try:
        with contextlib.ExitStack() as held:
            if shard.is_main:  # the job's rank 0 holds the folder for all its processes
                lock = functools.partial(folder_lock, out, f"--out {out}")
                on_every_process(lambda: held.enter_context(lock()), shard)
            else:
                on_every_process(lambda: None, shard)
            return run()
    finally:
        shutdown(shard)


def _distill(
    teacher: str | Path,
    data: Path,
    out: Path,
    prepared: PreparedDataset,
    chosen: DistillSettings,
    *,
    batch_size: int | None,
    max_tokens: int | None,
    device: str,
    progress: bool,
    say: Log,
    shard: DistInfo,
) -> Path:
    """`distill` into the folder `out`, locked by this process or, under torchrun, by the
    job's rank 0 (gmlm.locking): rank r translates the chunks i with i % world_size == r, and
    rank 0 then reads every chunk back and builds the dataset, in the corpus's order."""
    _check_out(out, data, Path(teacher))
    beam, threads = chosen.beam, chosen.threads
    previous_threads = torch.get_num_threads()
    if threads > 0:
        torch.set_num_threads(threads)
    try:
        loaded = load_teacher(teacher, device)
        check_dataset(teacher, loaded.translator.languages, prepared)
        use_bf16 = (
            bf16_by_default(loaded.translator.device)
            if chosen.precision == "auto"
            else chosen.precision == "bf16"
        )
        settings = distill_settings(loaded, prepared, beam, use_bf16, chosen.chunk_sentences)
        if _reused(out, settings, say):
            return out
        if loaded.translator.tokenizer.fingerprint != prepared.tokenizer.fingerprint:
            say(f"note: the teacher's tokenizer differs from the tokenizer of {data}; {KEPT}")
        work = out / WORK
        # Every process sees the work folder rank 0 made ready (or learns that it failed).
        on_every_process(
            lambda: _prepare_work(work, settings, say) if shard.is_main else None, shard
        )
        sources = prepared.read_text("train", "src")
        plan = make_plan(sources, loaded.translator, chosen.chunk_sentences)
        how = f"beam {beam}, {'bf16' if use_bf16 else 'fp32'}, batches of "
        say(
            f"distilling {len(plan.order):,} of {len(sources):,} training sources with "
            f"{loaded.path} (step {loaded.step}), {how}{_limits(batch_size, max_tokens)}, "
            + _where(loaded, shard)
        )
        translate = functools.partial(
            _translate_chunks,
            loaded,
            plan,
            work,
            beam=beam,
            bf16=use_bf16,
            batch_size=batch_size,
            max_tokens=max_tokens,
            progress=progress,
            say=say,
            shard=shard,
        )
        outputs, timing = on_every_process(translate, shard)
    finally:
        torch.set_num_threads(previous_threads)
    if shard.active:  # every process's share, counted together (also waits for all)
        timing = _summed(timing, shard)
    barrier(shard)  # every chunk is written, and its time recorded
    if not shard.is_main:
        return out
    if shard.active:  # the other processes' chunks and times, read back from the work folder
        timing = replace(timing, rate=_recorded_rate(work))
        _read_back(work, plan, outputs)
    build_start = time.perf_counter()
    built = _build_dataset(prepared, data, sources, outputs, work / DATASET, loaded, beam)
    counts = _counts(sources, plan, outputs, built)
    record = _record(
        settings,
        loaded,
        data,
        counts,
        timing,
        beam=beam,
        precision="bf16" if use_bf16 else "fp32",
        batch_size=batch_size,
        max_tokens=max_tokens,
        threads=threads or previous_threads,
        build_seconds=round(time.perf_counter() - build_start, 3),
    )
    record.write(built / DISTILL_FILE)
    _install(built, out)
    shutil.rmtree(work, ignore_errors=True)
    rate = timing.rate.sentences_per_s
    say(
        f"{out}: distilled dataset written ({counts.train_pairs_kept:,} training pairs kept; "
        f"{counts.empty_outputs} empty teacher outputs; "
        f"{rate if rate is not None else '-'} sentences/s)"
    )
    return out


# Why a teacher with another tokenizer is fine (said when it has one).
KEPT = "the teacher reads and writes text, and the distilled data keeps the data's one"


def _record(
    settings: dict[str, Any],
    teacher: Teacher,
    data: Path,
    counts: DistillCounts,
    timing: ChunkTiming,
    *,
    beam: int,
    precision: str,
    batch_size: int | None,
    max_tokens: int | None,
    threads: int,
    build_seconds: float,
) -> DistillRecord:
    """The record of a distillation by `teacher` of `data` with these settings, with the
    versions and machine that made it."""
    return DistillRecord(
        settings=settings,
        teacher=str(teacher.path),
        teacher_step=teacher.step,
        data=str(data.resolve()),
        beam=beam,
        precision=precision,
        batch_size=batch_size,
        max_tokens=max_tokens,
        threads=threads,
        device=str(teacher.translator.device),
        torch=provenance.torch_version(),
        gmlm=provenance.gmlm_version(),
        cpu=provenance.cpu_model(),
        counts=counts,
        timing=timing,
        build_seconds=build_seconds,
        created_utc=datetime.now(timezone.utc).isoformat(timespec="seconds"),
    )


def _where(teacher: Teacher, shard: DistInfo) -> str:
    """ "2 threads on cpu[, 4 processes]": where the teacher translates."""
    processes = f", {shard.world_size} processes" if shard.active else ""
    return f"{torch.get_num_threads()} threads on {teacher.translator.device}{processes}"


def _reused(out: Path, settings: dict[str, Any], say: Log) -> bool:
    """Whether `out` holds this distillation already (its work folder then removed)."""
    if not _complete(out, settings):
        return False
    shutil.rmtree(out / WORK, ignore_errors=True)
    say(f"{out}: already distilled with this teacher, data and settings; reusing it")
    return True


def _summed(timing: ChunkTiming, shard: DistInfo) -> ChunkTiming:
    """`timing` with every process's sentences and resumed chunks summed (all processes)."""
    done_now: list[float] = [timing.sentences_this_run, timing.chunks_resumed]
    sentences_this_run, chunks_resumed = (int(v) for v in all_reduce_sum(done_now, shard))
    return replace(timing, sentences_this_run=sentences_this_run, chunks_resumed=chunks_resumed)


def _read_back(work: Path, plan: Plan, outputs: list[str]) -> None:
    """Every chunk's translations, as the processes wrote them, into `outputs`."""
    for index, chunk in enumerate(plan.chunks):
        done = read_chunk(chunk_path(work, index), len(chunk))
        if done is None:
            raise GmlmError(f"{chunk_path(work, index)}: missing after every process ended")
        for i, text in zip(chunk, done, strict=True):
            outputs[i] = text


def _counts(sources: list[str], plan: Plan, outputs: list[str], built: Path) -> DistillCounts:
    """What the distillation made of the training sources, and what the built dataset kept."""
    dataset = load_dataset(built)
    return DistillCounts(
        train_sources=len(sources),
        translated=len(plan.order),
        empty_sources=len(plan.empty),
        over_length_sources=len(plan.over_length),
        empty_outputs=sum(1 for i in plan.order if not outputs[i]),
        train_pairs_kept=dataset.manifest["splits"]["train"]["rows"],
        train_pairs_dropped=dataset.stats().splits["train"].dropped,
    )


def _limits(batch_size: int | None, max_tokens: int | None) -> str:
    shown = [f"{max_tokens} tokens"] if max_tokens is not None else []
    return " and ".join([*shown, *([f"{batch_size} sentences"] if batch_size else [])])


def _build_dataset(
    prepared: PreparedDataset,
    data: Path,
    sources: list[str],
    outputs: list[str],
    where: Path,
    teacher: Teacher,
    beam: int,
) -> Path:
    """Prepare (source, teacher output) as train plus the original valid/test into `where`,
    with the original data settings and tokenizer."""
    shutil.rmtree(where, ignore_errors=True)  # e.g. half moved out by a crash in _install
    cfg = load_saved_config(DataConfig, data / CONFIG)
    cfg.tokenizer.path = str(data.resolve())
    # Every split is given: nothing may be carved out of the distilled training data.
    cfg.valid_fraction = cfg.test_fraction = 0.0
    name = f"distilled {prepared.manifest.get('corpus')} (teacher {teacher.path}, beam {beam})"
    cfg.corpus = name
    splits = {"train": ParallelText(sources, outputs)}
    for split in prepared.splits:
        if split != "train":
            splits[split] = ParallelText(
                prepared.read_text(split, "src"), prepared.read_text(split, "tgt")
            )
    corpus = Corpus(
        name,
        splits,
        prepared.manifest.get("src_lang"),
        prepared.manifest.get("tgt_lang"),
        notes=[f"training targets from the beam-{beam} search of AR teacher {teacher.path}"],
    )
    return prepare_dataset(cfg, where, corpus=corpus)


__all__ = ["distill", "load_teacher", "weights_sha256"]
