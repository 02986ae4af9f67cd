"""Analyses of trained models: the attention of stutter pairs (paper Tables 4 and 5) and
the length predictor (`gmlm.analysis.length`).

from gmlm.analysis import attention_analysis, render_markdown
from gmlm.analysis.length import length_analysis, render_length_markdown

The names below are imported when first used, so that `gmlm.analysis.settings` (the command
line's and the reproduce stages') loads no torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gmlm.lazy import lazy_names

if TYPE_CHECKING:
    from gmlm.analysis.attention import (
        PairCollector,
        attention_analysis,
        pair_metrics,
        render_markdown,
    )
    from gmlm.analysis.metrics import (
        cosine_distance,
        cross_pair_metrics,
        self_pair_metrics,
        stutter_mask,
        summarize,
        top_k_overlap,
        total_variation,
    )

_HOMES = {
    "PairCollector": "gmlm.analysis.attention",
    "attention_analysis": "gmlm.analysis.attention",
    "cosine_distance": "gmlm.analysis.metrics",
    "cross_pair_metrics": "gmlm.analysis.metrics",
    "pair_metrics": "gmlm.analysis.attention",
    "render_markdown": "gmlm.analysis.attention",
    "self_pair_metrics": "gmlm.analysis.metrics",
    "stutter_mask": "gmlm.analysis.metrics",
    "summarize": "gmlm.analysis.metrics",
    "top_k_overlap": "gmlm.analysis.metrics",
    "total_variation": "gmlm.analysis.metrics",
}

__all__ = [
    "PairCollector",
    "attention_analysis",
    "cosine_distance",
    "cross_pair_metrics",
    "pair_metrics",
    "render_markdown",
    "self_pair_metrics",
    "stutter_mask",
    "summarize",
    "top_k_overlap",
    "total_variation",
]


__getattr__ = lazy_names(__name__, _HOMES)
