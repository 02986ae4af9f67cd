"""Checkpoints compared on a validation split: is a new model better than the one it would
replace?

    from gmlm.analysis.comparison import compare_checkpoints, render_comparison_markdown

    result = compare_checkpoints(["checkpoints/multi30k-en-de/padir", "runs/seed1/padir"],
                                 "data/multi30k-en-de", split="valid")
    print(render_comparison_markdown(result))  # a ComparisonResult; .to_json() / .write(path)

Each checkpoint translates the split's sources with its own decoding defaults (its
decoding.json), changed by the decoding settings of its kind given here (``{"ar": {"beam":
5}, "padir": {"steps": 10}}``), exactly as ``gmlm translate`` with those flags would (over-long
lines translated sentence by sentence, as the evaluation does). Every row is scored with
SacreBLEU, chrF, the BLEU length ratio and the stutter rate, and each row after the first is
compared with the first by sacrebleu's paired bootstrap (1,000 resamples), as
:mod:`gmlm.analysis.ablation` compares decoding settings; a row whose translations equal the
first row's, line for line, is marked so and not tested. Every checkpoint must translate the
dataset's language pair.

This is how a retrained model (another seed, recipe or teacher) is judged before it replaces a
shipped one: on validation data, never on the test set.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from gmlm import markdown
from gmlm.analysis.ablation import (
    BOOTSTRAP_SAMPLES,
    NOT_OUTPUT,
    QUALITY_COLUMNS,
    paired_bootstrap,
    scored_cells,
)
from gmlm.analysis.loading import run_provenance
from gmlm.analysis.results import ComparisonResult, ComparisonRow, PairedScoring
from gmlm.analysis.split_decoding import decode_scored, read_pairs
from gmlm.config import BATCH_SIZE, SENTENCES
from gmlm.decoding.options import Precision
from gmlm.errors import GmlmError
from gmlm.translation.translator import load


def compare_checkpoints(
    checkpoints: Sequence[str | Path],
    data: str | Path,
    split: str = "valid",
    *,
    sentences: int | None = None,
    decoding: Mapping[str, Mapping[str, Any]] | None = None,
    batch_size: int = 32,
    bf16: bool = False,
    seed: int = 0,
    device: str = "auto",
    log: Callable[[str], None] | None = None,
) -> ComparisonResult:
    """Each of `checkpoints` (two or more; the first is the one the others are compared with)
    on the first `sentences` (default all) pairs of `split` of the prepared dataset `data`,
    decoded with its defaults and `decoding[kind]` (see the module docstring). Every
    checkpoint is loaded and its settings checked before the first decoding. `log`, if given,
    is called with a line per finished row."""
    if len(checkpoints) < 2:
        raise GmlmError(
            f"comparing needs two checkpoints or more, got {len(checkpoints)}: the first and "
            "each one to compare with it"
        )
    if sentences is not None:
        SENTENCES.check(sentences, "sentences")
    BATCH_SIZE.check(batch_size, "batch_size")
    decoding = dict(decoding or {})
    translators = [load(path, device) for path in checkpoints]
    kinds = {t.kind for t in translators}
    unused = [kind for kind, given in decoding.items() if given and kind not in kinds]
    if unused:
        named = {"ar": "autoregressive", "padir": "PaDIR"}
        given = ", ".join(f"{k}={v}" for kind in unused for k, v in decoding[kind].items())
        raise GmlmError(
            f"decoding settings for {' and '.join(named[k] for k in unused)} checkpoints "
            f"({given}), but none is compared"
        )
    options = [t.options(**decoding.get(t.kind, {})) for t in translators]

    started = time.perf_counter()
    pairs = [
        read_pairs(data, split, sentences, c, t.languages)
        for c, t in zip(checkpoints, translators, strict=True)
    ]
    precision: Precision = "bf16" if bf16 else "fp32"
    rows = []
    for path, translator, row_options, row_pairs in zip(
        checkpoints, translators, options, pairs, strict=True
    ):
        decoded = decode_scored(
            translator,
            row_pairs,
            row_options,
            batch_size=batch_size,
            seed=seed,
            precision=precision,
        )
        rows.append((path, translator, row_options, decoded))
        if log is not None:
            log(f"  {path!s:44s} BLEU {decoded.quality.bleu:6.2f}  ({decoded.seconds:.0f} s)")

    first = rows[0][3]
    references = pairs[0].references
    differ = [i for i, row in enumerate(rows) if i and row[3].hypotheses != first.hypotheses]
    tested, bootstrap = paired_bootstrap(
        first.hypotheses, [rows[i][3].hypotheses for i in differ], references, pairs[0].tokenize
    )
    p_values = dict(zip(differ, tested, strict=True))
    return ComparisonResult(
        data=str(data),
        split=split,
        in_split=pairs[0].in_split,
        sentences=len(references),
        rows=tuple(
            ComparisonRow(
                checkpoint=str(path),
                kind=translator.kind,
                decoding={
                    k: v for k, v in dataclasses.asdict(row_options).items() if k not in NOT_OUTPUT
                },
                quality=decoded.quality,
                bleu_delta=round(decoded.quality.bleu - first.quality.bleu, 2),
                p_value=p_values.get(i),
                same_output=i > 0 and i not in p_values,
                seconds=round(decoded.seconds, 2),
            )
            for i, (path, translator, row_options, decoded) in enumerate(rows)
        ),
        settings=PairedScoring(
            batch_size=batch_size,
            seed=seed,
            bf16=bf16,
            tokenize=pairs[0].tokenize,
            bleu_signature=first.signatures.bleu,
            bootstrap=bootstrap,
            **run_provenance(translators[0]),
        ),
        seconds=round(time.perf_counter() - started, 3),
    )


COLUMNS = ("checkpoint", "kind", *QUALITY_COLUMNS)


def render_comparison_markdown(result: ComparisonResult) -> str:
    """The rows as a Markdown table, with what they decoded and how they were compared."""
    s = result.settings
    lines = [
        f"{result.sentences} pairs of split '{result.split}' of {result.data}"
        + (f" (the first of {result.in_split})" if result.sentences < result.in_split else "")
        + f"; each checkpoint with its own decoding defaults and the settings given "
        f"({'bf16' if s.bf16 else 'fp32'}, seed {s.seed}, batch {s.batch_size}). p: paired "
        "bootstrap against the first row (none where the translations are its own, line for "
        f"line) ({BOOTSTRAP_SAMPLES:,} resamples), the smallest it can give is "
        f"{1 / (BOOTSTRAP_SAMPLES + 1):.4f}.",
        "",
        *markdown.table(COLUMNS, align="llrrrrrrr"),
    ]
    for i, r in enumerate(result.rows):
        cells = scored_cells(i == 0, r.quality, r.bleu_delta, r.p_value, r.same_output, r.seconds)
        lines.append(markdown.row((r.checkpoint, r.kind, *cells)))
    return "\n".join(lines) + "\n"


__all__ = ["compare_checkpoints", "render_comparison_markdown"]
