"""What the analyses of a split share: a prepared split's sentence pairs, their sources encoded
for the analyses that run the model themselves (`gmlm.analysis.attention`,
`gmlm.analysis.length`), and decodings of them, timed and scored as the evaluation scores
them (`gmlm.analysis.ablation`, `gmlm.analysis.calibration`)."""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tqdm import tqdm

from gmlm.checkpoint.languages import Languages, check_dataset
from gmlm.data.binarized import load_dataset
from gmlm.data.lengths import EncodedInputs, encode_inputs
from gmlm.decoding.options import DecodingOptions
from gmlm.errors import GmlmError
from gmlm.evaluation.bleu import default_tokenizer
from gmlm.evaluation.summary import Quality, Signatures, quality_row
from gmlm.translation.translator import Translator


@dataclass(frozen=True)
class SplitPairs:
    """The sources and references of a split (or its first sentences), the pairs in the whole
    split, the sacrebleu tokenizer of its target language and the source file's name."""

    sources: list[str]
    references: list[str]
    in_split: int
    tokenize: str
    origin: str


@dataclass(frozen=True)
class ScoredDecoding:
    """One decoding of the pairs: its translations, wall seconds, scores and the signatures of
    BLEU and chrF."""

    hypotheses: list[str]
    seconds: float
    quality: Quality
    signatures: Signatures


def read_pairs(
    data: str | Path,
    split: str,
    sentences: int | None,
    checkpoint: str | Path,
    languages: Languages,
) -> SplitPairs:
    """The pairs of `split` of the prepared dataset `data`, the first `sentences` if given, to
    be translated by the checkpoint in `checkpoint`, which translates `languages`: a dataset of
    another language pair is an error (:func:`gmlm.checkpoint.languages.check_dataset`)."""
    prepared = load_dataset(data)
    check_dataset(checkpoint, languages, prepared)
    if split not in prepared.splits:
        raise GmlmError(f"{prepared.root}: no split {split!r}; it has {', '.join(prepared.splits)}")
    sources = prepared.read_text(split, "src")
    references = prepared.read_text(split, "tgt")
    in_split = len(references)
    if sentences is not None:
        sources, references = sources[:sentences], references[:sentences]
    return SplitPairs(
        sources=sources,
        references=references,
        in_split=in_split,
        tokenize=default_tokenizer(prepared.stats().tgt_lang),
        origin=f"{prepared.root}/{split}.src.txt",
    )


def decode_scored(
    translator: Translator, pairs: SplitPairs, options: DecodingOptions, **translate: Any
) -> ScoredDecoding:
    """`translator.translate` of the sources with `options` (over-long lines translated sentence
    by sentence, as the evaluation does; `translate`: its other keywords), scored against the
    references."""
    start = time.perf_counter()
    hypotheses = translator.translate(
        pairs.sources, options, on_over_length="split", origin=pairs.origin, **translate
    )
    seconds = time.perf_counter() - start
    quality, signatures = quality_row(hypotheses, pairs.references, pairs.tokenize)
    return ScoredDecoding(hypotheses, seconds, quality, signatures)


def decode_each(
    translator: Translator,
    pairs: SplitPairs,
    options: Sequence[DecodingOptions],
    *,
    desc: str,
    progress: bool,
    **translate: Any,
) -> Iterator[ScoredDecoding]:
    """:func:`decode_scored` of the pairs with each of `options` in turn, with a progress bar
    of decodings (`desc`) if `progress`."""
    for row_options in tqdm(
        options, desc=desc, unit="decoding", disable=None if progress else True
    ):
        yield decode_scored(translator, pairs, row_options, **translate)


def encode_sources(translator: Translator, pairs: SplitPairs) -> EncodedInputs:
    """The pairs' sources as the translator's ids (no EOS); those over its max_source_len are
    listed in `EncodedInputs.over_length` for the caller to skip, never cut."""
    return encode_inputs(
        translator.tokenizer,
        pairs.sources,
        translator.config.max_source_len,
        on_over_length="report",
        origin=pairs.origin,
    )
