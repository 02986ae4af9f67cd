"""The schema of a reproduction run and its presets (`src/gmlm/configs/reproduce/*.yaml`).

A preset holds overrides of :class:`ReproduceConfig` only; `gmlm reproduce --preset NAME
key=value ...` resolves defaults, then the preset (and its `base:` chain), then the overrides.
The training stages name a training preset (`small-ar`, ...) plus `key=value` overrides of it,
so a stage trains exactly what `gmlm train --config PRESET KEY=VALUE ...` would; or they name
a trained `checkpoint` (e.g. the released checkpoints/multi30k-de-en/ar), which the later
stages then use as it is (the `demo` preset).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

from gmlm.analysis.settings import FIRST_SENTENCES as FIRST_N
from gmlm.analysis.settings import (
    AblationSettings,
    AnalysisSettings,
    CalibrationSettings,
    ComparisonSettings,
    LengthSettings,
)
from gmlm.bench.settings import BenchSettings
from gmlm.config import (
    BATCH_SIZE,
    PRESET_DIR,
    THREADS,
    ConfigError,
    bounds,
    deep_update,
    field_range,
    from_dict,
    load_preset_dict,
    parse_override,
)
from gmlm.data.settings import PrepareSettings
from gmlm.decoding.options import (
    CALIBRATION_GRIDS,
    LENGTH_BEAM_SWEEP,
    PAPER_BEAM,
    PAPER_LENGTH_BEAM,
    PAPER_STEPS,
    STEPS_SWEEP,
    RefinementOptions,
    SearchOptions,
    StutterRemask,
)
from gmlm.settings import doc
from gmlm.theory.settings import EstimationSettings, HittingSettings, VerifySettings
from gmlm.translation.distill_settings import DistillSettings

PRESETS_DIR = PRESET_DIR / "reproduce"

# The first N sentences of a split; 0: all of it.
FIRST_SENTENCES = bounds(FIRST_N)
# A reproduce setting passed on to a setting declared elsewhere takes what that one takes.
STEPS = field_range(RefinementOptions, "steps")
LENGTH_BEAM = field_range(RefinementOptions, "length_beam")
STAGE_HELP = "the PaDIR decoding the stage analyses (the command's decoding flag)"
BATCH = bounds(BATCH_SIZE)

# The defaults of the theory stage: those of `gmlm theory` (the paper's settings).
VERIFY, ESTIMATION, HITTING = VerifySettings(), EstimationSettings(), HittingSettings()


def passed_on(settings: object, name: str) -> Any:
    """The dataclass field of a reproduce setting passed on to the field `name` of the
    settings dataclass instance `settings`, as that one declares it: its default (a tuple as
    a list, as YAML writes it) and its range. Ruff takes the call for a list computed once and
    shared (RUF009): it is a `field()` with a default_factory."""
    default = getattr(settings, name)
    limits = bounds(field_range(type(settings), name))
    if isinstance(default, tuple):
        return field(default_factory=lambda: list(default), metadata=limits)
    return field(default=default, metadata=limits)


@dataclass
class TheoryStage:
    """`gmlm theory verify` and Figures 1-3, each with the settings of its command
    (:mod:`gmlm.theory.settings`) and these changed: verify's `max_n`, both figures'
    `repetitions` and `seed` (verify's too), Figures 1-2's `sample_sizes`, Figure 3's
    `couplings`, `ks` and `budget` (defaults: the commands', the paper's settings). Flat keys,
    one per setting the stage changes: `repetitions` and `seed` are one setting of all three."""

    enabled: bool = True
    verify_max_n: int = passed_on(VERIFY, "max_n")
    repetitions: int = passed_on(ESTIMATION, "repetitions")
    sample_sizes: list[int] = passed_on(ESTIMATION, "sample_sizes")  # noqa: RUF009
    figure3_couplings: list[float] = passed_on(HITTING, "couplings")  # noqa: RUF009
    figure3_ks: list[int] = passed_on(HITTING, "ks")  # noqa: RUF009
    figure3_budget: int = passed_on(HITTING, "budget")
    seed: int = passed_on(VERIFY, "seed")

    def verify(self) -> VerifySettings:
        """What `gmlm theory verify` runs in this stage."""
        return dataclasses.replace(VERIFY, max_n=self.verify_max_n, seed=self.seed)

    def estimation(self, coupling: float) -> EstimationSettings:
        """What `gmlm theory figure1` (figure2) runs in this stage, at the figure's coupling."""
        return dataclasses.replace(
            ESTIMATION,
            coupling=coupling,
            sample_sizes=tuple(self.sample_sizes),
            repetitions=self.repetitions,
            seed=self.seed,
        )

    def hitting(self) -> HittingSettings:
        """What `gmlm theory figure3` runs in this stage."""
        return dataclasses.replace(
            HITTING,
            couplings=tuple(self.figure3_couplings),
            ks=tuple(self.figure3_ks),
            budget=self.figure3_budget,
            repetitions=self.repetitions,
            seed=self.seed,
        )


@dataclass(frozen=True)
class DataStage(PrepareSettings):
    """`gmlm data prepare` (its settings: :class:`PrepareSettings`, the same keys; `threads`
    0 keeps the run's `threads`) of `corpus` (bible:de-en, multi30k:DIR, files:SRC,TGT, ...),
    then the DataConfig `overrides`.

    `tokenizer`: a folder holding a tokenizer (a checkpoint's `tokenizer/`, a prepared dataset)
    to encode with instead of training one, as given checkpoints need; `splits`: prepare only
    these of the corpus's splits (empty: all). `examples_if_missing`: when a `multi30k:` corpus
    has no test files on this machine, prepare gmlm's own example sentences
    (`gmlm/reproduce/examples.{de,en}`) as the test split instead; the quality stages then
    say what they need rather than score them.
    """

    corpus: str = field(default="bible:de-en", metadata=doc("the corpus spec", cli=False))
    overrides: tuple[str, ...] = field(
        default=(), metadata=doc("more DataConfig KEY=VALUE, after the settings", cli=False)
    )
    tokenizer: str = field(default="", metadata=doc("the tokenizer to reuse", cli=False))
    splits: tuple[str, ...] = field(
        default=(), metadata=doc("the corpus's splits to prepare (empty: all)", cli=False)
    )
    examples_if_missing: bool = field(
        default=False, metadata=doc("gmlm's examples as a missing test split", cli=False)
    )


@dataclass
class TrainStage:
    """A training run: a `gmlm train` preset and key=value overrides (data/out are set).

    With `checkpoint` (a checkpoint folder) nothing is trained: the stage checks that the
    folder holds a model of the stage's kind and the later stages use it.
    """

    preset: str = "small-ar"
    overrides: list[str] = field(default_factory=list)
    checkpoint: str = ""


@dataclass
class OptionalTrainStage(TrainStage):
    """A training stage that runs only when `enabled`: the `ar1` stage, the deep-encoder /
    1-layer-decoder AR baseline (Kasai et al. 2021), which costs hours on a CPU. Off, it
    finishes at once and the evaluation and benchmark leave its systems out."""

    enabled: bool = False


@dataclass
class TuneStage:
    """PaDIR fine-tuned on the AR baseline's translations: the `ar` stage's checkpoint translates
    the training sources (beam search of width `beam`, the distill stage's other settings) into
    DIR/tune-distill, and a PaDIR run (DIR/tune) starts from the padir stage's checkpoint
    (`init_from`), with that checkpoint's own training config, then `overrides` (the fine-tuning
    schedule: max_steps, optim.*). Where the AR student translates better than the teacher the
    students learnt from, PaDIR learns from better targets without training from scratch. On
    (`enabled: true`), the later stages use its checkpoint as PaDIR's; off, it finishes at once.
    """

    enabled: bool = False
    beam: int = field(default=PAPER_BEAM, metadata=bounds(field_range(SearchOptions, "beam")))
    overrides: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class DistillStage(DistillSettings):
    """`gmlm distill` of the training sources by the teacher's beam search (its settings:
    :class:`DistillSettings`, the same keys; `threads` 0 keeps the run's `threads`), in
    batches of `batch_size` sentences.

    Off (`enabled: false`): no teacher is trained and the students learn from the raw data.
    """

    enabled: bool = field(default=True, metadata=doc("run the stage", cli=False))
    batch_size: int = field(
        default=128,
        metadata=doc(
            "sentences per batch (the command's --batch-size)", cli=False, range=BATCH_SIZE
        ),
    )


@dataclass(frozen=True)
class CalibrateStage(CalibrationSettings):
    """`gmlm analyze calibrate` (its settings: :class:`CalibrationSettings`, the same keys):
    each compared model's length setting chosen on the validation split before anything is
    scored, PaDIR's `length_shift` (at the default T=4 B=5) over `length_shifts` and the AR
    students' beam-search `length_penalty` (at beam `ar_beam`) over `length_penalties`; the
    best value of each grid becomes the checkpoint's decoding default (its decoding.json, which
    every later stage and `gmlm translate` then use) only if it beats the class default's BLEU
    by more than `min_gain`. The teacher is not calibrated (it only distils), nor a checkpoint
    given in a stage's settings (it carries its own decoding.json). Off by default (it decodes
    the split once per value)."""

    enabled: bool = field(default=False, metadata=doc("run the stage", cli=False))
    length_shifts: tuple[int, ...] = field(
        default=tuple(int(v) for v in CALIBRATION_GRIDS["padir"][1]),
        metadata=doc(
            "the PaDIR grid (--values of its calibrate command)",
            cli=False,
            range=field_range(RefinementOptions, "length_shift"),
        ),
    )
    length_penalties: tuple[float, ...] = field(
        default=tuple(float(v) for v in CALIBRATION_GRIDS["ar"][1]),
        metadata=doc(
            "the AR students' grid (--values of their calibrate command)",
            cli=False,
            range=field_range(SearchOptions, "length_penalty"),
        ),
    )


@dataclass(frozen=True)
class CompareStage(ComparisonSettings):
    """`gmlm analyze compare` (its settings: :class:`ComparisonSettings`, the same keys): the
    checkpoints this run's PaDIR would replace (`against`, e.g. the shipped one; the first is
    the baseline), then the run's PaDIR (tuned, where the tune stage ran), each with its own
    decoding.json (the run's after its calibration), on the validation split, with the paired
    bootstrap against the first: whether a try beats the current model where the choice is
    made, before the test set is scored. Off by default."""

    enabled: bool = field(default=False, metadata=doc("run the stage", cli=False))

    def validate(self) -> None:
        """`against` is needed only when the stage is on."""
        if self.enabled:
            super().validate()


@dataclass(frozen=True)
class AblationStage(AblationSettings):
    """`gmlm analyze ablation` (its settings: :class:`AblationSettings`, the same keys):
    PaDIR's default decoding, then each of `variants` (default `ABLATION_VARIANTS`, each
    switching off one choice the defaults make), on the validation split, where decoding
    settings are chosen; the report's decoding ablation table. Before the evaluation, so that
    the test set is scored after the choice. Off by default (it decodes the split once per
    variant)."""

    enabled: bool = field(default=False, metadata=doc("run the stage", cli=False))


@dataclass
class EvaluateStage:
    """Quality of every system on `split` (or its first `sentences`): BLEU, chrF, stutter."""

    split: str = "test"
    sentences: int = field(default=0, metadata=FIRST_SENTENCES)
    ar_beams: list[int] = field(
        default_factory=lambda: [1, PAPER_BEAM], metadata=bounds(field_range(SearchOptions, "beam"))
    )
    padir_steps: list[int] = field(
        default_factory=lambda: list(STEPS_SWEEP), metadata=bounds(STEPS)
    )
    length_beams: list[int] = field(
        default_factory=lambda: list(LENGTH_BEAM_SWEEP), metadata=bounds(LENGTH_BEAM)
    )
    batch_size: int = field(default=64, metadata=BATCH)
    bf16: bool = False  # quality numbers in fp32; the bench measures both precisions


@dataclass(frozen=True)
class BenchStage(BenchSettings):
    """`gmlm bench` of every system: the command's settings (:class:`BenchSettings`, the same
    keys and defaults); `ctranslate2` is checked when the run starts, not after its training
    (the optional extra gmlm[ctranslate2])."""

    enabled: bool = field(default=True, metadata=doc("run the stage", cli=False))


# The PaDIR decoding an analysis stage fixes, passed to its command as decoding flags.
STAGE_DECODING = ("steps", "length_beam", "stutter_remask")


@dataclass(frozen=True)
class AttentionStage(AnalysisSettings):
    """`gmlm analyze attention` (its settings: :class:`AnalysisSettings`, the same keys) at
    `steps` passes and `length_beam` lengths; `stutter_remask` "none": look at the stutters the
    model makes (remasking would hide most of them)."""

    enabled: bool = field(default=True, metadata=doc("run the stage", cli=False))
    steps: int = field(default=PAPER_STEPS, metadata=doc(STAGE_HELP, cli=False, range=STEPS))
    length_beam: int = field(
        default=PAPER_LENGTH_BEAM, metadata=doc(STAGE_HELP, cli=False, range=LENGTH_BEAM)
    )
    stutter_remask: StutterRemask = field(default="none", metadata=doc(STAGE_HELP, cli=False))


@dataclass(frozen=True)
class LengthStage(LengthSettings):
    """`gmlm analyze length` (its settings: :class:`LengthSettings`, the same keys): the
    length predictor against the references and decoding with the reference length (an
    oracle), at `steps` passes and `length_beam` lengths. Off by default (it decodes the split
    several times)."""

    enabled: bool = field(default=False, metadata=doc("run the stage", cli=False))
    steps: int = field(default=PAPER_STEPS, metadata=doc(STAGE_HELP, cli=False, range=STEPS))
    length_beam: int = field(
        default=PAPER_LENGTH_BEAM, metadata=doc(STAGE_HELP, cli=False, range=LENGTH_BEAM)
    )


@dataclass
class TrainAblationStage:
    """PaDIR retrained with each of `variants` (space-separated `gmlm train` key=value
    settings, each switching off a change of the padir stage's recipe) for `steps` steps, each
    compared with the padir run's own validation at that step
    (:mod:`gmlm.reproduce.train_ablation`). Off by default: each variant is a training of its
    own (about an hour per 1,500 steps of small-padir on 2 CPU cores)."""

    enabled: bool = False
    steps: int = field(default=1500, metadata=bounds(ge=1, le=10**9))
    variants: list[str] = field(default_factory=list)


BLEU = bounds(ge=0, le=100, note="BLEU points; 0 leaves the row out")
RATIO = bounds(ge=0, note="0 leaves the row out")


@dataclass
class Targets:
    """What the report's Targets table holds the run to, each a row with its measured value
    and verdict; a row whose target is 0 (or false) is left out, as is one whose systems were
    not evaluated or timed. Quality rows read eval/scores.json, speed rows bench/bench.json
    (batch 1, text in and text out, each system at its fastest precision of the bench)."""

    # PaDIR T=4 B=5 at most this many BLEU below AR beam 5
    bleu_gap: float = field(default=1.0, metadata=BLEU)
    # AR beam 5 at this BLEU or more
    ar_bleu: float = field(default=0.0, metadata=BLEU)
    more_steps: bool = False  # PaDIR T=10 B=5 at least as good as T=4 B=5
    # PaDIR T=4 B=5's stutter at most this times AR beam 5's
    stutter_ratio: float = field(default=0.0, metadata=RATIO)
    # PaDIR T=4 B=5 this many times faster than AR beam 5, median
    speedup_p50: float = field(default=2.0, metadata=RATIO)
    speedup_p99: float = field(default=0.0, metadata=RATIO)  # the same at p99
    # ... than CTranslate2's AR beam 5, median
    ctranslate2_speedup: float = field(default=0.0, metadata=RATIO)


SECONDS = bounds(ge=0, le=10**8, note="seconds")


class Stage(NamedTuple):
    """A stage of `gmlm reproduce`, declared once, in STAGE_REGISTRY: the config, the pipeline,
    the report and the timing table read it.

    name: its key in ReproduceConfig (the field of its `settings`), in StageSeconds (its
        expected seconds), in stages/NAME.json and in --stages; its function is
        `gmlm.reproduce.stages.NAME`, `stage(ctx) -> summary` (named, not held: the stages
        read this config, and imports do not cycle, tests/test_architecture.py).
    what: what it does, for the progress lines.
    needs: the earlier stages whose output it reads.
    settings: the class of its settings (None: it has none, and no key in ReproduceConfig).
    system: a training stage's name for the model it trains, in the report ("" otherwise).
    reads_data: whether it reads the data stage's output, so that it is redone when a run
        that stood gmlm's examples in for a missing test split gets the test split.
    """

    name: str
    what: str
    needs: tuple[str, ...] = ()
    settings: type | None = None
    system: str = ""
    reads_data: bool = False


# What a stage that decodes needs: the trained models (every one, or PaDIR) and their
# calibrated decoding defaults.
EVERY_SYSTEM = ("teacher", "ar", "ar1", "padir", "tune", "calibrate")
PADIR_DECODING = ("padir", "tune", "calibrate")

# The stages in the order they run; each depends only on earlier ones.
STAGE_REGISTRY = (
    Stage(
        "theory",
        "exact checks of Lemma 2 and Theorems 1-3, then Figures 1-3",
        settings=TheoryStage,
    ),
    Stage(
        "data",
        "preparing the corpus: cleaning, tokenizer, binarized splits",
        settings=DataStage,
        reads_data=True,
    ),
    Stage(
        "teacher",
        "the autoregressive teacher",
        ("data",),
        TrainStage,
        system="AR teacher",
    ),
    Stage(
        "distill",
        "distilling the training sources with the teacher's beam search",
        ("teacher",),
        DistillStage,
    ),
    Stage("ar", "the autoregressive baseline", ("distill",), TrainStage, system="AR"),
    Stage(
        "ar1",
        "the autoregressive baseline with a 1-layer decoder (Kasai et al. 2021), if enabled",
        ("distill",),
        OptionalTrainStage,
        system="AR 1-layer decoder",
    ),
    Stage("padir", "PaDIR", ("distill",), TrainStage, system="PaDIR"),
    Stage(
        "tune",
        "PaDIR fine-tuned on the AR baseline's beam translations, if enabled",
        ("ar", "padir"),
        TuneStage,
    ),
    Stage(
        "calibrate",
        "each student's length setting chosen on the validation split, if enabled",
        ("ar", "ar1", "padir", "tune"),
        CalibrateStage,
    ),
    Stage(
        "compare",
        "the run's PaDIR against the checkpoints it would replace, on the validation split, "
        "if enabled",
        PADIR_DECODING,
        CompareStage,
        reads_data=True,
    ),
    Stage(
        "ablation",
        "PaDIR's decoding choices switched one at a time on the validation split, if enabled",
        PADIR_DECODING,
        AblationStage,
        reads_data=True,
    ),
    Stage(
        "evaluate",
        "translating the test split with every system; BLEU, chrF, stutter",
        EVERY_SYSTEM,
        EvaluateStage,
        reads_data=True,
    ),
    Stage(
        "bench",
        "batch-1 latency and throughput of every system",
        EVERY_SYSTEM,
        BenchStage,
        reads_data=True,
    ),
    Stage(
        "attention",
        "attention of stutter pairs (the paper's Tables 4 and 5)",
        PADIR_DECODING,
        AttentionStage,
        reads_data=True,
    ),
    Stage(
        "length",
        "the length predictor against the references, and oracle-length decoding",
        PADIR_DECODING,
        LengthStage,
        reads_data=True,
    ),
    Stage(
        "train_ablation",
        "PaDIR retrained briefly with each recipe change switched off, if enabled",
        ("distill", "padir"),
        TrainAblationStage,
    ),
    Stage("report", "writing REPORT.md and its plots", reads_data=True),
)
STAGES = tuple(stage.name for stage in STAGE_REGISTRY)
STAGE = {stage.name: stage for stage in STAGE_REGISTRY}
# The training stages (teacher, ar, ar1, padir): those whose settings are a TrainStage.
TRAINING_STAGES = tuple(
    s.name for s in STAGE_REGISTRY if s.settings and issubclass(s.settings, TrainStage)
)

SECONDS = bounds(ge=0, le=10**8, note="seconds")
SECONDS_DOC = """Wall-clock seconds of each stage of a preset on its reference machine (measured, or
    estimated where the preset says so), for the time-left estimates of the progress lines
    (all 0, the default: no estimate is printed)."""

if TYPE_CHECKING:
    # What mypy sees of the class made below: a float per stage, read by the stage's name.

    class StageSeconds:
        def __init__(self, **seconds: float) -> None: ...
        def __getattr__(self, name: str) -> float: ...

else:
    # One field per stage of the registry, in its order (a preset's `expected_seconds`).
    StageSeconds = dataclasses.make_dataclass(
        "StageSeconds",
        [(name, float, field(default=0.0, metadata=SECONDS)) for name in STAGES],
        namespace={"__module__": __name__, "__doc__": SECONDS_DOC},
    )


# Its fields are written out, not made from STAGE_REGISTRY (as StageSeconds is), so that mypy
# knows each stage's settings (`cfg.theory.verify()`, `cfg.ar1.enabled`); a stage's field
# comes between train_precision and checkpoint, in the registry's order, annotated with its
# `settings` class, as tests/reproduce/test_registry.py checks.
@dataclass
class ReproduceConfig:
    """A reproduction run. `published`: where the scores of the whole evaluation split are
    published for the checkpoints a preset names, and how they compare (a phrase for the
    report and the last lines, shown when the run scores only the first `evaluate.sentences`);
    "" for runs that train their own models."""

    preset: str = ""
    description: str = ""
    published: str = ""
    # torch threads for every stage; 0 keeps torch's default
    threads: int = field(default=0, metadata=bounds(THREADS))
    # The training stages' precision ("": each stage's own, i.e. the trainer's auto: fp32 on a
    # CPU). A setting of the machine rather than the recipe, like threads: bf16 autocast trains
    # 1.3-1.5x faster on CPUs with AMX (measured with `gmlm throughput`) and several times
    # slower where bf16 is emulated (AVX2), so a run that moves between machines may change it
    # when it resumes. `fastest` measures instead of assuming: whenever a training stage starts
    # or resumes, a few interleaved fp32 and bf16 steps on its own data and model (seconds
    # where bf16 has hardware, a few minutes where it is emulated) decide, bf16 only at
    # FASTEST_MARGIN or more. Each stage's metrics.jsonl records the precision of every step.
    train_precision: Literal["", "fp32", "bf16", "fastest"] = ""
    theory: TheoryStage = field(default_factory=TheoryStage)
    data: DataStage = field(default_factory=DataStage)
    teacher: TrainStage = field(default_factory=TrainStage)
    distill: DistillStage = field(default_factory=DistillStage)
    ar: TrainStage = field(default_factory=TrainStage)
    ar1: OptionalTrainStage = field(default_factory=lambda: OptionalTrainStage(preset="small-ar1"))
    padir: TrainStage = field(default_factory=lambda: TrainStage(preset="small-padir"))
    tune: TuneStage = field(default_factory=TuneStage)
    calibrate: CalibrateStage = field(default_factory=CalibrateStage)
    compare: CompareStage = field(default_factory=CompareStage)
    ablation: AblationStage = field(default_factory=AblationStage)
    evaluate: EvaluateStage = field(default_factory=EvaluateStage)
    bench: BenchStage = field(default_factory=BenchStage)
    attention: AttentionStage = field(default_factory=AttentionStage)
    length: LengthStage = field(default_factory=LengthStage)
    train_ablation: TrainAblationStage = field(default_factory=TrainAblationStage)
    checkpoint: Literal["best", "last", "averaged"] = "best"
    targets: Targets = field(default_factory=Targets)
    expected_seconds: StageSeconds = field(default_factory=StageSeconds)


def trained_stage(cfg: ReproduceConfig, name: str) -> TrainStage:
    """The settings of the training stage `name` (teacher, ar, ar1 or padir)."""
    if name not in TRAINING_STAGES:
        raise KeyError(name)
    stage: TrainStage = getattr(cfg, name)
    return stage


def checkpoint_dir(cfg: ReproduceConfig, out: Path, name: str) -> Path:
    """The checkpoint the later stages use for the training stage `name`: for PaDIR fine-tuned
    by the tune stage, the tuned one; else the one given in its settings, or the
    `cfg.checkpoint` of the run it trained under `out`."""
    if name == "padir" and cfg.tune.enabled:
        return out / "tune" / cfg.checkpoint
    return stage_checkpoint(cfg, out, name)


def stage_checkpoint(cfg: ReproduceConfig, out: Path, name: str) -> Path:
    """The checkpoint of the training stage `name` itself: the one given in its settings, or
    the `cfg.checkpoint` of the run it trained under `out` (before any fine-tuning)."""
    given = trained_stage(cfg, name).checkpoint
    return Path(given) if given else out / name / cfg.checkpoint


def given_as_is(cfg: ReproduceConfig, name: str) -> str:
    """The checkpoint given for the training stage `name` that the later stages use as it is
    (not calibrated, not trained by the run), or "": PaDIR's is not, once the tune stage
    fine-tunes it."""
    if name == "padir" and cfg.tune.enabled:
        return ""
    return trained_stage(cfg, name).checkpoint


def list_reproduce_presets() -> list[str]:
    return sorted(p.stem for p in PRESETS_DIR.glob("*.yaml"))


def load_reproduce_config(preset: str, overrides: Sequence[str] = ()) -> ReproduceConfig:
    path = Path(preset)
    if path.suffix not in (".yaml", ".yml"):
        path = PRESETS_DIR / f"{preset}.yaml"
        if not path.is_file():
            raise ConfigError(
                f"unknown reproduce preset '{preset}'; available: "
                f"{', '.join(list_reproduce_presets())} (or a YAML file of overrides)"
            )
    cfg = read_reproduce_file(path, overrides)
    if not cfg.preset:
        cfg.preset = path.stem
    return cfg


def read_reproduce_file(path: Path, overrides: Sequence[str] = ()) -> ReproduceConfig:
    """The ReproduceConfig of the YAML file `path` (a preset and its `base:` chain, or a run's
    reproduce.yaml) and the `key=value` overrides, the file's former keys read as the settings
    that replaced them (:func:`upgrade_former_keys`)."""
    data = upgrade_former_keys(load_preset_dict(path, presets=PRESETS_DIR))
    for text in overrides:
        data = deep_update(data, parse_override(text))
    return from_dict(ReproduceConfig, data)


# distill.bf16, which distill.precision replaced, and its values as precisions.
FORMER_BF16_KEY = "bf16"
FORMER_BF16 = ((None, "auto"), (True, "bf16"), (False, "fp32"))


def upgrade_former_keys(data: dict[str, Any]) -> dict[str, Any]:
    """`data` (a reproduce config as read from YAML) with the keys an earlier gmlm wrote in
    every run's reproduce.yaml replaced by the settings that replaced them, so that its runs
    still resume: `distill.bf16` (null, true, false) is `distill.precision` (auto, bf16,
    fp32). Any other value stays, to be refused as an unknown key."""
    distill = data.get("distill")
    if not isinstance(distill, dict) or FORMER_BF16_KEY not in distill:
        return data
    bf16 = distill[FORMER_BF16_KEY]
    precision = next((p for value, p in FORMER_BF16 if bf16 is value), None)
    if precision is None or "precision" in distill:
        return data
    kept = {key: value for key, value in distill.items() if key != FORMER_BF16_KEY}
    return {**data, "distill": {**kept, "precision": precision}}


def parse_stages(text: str | None, flag: str = "--stages") -> list[str]:
    """`theory,data` -> those stages in pipeline order; None -> all of them. A list that names
    no stage ("", ",") is an error naming `flag`: it would run nothing and say nothing."""
    if text is None:
        return list(STAGES)
    names = [s.strip() for s in text.split(",") if s.strip()]
    if not names:
        raise ConfigError(
            f"{flag} {text!r} names no stage; give comma-separated stages from "
            f"{', '.join(STAGES)}, or leave {flag} out"
        )
    unknown = [n for n in names if n not in STAGES]
    if unknown:
        raise ConfigError(
            f"unknown stage(s) {', '.join(unknown)}; the stages are {', '.join(STAGES)}"
        )
    return [s for s in STAGES if s in names]
