"""Length prediction of a PaDIR checkpoint: how often it predicts the reference length, and
what the translation quality would be with the reference length given (an oracle).

    from gmlm.analysis.length import length_analysis, render_length_markdown

    result = length_analysis("runs/padir", "data/multi30k", split="test", steps=4)
    print(render_length_markdown(result))      # a LengthResult; .to_json() / .write(path)

PaDIR fixes the output length before refining (the encoder's [LENGTH] state scores lengths 1 ..
max_target_len), so a wrong length costs BLEU that no number of refinement passes can win
back. This analysis separates that cost from the rest:

* the predictor: for each pair, the reference length N* (the reference's pieces under the
  checkpoint's tokenizer, plus EOS) against the top-1 prediction (exact, within 1 and 2, mean
  absolute and signed error), the share of references among the top B lengths, and the mean
  rank of N* in the predictor's order;
* decoding with T passes and (a) the top-1 predicted length, (b) the top B predicted lengths
  and each selection weight in `length_weights` (0 = the paper's summed token log-probability,
  see `RefinementOptions.length_score_weight`), (c) the reference length (oracle, one candidate).
  Each row gets SacreBLEU, chrF, the BLEU length ratio and the word-level stutter rate against
  the references, and for (b) how often the selected candidate has the reference length.

Pairs are decoded as ``gmlm translate`` does (longest source first, batches of `batch_size`,
each line's initial tokens keyed by `seed` and the line's own ids,
:mod:`gmlm.decoding.draws`), so rows (a) and (b) are the translations of ``gmlm translate
--steps T --length-beam B`` of the split's source file (exactly so when no pair is skipped:
skipping changes the batches, hence the float rounding at near-ties).
Pairs with an empty side, a source over max_source_len or a reference over max_target_len are
skipped and counted. Note that a model trained on distilled targets learns the lengths of the
teacher's translations, not of human references; the oracle row measures the headroom left by
the length predictor against human lengths.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from gmlm import markdown
from gmlm.analysis.batches import source_batches
from gmlm.analysis.loading import load_padir, padir_at, run_provenance
from gmlm.analysis.results import (
    LengthResult,
    LengthRow,
    LengthSentences,
    LengthSettings,
    Predictor,
)
from gmlm.analysis.split_decoding import SplitPairs, encode_sources, read_pairs
from gmlm.data.tokenizer import Tokenizer
from gmlm.decoding.options import RefinementOptions
from gmlm.decoding.refinement import refine
from gmlm.errors import GmlmError
from gmlm.evaluation.summary import quality_row
from gmlm.models import PadirModel
from gmlm.translation.translator import Translator


@dataclasses.dataclass(frozen=True)
class Configuration:
    """One decoding of every pair: `oracle` decodes the reference length only."""

    name: str
    length_beam: int
    length_weight: float = 0.0
    oracle: bool = False


def configurations(length_beam: int, length_weights: tuple[float, ...]) -> list[Configuration]:
    found = [Configuration("predicted length (B=1)", 1)]
    if length_beam > 1:
        found += [
            Configuration(f"top {length_beam} predicted lengths, weight {w:g}", length_beam, w)
            for w in length_weights
        ]
    found.append(Configuration("reference length (oracle)", 1, oracle=True))
    return found


@dataclasses.dataclass(frozen=True)
class Pair:
    """A pair to analyse: source ids (no EOS), the reference length in pieces + EOS, the
    reference text, and its line in the split (which keys its initial tokens)."""

    ids: list[int]
    target: int
    reference: str
    line: int


def analysable_pairs(
    tokenizer: Tokenizer,
    source_ids: Sequence[list[int]],
    over_length: set[int],
    references: Sequence[str],
    max_target_len: int,
) -> tuple[list[Pair], dict[str, int]]:
    """The pairs that can be analysed and the counts of those skipped, by reason: an empty
    side, a source over max_source_len (`over_length`), a reference over max_target_len."""
    skipped = {"empty": 0, "source_over_length": 0, "reference_over_length": 0}
    pairs = []
    for i, (ids, reference) in enumerate(zip(source_ids, references, strict=True)):
        target = len(tokenizer.encode(reference)) + 1
        if not ids or target == 1:
            skipped["empty"] += 1
        elif i in over_length:
            skipped["source_over_length"] += 1
        elif target > max_target_len:
            skipped["reference_over_length"] += 1
        else:
            pairs.append(Pair(ids, target, reference, i))
    return pairs, skipped


@dataclasses.dataclass(frozen=True)
class Decoded:
    """What decoding every pair gave: per pair (in `pairs` order) the top-1 predicted length
    and the reference length's rank (1 = top) in the predictor's order, (P,) each; per
    configuration the hypotheses and, for those with several lengths, how many selected
    candidates have the reference length."""

    top1: Tensor
    rank: Tensor
    hypotheses: dict[str, list[str]]
    chosen_is_reference: dict[str, int]


def decode_pairs(
    translator: Translator,
    model: PadirModel,
    pairs: Sequence[Pair],
    runs: Sequence[Configuration],
    options: dict[str, RefinementOptions],
    *,
    batch_size: int,
    seed: int,
    progress: bool,
) -> Decoded:
    """Predict the length of every pair and decode it under every configuration, batched as
    `Translator.translate_ids` batches (longest source first)."""
    top1 = torch.zeros(len(pairs), dtype=torch.long)
    rank = torch.zeros(len(pairs), dtype=torch.long)
    hypotheses = {c.name: [""] * len(pairs) for c in runs}
    chosen_is_reference = {c.name: 0 for c in runs if c.length_beam > 1}
    for batch in source_batches(
        translator,
        [p.ids for p in pairs],
        [p.line for p in pairs],
        batch_size=batch_size,
        seed=seed,
        desc="length",
        progress=progress,
    ):
        targets = torch.tensor([pairs[i].target for i in batch.rows])
        with torch.no_grad():
            logits = model.length_logits(model.encode(batch.src)).float().cpu()
        target_logit = logits.gather(1, (targets - 1).unsqueeze(1))
        rows = torch.tensor(batch.rows)
        top1[rows] = logits.argmax(1) + 1
        rank[rows] = (logits > target_logit).sum(1) + 1
        for c in runs:
            lengths = targets.unsqueeze(1).to(batch.src.device) if c.oracle else None
            results = refine(model, batch.src, options[c.name], batch.seed, lengths)
            for i, r in zip(batch.rows, results, strict=True):
                hypotheses[c.name][i] = translator.text(r.tokens, options[c.name])
                if c.name in chosen_is_reference:
                    chosen_is_reference[c.name] += r.length == pairs[i].target
    return Decoded(top1, rank, hypotheses, chosen_is_reference)


def predictor_statistics(
    top1: Tensor, rank: Tensor, reference_lengths: Tensor, length_beam: int
) -> Predictor:
    """The predictor's accuracy from the top-1 lengths, the references' ranks and lengths,
    (P,) each."""
    error = (top1 - reference_lengths).float()
    return Predictor(
        top1_exact=round(float((error == 0).float().mean()), 4),
        top1_within_1=round(float((error.abs() <= 1).float().mean()), 4),
        top1_within_2=round(float((error.abs() <= 2).float().mean()), 4),
        top1_mean_abs_error=round(float(error.abs().mean()), 3),
        top1_mean_signed_error=round(float(error.mean()), 3),
        length_beam=length_beam,
        reference_in_top=round(float((rank <= length_beam).float().mean()), 4),
        reference_mean_rank=round(float(rank.float().mean()), 3),
        mean_reference_length=round(float(reference_lengths.float().mean()), 3),
    )


def decoding_rows(
    runs: Sequence[Configuration], decoded: Decoded, references: Sequence[str], tokenize: str
) -> tuple[LengthRow, ...]:
    """The quality of each configuration's hypotheses against the references."""
    rows = []
    for c in runs:
        quality, _ = quality_row(decoded.hypotheses[c.name], references, tokenize)
        chosen = decoded.chosen_is_reference.get(c.name)
        rows.append(
            LengthRow(
                decoding=c.name,
                length_beam=c.length_beam,
                length_weight=c.length_weight,
                oracle=c.oracle,
                quality=quality,
                chosen_is_reference_length=(
                    None if chosen is None else round(chosen / len(references), 4)
                ),
            )
        )
    return tuple(rows)


def configuration_options(
    translator: Translator, base: RefinementOptions, runs: Sequence[Configuration]
) -> dict[str, RefinementOptions]:
    """Each configuration's decoding: `base` with its length_beam and length_weight (the
    oracle: no offsets either)."""
    decodings = {}
    for c in runs:
        options = translator.options(
            base,
            length_beam=c.length_beam,
            length_score_weight=c.length_weight,
            length_offsets=() if c.oracle else None,
        )
        assert isinstance(options, RefinementOptions)
        decodings[c.name] = options
    return decodings


def read_analysable(
    translator: Translator,
    checkpoint: str | Path,
    data: str | Path,
    split: str,
    sentences: int | None,
) -> tuple[SplitPairs, list[Pair], dict[str, int]]:
    """The first `sentences` pairs of `split` of the prepared dataset `data`, for the
    `translator` of `checkpoint` (a dataset of another language pair is an error), those of them
    that can be analysed, and the counts of the others by reason (:func:`analysable_pairs`);
    none analysable is an error."""
    text = read_pairs(data, split, sentences, checkpoint, translator.languages)
    encoded = encode_sources(translator, text)
    pairs, skipped = analysable_pairs(
        translator.tokenizer,
        encoded.ids,
        set(encoded.over_length),
        text.references,
        translator.config.max_target_len,
    )
    if not pairs:
        raise GmlmError(f"{text.origin}: no pair of split {split!r} can be analysed ({skipped})")
    return text, pairs, skipped


def length_analysis(
    checkpoint: str | Path,
    data: str | Path,
    split: str = "test",
    *,
    sentences: int | None = None,
    options: RefinementOptions | None = None,
    length_weights: tuple[float, ...] = (0.0, 0.5),
    batch_size: int = 32,
    bf16: bool = False,
    seed: int = 0,
    device: str = "auto",
    progress: bool = False,
    **overrides: Any,
) -> LengthResult:
    """Length prediction and oracle-length decoding of a PaDIR `checkpoint` on the first
    `sentences` (default all) pairs of `split` of the prepared dataset `data` (see the module
    docstring), decoded with `options` (default: those of ``gmlm translate``, T = 4, B = 5)
    and field `overrides` (``steps=10``, as :meth:`Translator.translate` takes them), each
    configuration setting its length_beam and length_weight (the oracle: one length, no
    offsets)."""
    if not length_weights or min(length_weights) < 0:
        raise GmlmError(
            f"length_weights={tuple(length_weights)}: give at least one weight, each >= 0 "
            "(0 is the paper's selection)"
        )
    started = time.perf_counter()
    translator, model = load_padir(checkpoint, device, sentences, batch_size, "length prediction")
    model = padir_at(translator, bf16)
    base = translator.options(options, **overrides)
    assert isinstance(base, RefinementOptions)
    steps, length_beam = base.steps, base.length_beam
    runs = configurations(length_beam, tuple(length_weights))
    decodings = configuration_options(translator, base, runs)
    text, pairs, skipped = read_analysable(translator, checkpoint, data, split, sentences)
    decoded = decode_pairs(
        translator,
        model,
        pairs,
        runs,
        decodings,
        batch_size=batch_size,
        seed=seed,
        progress=progress,
    )
    tokenize = text.tokenize
    references = [p.reference for p in pairs]
    reference_lengths = torch.tensor([p.target for p in pairs])
    return LengthResult(
        checkpoint=str(checkpoint),
        data=str(data),
        split=split,
        sentences=LengthSentences(in_split=len(text.sources), analysed=len(pairs), skipped=skipped),
        predictor=predictor_statistics(decoded.top1, decoded.rank, reference_lengths, length_beam),
        decoding=decoding_rows(runs, decoded, references, tokenize),
        settings=LengthSettings(
            steps=steps,
            length_beam=length_beam,
            length_weights=tuple(length_weights),
            decoding={
                k: v
                for k, v in dataclasses.asdict(base).items()
                if k not in ("return_steps", "return_attention", "length_score_weight")
            },
            batch_size=batch_size,
            seed=seed,
            bf16=bf16,
            tokenize=tokenize,
            **run_provenance(translator),
        ),
        seconds=round(time.perf_counter() - started, 3),
    )


# The decoding table's columns (render_length_markdown).
DECODING_COLUMNS = (
    "lengths decoded",
    "BLEU",
    "chrF",
    "length ratio",
    "stutter / 100 words",
    "chosen = reference length",
)


def render_length_markdown(result: LengthResult) -> str:
    """The predictor's accuracy and the decoding table as Markdown."""
    p, s, n = result.predictor, result.settings, result.sentences
    lines = [
        f"{n.analysed} pairs of split '{result.split}' (skipped: "
        + ", ".join(f"{k} {v}" for k, v in n.skipped.items())
        + f"); lengths in pieces with EOS (mean reference {p.mean_reference_length:.1f}).",
        "",
        *markdown.table(
            ("length predictor", "value"),
            (
                ("top-1 = reference length", f"{100 * p.top1_exact:.1f}%"),
                (
                    "top-1 within 1 / within 2",
                    f"{100 * p.top1_within_1:.1f}% / {100 * p.top1_within_2:.1f}%",
                ),
                (
                    "top-1 mean absolute / signed error",
                    f"{p.top1_mean_abs_error:.2f} / {p.top1_mean_signed_error:+.2f}",
                ),
                (f"reference among the top {p.length_beam}", f"{100 * p.reference_in_top:.1f}%"),
                ("mean rank of the reference length", f"{p.reference_mean_rank:.2f}"),
            ),
            align="lr",
        ),
        "",
        f"Decoding with T={s.steps} passes ({'bf16' if s.bf16 else 'fp32'}, seed {s.seed}):",
        "",
        *markdown.table(DECODING_COLUMNS, align="lrrrrr"),
    ]
    for r in result.decoding:
        q, chosen = r.quality, r.chosen_is_reference_length
        lines.append(
            markdown.row(
                (
                    r.decoding,
                    f"{q.bleu:.2f}",
                    f"{q.chrf:.2f}",
                    f"{q.length_ratio:.3f}",
                    f"{q.stutter_per_100_words:.3f}",
                    "n/a" if chosen is None else f"{100 * chosen:.1f}%",
                )
            )
        )
    return "\n".join(lines) + "\n"
