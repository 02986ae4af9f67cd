"""Translation-time length check: over-long inputs are reported or refused, never cut.

Training data is filtered to `max_len` when it is prepared; raw text given to a trained model
is not, so `encode_inputs` cleans and encodes it and flags every sentence whose ids plus EOS
exceed the model's `max_len`. With `on_over_length="error"` (the default) it raises
`OverLengthError` naming the lines; with `"report"` it returns them in `over_length` so the
caller handles them explicitly (e.g. splits them or passes them through with a warning).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from gmlm.data.cleaning import normalize
from gmlm.data.tokenizer import Tokenizer
from gmlm.errors import GmlmError

SHOWN = 5
# The other policies of `gmlm translate --over-length` and `Translator.translate(on_over_length=)`.
OVER_LENGTH_WAY_OUT = (
    'pass --over-length split (Python: on_over_length="split") to translate them sentence by '
    "sentence, or --over-length report to leave their outputs empty"
)


class OverLengthError(GmlmError):
    """Some inputs are longer than the model accepts; the message names their lines."""


@dataclass(frozen=True)
class EncodedInputs:
    """ids[i]: the ids of sentence i (no EOS); lengths[i] = len(ids[i]) + 1 (with EOS);
    over_length: the indices i (0-based) with lengths[i] > max_len."""

    ids: list[list[int]]
    lengths: list[int]
    over_length: list[int]


def encode_inputs(
    tokenizer: Tokenizer,
    sentences: Sequence[str],
    max_len: int,
    *,
    on_over_length: Literal["error", "report"] = "error",
    origin: str = "input",
) -> EncodedInputs:
    """Clean and encode raw sentences for translation, checking them against `max_len`.

    `origin` names the input in messages (a file name); lines are reported 1-based.
    """
    if on_over_length not in ("error", "report"):
        raise ValueError("on_over_length must be 'error' or 'report'")
    ids = tokenizer.encode_batch([normalize(s) for s in sentences])
    lengths = [len(x) + 1 for x in ids]
    over = [i for i, n in enumerate(lengths) if n > max_len]
    if over and on_over_length == "error":
        shown = ", ".join(f"line {i + 1} ({lengths[i]} tokens)" for i in over[:SHOWN])
        more = f" and {len(over) - SHOWN} more" if len(over) > SHOWN else ""
        raise OverLengthError(
            f"{origin}: {len(over)} sentence(s) longer than the model's max_len={max_len} "
            f"tokens (EOS included): {shown}{more}; they are never truncated silently: split "
            f"them into shorter sentences, or {OVER_LENGTH_WAY_OUT}"
        )
    return EncodedInputs(ids, lengths, over)
