"""The paper's Table 1 in gmlm's setting: the Multi30k test set, a column group per direction.

    from gmlm.analysis.settings import Table1Settings
    from gmlm.analysis.table1 import render_table1_markdown, table1

    settings = Table1Settings(directions=("de-en=checkpoints/multi30k-de-en",),
                              multi30k=Path("../shared/data/multi30k"))
    result = table1(settings)                     # a Table1Result; .write(path): the JSON
    print(render_table1_markdown(result))

Rows, the paper's: the AR model with beam 5, and PaDIR with T = 4 and T = 10 passes over
B = 5 predicted lengths (`ROWS`), each decoding with its checkpoint's own defaults
(decoding.json, as `gmlm translate` uses them) and the row's settings over them. Columns per
direction: BLEU and chrF, by sacrebleu through :mod:`gmlm.evaluation` (the scores `gmlm
evaluate` gives for the same translations), beside the paper's BLEU on WMT for scale
(:mod:`gmlm.analysis.paper`).

A direction is NAME=FOLDER: NAME its language pair, source-target, which picks the test files
test_2016_flickr.SRC and .TGT of the Multi30k folder; FOLDER holds its checkpoints `ar` and
`padir` (checkpoint or run folders). Where a checkpoint's languages are known
(:mod:`gmlm.checkpoint.languages`: its meta.json, or the manifest of its training data where
that is on this machine), its pair must be NAME, else the command stops; where they are not,
the result says the pair was not checked. Every direction,
checkpoint and test file is checked before the first translation.

The sources are translated from the raw test file as `gmlm translate --input` translates them
(a line over the model's maximum split into sentences, as the evaluation does) and scored
against the raw reference file, as `sacrebleu REF` scores them. A command of its own rather
than a stage of `gmlm reproduce`: it scores finished checkpoints of several directions, each
trained by a run of its own, in one table.
"""

from __future__ import annotations

import dataclasses
import re
import shlex
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gmlm import markdown
from gmlm.analysis.ablation import NOT_OUTPUT
from gmlm.analysis.loading import run_provenance
from gmlm.analysis.paper import (
    AR_BEAM5,
    CITATION,
    PADIR_T4_B5,
    PADIR_T10_B5,
    PAPER_CORPUS,
    paper_bleu,
)
from gmlm.analysis.results import Table1Direction, Table1Result, Table1System
from gmlm.analysis.settings import Table1Settings
from gmlm.analysis.split_decoding import SplitPairs, decode_scored
from gmlm.checkpoint.config import read_checkpoint_config
from gmlm.checkpoint.languages import check_languages
from gmlm.checkpoint.loading import resolve_checkpoint
from gmlm.data.corpora import multi30k_files
from gmlm.data.parallel import PAIR_PATTERN
from gmlm.data.textfiles import read_parallel_files
from gmlm.decoding.options import (
    PAPER_BEAM,
    PAPER_LENGTH_BEAM,
    PAPER_MORE_STEPS,
    PAPER_STEPS,
    DecodingOptions,
)
from gmlm.errors import GmlmError
from gmlm.evaluation.bleu import default_tokenizer
from gmlm.io import atomic_write_text, check_output_files
from gmlm.models import ModelKind
from gmlm.settings import flags_of, to_argv
from gmlm.translation.translator import Translator, load


@dataclass(frozen=True)
class Row:
    """A row of the paper's Table 1: the system's key, its label, the kind of checkpoint it
    runs and its decoding settings over the checkpoint's defaults."""

    system: str
    label: str
    kind: ModelKind
    settings: Mapping[str, int]


ROWS = (
    Row(AR_BEAM5, f"AR, beam {PAPER_BEAM}", "ar", {"beam": PAPER_BEAM}),
    Row(
        PADIR_T4_B5,
        f"PaDIR T={PAPER_STEPS} B={PAPER_LENGTH_BEAM}",
        "padir",
        {"steps": PAPER_STEPS, "length_beam": PAPER_LENGTH_BEAM},
    ),
    Row(
        PADIR_T10_B5,
        f"PaDIR T={PAPER_MORE_STEPS} B={PAPER_LENGTH_BEAM}",
        "padir",
        {"steps": PAPER_MORE_STEPS, "length_beam": PAPER_LENGTH_BEAM},
    ),
)
KINDS: tuple[ModelKind, ...] = ("ar", "padir")  # a direction folder's checkpoints, by name


@dataclass(frozen=True)
class Direction:
    """A direction checked and read, before any translation: its name, folder, checkpoints
    by kind, how their languages were checked, the test files and the pairs."""

    name: str
    folder: Path
    checkpoints: dict[str, Path]
    languages: dict[str, str]
    files: tuple[Path, Path]
    pairs: SplitPairs


def parse_direction(spec: str) -> tuple[str, tuple[str, str], Path]:
    """NAME=FOLDER -> (NAME, its source and target languages, FOLDER)."""
    name, sep, folder = spec.partition("=")
    match = re.fullmatch(PAIR_PATTERN, name)
    if not sep or not folder or match is None or match.group(1) == match.group(2):
        raise GmlmError(
            f"--direction {spec}: expected NAME=FOLDER, NAME the language pair source-target "
            "and FOLDER the folder of its ar and padir checkpoints, e.g. "
            "de-en=checkpoints/multi30k-de-en"
        )
    return name, (match.group(1), match.group(2)), Path(folder)


def plan_direction(spec: str, multi30k: Path, sentences: int | None) -> Direction:
    """The direction `spec` checked (its name, folder, checkpoints and their kinds and
    languages) and its test pairs read, the first `sentences` if given."""
    name, langs, folder = parse_direction(spec)
    if not folder.is_dir():
        raise GmlmError(
            f"--direction {spec}: no folder {folder}; give the folder that holds the "
            "direction's checkpoints as ar/ and padir/"
        )
    checkpoints: dict[str, Path] = {}
    languages: dict[str, str] = {}
    for kind in KINDS:
        try:
            checkpoint = resolve_checkpoint(folder / kind)
        except GmlmError as err:
            raise GmlmError(
                f"--direction {spec}: {err}; the folder holds the direction's checkpoints as "
                "ar/ and padir/"
            ) from None
        found = read_checkpoint_config(checkpoint).kind
        if found != kind:
            raise GmlmError(
                f"--direction {spec}: {checkpoint} is a '{found}' checkpoint; {folder}/{kind} "
                f"must hold the '{kind}' one"
            )
        checkpoints[kind] = checkpoint
        languages[kind] = check_languages(
            f"--direction {spec}",
            checkpoint,
            langs,
            "name the direction {pair}, or give the folder of the {wanted} checkpoints",
        ).describe()
    try:
        files = multi30k_files(multi30k, "test", *langs)
    except GmlmError as err:
        raise GmlmError(f"--multi30k {err}") from None
    sources, references = read_parallel_files(*files)
    pairs = SplitPairs(
        sources=sources[:sentences],
        references=references[:sentences],
        in_split=len(references),
        tokenize=default_tokenizer(langs[1]),
        origin=str(files[0]),
    )
    return Direction(name, folder, checkpoints, languages, files, pairs)


def direction_folders(settings: Table1Settings) -> dict[str, Path]:
    """The folders the command reads, by the flag that names them (outputs must avoid them)."""
    folders = {f"--direction {spec}": parse_direction(spec)[2] for spec in settings.directions}
    if settings.multi30k is not None:
        folders["--multi30k"] = settings.multi30k
    return folders


def check_outputs(settings: Table1Settings, output: Path | None, markdown: Path | None) -> None:
    """Fail now, before the translations, where --output or --markdown could not be written
    or must not be replaced, or name the same file (:func:`gmlm.io.check_output_files`)."""
    check_output_files(
        (("--output", output), ("--markdown", markdown)), inputs=direction_folders(settings)
    )


def table1(
    settings: Table1Settings,
    *,
    device: str = "auto",
    log: Callable[[str], None] | None = None,
) -> Table1Result:
    """Table 1's rows in every direction of `settings` (see the module docstring); `log`, if
    given, gets a line as each system starts and ends."""
    settings.validate()
    assert settings.multi30k is not None  # validate() says so
    started = time.perf_counter()
    sentences = settings.sentences or None
    plans = [plan_direction(spec, settings.multi30k, sentences) for spec in settings.directions]
    directions = []
    provenance: dict[str, Any] = {}
    for plan in plans:
        translators = {kind: load(path, device) for kind, path in plan.checkpoints.items()}
        provenance = provenance or run_provenance(translators["ar"])
        directions.append(_direction(plan, translators, settings, log))
    return Table1Result(
        command=shlex.join(["gmlm", "analyze", "table1", *to_argv(settings)]),
        precision=settings.precision,
        seed=settings.seed,
        **provenance,
        seconds=round(time.perf_counter() - started, 3),
        directions=tuple(directions),
    )


def _direction(
    plan: Direction,
    translators: Mapping[str, Translator],
    settings: Table1Settings,
    log: Callable[[str], None] | None,
) -> Table1Direction:
    """Every row of Table 1 in the direction `plan`."""
    systems = []
    signatures = None
    for row in ROWS:
        translator = translators[row.kind]
        options = translator.options(**row.settings)
        if log is not None:
            log(f"table1: {plan.name} {row.label}: {len(plan.pairs.sources):,} sentences")
        scored = decode_scored(
            translator, plan.pairs, options, seed=settings.seed, precision=settings.precision
        )
        if log is not None:
            log(
                f"table1: {plan.name} {row.label}: BLEU {scored.quality.bleu:.2f}, chrF "
                f"{scored.quality.chrf:.2f} ({scored.seconds:.0f} s)"
            )
        signatures = signatures or scored.signatures
        decoding = dataclasses.asdict(options)
        systems.append(
            Table1System(
                system=row.system,
                label=row.label,
                checkpoint=str(plan.checkpoints[row.kind]),
                decoding={k: v for k, v in decoding.items() if k not in NOT_OUTPUT},
                translate_flags=shlex.join(translate_flags(options, row.settings)),
                quality=scored.quality,
                seconds=round(scored.seconds, 2),
                paper_bleu=paper_bleu(plan.name, row.system),
            )
        )
    assert signatures is not None
    return Table1Direction(
        direction=plan.name,
        folder=str(plan.folder),
        languages=plan.languages,
        source_file=str(plan.files[0]),
        reference_file=str(plan.files[1]),
        sentences=len(plan.pairs.references),
        test_sentences=plan.pairs.in_split,
        tokenize=plan.pairs.tokenize,
        signatures=signatures,
        paper_corpus=PAPER_CORPUS.get(plan.name),
        systems=tuple(systems),
    )


def translate_flags(options: DecodingOptions, settings: Mapping[str, Any]) -> list[str]:
    """The `gmlm translate` flags that decode with `options`: the row's own `settings` first,
    each spelled even where it is the class default (the paper's T=4 B=5 is), then every
    other setting that is not its default (the checkpoint's decoding.json)."""
    defaults = type(options)()
    rest = dataclasses.replace(options, **{name: getattr(defaults, name) for name in settings})
    return flags_of(type(options), settings) + to_argv(rest)


def _arrow(direction: str) -> str:
    """A direction as the table heads it: de-en -> DE->EN."""
    return "->".join(lang.upper() for lang in direction.split("-"))


def _number(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def render_table1_markdown(result: Table1Result) -> str:
    """The table, a column group per direction (BLEU, chrF, the paper's BLEU), and how it was
    made: test set, decoding of every row, signatures, languages, the paper, the command."""
    header = ["model", "steps", "# hyp."]
    for d in result.directions:
        arrow = _arrow(d.direction)
        paper = f"paper {d.paper_corpus} {arrow}" if d.paper_corpus else f"paper {arrow}"
        header += [f"{arrow} BLEU", f"{arrow} chrF", f"{paper} BLEU"]
    lines = [
        "## Table 1, our version: Multi30k test_2016_flickr",
        "",
        *markdown.table(header, align="lll" + "r" * (len(header) - 3)),
    ]
    first = result.directions[0]
    for i, system in enumerate(first.systems):
        steps = system.decoding.get("steps", "N")
        hyps = system.decoding.get("beam", system.decoding.get("length_beam"))
        cells = [system.label, str(steps), str(hyps)]
        for d in result.directions:
            s = d.systems[i]
            cells += [_number(s.quality.bleu), _number(s.quality.chrf), _number(s.paper_bleu)]
        lines.append(markdown.row(cells))
    lines += [
        "",
        "Steps: refinement passes T (N: autoregressive, one pass per token); # hyp.: beam size "
        "(AR) or predicted lengths decoded, B (PaDIR). "
        + " ".join(
            f"{d.direction}: {d.sentences:,} sentences"
            + (f" (the first of {d.test_sentences:,})" if d.sentences < d.test_sentences else "")
            + f" of {d.source_file} against {d.reference_file}."
            for d in result.directions
        )
        + f" Decoded in {result.precision}, seed {result.seed}, on {result.device} with "
        f"{result.threads} torch thread{'' if result.threads == 1 else 's'}, gmlm "
        f"{result.gmlm}, torch {result.torch}: {result.seconds:.0f} s in all.",
        "",
        "Each row decodes with its checkpoint's decoding defaults (decoding.json) and its own "
        "settings, as these commands do:",
        "",
    ]
    for d in result.directions:
        for s in d.systems:
            command = shlex.join(["gmlm", "translate", "--checkpoint", s.checkpoint])
            lines.append(f"- {d.direction}, {s.label}: `{command} {s.translate_flags}`")
    lines.append("")
    for d in result.directions:
        checks = "; ".join(f"{kind}: {note}" for kind, note in d.languages.items())
        lines.append(
            f"{d.direction}: BLEU signature `{d.signatures.bleu}`, chrF signature "
            f"`{d.signatures.chrf}`. Languages of the checkpoints in {d.folder}: {checks}."
        )
    lines += [
        "",
        f"Paper columns: {CITATION}, Table 1 (SacreBLEU; AR trained on distilled data; "
        "another corpus, larger models and far longer training): for scale, not a "
        "like-for-like comparison. The paper gives no chrF.",
        "",
        f"Made by: `{result.command}`",
    ]
    return "\n".join(lines) + "\n"


def write_outputs(result: Table1Result, output: Path | None, markdown: Path | None) -> None:
    """The JSON to `output` and the Markdown to `markdown`, each atomically, where given."""
    if output is not None:
        result.write(output)
    if markdown is not None:
        atomic_write_text(markdown, render_table1_markdown(result))
