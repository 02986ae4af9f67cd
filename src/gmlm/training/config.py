"""The training configuration schema. Presets in gmlm/configs/*.yaml hold overrides only.

`gmlm train --config small-padir data=DIR out=DIR optim.lr=3e-4` resolves, in order: these
defaults, the preset chain (`small-padir` -> `small`), then each `key=value` override.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from gmlm.config import (
    MAX_TOKENS,
    SEED,
    THREADS,
    TRAINING_STEPS,
    ConfigError,
    bounds,
    check_settings,
    load_config,
)
from gmlm.data.tokenizer import Tokenizer
from gmlm.decoding.options import MAX_STEPS, PAPER_STEPS
from gmlm.models.losses import StageArgmax, StageStutterRemask
from gmlm.nn.config import RATE, ModelConfig


@dataclass
class OptimConfig:
    name: Literal["adamw", "adafactor"] = "adamw"
    # peak learning rate, reached at the end of warm-up
    lr: float = field(default=5e-4, metadata=bounds(gt=0))
    betas: list[float] = field(default_factory=lambda: [0.9, 0.98], metadata=bounds(RATE))
    eps: float = field(default=1e-8, metadata=bounds(gt=0))
    weight_decay: float = field(default=0.01, metadata=bounds(ge=0))
    # 0 disables gradient clipping
    clip_norm: float = field(default=1.0, metadata=bounds(ge=0, note="0 disables clipping"))
    # warm-up then cosine decay to min_lr at max_steps (the paper), or inverse square root
    schedule: Literal["cosine", "inverse_sqrt", "constant"] = "cosine"
    warmup_steps: int = field(default=1000, metadata=bounds(ge=0, le=TRAINING_STEPS.le))
    min_lr: float = field(default=1e-5, metadata=bounds(ge=0))


@dataclass
class PadirObjectiveConfig:
    """PaDIR's training objective: the keywords of :func:`gmlm.models.padir_loss`.

    The defaults are the objective older runs were trained with. Length label smoothing is
    its own setting rather than `label_smoothing`'s: the token smoothing defaults to 0.1, so
    sharing it would change the length loss of every existing config, the two spread their
    mass over different class counts (lengths vs vocabulary), and the references differ (the
    authors' code smooths the length loss like the tokens, fairseq's NAT models do not).
    """

    # multi-stage training: the paper uses 2 (each stage is a forward pass of every step)
    stages: int = field(default=2, metadata=bounds(ge=1, le=100))
    # the paper's "unmasking rate": target tokens kept correct
    keep_rate: float = field(default=0.15, metadata=bounds(ge=0, le=1))
    # Weight of the per-sentence length loss against the per-token loss (see models/losses.py;
    # 1 overweights it about 30x against the authors' code, fairseq uses 0.1).
    length_weight: float = field(default=1.0, metadata=bounds(ge=0))
    length_label_smoothing: float = field(default=0.0, metadata=bounds(RATE))
    # Stage s + 1's input: the argmax over every id ("any") or, as at inference, the best
    # ordinary token ("ordinary"); stutter remasked from stage s's input ("previous") or not.
    stage_argmax: StageArgmax = "any"
    stage_stutter_remask: StageStutterRemask = "none"


@dataclass
class TrainConfig:
    kind: Literal["ar", "padir"] = "padir"
    data: str = ""  # prepared dataset folder (gmlm data prepare)
    out: str = ""  # run folder: checkpoints, metrics, resolved config
    seed: int = field(default=0, metadata=bounds(SEED))
    # start a new run from this checkpoint's weights (a checkpoint or run folder; fine-tuning):
    # the optimizer, schedule and step start afresh, the model must be the checkpoint's (its
    # dropout rates aside) and the data's tokenizer its own (gmlm.training.init_from); ignored
    # when the run resumes from its own `last`
    init_from: str = ""
    # model.vocab_size 0 (the default): the data's tokenizer's; any other value must equal it
    model: ModelConfig = field(default_factory=lambda: ModelConfig(vocab_size=0))
    optim: OptimConfig = field(default_factory=OptimConfig)
    padir: PadirObjectiveConfig = field(default_factory=PadirObjectiveConfig)
    label_smoothing: float = field(default=0.1, metadata=bounds(RATE))
    # padded tokens per micro-batch and process
    max_tokens: int = field(default=4096, metadata=bounds(MAX_TOKENS))
    # 0: no limit besides max_tokens
    max_sentences: int = field(default=0, metadata=bounds(ge=0, le=MAX_TOKENS.le, note="0: none"))
    # micro-batches per optimizer step
    accum_steps: int = field(default=1, metadata=bounds(ge=1, le=1 << 16))
    max_steps: int = field(default=10000, metadata=bounds(TRAINING_STEPS))
    # auto: fp32 on every CPU, bf16 autocast on GPUs that support it. The choice depends on the
    # device type only, never on CPU flags, so a run means the same on every CPU; bf16 on a CPU
    # is opt-in (precision=bf16) once `gmlm throughput` shows it pays there (AMX: often; AVX2:
    # measured 5-13x slower than fp32).
    precision: Literal["auto", "fp32", "bf16"] = "auto"
    device: str = "auto"  # auto, cpu, cuda, cuda:1, ...
    # torch.compile the training step's forward (the model and its loss): off by default, as
    # it pays only on some devices and compiles again for new batch shapes; measure it first
    # with `gmlm throughput CONFIG compile=true` against compile=false (docs/GPU.md)
    compile: bool = False
    # CPU threads for torch; 0 keeps torch's default
    threads: int = field(default=0, metadata=bounds(THREADS))
    # write a metrics row every this many steps: the only steps that read the losses on the
    # host (on a GPU, a wait for the device) and check that every loss since was finite
    log_every: int = field(default=50, metadata=bounds(TRAINING_STEPS))
    # also writes the `last` checkpoint
    valid_every: int = field(default=500, metadata=bounds(TRAINING_STEPS))
    # Also write `last` (without validating) once this many minutes have passed since the last
    # save, checked every log_every steps, so an interrupted CPU run loses little; 0: only at
    # validations. When it saves never changes what is trained (resuming is exact).
    save_minutes: float = field(
        default=10.0, metadata=bounds(ge=0, le=10**6, note="0: save at validations only")
    )
    # quick BLEU on this many kept valid pairs (0: loss only)
    valid_sentences: int = field(default=200, metadata=bounds(ge=0, le=10**7, note="0: none"))
    # PaDIR refinement steps in the validation BLEU
    valid_steps: int = field(default=PAPER_STEPS, metadata=bounds(ge=1, le=MAX_STEPS))
    # keep the weights of the last N checkpoints for averaging
    keep_history: int = field(default=0, metadata=bounds(ge=0, le=1000))
    # at the end, average the last N kept checkpoints into `averaged`
    average_last: int = field(default=0, metadata=bounds(ge=0, le=1000))
    tensorboard: bool = False

    def validate(self) -> None:
        # Until use_vocab_size fills it in, a vocab_size of 0 stands for any valid size.
        check_settings(self)
        least = self.model.n_special + 1
        dataclasses.replace(self.model, vocab_size=self.model.vocab_size or least).validate()
        if self.average_last > self.keep_history:
            raise ConfigError(
                f"average_last={self.average_last} needs keep_history >= {self.average_last}"
            )


def use_vocab_size(cfg: TrainConfig, tokenizer: Tokenizer) -> None:
    """Set model.vocab_size to the size of the data's tokenizer (the embedding rows must match
    its ids); a different value set by hand is an error rather than silently replaced."""
    given = cfg.model.vocab_size
    if given not in (0, tokenizer.vocab_size):
        raise ConfigError(
            f"model.vocab_size={given}, but the tokenizer of data={cfg.data} has "
            f"{tokenizer.vocab_size} pieces; the vocabulary size comes from the data, so drop "
            "the setting (or prepare the data with --vocab-size to change it)"
        )
    cfg.model.vocab_size = tokenizer.vocab_size


def load_train_config(preset: str | Path | None, overrides: Sequence[str]) -> TrainConfig:
    cfg = load_config(TrainConfig, preset, overrides)
    cfg.validate()
    return cfg
