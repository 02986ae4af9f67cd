"""PaDIR's decoding choices switched one at a time, scored on a validation split.

    from gmlm.analysis.ablation import decoding_ablation, render_ablation_markdown

    result = decoding_ablation("runs/padir", "data/multi30k", split="valid",
                               variants=("selection=sum", "prune_after=0"))
    print(render_ablation_markdown(result))     # an AblationResult; .to_json() / .write(path)

The first row decodes the split with `options` (default: those of ``gmlm translate``), each
later row with those plus one variant's settings (`gmlm.decoding.options.parse_variant`; the
default variants, `ABLATION_VARIANTS`, switch off each choice the defaults make: the
candidate selection, stutter remasking, stutter of repeated n-grams, the final dedup,
pruning, the B predicted lengths, and try the paper's T = 10). Every row is ``gmlm
translate`` of the split's source file with those flags (`Translator.translate`, over-long
lines translated sentence by sentence as the evaluation does), scored with SacreBLEU, chrF,
the BLEU length ratio and the stutter rate, and compared with the first row by sacrebleu's
paired bootstrap (1,000 resamples; its seed is sacrebleu's, in the signature), so a
difference within noise reads as one. A variant whose translations equal the first row's,
line for line, is marked so and not tested (sacrebleu gives a system tested against itself
its smallest p-value, by design).

This is how gmlm chooses its decoding defaults: on validation data, never on the test set,
and it gives the decoding half of the ablation table in the reproduction report (the
training-time choices need a training run each).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from gmlm import markdown
from gmlm.analysis.loading import load_padir, run_provenance
from gmlm.analysis.results import AblationResult, AblationRow, AblationSettings
from gmlm.analysis.split_decoding import decode_each, read_pairs
from gmlm.decoding.options import (
    ABLATION_VARIANTS,
    Precision,
    RefinementOptions,
    parse_variant,
    pruning_text,
)
from gmlm.evaluation.summary import Quality
from gmlm.translation.translator import Translator

DEFAULT = "default"
BOOTSTRAP_SAMPLES = 1000
# Options that cannot change a translation, left out of the recorded settings.
NOT_OUTPUT = ("return_steps", "return_attention")


@dataclasses.dataclass(frozen=True)
class Decoded:
    """One row's decoding of the split: its variant and settings, translations, wall time
    and scores."""

    variant: str
    changes: dict[str, Any]
    hypotheses: list[str]
    seconds: float
    quality: Quality


def paired_bootstrap(
    baseline: Sequence[str],
    systems: Sequence[Sequence[str]],
    references: Sequence[str],
    tokenize: str,
) -> tuple[list[float], str]:
    """Sacrebleu's paired bootstrap test of BLEU (`BOOTSTRAP_SAMPLES` resamples) of each of
    `systems` against `baseline`: their p-values, in order, and the test's signature. The
    same numbers as ``sacrebleu REF -i BASELINE SYSTEM... -m bleu --paired-bs``."""
    from sacrebleu.metrics import BLEU
    from sacrebleu.significance import PairedTest

    if not systems:
        return [], ""
    named: list[tuple[str, Sequence[str]]] = [("baseline", list(baseline))]
    named += [(f"system {i}", list(hyps)) for i, hyps in enumerate(systems, 1)]
    test = PairedTest(
        named, {"BLEU": BLEU(tokenize=tokenize)}, [list(references)], "bs", BOOTSTRAP_SAMPLES
    )
    signatures, scores = test()
    p_values = []
    for result in scores["BLEU"][1:]:
        assert not isinstance(result, str) and result.p_value is not None
        p_values.append(float(result.p_value))
    return p_values, str(signatures["BLEU"])


def variant_options(
    translator: Translator, base: RefinementOptions, settings: Sequence[tuple[str, dict[str, Any]]]
) -> list[tuple[str, dict[str, Any], RefinementOptions]]:
    """The default row (`base`) and each variant's (name, changes, options), every variant
    checked before the first decoding."""
    rows: list[tuple[str, dict[str, Any], RefinementOptions]] = [(DEFAULT, {}, base)]
    for variant, changes in settings:
        options = translator.options(base, **changes)
        assert isinstance(options, RefinementOptions)
        rows.append((variant, changes, options))
    return rows


def compared_rows(
    decoded: Sequence[Decoded], references: Sequence[str], tokenize: str
) -> tuple[tuple[AblationRow, ...], str]:
    """The rows of `decoded` (the default first), each compared with the default by the paired
    bootstrap unless its translations are the default's, and the test's signature."""
    default = decoded[0]
    differ = [i for i, d in enumerate(decoded) if i and d.hypotheses != default.hypotheses]
    tested, bootstrap = paired_bootstrap(
        default.hypotheses, [decoded[i].hypotheses for i in differ], references, tokenize
    )
    p_values = dict(zip(differ, tested, strict=True))
    rows = tuple(
        AblationRow(
            variant=d.variant,
            settings=d.changes,
            quality=d.quality,
            bleu_delta=round(d.quality.bleu - default.quality.bleu, 2),
            p_value=p_values.get(i),
            same_output=i > 0 and i not in p_values,
            seconds=round(d.seconds, 2),
        )
        for i, d in enumerate(decoded)
    )
    return rows, bootstrap


def decoding_ablation(
    checkpoint: str | Path,
    data: str | Path,
    split: str = "valid",
    *,
    variants: Sequence[str] = ABLATION_VARIANTS,
    sentences: int | None = None,
    options: RefinementOptions | None = None,
    batch_size: int = 32,
    bf16: bool = False,
    seed: int = 0,
    device: str = "auto",
    progress: bool = False,
    log: Callable[[str], None] | None = None,
    **overrides: Any,
) -> AblationResult:
    """The default decoding and each of `variants` of a PaDIR `checkpoint` on the first
    `sentences` (default all) pairs of `split` of the prepared dataset `data` (see the module
    docstring); `options` and field `overrides` (``steps=10``) set the default row. `log`, if
    given, is called with a line per finished row."""
    settings = [(variant, parse_variant(variant)) for variant in variants]
    translator, _ = load_padir(checkpoint, device, sentences, batch_size, "decoding settings")
    base = translator.options(options, **overrides)
    assert isinstance(base, RefinementOptions)
    rows_options = variant_options(translator, base, settings)

    started = time.perf_counter()
    pairs = read_pairs(data, split, sentences, checkpoint, translator.languages)
    precision: Precision = "bf16" if bf16 else "fp32"

    decoded: list[Decoded] = []
    signature = ""
    rows_decoded = decode_each(
        translator,
        pairs,
        [row_options for _, _, row_options in rows_options],
        desc="ablation",
        progress=progress,
        batch_size=batch_size,
        seed=seed,
        precision=precision,
    )
    for (variant, changes, _), row in zip(rows_options, rows_decoded, strict=True):
        decoded.append(Decoded(variant, changes, row.hypotheses, row.seconds, row.quality))
        signature = signature or row.signatures.bleu
        if log is not None:
            log(f"  {variant:44s} BLEU {row.quality.bleu:6.2f}  ({row.seconds:.0f} s)")

    rows, bootstrap = compared_rows(decoded, pairs.references, pairs.tokenize)
    return AblationResult(
        checkpoint=str(checkpoint),
        data=str(data),
        split=split,
        in_split=pairs.in_split,
        sentences=len(pairs.references),
        rows=rows,
        settings=AblationSettings(
            decoding={k: v for k, v in dataclasses.asdict(base).items() if k not in NOT_OUTPUT},
            batch_size=batch_size,
            seed=seed,
            bf16=bf16,
            tokenize=pairs.tokenize,
            bleu_signature=signature,
            bootstrap=bootstrap,
            **run_provenance(translator),
        ),
        seconds=round(time.perf_counter() - started, 3),
    )


def best_row(result: AblationResult) -> AblationRow:
    """The row of the highest BLEU (the earliest of equals, so the default wins a tie)."""
    return max(result.rows, key=lambda r: r.quality.bleu)  # max keeps the first of equals


def scored_cells(
    first: bool, quality: Quality, delta: float, p_value: float | None, same: bool, seconds: float
) -> tuple[str, ...]:
    """A compared row's cells from BLEU on (QUALITY_COLUMNS): its change and p-value against
    the first row (blank on the first row itself), or "same output"."""
    p = "same output" if same else "" if p_value is None else f"{p_value:.3f}"
    return (
        f"{quality.bleu:.2f}",
        "" if first else f"{delta:+.2f}",
        p,
        f"{quality.chrf:.2f}",
        f"{quality.length_ratio:.3f}",
        f"{quality.stutter_per_100_words:.3f}",
        f"{seconds:.1f}",
    )


QUALITY_COLUMNS = ("BLEU", "change", "p", "chrF", "length ratio", "stutter / 100 words", "seconds")
"""The columns of :func:`scored_cells`."""
COLUMNS = ("decoding", *QUALITY_COLUMNS)  # the decoding table's (render_ablation_markdown)


def render_ablation_markdown(result: AblationResult) -> str:
    """The rows as a Markdown table, with a line on whether the default is the best."""
    s = result.settings
    d = s.decoding
    lines = [
        f"{result.sentences} pairs of split '{result.split}'"
        + (f" (the first of {result.in_split})" if result.sentences < result.in_split else "")
        + f"; default decoding T={d.get('steps')} B={d.get('length_beam')}, selection "
        f"{d.get('selection')}, stutter remask {d.get('stutter_remask')}, pruning "
        f"{pruning_text(d.get('prune_after', 0), d.get('prune_keep'))} "
        f"({'bf16' if s.bf16 else 'fp32'}, "
        f"seed {s.seed}, batch {s.batch_size}). Each variant changes only the settings named; "
        "p: paired bootstrap against the default (none where the translations are the "
        "default's, line for line) "
        f"({BOOTSTRAP_SAMPLES:,} resamples), the smallest it can give is "
        f"{1 / (BOOTSTRAP_SAMPLES + 1):.4f}.",
        "",
        *markdown.table(COLUMNS, align="lrrrrrrr"),
    ]
    for i, r in enumerate(result.rows):
        cells = scored_cells(i == 0, r.quality, r.bleu_delta, r.p_value, r.same_output, r.seconds)
        lines.append(markdown.row((r.variant, *cells)))
    best = best_row(result)
    lines.append("")
    if best.variant == DEFAULT:
        lines.append(f"The default decoding scores highest on '{result.split}'.")
    else:
        p_value = 1.0 if best.p_value is None else best.p_value
        significant = p_value < 0.05
        lines.append(
            f"`{best.variant}` scores highest on '{result.split}', {best.bleu_delta:+.2f} BLEU "
            f"over the default (p = {p_value:.3f}, "
            + (
                "significant at 0.05: a candidate for the default, weighed against its time"
                if significant
                else "within noise at 0.05"
            )
            + ")."
        )
    return "\n".join(lines) + "\n"
