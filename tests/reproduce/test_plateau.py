"""The report's plateau lines under the Training table: the fitted change of validation BLEU
over the last quarter of each run's steps, and the verdict it gives."""

from __future__ import annotations

from typing import Any

from gmlm.reproduce.sections import PLATEAU_BLEU, plateau_lines


def curve(bleus: list[float | None], every: int = 500) -> list[dict[str, Any]]:
    return [
        {"step": every * (i + 1), "valid_loss": 1.0, "valid_bleu": b} for i, b in enumerate(bleus)
    ]


def test_a_rising_run_and_a_flat_one() -> None:
    # 16 validations: the last quarter is steps 6,500-8,000 (4 of them).
    rising = curve([10.0 + i for i in range(16)])  # +1 per validation: +3 across the quarter
    flat = curve([*range(12), 30.0, 30.4, 29.9, 30.3])  # fitted: +0.12 across the quarter
    lines = plateau_lines({"padir": rising, "ar": flat}, {"padir": "PaDIR", "ar": "AR"})
    assert lines == [
        "PaDIR: validation BLEU 22.00 at step 6,500 to 25.00 at step 8,000 (4 validations in "
        "the last quarter of its training; fitted change across them +3.00 BLEU): still "
        "rising: more steps would likely raise it further (a fitted rise below 0.5 BLEU "
        "counts as one).",
        "AR: validation BLEU 30.00 at step 6,500 to 30.30 at step 8,000 (4 validations in the "
        "last quarter of its training; fitted change across them +0.12 BLEU): a plateau (a "
        "fitted rise below 0.5 BLEU counts as one).",
    ]
    assert PLATEAU_BLEU == 0.5


def test_a_falling_run_is_a_plateau_and_short_runs_say_nothing() -> None:
    falling = curve([*range(12), 28.0, 27.0, 26.0, 25.0])
    (line,) = plateau_lines({"t": falling}, {"t": "teacher"})
    assert "fitted change across them -3.00 BLEU): a plateau" in line
    # Under 3 validations in the last quarter, or none with BLEU: no line.
    assert plateau_lines({"t": curve([1.0, 2.0, 3.0, 4.0])}, {"t": "x"}) == []
    assert plateau_lines({"t": curve([None] * 16)}, {"t": "x"}) == []
