"""The training configuration schema. Presets in gmlm/configs/*.yaml hold overrides only.

`gmlm train --config small-padir data=DIR out=DIR optim.lr=3e-4` resolves, in order: these
defaults, the preset chain (`small-padir` -> `small`), then each `key=value` override.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from gmlm.config import ConfigError, load_config
from gmlm.data.tokenizer import Tokenizer
from gmlm.decoding.options import MAX_STEPS
from gmlm.models.losses import StageArgmax, StageStutterRemask
from gmlm.nn.config import ModelConfig


@dataclass
class OptimConfig:
    name: Literal["adamw", "adafactor"] = "adamw"
    lr: float = 5e-4  # peak learning rate, reached at the end of warm-up
    betas: list[float] = field(default_factory=lambda: [0.9, 0.98])
    eps: float = 1e-8
    weight_decay: float = 0.01
    clip_norm: float = 1.0  # 0 disables gradient clipping
    # warm-up then cosine decay to min_lr at max_steps (the paper), or inverse square root
    schedule: Literal["cosine", "inverse_sqrt", "constant"] = "cosine"
    warmup_steps: int = 1000
    min_lr: float = 1e-5


@dataclass
class PadirObjectiveConfig:
    """PaDIR's training objective: the keywords of :func:`gmlm.models.padir_loss`.

    The defaults are the objective older runs were trained with. Length label smoothing is
    its own setting rather than `label_smoothing`'s: the token smoothing defaults to 0.1, so
    sharing it would change the length loss of every existing config, the two spread their
    mass over different class counts (lengths vs vocabulary), and the references differ (the
    authors' code smooths the length loss like the tokens, fairseq's NAT models do not).
    """

    stages: int = 2  # multi-stage training: the paper uses 2
    keep_rate: float = 0.15  # the paper's "unmasking rate": target tokens kept correct
    # Weight of the per-sentence length loss against the per-token loss (see models/losses.py;
    # 1 overweights it about 30x against the authors' code, fairseq uses 0.1).
    length_weight: float = 1.0
    length_label_smoothing: float = 0.0
    # Stage s + 1's input: the argmax over every id ("any") or, as at inference, the best
    # ordinary token ("ordinary"); stutter remasked from stage s's input ("previous") or not.
    stage_argmax: StageArgmax = "any"
    stage_stutter_remask: StageStutterRemask = "none"

    def validate(self) -> None:
        """Raise :class:`ConfigError` naming the field at fault."""
        if self.stages < 1:
            raise ConfigError(f"padir.stages must be at least 1, got {self.stages}")
        if not 0.0 <= self.keep_rate <= 1.0:
            raise ConfigError(f"padir.keep_rate must be in [0, 1], got {self.keep_rate}")
        if not 0.0 <= self.length_weight < math.inf:
            raise ConfigError(
                f"padir.length_weight must be a finite number >= 0, got {self.length_weight}"
            )
        if not 0.0 <= self.length_label_smoothing < 1.0:
            raise ConfigError(
                f"padir.length_label_smoothing must be in [0, 1), got {self.length_label_smoothing}"
            )


@dataclass
class TrainConfig:
    kind: Literal["ar", "padir"] = "padir"
    data: str = ""  # prepared dataset folder (gmlm data prepare)
    out: str = ""  # run folder: checkpoints, metrics, resolved config
    seed: int = 0
    # model.vocab_size 0 (the default): the data's tokenizer's; any other value must equal it
    model: ModelConfig = field(default_factory=lambda: ModelConfig(vocab_size=0))
    optim: OptimConfig = field(default_factory=OptimConfig)
    padir: PadirObjectiveConfig = field(default_factory=PadirObjectiveConfig)
    label_smoothing: float = 0.1
    max_tokens: int = 4096  # padded tokens per micro-batch and process
    max_sentences: int = 0  # 0: no limit besides max_tokens
    accum_steps: int = 1  # micro-batches per optimizer step
    max_steps: int = 10000
    # auto: fp32 on every CPU, bf16 autocast on GPUs that support it. The choice depends on the
    # device type only, never on CPU flags, so a run means the same on every CPU; bf16 on a CPU
    # is opt-in (precision=bf16) once `gmlm throughput` shows it pays there (AMX: often; AVX2:
    # measured 5-13x slower than fp32).
    precision: Literal["auto", "fp32", "bf16"] = "auto"
    device: str = "auto"  # auto, cpu, cuda, cuda:1, ...
    threads: int = 0  # CPU threads for torch; 0 keeps torch's default
    log_every: int = 50
    valid_every: int = 500  # also writes the `last` checkpoint
    # Also write `last` (without validating) once this many minutes have passed since the last
    # save, checked every log_every steps, so an interrupted CPU run loses little; 0: only at
    # validations. When it saves never changes what is trained (resuming is exact).
    save_minutes: float = 10.0
    valid_sentences: int = 200  # quick BLEU on this many kept valid pairs (0: loss only)
    valid_steps: int = 4  # PaDIR refinement steps in the validation BLEU
    keep_history: int = 0  # keep the weights of the last N checkpoints for averaging
    average_last: int = 0  # at the end, average the last N kept checkpoints into `averaged`
    tensorboard: bool = False

    def validate(self) -> None:
        # Until use_vocab_size fills it in, a vocab_size of 0 stands for any valid size.
        least = self.model.n_special + 1
        dataclasses.replace(self.model, vocab_size=self.model.vocab_size or least).validate()
        positive = ("max_tokens", "accum_steps", "max_steps", "log_every", "valid_every")
        for name in positive:
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be at least 1, got {getattr(self, name)}")
        if not 1 <= self.valid_steps <= MAX_STEPS:
            raise ConfigError(
                f"valid_steps must be between 1 and {MAX_STEPS}, got {self.valid_steps}"
            )
        self.padir.validate()
        if not 0.0 <= self.label_smoothing < 1.0:
            raise ConfigError(f"label_smoothing must be in [0, 1), got {self.label_smoothing}")
        if not 0.0 <= self.save_minutes < math.inf:
            raise ConfigError(
                f"save_minutes must be a finite number >= 0 (0: save at validations only), "
                f"got {self.save_minutes}"
            )
        if self.average_last > self.keep_history:
            raise ConfigError(
                f"average_last={self.average_last} needs keep_history >= {self.average_last}"
            )
        if self.optim.lr <= 0 or self.optim.min_lr < 0 or self.optim.warmup_steps < 0:
            raise ConfigError("optim.lr must be > 0, optim.min_lr and warmup_steps >= 0")


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
