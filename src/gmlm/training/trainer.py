"""The trainer: one loop for both models, exact resume, data parallelism, validation.

Loss normalisation. Each optimizer step sums the token cross-entropy over every target token of
its micro-batches on every process and divides by the global token count (the length loss
likewise by the global sentence count, then weighs it by padir.length_weight, in
`gmlm.models.losses.total_loss`). Gradient accumulation and data parallelism therefore give
the gradient of one large batch, whatever the split into micro-batches and processes.

Resume. The `last` checkpoint holds weights, optimizer state, RNG states and the data iterator
position; a restarted run (after Ctrl-C or `kill -9`) continues from it with exactly the steps
the uninterrupted run would have taken. Metrics logged after that checkpoint are discarded.
SIGTERM or SIGINT (Ctrl-C) stops a run after the step in progress, with `last` saved at that
step (gmlm.training.stopping), so a stop on request loses nothing; `kill -9` loses the steps
since the last save (at most `save_minutes`).

Validation. Every `valid_every` steps the `last` checkpoint is written first, marked as awaiting
the validation of its step, and only then is the model validated (with the random generators
put back afterwards, so that validating never changes the training that follows). A validation
that raises therefore loses no step: the run stops with an error that says so, and re-running
the same command resumes at that step and repeats the validation before training on. Stopping
is preferred to warning and training on because a failing validation would fail again at every
later one, and a run whose `best` checkpoint was chosen without those validations would look
finished while it is not.
"""

from __future__ import annotations

import json
import math
import signal
import time
from collections.abc import Callable, Iterator
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn
from torch.nn.parallel import DistributedDataParallel
from tqdm import tqdm

from gmlm.checkpoint.files import (
    fill_inference_files,
    load_json,
    load_tensors,
    load_weights,
    save_tensors,
    write_checkpoint_dir,
)
from gmlm.checkpoint.languages import language_meta, pair_of
from gmlm.config import save_config
from gmlm.data.batching import Batch, BatchIterator
from gmlm.data.binarized import PreparedDataset, TranslationDataset, load_dataset
from gmlm.distributed import (
    all_reduce_sum,
    barrier,
    init_distributed,
    pick_device,
    process_device,
    shutdown,
)
from gmlm.errors import GmlmError, Stopped
from gmlm.io import MODEL_FILE, WriteError, atomic_open, atomic_write_json, writing
from gmlm.locking import folder_lock
from gmlm.models import build_model
from gmlm.nn.layers import count_parameters
from gmlm.provenance import torch_version
from gmlm.training import checkpoint as ckpt
from gmlm.training.averaging import history_file, history_steps, write_averaged
from gmlm.training.config import TrainConfig, use_vocab_size
from gmlm.training.init_from import load_initial_weights
from gmlm.training.objective import loss_module
from gmlm.training.optim import build_optimizer, lr_at
from gmlm.training.precision import (
    PRECISION_KEY,
    precision_name,
    resolve_precision,
)
from gmlm.training.step import LossWatch, StepValues, optimizer_step
from gmlm.training.step_timing import measured_precision
from gmlm.training.stopping import StopRequests
from gmlm.training.validation import validate, validation_pairs
from gmlm.translation.translator import Translator

Log = Callable[[str], None]


@dataclass
class TrainResult:
    run_dir: Path
    step: int
    best: dict[str, Any] = field(default_factory=dict)
    last_metrics: dict[str, Any] = field(default_factory=dict)


def training_data(cfg: TrainConfig) -> PreparedDataset:
    """The prepared dataset `cfg.data` names (training and `gmlm throughput`)."""
    if not cfg.data:
        raise GmlmError("no data: pass data=DIR (a folder made by `gmlm data prepare`)")
    return load_dataset(cfg.data)


def check_data_fits(cfg: TrainConfig, data: PreparedDataset) -> None:
    """The tokenizer's ids must be the model's; every sentence, with the EOS (AR targets: the
    BOS) that batches add, must fit the model's maxima."""
    tok = data.tokenizer
    for name, value in cfg.model.special_ids().items():
        if getattr(tok, name) != value:
            raise GmlmError(
                f"{cfg.data}: its tokenizer has {name}={getattr(tok, name)} but the model expects "
                f"{value}: the data directory comes from an incompatible tokenizer; prepare it "
                "again with `gmlm data prepare`"
            )
    for split in ("train", "valid"):
        if split not in data.splits:
            raise GmlmError(f"{cfg.data}: no '{split}' split; prepare the data with one")
        ds = data.split(split)
        if len(ds) == 0:
            raise GmlmError(f"{cfg.data}: the {split} split is empty")
        # Stored lengths exclude the EOS (BOS) that every batch appends to both sides.
        longest_src, longest_tgt = int(ds.src_lengths.max()) + 1, int(ds.tgt_lengths.max()) + 1
        if longest_src > cfg.model.max_source_len or longest_tgt > cfg.model.max_target_len:
            raise GmlmError(
                f"{cfg.data}: the {split} split has sources up to {longest_src} and targets up to "
                f"{longest_tgt} tokens (EOS included), beyond model.max_source_len="
                f"{cfg.model.max_source_len} / model.max_target_len={cfg.model.max_target_len}; "
                "raise those or prepare the data with a smaller --max-len"
            )


class Trainer:
    def __init__(self, cfg: TrainConfig, progress: bool = True, log: Log = print) -> None:
        self.data = training_data(cfg)
        if not cfg.out:
            raise GmlmError("no output folder: pass out=DIR")
        use_vocab_size(cfg, self.data.tokenizer)
        cfg.validate()
        check_data_fits(cfg, self.data)
        self.cfg = cfg
        self.run_dir = Path(cfg.out)
        self.device = process_device(pick_device(cfg.device))
        self.dist = init_distributed(self.device)
        self.dtype = resolve_precision(cfg, self.device)
        self.log = log if self.dist.is_main else (lambda _msg: None)
        self.progress = progress and self.dist.is_main
        if cfg.threads > 0:
            torch.set_num_threads(cfg.threads)
        torch.manual_seed(cfg.seed + 1000 * self.dist.rank)
        self.model = build_model(cfg.kind, cfg.model).to(self.device)
        self.loss_module: nn.Module = loss_module(self.model, cfg)
        if self.dist.active:
            self.loss_module = DistributedDataParallel(self.loss_module)
        self.optimizer = build_optimizer(self.model, cfg.optim)
        self.noise = torch.Generator(device=self.device)
        self.noise.manual_seed(cfg.seed * 7919 + self.dist.rank)
        self.watch = LossWatch(self.device)
        self.valid_pairs = (
            validation_pairs(self.data, cfg.valid_sentences) if self.dist.is_main else None
        )
        self.train_set = TranslationDataset(self.data, "train")
        self.batches = BatchIterator(
            self.train_set,
            cfg.max_tokens,
            seed=cfg.seed,
            max_sentences=cfg.max_sentences or None,
            rank=self.dist.rank,
            world_size=self.dist.world_size,
        )
        self.precision_rates: dict[str, float] = {}
        if cfg.precision == "auto" and self.dtype is not None and not self.dist.active:
            self._measure_precision()
        self.step = 0
        self.best: dict[str, Any] = {}
        self.elapsed = 0.0
        self._stream: Iterator[Batch] | None = None
        # The main process's copy of last/state.json, and whether the validation of its step
        # is still to be done (a crash or an error stopped it).
        self._last_state: dict[str, Any] = {}
        self._validation_pending = False
        self._saved_at = time.monotonic()

    def _measure_precision(self) -> None:
        """precision=auto where bf16 is an option: a few steps of each precision on copies of
        the model and the run's first batches (gmlm.training.step_timing), bf16 only where it
        trained at least as fast. One process only (under torchrun every rank must agree: the
        device's default, bf16, stands)."""
        cfg = self.cfg
        iterator = BatchIterator(
            self.train_set, cfg.max_tokens, seed=cfg.seed, max_sentences=cfg.max_sentences or None
        )
        batches = [batch.to(self.device) for _, batch in zip(range(4), iterator, strict=False)]
        if not batches:
            return
        devices = [self.device] if self.device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices):  # the run's random draws stay its own
            self.dtype, self.precision_rates = measured_precision(cfg, self.model, batches)
        rates = ", ".join(f"{k} {v:,.0f}" for k, v in self.precision_rates.items())
        self.log(
            f"precision=auto: {precision_name(self.dtype)} (target tokens/s over "
            f"{len(batches) - 1} timed steps each: {rates})"
        )

    # ----------------------------------------------------------------------------- state
    def _prepare_run_dir(self) -> bool:
        """Whether the run folder (created with its lock) holds a run to resume."""
        run = self.run_dir
        if ckpt.check_run_folder(run):
            saved = ckpt.read_config(run / "last")
            ckpt.check_resume_compatible(saved, self.cfg, run)
            return True
        return False

    def _restore(self) -> None:
        last = self.run_dir / "last"
        load_weights(self.model, last)
        ckpt.load_optimizer(last, self.optimizer)
        state = load_json(last / "state.json")
        if state.get("data_fingerprint") != self.train_set.fingerprint:
            raise GmlmError(
                f"{last}: the run was trained on different data than data={self.cfg.data};"
                " use another out= folder"
            )
        if state.get("world_size", 1) != self.dist.world_size:
            raise GmlmError(
                f"{last}: saved with {state.get('world_size')} processes, resumed "
                f"with {self.dist.world_size}; resume with the same process count"
            )
        rng = load_tensors(last / "state.safetensors")
        rank_key = f"rank{self.dist.rank}"
        torch.set_rng_state(rng[f"{rank_key}.torch"])
        self.noise.set_state(rng[f"{rank_key}.noise"].to(self.noise.get_state().device))
        if self.device.type == "cuda" and f"{rank_key}.cuda" in rng:
            torch.cuda.set_rng_state(rng[f"{rank_key}.cuda"], self.device)
        self.batches.load_state_dict(state["data"][rank_key])
        self.step = int(state["step"])
        self.best = state.get("best", {})
        self.elapsed = float(state.get("elapsed", 0.0))
        self._last_state = state
        self._validation_pending = bool(state.get("validation_pending", False))
        self._truncate_metrics()
        self.log(
            f"resumed {self.run_dir} at step {self.step}"
            + (", whose validation comes first" if self._validation_pending else "")
        )

    def _truncate_metrics(self) -> None:
        """Drop the rows logged after the `last` checkpoint (and the validation row of its own
        step, when that validation is to be repeated)."""
        path = self.run_dir / "metrics.jsonl"
        if not path.is_file():
            return

        def keep(row: dict[str, Any]) -> bool:
            step = row.get("step", 0)
            if step == self.step and self._validation_pending:
                return not any(key.startswith("valid_") for key in row)
            return bool(step <= self.step)

        kept = [
            line
            for line in path.read_text(encoding="utf-8").splitlines()
            if line.strip() and keep(json.loads(line))
        ]
        with atomic_open(path) as handle:
            handle.write("".join(line + "\n" for line in kept))

    def _rng_tensors(self) -> dict[str, Tensor]:
        key = f"rank{self.dist.rank}"
        out = {f"{key}.torch": torch.get_rng_state(), f"{key}.noise": self.noise.get_state().cpu()}
        if self.device.type == "cuda":
            out[f"{key}.cuda"] = torch.cuda.get_rng_state(self.device)
        return out

    def _gather(self, obj: Any) -> list[Any]:
        if not self.dist.active:
            return [obj]
        out: list[Any] = [None] * self.dist.world_size
        torch.distributed.all_gather_object(out, obj)
        return out

    def save_last(self, validate: bool = True) -> None:
        """Write the `last` checkpoint (every process contributes its RNG and data position).
        With `validate`, it is marked as awaiting the validation of its step until `_validate`
        records its outcome, and its weights join the history kept for averaging; otherwise it
        is a save between validations (`save_minutes`)."""
        self.check_losses()
        self._saved_at = time.monotonic()
        rngs = self._gather(self._rng_tensors())
        data_states = self._gather(self.batches.state_dict())
        if self.dist.is_main:
            previous = self._last_state.get("step")
            rng = {k: v for part in rngs for k, v in part.items()}
            state = {
                "step": self.step,
                "elapsed": self.elapsed,
                "best": self.best,
                "world_size": self.dist.world_size,
                "data_fingerprint": self.train_set.fingerprint,
                "data": {f"rank{r}": s for r, s in enumerate(data_states)},
                "validation_pending": validate,
            }

            def fill(tmp: Path) -> None:
                fill_inference_files(tmp, self.model, self.cfg, self.data.tokenizer, self._meta())
                ckpt.save_optimizer(tmp, self.optimizer)
                save_tensors(rng, tmp / "state.safetensors")
                atomic_write_json(tmp / "state.json", state)

            try:
                write_checkpoint_dir(self.run_dir / "last", fill)
            except WriteError as err:  # `last` as it was: the previous save, or none
                kept = (
                    f"the checkpoint of step {previous} in it is intact: once the cause is "
                    "fixed, run the same command again to resume from it"
                    if previous is not None
                    else "no checkpoint of this run was saved before"
                )
                raise GmlmError(f"{err}. Saving step {self.step} failed; {kept}") from err
            self._last_state = state
            if self.cfg.keep_history and validate:
                self._save_history()
        barrier(self.dist)

    def _save_history(self) -> None:
        target = history_file(self.run_dir, self.step)
        target.parent.mkdir(exist_ok=True)
        with atomic_open(target, "wb") as handle:
            handle.write((self.run_dir / "last" / MODEL_FILE).read_bytes())
        for old in list(history_steps(self.run_dir).values())[: -self.cfg.keep_history]:
            old.unlink()

    def _meta(self, **extra: Any) -> dict[str, Any]:
        return {
            "step": self.step,
            "kind": self.cfg.kind,
            "torch": torch_version(),
            "parameters": count_parameters(self.model),
            **language_meta(pair_of(self.data.manifest)),
            **extra,
        }

    # ----------------------------------------------------------------------------- loop
    def _next_batch(self) -> Batch:
        while True:
            if self._stream is None:
                self._stream = iter(self.batches)
            batch = next(self._stream, None)
            if batch is not None:
                return batch
            self.batches = self._next_epoch()
            self._stream = None

    def _next_epoch(self) -> BatchIterator:
        nxt = BatchIterator(
            self.train_set,
            self.cfg.max_tokens,
            seed=self.cfg.seed,
            max_sentences=self.cfg.max_sentences or None,
            rank=self.dist.rank,
            world_size=self.dist.world_size,
            epoch=self.batches.epoch + 1,
        )
        if len(nxt) == 0:
            raise GmlmError("the training split yields no batches: lower max_tokens or add data")
        return nxt

    def train_step(self) -> StepValues:
        """One optimizer step over accum_steps micro-batches on every process, with no host
        read of a device value (gmlm.training.step)."""
        cfg = self.cfg
        micro = [
            self._next_batch().to(self.device, non_blocking=True) for _ in range(cfg.accum_steps)
        ]
        # Every process's batches are shares of the same global batches, so each knows the
        # totals without asking the others.
        tokens = float(sum(b.all_tgt_tokens for b in micro))
        sents = float(sum(b.all_size for b in micro))
        self.model.train()
        values = optimizer_step(
            cfg,
            self.model,
            self.loss_module,
            self.optimizer,
            micro,
            (tokens, sents),
            lr=lr_at(self.step + 1, cfg.optim, cfg.max_steps),
            dtype=self.dtype,
            noise=self.noise,
            watch=self.watch,
            step=self.step + 1,
            world_size=self.dist.world_size,
        )
        self.step += 1
        return values

    def check_losses(self) -> None:
        """Stop with an error if a loss since the last check was not finite (one host read):
        before every save and every logged row, so no checkpoint holds what followed it. Under
        torchrun every process learns whether any found one, and all stop together (a process
        that went on alone would wait for the others forever)."""
        found = self.watch.check()
        if self.dist.active:
            anywhere = all_reduce_sum([float(found is not None)], self.dist)[0]
            if found is None and anywhere > 0:
                raise GmlmError(
                    f"non-finite loss on another process before step {self.step} (its error "
                    f"names the step and lines); nothing was saved after it, the last good "
                    f"checkpoint is {self.run_dir / 'last'}"
                )
        if found is None:
            return
        lines = [int(self.train_set.lines[r]) + 1 for r in found.rows[:20]]
        raise GmlmError(
            f"non-finite loss at step {found.step} (micro-batch {found.micro_batch}, lines "
            f"{lines} of the prepared training text); nothing was saved after it, the last "
            f"good checkpoint is {self.run_dir / 'last'}; lower optim.lr or check those "
            "sentences"
        )

    def run(self) -> TrainResult:
        """Train (or resume) to max_steps in the run folder, which the main process holds
        locked throughout (gmlm.locking): a second run on it fails at once."""
        owner = (
            folder_lock(self.run_dir, f"out={self.run_dir}") if self.dist.is_main else nullcontext()
        )
        try:
            with owner:
                return self._run()
        finally:
            shutdown(self.dist)

    def _run(self) -> TrainResult:
        cfg = self.cfg
        # Only the main process touches the folder; the others learn the outcome from it.
        resuming = self._prepare_run_dir() if self.dist.is_main else False
        if self.dist.active:
            flag = [resuming]
            torch.distributed.broadcast_object_list(flag, src=0)
            resuming = bool(flag[0])
        if resuming:
            self._restore()
        else:
            if cfg.init_from:
                source = load_initial_weights(self.model, cfg, self.data.tokenizer)
                self.log(f"starting from the weights of {source} (init_from)")
            if self.dist.is_main:
                (self.run_dir / "metrics.jsonl").unlink(missing_ok=True)
        if self.dist.is_main:
            ckpt.remove_stale(self.run_dir)
            save_config(cfg, self.run_dir / "config.yaml")
        barrier(self.dist)
        self.log(
            f"training {cfg.kind} ({count_parameters(self.model):,} parameters) on "
            f"{self.device} x{self.dist.world_size}, precision "
            f"{'bf16 autocast' if self.dtype else 'fp32'}, threads {torch.get_num_threads()}, "
            f"{len(self.train_set):,} training pairs, steps {self.step} -> {cfg.max_steps}"
        )
        if self.valid_pairs is not None:
            self.log(self.valid_pairs.describe())
        metrics_path = self.run_dir / "metrics.jsonl"
        writer = None
        if self.dist.is_main:
            with writing(metrics_path):
                writer = open(metrics_path, "a", encoding="utf-8")  # noqa: SIM115
        tb = self._tensorboard()
        bar = tqdm(
            total=cfg.max_steps,
            initial=self.step,
            disable=not self.progress,
            desc=f"train {cfg.kind}",
            unit="step",
            dynamic_ncols=True,
        )
        self._last_row: dict[str, Any] = {}
        # The signal handlers cover the closing below too: a Ctrl-C there must not replace
        # the Stopped that says where `last` is by a KeyboardInterrupt.
        with StopRequests() as stop:
            try:
                if self._validation_pending and self.dist.is_main:
                    self._validate(writer, tb)
                self._train_until_done_or_stopped(stop, writer, tb, bar)
            finally:
                bar.close()
                if writer is not None:
                    with writing(metrics_path):
                        writer.close()
                if tb is not None:
                    tb.close()
        if cfg.average_last and self.dist.is_main:
            self._average()
        return TrainResult(self.run_dir, self.step, self.best, self._last_row)

    def _train_until_done_or_stopped(
        self, stop: StopRequests, writer: Any, tb: Any, bar: Any
    ) -> None:
        """Train to max_steps; on a stop request (SIGTERM/SIGINT) save `last` after the step
        in progress and raise Stopped (see gmlm.training.stopping)."""
        cfg = self.cfg
        window_tokens, window_start = 0.0, time.perf_counter()
        while self.step < cfg.max_steps:
            started = time.perf_counter()
            values = self.train_step()
            self.elapsed += time.perf_counter() - started
            window_tokens += values.tokens
            bar.update(1)
            if self.step % cfg.log_every == 0 or self.step == cfg.max_steps:
                self.check_losses()
                stats = values.read(cfg, self.dist)  # waits for the device
                rate = window_tokens / max(time.perf_counter() - window_start, 1e-9)
                self._last_row = {
                    "step": self.step,
                    **stats,
                    "target_tokens_per_s": rate,
                    "elapsed_s": self.elapsed,
                    PRECISION_KEY: precision_name(self.dtype),
                }
                bar.set_postfix(loss=f"{stats['loss']:.3f}", tok_s=f"{rate:,.0f}")
                self._write(writer, tb, self._last_row)
                window_tokens, window_start = 0.0, time.perf_counter()
            saved = True
            if self.step % cfg.valid_every == 0 or self.step == cfg.max_steps:
                self._save_and_validate(writer, tb)
            elif self.step % cfg.log_every == 0 and self._save_due():
                self.save_last(validate=False)
            else:
                saved = False
            if self.step < cfg.max_steps and self._stop_requested(stop):
                if not saved:
                    self.save_last(validate=False)
                signum = stop.signum or signal.SIGTERM
                raise Stopped(
                    f"stopped by {signal.Signals(signum).name} after step {self.step} of "
                    f"{cfg.max_steps}, saved in {self.run_dir / 'last'}; run the same command "
                    "again to resume there",
                    signum,
                )

    def _stop_requested(self, stop: StopRequests) -> bool:
        """Whether any process got a stop signal (they stop together, after the same step)."""
        asked = stop.signum is not None
        if self.dist.active:
            asked = all_reduce_sum([float(asked)], self.dist)[0] > 0
        return asked

    def _tensorboard(self) -> Any:
        if not (self.cfg.tensorboard and self.dist.is_main):
            return None
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:
            raise GmlmError(
                "tensorboard=true needs the extra: pip install 'gmlm[tensorboard]'"
            ) from None
        return SummaryWriter(str(self.run_dir / "tensorboard"))

    def _write(self, writer: Any, tb: Any, row: dict[str, Any]) -> None:
        if writer is None:
            return
        with writing(self.run_dir / "metrics.jsonl"):
            writer.write(json.dumps(row) + "\n")
            writer.flush()
        if tb is not None:
            for key, value in row.items():
                if key != "step" and isinstance(value, (int, float)) and math.isfinite(value):
                    tb.add_scalar(key, value, row["step"])

    def _save_due(self) -> bool:
        """Whether `save_minutes` have passed since the last save, by the main process's
        clock (every process takes its decision, so that they save together)."""
        minutes = self.cfg.save_minutes
        due = bool(minutes) and time.monotonic() - self._saved_at >= 60.0 * minutes
        if self.dist.active:
            flag = [due]
            torch.distributed.broadcast_object_list(flag, src=0)
            due = bool(flag[0])
        return due

    def _save_and_validate(self, writer: Any, tb: Any) -> None:
        """Save `last`, then validate: an error in the validation loses no training step."""
        self.save_last()
        if self.dist.is_main:
            self._validate(writer, tb)
        barrier(self.dist)

    def _translate_valid(self, sources: list[list[int]]) -> list[str]:
        """The validation BLEU's translations: the model being trained, decoded with the
        decoding options' class defaults (PaDIR: `valid_steps` refinement steps), so that the
        curves of every run compare."""
        translator = Translator(self.cfg.kind, self.model, self.data.tokenizer)
        steps = self.cfg.valid_steps if self.cfg.kind == "padir" else None
        options = translator.options(steps=steps)
        outputs = translator.translate_ids(sources, options)
        return [translator.text(ids, options) for ids in outputs]

    def _validate(self, writer: Any, tb: Any) -> None:
        """Validate the model of this step (main process), write `best` if it is, and mark the
        `last` checkpoint's validation done."""
        last = self.run_dir / "last"
        devices = [self.device] if self.device.type == "cuda" else []
        try:
            # Training goes on as if no validation ran (`last` was saved before it).
            with torch.random.fork_rng(devices=devices):
                scores = validate(
                    self.model,
                    self.cfg,
                    self.data,
                    self.device,
                    self.dtype,
                    self._translate_valid,
                    self.valid_pairs,
                )
        except Exception as err:
            cause = str(err) if isinstance(err, GmlmError) else f"{type(err).__name__}: {err}"
            raise GmlmError(
                f"validation at step {self.step} failed: {cause}. Training up to step "
                f"{self.step} is saved in {last}: fix the cause and run the same command again, "
                "which resumes there and repeats this validation"
            ) from err
        row = {
            "step": self.step,
            **{f"valid_{k}": v for k, v in scores.items() if not isinstance(v, str)},
            PRECISION_KEY: precision_name(self.dtype),  # what trained up to here
        }
        self._write(writer, tb, row)
        key = "bleu" if "bleu" in scores else "loss"
        better = not self.best or (
            scores[key] > self.best[key] if key == "bleu" else scores[key] < self.best[key]
        )
        if better:
            self.best = {"step": self.step, **scores}
            write_checkpoint_dir(
                self.run_dir / "best",
                lambda tmp: fill_inference_files(
                    tmp, self.model, self.cfg, self.data.tokenizer, self._meta(valid=scores)
                ),
            )
        self.log(
            f"step {self.step}: valid "
            + ", ".join(f"{k} {v:.4g}" for k, v in scores.items() if isinstance(v, float))
            + (" (best)" if better else "")
        )
        # Only the validation's outcome changes: rewriting state.json (atomically) keeps the
        # folder a complete checkpoint at every moment.
        self._last_state.update(best=self.best, validation_pending=False)
        atomic_write_json(last / "state.json", self._last_state)
        self._validation_pending = False

    def _average(self) -> None:
        files = list(history_steps(self.run_dir).values())[-self.cfg.average_last :]
        write_averaged(
            self.run_dir / "averaged", files, self.cfg, self.data.tokenizer, self._meta()
        )
        self.log(f"averaged {len(files)} checkpoints into {self.run_dir / 'averaged'}")
