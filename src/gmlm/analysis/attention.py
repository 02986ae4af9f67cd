"""Attention of stutter pairs: the analysis of Li et al. (ICML 2024, Section 3.4, Tables 4
and 5) on a trained PaDIR checkpoint.

    from gmlm.analysis import attention_analysis, render_markdown

    result = attention_analysis("runs/padir", "data/multi30k", split="test", steps=4)
    print(render_markdown(result))   # both tables, paper cells alongside; an AttentionResult

Each source sentence of the split is decoded with PaDIR (the checkpoint's tokenizer, the
decoding of ``gmlm translate``: T passes, B predicted lengths, the best-scoring candidate). For
the chosen candidate we take the last decoder layer's token self-attention (H, N, N) and
cross-attention (H, N, S) at its final pass (`RefinementOptions.return_attention`; other
candidates' weights are dropped batch by batch), and split the adjacent positions (i, i+1)
of its output into stutter pairs (the same token id at i and i+1) and the rest.

Which hypothesis: the raw final argmax of the chosen candidate, before post-processing. The
weights belong to exactly those positions, and the post-processing would delete the very
stutters we look for (``dedup``) and drop tokens the model left at their random
initial value (``keep_initial_tokens``); both filters are therefore irrelevant here and
every output position (EOS excluded) takes part, so a sentence of n output tokens gives n - 1
pairs. Stutter remasking only rewrites the inputs of non-final passes, so stutters of the
final pass remain observable with the default ``stutter_remask="previous"``; ``"none"``
shows the model without that help. Stutters are token-level (subword pieces), which is
what the decoder's remasking and dedup act on; `gmlm evaluate` reports the word-level rate.

Metric definitions are in :mod:`gmlm.analysis.metrics`. Paper numbers: docs/DESIGN.md section 4
quotes only the average-over-heads total variation of Table 5 (0.13 for stutter pairs, 0.23
for the others); every other paper cell is shown as n/a rather than guessed.
"""

from __future__ import annotations

import dataclasses
import time
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from gmlm import markdown
from gmlm.analysis.batches import source_batches
from gmlm.analysis.loading import load_padir, padir_at, run_provenance
from gmlm.analysis.metrics import (
    HEAD_AGGREGATES,
    TOP_K,
    cross_pair_metrics,
    probability,
    self_pair_metrics,
    stutter_mask,
    summarize,
)
from gmlm.analysis.results import (
    GROUPS,
    AttentionModel,
    AttentionResult,
    AttentionSentences,
    AttentionSettings,
    GroupSummary,
    HeadSummary,
    MeanStd,
)
from gmlm.analysis.split_decoding import encode_sources, read_pairs
from gmlm.decoding.options import RefinementOptions
from gmlm.decoding.refinement import refine
from gmlm.models import PadirModel
from gmlm.translation.translator import Translator

TABLES = ("self_attention", "cross_attention")
# Per table: the metrics summarized min / avg / max over heads, with their row labels.
DISTANCES = {
    "self_attention": {
        "next": "weight of i on i+1",
        "prev": "weight of i+1 on i",
        "tv": "TV distance of rows i, i+1 (not in the paper)",
        "cosine": "cosine distance of rows i, i+1 (not in the paper)",
    },
    "cross_attention": {"tv": "total variation distance", "cosine": "cosine distance"},
}
TOP_K_LABELS = {
    "self_attention": "P(top-{k}): i+1 in top-{k} of i, or i in top-{k} of i+1",
    "cross_attention": "P(top-{k} overlap): top-{k} source tokens intersect",
}
TITLES = {
    "self_attention": "Self-attention (paper Table 4)",
    "cross_attention": "Cross-attention (paper Table 5)",
}
PAPER: dict[str, Any] = {
    "source": "docs/DESIGN.md section 4, quoting Li et al. (ICML 2024) Section 3.4 / Table 5: "
    "average-over-heads cross-attention TV 0.13 (stutter) vs 0.23 (non-stutter); that document "
    "gives no other cell, so the rest are n/a",
    "finding": "self-attention does not separate stutter pairs; cross-attention does (stutter "
    "pairs attend to the source more similarly)",
    "cross_attention": {"stutter": {"tv": {"avg": 0.13}}, "non_stutter": {"tv": {"avg": 0.23}}},
}
DEFINITIONS = {
    "pairs": "adjacent positions (i, i+1) of the chosen candidate's raw final argmax (before "
    "dedup / dropping unchanged initial tokens; EOS excluded); stutter = same token id",
    "attention": "last decoder layer, final refinement pass; self-attention is the token "
    "self-attention sublayer (not positional attention), over the N positions with EOS; "
    "cross-attention is over the S source tokens with EOS",
    "head_aggregates": "min / avg / max over heads per pair, then mean +- std (population) "
    "over the pairs of a group",
    "tv": "1/2 * sum |p - q| between the two positions' attention rows",
    "cosine": "1 - <p, q> / (|p| |q|) between the two rows",
    "next / prev": "self-attention weight of position i on i+1 / of i+1 on i",
    "self p_topk": "share of (pair, head) with i+1 among the k most attended positions of i, "
    "or i among those of i+1 (ties to the lower position)",
    "cross p_topk": "share of (pair, head) whose k most attended source tokens intersect "
    "(ties to the lower position)",
}


def pair_metrics(
    tokens: Sequence[int], self_attention: Tensor, cross_attention: Tensor
) -> tuple[Tensor, dict[str, Tensor], dict[str, Tensor]]:
    """One hypothesis: its n output ids (no EOS), self-attention (H, N, N) and cross-attention
    (H, N, S) with N >= n (positions past n, e.g. EOS, are keys only) -> the stutter mask
    (n-1,) of its pairs and the self- and cross-attention metrics (n-1, H) of each pair."""
    stutter = stutter_mask(tokens)
    starts = torch.arange(stutter.numel(), device=self_attention.device)
    self_rows = self_attention.transpose(0, 1)  # (N, H, N): rows by position
    cross_rows = cross_attention.transpose(0, 1)  # (N, H, S)
    return (
        stutter,
        self_pair_metrics(self_rows[starts], self_rows[starts + 1], starts),
        cross_pair_metrics(cross_rows[starts], cross_rows[starts + 1]),
    )


class PairCollector:
    """Per-pair metrics of many hypotheses, grouped into stutter and non-stutter pairs; only
    (P, H) values are kept, never attention weights."""

    def __init__(self, heads: int) -> None:
        self.heads = heads
        self.parts: dict[tuple[str, str], dict[str, list[Tensor]]] = defaultdict(
            lambda: defaultdict(list)
        )

    def add(
        self, stutter: Tensor, self_metrics: dict[str, Tensor], cross_metrics: dict[str, Tensor]
    ) -> None:
        stutter = stutter.cpu()
        for group, select in zip(GROUPS, (stutter, ~stutter), strict=True):
            for table, metrics in zip(TABLES, (self_metrics, cross_metrics), strict=True):
                for name, values in metrics.items():
                    self.parts[table, group][name].append(values.cpu()[select])

    def values(self, table: str, group: str, name: str) -> Tensor:
        """(P, H) of one metric over every pair of the group."""
        parts = self.parts[table, group][name]
        return torch.cat(parts) if parts else torch.zeros(0, self.heads)

    def pairs(self, group: str) -> int:
        return int(self.values("cross_attention", group, "tv").shape[0])

    def summary(self, table: str, group: str) -> GroupSummary:
        """The table's metrics over the group's pairs (`DISTANCES[table]` and top-k)."""
        distances = {}
        for name in DISTANCES[table]:
            stats = summarize(self.values(table, group, name))
            distances[name] = HeadSummary(
                **{a: MeanStd(mean=s["mean"], std=s["std"]) for a, s in stats.items()}
            )
        top = {k: probability(self.values(table, group, f"top{k}")) for k in TOP_K}
        return GroupSummary(
            pairs=self.pairs(group),
            next=distances.get("next"),
            prev=distances.get("prev"),
            tv=distances["tv"],
            cosine=distances["cosine"],
            p_top1=top[1],
            p_top2=top[2],
        )


@dataclasses.dataclass
class Collected:
    """The adjacent pairs of every decoded sentence, its output tokens (EOS excluded), and
    how many sentences hold a stutter."""

    collector: PairCollector
    output_tokens: int = 0
    with_stutter: int = 0


def collect_pairs(
    translator: Translator,
    model: PadirModel,
    decoding: RefinementOptions,
    sources: Sequence[Sequence[int]],
    lines: Sequence[int],
    *,
    batch_size: int,
    seed: int,
    progress: bool,
) -> Collected:
    """Decode `sources` (ids; `lines`: their lines in the split) with `decoding`, which
    returns attention, and collect the pair metrics of each chosen candidate."""
    collected = Collected(PairCollector(translator.config.n_heads))
    batches = source_batches(
        translator,
        sources,
        lines,
        batch_size=batch_size,
        seed=seed,
        desc="attention",
        progress=progress,
    )
    for batch in batches:
        for result in refine(model, batch.src, decoding, batch.seed):
            assert result.self_attention is not None and result.cross_attention is not None
            stutter, self_m, cross_m = pair_metrics(
                result.raw, result.self_attention, result.cross_attention
            )
            collected.collector.add(stutter, self_m, cross_m)
            collected.output_tokens += len(result.raw)
            collected.with_stutter += bool(stutter.any())
    return collected


def attention_analysis(
    checkpoint: str | Path,
    data: str | Path,
    split: str = "test",
    *,
    sentences: int | None = None,
    options: RefinementOptions | None = None,
    batch_size: int = 32,
    bf16: bool = False,
    seed: int = 0,
    device: str = "auto",
    progress: bool = False,
    **overrides: Any,
) -> AttentionResult:
    """Tables 4 and 5 for a PaDIR `checkpoint` (folder or run folder) on the first
    `sentences` (default all) sources of `split` of the prepared dataset `data`.

    Decoding: `options` (default: those of ``gmlm translate``, T = 4 passes, B = 5
    lengths) with field `overrides` (``steps=10``, as :meth:`Translator.translate` takes
    them), in batches of `batch_size` sorted by length, each line's initial tokens keyed
    by `seed` and its own ids as in ``gmlm translate``, optionally
    with bf16 weights and activations (``Translator.model_at("bf16")``). Sources empty or longer
    than the model's max_source_len are skipped and counted. n/a statistics are None.
    """
    started = time.perf_counter()
    studies = "PaDIR's parallel decoder"
    translator, _ = load_padir(checkpoint, device, sentences, batch_size, studies)
    config = translator.config
    decoding = translator.options(options, **{**overrides, "return_attention": True})
    assert isinstance(decoding, RefinementOptions)

    pairs = read_pairs(data, split, sentences, checkpoint, translator.languages)
    encoded = encode_sources(translator, pairs)
    over = set(encoded.over_length)
    lines = [i for i, ids in enumerate(encoded.ids) if ids and i not in over]
    collected = collect_pairs(
        translator,
        padir_at(translator, bf16),
        decoding,
        [encoded.ids[i] for i in lines],
        lines,
        batch_size=batch_size,
        seed=seed,
        progress=progress,
    )
    # The post-processing filters never touch the raw hypotheses analysed: leave them out.
    unused = ("return_steps", "return_attention", "keep_initial_tokens", "dedup", "dedup_words")
    settings = {k: v for k, v in dataclasses.asdict(decoding).items() if k not in unused}
    tables = {t: {g: collected.collector.summary(t, g) for g in GROUPS} for t in TABLES}
    return AttentionResult(
        checkpoint=str(checkpoint),
        data=str(data),
        split=split,
        sentences=AttentionSentences(
            in_split=pairs.in_split,
            decoded=len(lines),
            skipped_empty=sum(1 for ids in encoded.ids if not ids),
            skipped_over_length=len(over),
        ),
        output_tokens=collected.output_tokens,
        sentences_with_stutter=collected.with_stutter,
        pairs={group: collected.collector.pairs(group) for group in GROUPS},
        model=AttentionModel(
            heads=config.n_heads,
            decoder_layers=config.n_decoder_layers,
            layer=config.n_decoder_layers,
        ),
        settings=AttentionSettings(
            decoding=settings,
            batch_size=batch_size,
            seed=seed,
            bf16=bf16,
            **run_provenance(translator),
        ),
        self_attention=tables["self_attention"],
        cross_attention=tables["cross_attention"],
        paper=PAPER,
        definitions=DEFINITIONS,
        seconds=round(time.perf_counter() - started, 3),
    )


def _cell(stat: MeanStd) -> str:
    mean, std = stat.mean, stat.std
    return "n/a" if mean is None or std is None else f"{mean:.3f} ± {std:.3f}"


def _number(value: float | None, digits: int = 3) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def _paper(table: str, group: str, *keys: str) -> str:
    value: Any = PAPER.get(table, {}).get(group, {})
    for key in keys:
        value = value.get(key, {}) if isinstance(value, dict) else None
    return f"{value:.2f}" if isinstance(value, float) else "n/a"


def _table(result: AttentionResult, table: str) -> list[str]:
    data = result.table(table)
    lines = [
        f"**{TITLES[table]}**",
        "",
        *markdown.table(
            ("statistic", "stutter", "non-stutter", "paper stutter", "paper non-stutter")
        ),
        markdown.row(("pairs", *(data[g].pairs for g in GROUPS), "n/a", "n/a")),
    ]
    for name, label in DISTANCES[table].items():
        for aggregate in HEAD_AGGREGATES:
            cells = [_cell(data[g].distance(name).aggregate(aggregate)) for g in GROUPS]
            cells += [_paper(table, g, name, aggregate) for g in GROUPS]
            lines.append(markdown.row((f"{label}, {aggregate} over heads", *cells)))
    for k in TOP_K:
        cells = [_number(data[g].p_top(k)) for g in GROUPS]
        cells += [_paper(table, g, f"p_top{k}") for g in GROUPS]
        lines.append(markdown.row((TOP_K_LABELS[table].format(k=k), *cells)))
    return lines


def render_markdown(result: AttentionResult) -> str:
    """Both tables of an :func:`attention_analysis` result as Markdown, with a line on how
    they were made and where the paper cells come from."""
    sentences, settings, model = result.sentences, result.settings, result.model
    decoding = settings.decoding
    header = (
        f"Attention of adjacent output positions: {result.checkpoint} on "
        f"{sentences.decoded} sentences of split '{result.split}' of {result.data} "
        f"({sentences.skipped_empty} empty and {sentences.skipped_over_length} over-long "
        f"skipped); PaDIR T = {decoding['steps']}, B = {decoding['length_beam']}, stutter "
        f"remask {decoding['stutter_remask']}; last decoder layer ({model.layer} of "
        f"{model.decoder_layers}, {model.heads} heads), final pass of the chosen "
        f"candidate, raw output before dedup; {result.output_tokens} output tokens, "
        f"{result.sentences_with_stutter} sentences with a token-level stutter. Cells: "
        f"mean ± std over pairs; {settings.device}, {settings.threads} threads, "
        f"{'bf16' if settings.bf16 else 'fp32'}, torch {settings.torch}, "
        f"{result.seconds:.1f} s."
    )
    footer = f"Paper cells: {result.paper['source']}. Paper finding: {result.paper['finding']}."
    return "\n".join(
        [
            header,
            "",
            *_table(result, "self_attention"),
            "",
            *_table(result, "cross_attention"),
            "",
            footer,
            "",
        ]
    )
