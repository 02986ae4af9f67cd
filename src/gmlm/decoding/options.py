"""The decoding settings of both model kinds, each declared once.

:class:`SearchOptions` (greedy and beam search, :mod:`gmlm.decoding.autoregressive`) and
:class:`RefinementOptions` (PaDIR, :mod:`gmlm.decoding.refinement`) are the single source
of every decoding setting: each field carries its default, its type and, in its metadata
(:func:`doc`), the help text that documents it and the range of a number. `gmlm translate`,
`gmlm analyze` and `gmlm bench` derive their flags from these fields (:mod:`gmlm.cli.options`),
and :func:`decoding_options` derives which model kind owns a setting from which class has the
field (``length_penalty`` belongs to both).

This module imports neither torch nor the models, so that building the command-line parsers
(`gmlm --help`) stays light.
"""

from __future__ import annotations

import dataclasses
import math
import typing
from collections.abc import Callable, Iterable, Mapping
from dataclasses import field
from typing import TYPE_CHECKING, Any, Literal

from gmlm.config import (
    MAX_LENGTH,
    ConfigError,
    Range,
    check_settings,
    merge,
    parse_override,
)
from gmlm.errors import GmlmError
from gmlm.settings import doc

if TYPE_CHECKING:
    from gmlm.nn.config import ModelConfig

# Passes allowed (the paper uses 4 and 10; diffusion-style decoders go up to 1000): bounds the
# cost of a typo, since the linear remask schedule makes every candidate run all of them.
MAX_STEPS = 1000
# Beams and random starts allowed: far beyond what translation gains from (the paper uses 5
# beams), while each multiplies the rows decoded at once. Within these, what a batch may take
# is bounded by the memory there is (gmlm.memory).
MAX_BEAM = 1000
MAX_RANDOM_STARTS = 1000

# Row-positions one extra decoder pass is worth (RefinementOptions.split_overhead), measured
# with `gmlm bench` on the shipped PaDIR
# (docs/history/multi30k-de-en-notes.md, "File throughput and padding").
SPLIT_OVERHEAD = 32

# Padded decoder row-positions per batch (a batch's rows times its widest row: PaDIR's
# candidates at their predicted lengths, AR's beams at the source length) when a translation
# names neither a token budget nor a batch size (Translator.translate, `gmlm translate`,
# `gmlm distill`), and why (the --help of those commands says it).
MAX_TOKENS_DEFAULT = 4000
MAX_TOKENS_WHY = (
    "the fastest, or within 4 percent of it, for PaDIR T=4 B=5 and AR beam 5 among batch "
    "sizes 8-64 and budgets 2000-8000 on 320 Multi30k test lines, one thread of an AMD EPYC "
    '(docs/history/multi30k-de-en-notes.md, "Batches by tokens")'
)

# The longest repeated n-gram of tokens stutter_ngram may ask for: bounds the cost of a typo
# (each pass compares the hypotheses once per n and token of the n-gram).
MAX_STUTTER_NGRAM = 16

# The weight of a rescoring model's mean log-probability per token in a PaDIR candidate's
# score (gmlm.decoding.rescoring; `gmlm translate --rescore-weight`, Translator.rescore_with).
RESCORE_WEIGHT = Range(gt=0, le=1e6, note="0 would not rescore; leave out --rescore instead")

StutterRemask = Literal["none", "previous", "initial"]
Remask = Literal["none", "constant", "linear"]
Selection = Literal["sum", "mean", "changed"]
# The arithmetic a model decodes in (gmlm.translation.precision): fp32, bf16 weights and
# activations, or int8 dynamic quantisation of the Linear layers. The choices of every
# decoding --precision flag (translate, analyze, distill) and of the benchmark.
Precision = Literal["fp32", "bf16", "int8"]
PRECISIONS: tuple[Precision, ...] = typing.get_args(Precision)
# The floating-point ones: what `gmlm export` writes weights in (int8 is made at load time)
# and what `gmlm analyze` and `gmlm distill` offer.
FLOAT_PRECISIONS: tuple[Precision, ...] = ("fp32", "bf16")

KIND_NAMES: dict[str, str] = {"ar": "an autoregressive", "padir": "a PaDIR"}

# The paper's decodings, named once: PaDIR's T = 4 passes (and 10, its other T), B = 5
# predicted lengths, and the AR baseline's beam 5; and the sweeps of T and B that the speed
# benchmark and the reports run.
PAPER_STEPS = 4
PAPER_MORE_STEPS = 10
PAPER_LENGTH_BEAM = 5
PAPER_BEAM = 5
STEPS_SWEEP: tuple[int, ...] = (1, 2, PAPER_STEPS, PAPER_MORE_STEPS)
LENGTH_BEAM_SWEEP: tuple[int, ...] = (1, PAPER_LENGTH_BEAM)

LENGTH_PENALTY_HELP = (
    "GNMT length-penalty alpha dividing a hypothesis's summed log-probability when ranking "
    "hypotheses, 0 for none (gmlm.decoding.scores)"
)


LENGTH_PENALTY = Range(ge=0, note="0 disables it")
# Length changes (a shift, offsets): within the longest sequence any model may take.
LENGTH_CHANGE = Range(ge=-MAX_LENGTH, le=MAX_LENGTH)


@dataclasses.dataclass(frozen=True)
class SearchOptions:
    """Settings of greedy (beam = 1) and beam search (each field's help says what it does).

    The length limit is ``min(floor(max_len_a * src_len + max_len_b), max_target_len)``, EOS
    counted on both sides; 1.5 and 10 leave room for the longest Multi30k and WMT targets
    relative to their sources while stopping runaway repetition early. Any beam size works:
    with at least as many beams as there are possible outputs the search is exhaustive and
    returns every output, best first (beams that hold nothing stay at -inf).
    """

    beam: int = field(
        default=1,
        metadata=doc(
            f"beams per sentence, 1 for greedy search; the paper's AR baseline uses {PAPER_BEAM}",
            range=Range(ge=1, le=MAX_BEAM, note="1 is greedy search"),
        ),
    )
    length_penalty: float = field(
        default=0.6, metadata=doc(LENGTH_PENALTY_HELP, range=LENGTH_PENALTY)
    )
    max_len_a: float = field(
        default=1.5,
        metadata=doc(
            "output length limit a * src_len + b: the a", range=Range(ge=0, le=MAX_LENGTH)
        ),
    )
    max_len_b: int = field(
        default=10,
        metadata=doc(
            "output length limit a * src_len + b: the b", range=Range(ge=0, le=MAX_LENGTH)
        ),
    )
    min_length: int = field(
        default=2,
        metadata=doc(
            "EOS is refused before this length (EOS counted; 2 = at least one token; the length "
            "limit wins over it). For fixed-length benchmarks",
            cli=False,
            range=Range(ge=1, le=MAX_LENGTH, note="EOS counts"),
        ),
    )
    max_length: int | None = field(
        default=None,
        metadata=doc(
            "a fixed length limit (EOS counted) instead of the a/b formula; with min_length == "
            "max_length every output has exactly that length. For fixed-length benchmarks",
            cli=False,
            range=Range(ge=1, le=MAX_LENGTH, note="EOS counts"),
        ),
    )

    def validate(self, config: ModelConfig) -> None:
        check_settings(self)


@dataclasses.dataclass(frozen=True)
class RefinementOptions:
    """Settings of PaDIR decoding (each field's help says what it does; the module docstring
    of :mod:`gmlm.decoding.refinement` how they act). Defaults follow the paper (T = 4,
    B = 5), except the candidate selection and the pruning, chosen on validation data."""

    steps: int = field(
        default=PAPER_STEPS,
        metadata=doc(
            f"refinement passes T, 1 to {MAX_STEPS}; the paper uses {PAPER_STEPS} and "
            f"{PAPER_MORE_STEPS}",
            range=Range(ge=1, le=MAX_STEPS),
        ),
    )
    length_beam: int = field(
        default=PAPER_LENGTH_BEAM,
        metadata=doc(
            "top predicted lengths decoded per sentence, B, at most the model's max_target_len; "
            f"the paper uses {PAPER_LENGTH_BEAM}",
            range=Range(ge=1, le=MAX_LENGTH),
        ),
    )
    length_offsets: tuple[int, ...] = field(
        default=(),
        metadata=doc(
            "extra candidates at predicted length + offset, e.g. --length-offsets=-1,1",
            range=LENGTH_CHANGE,
        ),
    )
    length_shift: int = field(
        default=0,
        metadata=doc(
            "add this to every predicted length before decoding (not to given lengths such as "
            "an oracle's): a correction for a length predictor that predicts short or long, "
            "chosen on validation data",
            range=LENGTH_CHANGE,
        ),
    )
    random_starts: int = field(
        default=1,
        metadata=doc(
            "initial hypotheses per length (random initial tokens)",
            range=Range(ge=1, le=MAX_RANDOM_STARTS),
        ),
    )
    init: Literal["random", "mask"] | None = field(
        default=None,
        metadata=doc(
            "'random' or 'mask' initial tokens; None takes the model config's (what it was "
            "trained for)",
            cli=False,
        ),
    )
    early_stop: bool = field(
        default=True,
        metadata=doc(
            "stop a candidate once its next input equals its input; exact, it changes only the "
            "cost (False: for measurements)",
            cli=False,
        ),
    )
    stutter_remask: StutterRemask = field(
        default="previous",
        metadata=doc(
            "before each pass but the last, replace a token equal to its left neighbour (and "
            "the second copy of a repeated n-gram, --stutter-ngram) by the previous "
            "iteration's token or the initial token, or not at all"
        ),
    )
    stutter_ngram: int = field(
        default=4,
        metadata=doc(
            "the longest repeat treated as stutter: an n-gram of tokens immediately repeated "
            "('in a field in a field'), n = 1 to this (1 to "
            f"{MAX_STUTTER_NGRAM}; 1: a token equal to its left neighbour, as in the paper); "
            "--stutter-remask replaces, and the final dedup drops, the second copy of each "
            "(4: chosen on validation data)",
            range=Range(ge=1, le=MAX_STUTTER_NGRAM, note="1 is a repeated token"),
        ),
    )
    keep_initial_tokens: bool = field(
        default=False,
        metadata=doc(
            "keep output tokens still equal to their random initial token (dropped by default)"
        ),
    )
    dedup: bool = field(
        default=True,
        metadata=doc(
            "keep repeated adjacent output tokens and n-grams (--stutter-ngram; dropped by "
            "default), e.g. to measure stutter"
        ),
    )
    dedup_words: bool = field(
        default=True,
        metadata=doc(
            "keep the word repeats the tokens hide (by default the final dedup, after "
            "detokenization, also drops the second copy of an immediately repeated run of up "
            "to --stutter-ngram words compared case-insensitively: the same word in another "
            "case or spelt with other pieces; gmlm.translation.word_repeats)"
        ),
    )
    selection: Selection = field(
        default="mean",
        metadata=doc(
            "how candidates are scored: the mean of the log-probabilities of their last argmax "
            "at every position, EOS included (chosen on validation data), their sum (the "
            "paper), or the sum over the content tokens changed from the random start (the "
            "authors' code)"
        ),
    )
    length_penalty: float = field(
        default=0.0, metadata=doc(LENGTH_PENALTY_HELP, range=LENGTH_PENALTY)
    )
    length_score_weight: float = field(
        default=0.0,
        metadata=doc(
            "add this times the length predictor's log-probability of a candidate's length to "
            "its score (0: token log-probabilities only, as in the paper)",
            range=Range(note="any finite weight; a negative one favours unlikely lengths"),
        ),
    )
    remask: Remask = field(
        default="none",
        metadata=doc(
            "Mask-Predict style reset of the least confident tokens to their initial token: a "
            "fixed share every pass (constant, --remask-ratio) or a share falling linearly to 0"
        ),
    )
    remask_ratio: float = field(
        default=0.2,
        metadata=doc("share of the content reset by --remask constant", range=Range(ge=0, lt=1)),
    )
    prune_after: int = field(
        default=1,
        metadata=doc(
            "after this pass, keep only each sentence's --prune-keep best candidates (scored "
            "as the final choice is) and run the later passes on them alone; 0 never prunes "
            "(1 with 3,2: chosen on validation data: docs/DESIGN.md section 7)",
            range=Range(ge=0, le=MAX_STEPS, note="0 never prunes"),
        ),
    )
    prune_keep: tuple[int, ...] = field(
        default=(3, 2),
        metadata=doc(
            "candidates per sentence that survive --prune-after's pass, then each next pass "
            "(one number per pass, not increasing), e.g. 3,2: 3 after that pass, 2 after the "
            "next",
            range=Range(ge=1),
        ),
    )
    split_overhead: int = field(
        default=SPLIT_OVERHEAD,
        metadata=doc(
            "a decoder pass over candidates of different lengths runs as several passes over "
            "groups of similar length where that saves more than this many padded "
            "row-positions per extra pass (what one pass's fixed cost is worth); 0: one pass "
            "per length, a large number: never split",
            range=Range(ge=0, le=1_000_000),
        ),
    )
    return_steps: bool = field(
        default=False,
        metadata=doc("keep each candidate's hypothesis after every pass (analyses)", cli=False),
    )
    return_attention: bool = field(
        default=False,
        metadata=doc(
            "keep the last decoder layer's attention weights of the last pass (analyses)", cli=False
        ),
    )

    def __post_init__(self) -> None:
        if isinstance(self.prune_keep, int):  # one count: kept after pass prune_after alone
            object.__setattr__(self, "prune_keep", (self.prune_keep,))

    def validate(self, config: ModelConfig) -> None:
        check_settings(self)
        if self.length_beam > config.max_target_len:
            raise GmlmError(
                f"length_beam={self.length_beam} must be between 1 and the model's "
                f"max_target_len={config.max_target_len}"
            )
        # A move of max_target_len or more would cut every length to 1 or to the maximum.
        most = config.max_target_len
        moves = {"length_shift": (self.length_shift,), "length_offsets": self.length_offsets}
        for name, values in moves.items():
            if any(abs(value) >= most for value in values):
                shown = values[0] if name == "length_shift" else values
                raise GmlmError(
                    f"{name}={shown} moves lengths by the model's max_target_len={most} or "
                    f"more; give moves between {1 - most} and {most - 1}"
                )
        if 0 in self.length_offsets or len(set(self.length_offsets)) != len(self.length_offsets):
            raise GmlmError(
                f"length_offsets={self.length_offsets} must be distinct and non-zero (the "
                "predicted length itself is always decoded)"
            )
        if self.random_starts > 1 and (self.init or config.init_hypothesis) == "mask":
            raise GmlmError(
                "random_starts > 1 needs random initial tokens; [MASK] starts are all the same"
            )
        if self.stutter_remask not in ("none", "previous", "initial"):
            raise GmlmError(
                f"stutter_remask={self.stutter_remask!r}: choose none, previous or initial"
            )
        if self.selection not in ("sum", "mean", "changed"):
            raise GmlmError(f"selection={self.selection!r}: choose sum, mean or changed")
        if self.remask not in ("none", "constant", "linear"):
            raise GmlmError(f"remask={self.remask!r}: choose none, constant or linear")
        keep = self.prune_keep
        if not keep or list(keep) != sorted(keep, reverse=True):
            raise GmlmError(
                f"prune_keep={keep} must be one or more counts of at least 1, not increasing "
                "(a pruned candidate never comes back), e.g. 2 or 3,2; prune_after=0 never "
                "prunes"
            )


def pruning_text(prune_after: int, prune_keep: object) -> str:
    """A pruning schedule in words, for reports: "after pass 1 to 3, then 2 candidates" or
    "none". `prune_keep` may be one count (files written before it took one per pass)."""
    if prune_after == 0:
        return "none"
    counts = prune_keep if isinstance(prune_keep, (list, tuple)) else [prune_keep]
    return f"after pass {prune_after} to {', then '.join(str(k) for k in counts)} candidates"


DecodingOptions = SearchOptions | RefinementOptions
# The options of each model kind; a setting belongs to the kinds whose class has its field.
OPTIONS: dict[str, type[SearchOptions] | type[RefinementOptions]] = {
    "ar": SearchOptions,
    "padir": RefinementOptions,
}


def rows_per_sentence(options: DecodingOptions) -> int:
    """Decoder rows one sentence takes (an upper bound): its beams, or PaDIR's candidates,
    length_beam x (1 + len(length_offsets)) x random_starts. What a batch's token budget
    counts (gmlm.translation.translator) and `gmlm serve` bounds."""
    if isinstance(options, SearchOptions):
        return options.beam
    return options.length_beam * (1 + len(options.length_offsets)) * options.random_starts


def decode_work(options: DecodingOptions, source_tokens: int, max_target_len: int) -> int:
    """What decoding one sentence of `source_tokens` tokens (EOS counted) costs, in decoder
    row-positions: PaDIR's candidates at about the source's width over its passes
    (rows_per_sentence x source tokens x steps); an AR search's beams over its longest output
    (one position per beam a step). A price to compare requests of one model by, and to turn
    into seconds at the rate its recent batches ran (`gmlm serve`), not a FLOP count."""
    rows = rows_per_sentence(options)
    if isinstance(options, SearchOptions):
        longest = options.max_length or math.floor(
            options.max_len_a * source_tokens + options.max_len_b
        )
        return rows * max(1, min(longest, max_target_len))
    return rows * min(source_tokens, max_target_len) * options.steps


# Names an earlier gmlm gave two settings, each with its value's translation into the setting
# that replaced it (one name per setting: the flag's). Read where settings written by an
# earlier gmlm come back (a run's ablation variants); anywhere else the old name is refused
# with the new one named.
FORMER_NAMES: dict[str, tuple[str, Callable[[Any], Any]]] = {
    "drop_unchanged_initial": (
        "keep_initial_tokens",
        lambda drop: not drop if isinstance(drop, bool) else drop,  # else refused by type
    ),
    "dedup_final": ("dedup", lambda dedup: dedup),
    "length_weight": ("length_score_weight", lambda weight: weight),  # not training's
}


def former_name_hint(names: Iterable[str]) -> str:
    """ "; dedup_final is now dedup" for each former name among `names` ("" if none)."""
    return "".join(
        f"; {name} is now {FORMER_NAMES[name][0]}" for name in names if name in FORMER_NAMES
    )


def field_names(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls))


def changed_fields(options: DecodingOptions) -> dict[str, Any]:
    """The fields of `options` whose values differ from its class's defaults."""
    default = type(options)()
    return {
        f.name: getattr(options, f.name)
        for f in dataclasses.fields(options)
        if getattr(options, f.name) != getattr(default, f.name)
    }


def decoding_options(
    kind: str,
    config: ModelConfig,
    options: DecodingOptions | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> DecodingOptions:
    """The decoding options of a model of `kind` ("ar" or "padir") with `config`: `options`
    (default: the defaults of its kind's class) with `overrides` (field name -> value; None
    keeps the value) applied, each value checked against its field's type, then validated.

    Options of the other kind's class, or a setting only the other kind has, are a
    :class:`GmlmError` that names the checkpoint's kind; a name no kind has is one that
    lists the valid names.
    """
    if kind not in OPTIONS:
        raise GmlmError(f"unknown model kind {kind!r}; expected 'ar' or 'padir'")
    cls = OPTIONS[kind]
    other = "padir" if kind == "ar" else "ar"
    mine = field_names(cls)
    if options is None:
        options = cls()
    elif not isinstance(options, tuple(OPTIONS.values())):  # a dict, a string, ...
        raise GmlmError(
            f"options: expected {cls.__name__} (or its settings as keywords), got "
            f"{type(options).__name__}"
        )
    elif not isinstance(options, cls):
        raise GmlmError(
            f"options: {type(options).__name__} are the settings of {KIND_NAMES[other]} "
            f"model, but this checkpoint is {KIND_NAMES[kind]} model (kind '{kind}'); pass "
            f"{cls.__name__}"
        )
    given = {name: value for name, value in (overrides or {}).items() if value is not None}
    unknown = [name for name in given if name not in mine]
    theirs = [name for name in unknown if name in field_names(OPTIONS[other])]
    if theirs:
        raise GmlmError(
            f"{', '.join(theirs)} only {'applies' if len(theirs) == 1 else 'apply'} to "
            f"{KIND_NAMES[other]} model, but this checkpoint is {KIND_NAMES[kind]} model "
            f"(kind '{kind}'); its settings are {', '.join(mine)}"
        )
    if unknown:
        raise GmlmError(
            f"unknown decoding setting{'s' if len(unknown) > 1 else ''} {', '.join(unknown)} "
            f"for {KIND_NAMES[kind]} model (kind '{kind}'){former_name_hint(unknown)}; its "
            f"settings are {', '.join(mine)}"
        )
    result = merge(options, given)  # checks each value against its field's type
    result.validate(config)
    return result


# What `gmlm analyze calibrate` and the reproduce `calibrate` stage choose on validation data by
# default, per model kind, and the values they try (the class default is always added): the
# setting that decides how long that kind's outputs come out.
CALIBRATION_GRIDS: dict[str, tuple[str, tuple[float, ...]]] = {
    "padir": ("length_shift", (-1, 0, 1, 2)),
    "ar": ("length_penalty", (0.6, 1.0, 1.4)),
}
# The BLEU the best value must gain over the default to be kept (the rule of gmlm's defaults).
CALIBRATION_MIN_GAIN = 0.2
MIN_GAIN = Range(ge=0, le=100, note="BLEU points")

# The decoding ablation's variants (`gmlm analyze ablation`, the reproduce stage `ablation`):
# each switches off one of the choices the defaults make, or tries the other setting the
# paper or the authors' code uses, or a cheaper pruning schedule (fewer candidate-passes:
# batch-1 latency, p99 most, grows with them; the schedule is chosen on validation, within
# 0.2 BLEU of no pruning). Space-separated field=value settings (parse_variant).
ABLATION_VARIANTS: tuple[str, ...] = (
    "selection=sum",  # the paper's selection: summed token log-probabilities
    "selection=changed",  # the authors' code: summed over the tokens changed from the start
    "stutter_remask=none",  # no stutter remasking between passes
    "stutter_ngram=1",  # the paper's stutter: a repeated token, not a repeated n-gram
    "dedup=false",  # repeated adjacent tokens kept in the output
    "dedup_words=false",  # the final dedup on tokens only, not also on the text's words
    "prune_after=0",  # every candidate through every pass
    "prune_after=2 prune_keep=2",  # every candidate through pass 2, then the best 2
    "prune_after=1 prune_keep=2",  # 2 (not 3, then 2) after the first pass
    "prune_after=1 prune_keep=1",  # the best candidate alone after the first pass
    "prune_after=2 prune_keep=1",  # the best candidate alone after the second pass
    "length_beam=1",  # the top predicted length only
    "length_beam=1 length_offsets=[-2,-1,1,2]",  # top-1 length plus offsets, 5 candidates
    f"steps={PAPER_MORE_STEPS}",  # the paper's other T
)


def parse_variant(text: str) -> dict[str, Any]:
    """The PaDIR decoding settings of an ablation variant: space-separated ``field=value``
    pairs of :class:`RefinementOptions` fields, values read as YAML (``length_beam=1
    length_offsets=[-2,-1,1,2]``), each checked against its field's type. An empty variant,
    a repeated or unknown field or a value of the wrong type is a :class:`GmlmError` naming
    the variant (checked again against a model's limits when it decodes)."""
    parts = text.split()
    if not parts:
        raise GmlmError(
            f"decoding variant {text!r} is empty: give field=value settings, e.g. selection=sum"
        )
    found: dict[str, Any] = {}
    try:
        for part in parts:
            ((key, value),) = parse_override(part).items()
            if isinstance(value, dict):
                raise ConfigError(f"{part!r}: decoding settings have no sections")
            if key in FORMER_NAMES:  # a variant an earlier gmlm stored in a run
                key, value = FORMER_NAMES[key][0], FORMER_NAMES[key][1](value)
            if key in found:
                raise ConfigError(f"{key} is set twice")
            found[key] = value
        checked = merge(RefinementOptions(), found)
    except ConfigError as err:
        raise GmlmError(f"decoding variant {text!r}: {err}") from None
    return {key: getattr(checked, key) for key in found}
