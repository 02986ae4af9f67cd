"""Analyses of trained models: the attention of stutter pairs (paper Tables 4 and 5) and
the length predictor (`gmlm.analysis.length`).

from gmlm.analysis import attention_analysis, render_markdown
from gmlm.analysis.length import length_analysis, render_length_markdown
"""

from gmlm.analysis.attention import PairCollector, attention_analysis, pair_metrics, render_markdown
from gmlm.analysis.metrics import (
    cosine_distance,
    cross_pair_metrics,
    self_pair_metrics,
    stutter_mask,
    summarize,
    top_k_overlap,
    total_variation,
)

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
