"""The paper's published Table 1, which gmlm's quality tables show beside their own numbers.

Li et al., "Promises and Pitfalls of Generative Masked Language Modeling", ICML 2024 (arXiv
2407.21046), Table 1: SacreBLEU of the autoregressive baseline trained on distilled data (beam
5) and of PaDIR with T = 4 and T = 10 refinement passes over B = 5 predicted lengths, on WMT14
DE<->EN, WMT16 RO<->EN and WMT17 ZH<->EN. Other corpora than gmlm's Multi30k runs, with larger
models and far longer training: for scale, never a like-for-like comparison. The paper gives
no chrF.

Declared once here: `gmlm analyze table1` (:mod:`gmlm.analysis.table1`) and REPORT.md's
quality section (:mod:`gmlm.reproduce.sections`) read it. Torch-free.
"""

from __future__ import annotations

# The rows of Table 1, by gmlm's system keys (as eval/scores.json names them).
AR_BEAM5, PADIR_T4_B5, PADIR_T10_B5 = "ar-beam5", "padir-T4-B5", "padir-T10-B5"

# Direction (source-target) -> the corpus of its column.
PAPER_CORPUS: dict[str, str] = {
    "de-en": "WMT14",
    "en-de": "WMT14",
    "ro-en": "WMT16",
    "en-ro": "WMT16",
    "zh-en": "WMT17",
    "en-zh": "WMT17",
}

# Direction -> system -> the paper's BLEU.
PAPER_BLEU: dict[str, dict[str, float]] = {
    "de-en": {AR_BEAM5: 33.50, PADIR_T4_B5: 33.49, PADIR_T10_B5: 33.63},
    "en-de": {AR_BEAM5: 29.54, PADIR_T4_B5: 28.61, PADIR_T10_B5: 28.58},
    "ro-en": {AR_BEAM5: 34.89, PADIR_T4_B5: 33.98, PADIR_T10_B5: 33.99},
    "en-ro": {AR_BEAM5: 29.75, PADIR_T4_B5: 28.98, PADIR_T10_B5: 28.97},
    "zh-en": {AR_BEAM5: 27.59, PADIR_T4_B5: 26.47, PADIR_T10_B5: 26.54},
    "en-zh": {AR_BEAM5: 33.94, PADIR_T4_B5: 32.59, PADIR_T10_B5: 32.68},
}

CITATION = 'Li et al., "Promises and Pitfalls of Generative Masked Language Modeling", ICML 2024'


def paper_bleu(direction: str, system: str) -> float | None:
    """The paper's BLEU of `system` (e.g. "padir-T4-B5") in `direction` (e.g. "de-en"), or None
    where Table 1 has no such cell."""
    return PAPER_BLEU.get(direction, {}).get(system)
