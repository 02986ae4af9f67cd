"""Model hyper-parameters shared by the autoregressive baseline and PaDIR, plus size presets.

The size presets are the `model` sections of the YAML presets (gmlm/configs/tiny.yaml,
small.yaml, base.yaml); :func:`preset` reads one with any field overridden by keyword, e.g. the
deep-encoder / shallow-decoder autoregressive baseline used in speed comparisons is
``preset("small", n_decoder_layers=1)``. The AR model and PaDIR built from the same config
differ only by PaDIR's length table and positional-attention weights.

Special tokens occupy the ids ``[0, n_special)``; random tokens (PaDIR noising and initial
hypotheses) are drawn uniformly from ``[n_special, vocab_size)``. The tokenizer must put its
special pieces at the ids named here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from gmlm.config import (
    LENGTH,
    MAX_VOCAB,
    ConfigError,
    Range,
    bounds,
    check_settings,
    deep_update,
    from_dict,
    load_preset_dict,
)

# Layers, widths and heads: each well beyond the paper's big models, so that a typo fails here
# rather than in the allocator.
LAYERS = Range(ge=1, le=256)
WIDTH = Range(ge=1, le=1 << 16)
RATE = Range(ge=0, lt=1)
SPECIAL_ID = Range(ge=0, le=255)


@dataclass
class ModelConfig:
    """Encoder-decoder Transformer sizes, special token ids and PaDIR options.

    Defaults are the paper's base model (6 + 6 layers, d_model 512, 8 heads, FFN 2048,
    dropout 0.1).

    Positions: both encoders and the AR decoder add learned absolute position embeddings to
    their inputs. The paper's T5 code uses relative position bias instead; absolute tables are
    simpler and cheaper. Without the relative bias (``relative_bias``, off by default) the
    PaDIR decoder also adds the absolute embeddings to its inputs (``decoder_positions``):
    positional attention alone cannot tell positions apart when neighbouring hidden states are
    equal, e.g. an all-[MASK] initial hypothesis would give the same prediction at every
    position. The table is shared between that input embedding and every layer's positional
    attention.

    Relative bias (PaDIR only, docs/DESIGN.md section 1): T5's bucketed bias, a learned scalar per
    head and bucket of key - query distance, added to the attention scores of the decoder's
    self-attention and positional attention. Each of the two has its own table, shared by
    every decoder layer: the T5 way (computed once per pass, no per-layer copies), and the
    bias then acts as one position signal that every layer reads, like the shared position
    table of positional attention. With it, ``decoder_positions`` may be switched off to match
    the authors' decoder.

    Dropout: ``dropout`` hits residual branches and the embeddings; ``attention_dropout`` the
    attention probabilities of every attention (positional attention included);
    ``activation_dropout`` the feed-forward activation. T5 uses one rate for all of them; the
    two extra rates default to 0 so that older configs keep their meaning.
    """

    vocab_size: int = field(
        default=8000,
        metadata=bounds(ge=0, le=MAX_VOCAB, note="0 in a training config: the data's tokenizer's"),
    )
    d_model: int = field(default=512, metadata=bounds(WIDTH))
    n_heads: int = field(default=8, metadata=bounds(ge=1, le=1024))
    n_encoder_layers: int = field(default=6, metadata=bounds(LAYERS))
    n_decoder_layers: int = field(default=6, metadata=bounds(LAYERS))
    d_ff: int = field(default=2048, metadata=bounds(ge=1, le=1 << 18))
    dropout: float = field(default=0.1, metadata=bounds(RATE))
    attention_dropout: float = field(default=0.0, metadata=bounds(RATE))
    activation_dropout: float = field(default=0.0, metadata=bounds(RATE))
    # Longest source (without PaDIR's [LENGTH] token) and target (counting EOS) in tokens.
    max_source_len: int = field(default=256, metadata=bounds(LENGTH))
    max_target_len: int = field(default=256, metadata=bounds(LENGTH))
    # One matrix for source embedding, target embedding and output projection (joint vocab).
    tie_embeddings: bool = True
    # PaDIR only: positional attention in every decoder layer (off for the ablation).
    positional_attention: bool = True
    # PaDIR only: add absolute position embeddings to the decoder input (see class docstring).
    decoder_positions: bool = True
    # PaDIR only: T5 relative position bias in decoder self- and positional attention: distances
    # |key - query| below relative_buckets / 4 get a bucket each (per direction), longer ones
    # share logarithmically wider buckets up to relative_max_distance (see class docstring).
    relative_bias: bool = False
    relative_buckets: int = field(
        default=32,
        metadata=bounds(
            ge=4,
            le=1024,
            note="even: half for each direction, each half split into exact and logarithmic "
            "buckets",
        ),
    )
    relative_max_distance: int = field(default=128, metadata=bounds(LENGTH))
    # PaDIR only: corrupt targets / start decoding from random tokens or from [MASK] tokens.
    init_hypothesis: Literal["random", "mask"] = "random"
    pad_id: int = field(default=0, metadata=bounds(SPECIAL_ID))
    unk_id: int = field(default=1, metadata=bounds(SPECIAL_ID))
    bos_id: int = field(default=2, metadata=bounds(SPECIAL_ID))
    eos_id: int = field(default=3, metadata=bounds(SPECIAL_ID))
    mask_id: int = field(default=4, metadata=bounds(SPECIAL_ID))
    length_id: int = field(default=5, metadata=bounds(SPECIAL_ID))
    n_special: int = field(default=6, metadata=bounds(ge=6, le=256, note="the six special ids"))

    def special_ids(self) -> dict[str, int]:
        return {
            "pad_id": self.pad_id,
            "unk_id": self.unk_id,
            "bos_id": self.bos_id,
            "eos_id": self.eos_id,
            "mask_id": self.mask_id,
            "length_id": self.length_id,
        }

    def validate(self) -> None:
        """Raise :class:`ConfigError` naming the field at fault."""
        check_settings(self, "model.")
        if self.d_model % self.n_heads:
            raise ConfigError(
                f"model.d_model={self.d_model} is not divisible by model.n_heads={self.n_heads}"
            )
        if self.relative_buckets % 2:
            raise ConfigError(
                f"model.relative_buckets must be even and at least 4 (half for each direction, "
                f"each half split into exact and logarithmic buckets), got {self.relative_buckets}"
            )
        if self.relative_max_distance <= self.relative_buckets // 4:
            raise ConfigError(
                f"model.relative_max_distance={self.relative_max_distance} must exceed "
                f"model.relative_buckets / 4 = {self.relative_buckets // 4}, the distances that "
                "get a bucket each"
            )
        specials = self.special_ids()
        if len(set(specials.values())) != len(specials):
            raise ConfigError(f"special token ids must be distinct, got {specials}")
        for name, value in specials.items():
            if not 0 <= value < self.n_special:
                raise ConfigError(
                    f"model.{name}={value} must lie in [0, model.n_special={self.n_special})"
                )
        if self.vocab_size <= self.n_special:
            raise ConfigError(
                f"model.vocab_size={self.vocab_size} leaves no ordinary tokens after "
                f"model.n_special={self.n_special} special ids"
            )


def preset(name: str | Path, **overrides: Any) -> ModelConfig:
    """The `model` section of a YAML preset (`tiny`, `small`, `base`, `small-padir`, ... in
    gmlm/configs, or a YAML file), with `overrides` applied: ``preset("small",
    n_decoder_layers=1)``. The YAML presets are the one place model sizes are written down."""
    model = load_preset_dict(name).get("model", {})
    config = from_dict(ModelConfig, deep_update(model, overrides), prefix="model.")
    config.validate()
    return config
