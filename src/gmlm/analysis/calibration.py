"""One model's length setting chosen on a validation split, and recorded in its checkpoint.

    from gmlm.analysis.calibration import calibrate

    result = calibrate("runs/padir/averaged", "data/multi30k", "valid",
                       setting="length_shift", values=(-1, 0, 1, 2))
    result.chosen                  # the value the checkpoint's decoding.json now holds

How long a model's outputs come out is a property of the trained model: a PaDIR length
predictor trained on distilled targets may err short (`RefinementOptions.length_shift` moves
its predicted lengths), a beam search may prefer short hypotheses (`SearchOptions.
length_penalty`). So each compared model gets that one setting chosen on validation data,
never on the test set, by the rule gmlm uses for its defaults: decode the split with each value
(every other setting at its default, plus `decoding`, e.g. ``beam=5``), score it with
SacreBLEU, and keep the best value only if it beats the default's BLEU by more than
`min_gain`; otherwise the default stays. The choice goes into the checkpoint's decoding.json
(`gmlm.decoding.checkpoint_defaults`), with the scores that made it, so `gmlm translate`,
`gmlm bench` and the analyses decode the model as it was evaluated. A checkpoint's existing
decoding.json does not enter the grid's decodings (each starts from the class defaults) and is
replaced.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tqdm import tqdm

from gmlm.analysis.results import Calibration, CalibrationRow
from gmlm.analysis.split_decoding import decode_scored, read_pairs
from gmlm.config import BATCH_SIZE, SENTENCES
from gmlm.decoding.checkpoint_defaults import write_decoding_defaults
from gmlm.decoding.options import CALIBRATION_MIN_GAIN, MIN_GAIN, OPTIONS
from gmlm.errors import GmlmError
from gmlm.training.checkpoint import resolve_checkpoint


def choose(rows: Sequence[CalibrationRow], default: float, min_gain: float) -> float:
    """The value of the best row if it beats the default's row by more than `min_gain`, else
    the default (ties: the first best row)."""
    base = next(r for r in rows if r.value == default)
    best = max(rows, key=lambda r: r.bleu)
    return best.value if best.bleu - base.bleu > min_gain else default


def calibrate(
    checkpoint: str | Path,
    data: str | Path,
    split: str = "valid",
    *,
    setting: str,
    values: Sequence[float],
    decoding: dict[str, Any] | None = None,
    min_gain: float = CALIBRATION_MIN_GAIN,
    sentences: int | None = None,
    batch_size: int = 64,
    device: str = "auto",
    progress: bool = True,
    log: Callable[[str], None] | None = None,
    write: bool = True,
) -> Calibration:
    """Decode `split` of the prepared `data` with each of `values` of decoding `setting` (the
    class default added when missing), choose (see the module docstring), and, if `write`,
    record the choice in `checkpoint`'s decoding.json (the default chosen: the file is
    removed)."""
    from gmlm.translation.translator import load

    if sentences is not None:
        SENTENCES.check(sentences, "sentences")
    BATCH_SIZE.check(batch_size, "batch_size")
    MIN_GAIN.check(min_gain, "min_gain")
    translator = load(checkpoint, device)
    cls = OPTIONS[translator.kind]
    fields = {f.name: f for f in dataclasses.fields(cls)}
    if setting not in fields or setting in (decoding or {}):
        raise GmlmError(
            f"setting {setting!r}: give a decoding setting of this {translator.kind} "
            f"checkpoint that `decoding` does not fix; its settings are {', '.join(fields)}"
        )
    default = getattr(cls(), setting)
    grid = list(dict.fromkeys([*values, default] if default not in values else values))
    # every value checked before the first decoding
    options = [translator.options(cls(), **(decoding or {}), **{setting: v}) for v in grid]

    pairs = read_pairs(data, split, sentences)
    rows = []
    signature = ""
    for value, row_options in tqdm(
        list(zip(grid, options, strict=True)),
        desc=f"calibrate {setting}",
        unit="decoding",
        disable=None if progress else True,
    ):
        row = decode_scored(translator, pairs, row_options, batch_size=batch_size)
        signature = signature or row.bleu_signature
        quality = row.quality
        rows.append(
            CalibrationRow(
                value=value,
                bleu=quality.bleu,
                length_ratio=quality.length_ratio,
                seconds=round(row.seconds, 2),
            )
        )
        if log is not None:
            log(
                f"  {setting}={value:<6g} BLEU {quality.bleu:6.2f}  length ratio "
                f"{quality.length_ratio:.3f}  ({row.seconds:.0f} s)"
            )
    result = Calibration(
        checkpoint=str(checkpoint),
        split=split,
        sentences=len(pairs.references),
        setting=setting,
        decoding=dict(decoding or {}),
        default=default,
        chosen=choose(rows, default, min_gain),
        min_gain=min_gain,
        bleu_signature=signature,
        rows=tuple(rows),
    )
    if write:
        chosen = result.chosen
        settings = {} if chosen == default else {setting: chosen}
        write_decoding_defaults(resolve_checkpoint(checkpoint), settings, result.summary())
    return result


def render_calibration_markdown(result: Calibration) -> str:
    """The grid as a Markdown table, the chosen value marked, and the rule."""
    lines = ["| value | BLEU | length ratio | seconds |", "|---:|---:|---:|---:|"]
    for r in result.rows:
        cells = (
            result.label(r.value),
            f"{r.bleu:.2f}",
            f"{r.length_ratio:.3f}",
            f"{r.seconds:.0f}",
        )
        lines.append("| " + " | ".join(cells) + " |")
    signature = f"BLEU signature: `{result.bleu_signature}`"
    return "\n".join([*lines, "", result.summary() + ".", signature, ""])
