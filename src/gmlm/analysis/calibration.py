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
SacreBLEU, and keep the best value only if it beats, by more than `min_gain` BLEU, what the
checkpoint decodes with now: the value its decoding.json records (a choice made earlier, maybe
on more sentences), else the class default, both always in the grid. So a calibration never
silently undoes an earlier decision: it keeps it (decoding.json untouched), replaces it, or
records a first choice, and says which (`Calibration.decision`). The choice goes into the
checkpoint's decoding.json (`gmlm.checkpoint.decoding_defaults`) beside the file's other
settings, with the scores that made it, so `gmlm translate`, `gmlm bench` and the analyses
decode the model as it was evaluated. Each grid row decodes as the checkpoint does (its
decoding.json's other settings included) with the one setting changed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gmlm import markdown
from gmlm.analysis.results import Calibration, CalibrationRow
from gmlm.analysis.split_decoding import decode_each, read_pairs
from gmlm.checkpoint.decoding_defaults import DECODING_FILE, write_decoding_defaults
from gmlm.checkpoint.loading import resolve_checkpoint
from gmlm.config import BATCH_SIZE, SENTENCES
from gmlm.decoding.options import CALIBRATION_MIN_GAIN, MIN_GAIN, OPTIONS
from gmlm.errors import GmlmError

if TYPE_CHECKING:
    from gmlm.translation.translator import Translator


def choose(rows: Sequence[CalibrationRow], default: float, min_gain: float) -> float:
    """The value of the best row if it beats the default's row by more than `min_gain`, else
    the default (ties: the first best row)."""
    base = next(r for r in rows if r.value == default)
    best = max(rows, key=lambda r: r.bleu)
    return best.value if best.bleu - base.bleu > min_gain else default


def value_grid(
    translator: Translator, setting: str, values: Sequence[float], decoding: dict[str, Any]
) -> tuple[float, float | None, list[float]]:
    """`setting`'s class default, the value the checkpoint's decoding.json records (None
    without one) and the values to try: `values`, then those two when missing. `setting` must
    be a decoding setting of the checkpoint's kind that `decoding` does not fix."""
    cls = OPTIONS[translator.kind]
    fields = {f.name: f for f in dataclasses.fields(cls)}
    if setting not in fields or setting in decoding:
        raise GmlmError(
            f"setting {setting!r}: give a decoding setting of this {translator.kind} "
            f"checkpoint that `decoding` does not fix; its settings are {', '.join(fields)}"
        )
    default = getattr(cls(), setting)
    previous = translator.defaults.get(setting)
    grid = list(dict.fromkeys([*values, default, *([] if previous is None else [previous])]))
    return default, previous, grid


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
    class default and the checkpoint's recorded value added when missing), choose (see the
    module docstring), and, if `write`, record a new choice in `checkpoint`'s decoding.json."""
    from gmlm.translation.translator import load

    if sentences is not None:
        SENTENCES.check(sentences, "sentences")
    BATCH_SIZE.check(batch_size, "batch_size")
    MIN_GAIN.check(min_gain, "min_gain")
    translator = load(checkpoint, device)
    default, previous, grid = value_grid(translator, setting, values, decoding or {})
    # every value checked before the first decoding
    options = [translator.options(**(decoding or {}), **{setting: v}) for v in grid]

    pairs = read_pairs(data, split, sentences, checkpoint, translator.languages)
    rows = []
    signature = ""
    decodings = decode_each(
        translator,
        pairs,
        options,
        desc=f"calibrate {setting}",
        progress=progress,
        batch_size=batch_size,
    )
    for value, row in zip(grid, decodings, strict=True):
        signature = signature or row.signatures.bleu
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
        chosen=choose(rows, default if previous is None else previous, min_gain),
        min_gain=min_gain,
        bleu_signature=signature,
        rows=tuple(rows),
        previous=previous,
    )
    folder = resolve_checkpoint(checkpoint)
    result = dataclasses.replace(result, decision=decision(result, folder / DECODING_FILE, write))
    if write and result.chosen != result.baseline:
        settings = {**translator.defaults, setting: result.chosen}
        write_decoding_defaults(folder, settings, result.summary())
    if log is not None:
        log(f"  {result.decision}")
    return result


def decision(result: Calibration, path: Path, write: bool) -> str:
    """What the choice of `result` does to the decoding.json at `path`, in words."""
    r = result
    gain = next(x.bleu for x in r.rows if x.value == r.chosen) - next(
        x.bleu for x in r.rows if x.value == r.baseline
    )
    if r.chosen == r.baseline and r.previous is None:
        text = (
            f"nothing to record: no {r.setting} beats the class default ({r.default:g}) by "
            f"more than {r.min_gain:g} BLEU"
        )
    elif r.chosen == r.baseline:
        text = (
            f"kept {r.setting}={r.previous:g} of {path}: no value beats it by more than "
            f"{r.min_gain:g} BLEU"
        )
    elif r.previous is None:
        text = (
            f"recorded {r.setting}={r.chosen:g} in {path} ({gain:+.2f} BLEU over the class "
            f"default {r.default:g})"
        )
    else:
        text = (
            f"replaced {r.setting}={r.previous:g} by {r.chosen:g} in {path} ({gain:+.2f} BLEU "
            "over it)"
        )
    return text if write else f"dry run, {path} left as it is; a run would have: {text}"


def render_calibration_markdown(result: Calibration) -> str:
    """The grid as a Markdown table, the chosen value marked, and the rule."""
    rows = (
        (result.label(r.value), f"{r.bleu:.2f}", f"{r.length_ratio:.3f}", f"{r.seconds:.0f}")
        for r in result.rows
    )
    lines = markdown.table(("value", "BLEU", "length ratio", "seconds"), rows, align="rrrr")
    signature = f"BLEU signature: `{result.bleu_signature}`"
    done = [f"decoding.json: {result.decision}.", ""] if result.decision else []
    return "\n".join([*lines, "", result.summary() + ".", signature, "", *done])
