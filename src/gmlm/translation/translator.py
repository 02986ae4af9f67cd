"""Translate raw text with a trained model: the Python API behind `gmlm translate`.

    import gmlm

    translator = gmlm.load("runs/padir/checkpoints/best")   # kind, model, tokenizer, config
    translator.translate(["Ein Hund läuft.", ""], steps=4)  # ["A dog runs.", ""]

Lines are cleaned and encoded like the training data, decoded in batches of similar length
(see "Batches" below) and returned in input order, one single-line output per input (an
empty or blank line gives an empty output without touching the model). Lines with no
letters, or confidently in another language than the checkpoint's source language, are
named in a warning, or with ``check_language="strict"`` refuse the input
(:mod:`gmlm.translation.language_check`). A line longer than
the model's max_source_len is never cut silently: by default it is an error naming the line
and the limit;
``on_over_length="split"`` translates each of its sentences on its own (the models learn
from single sentences: several in one input lose content) and joins the translations with a
space, a sentence that is still too long cut further at clause punctuation, then between
words, then between tokens, so that no text is ever left out; ``"report"`` leaves its output
empty and names it in a warning.

A line's translation depends only on the line, the checkpoint, the seed and the decoding
settings, not on the batch size, its place in the input or the other lines: PaDIR's initial
random tokens are a draw keyed by the seed and the sentence's own source ids
(:mod:`gmlm.decoding.draws`), so a sentence repeated in a file translates alike. Batching
can still change float rounding (padding widens the matrix products), which moves an output
only where two tokens' scores nearly tie.

Batches: by default, and with ``max_tokens``, a batch is bounded by its padded size in
decoder row-positions, its rows times its widest row (as fairseq's ``--max-tokens`` and
CTranslate2's ``batch_type="tokens"``), rather than by a count of sentences, so that short
sentences make large batches and long ones small. A PaDIR sentence brings its K candidates
(length_beam x (1 + len(length_offsets)) x random_starts) at the widest of their lengths:
the encoder and the length head run first, once per sentence, over a window of sentences of
similar source length (up to PLAN_BYTES of encoder states; encoder batches of up to
``max_tokens`` source tokens), then the window's sentences are sorted by their widest
candidate and batched, each batch decoding the lengths predicted and reusing the encoding.
An AR sentence brings its beam at its source length (EOS included). ``batch_size``
bounds the sentences per batch as well, or alone when no ``max_tokens`` is given; then
sentences are sorted by source length. A sentence over the budget alone is a batch of its
own. Neither given: ``max_tokens`` =
:data:`gmlm.decoding.options.MAX_TOKENS_DEFAULT`.

Decoding settings are an options object of the model's kind,
:class:`gmlm.decoding.SearchOptions` (greedy, GNMT alpha 0.6 by default) or
:class:`gmlm.decoding.RefinementOptions` (the paper's T = 4, B = 5), and/or ``name=value``
overrides of its fields (``translate(lines, steps=10)``). A setting of the other model kind
(``beam`` for a PaDIR model, ``steps`` for an autoregressive one) is an error that names the
checkpoint's kind; a name neither kind has is one that lists the valid names.

``precision`` ("fp32", "bf16" or "int8", :mod:`gmlm.translation.precision`) picks the arithmetic;
the bf16 and int8 copies of the model are made on first use and kept. Decoding runs under
``torch.inference_mode``.

On a GPU, PaDIR decodes at fixed shapes (``fixed_shapes``, :mod:`gmlm.decoding.fixed`): every
candidate in every pass at bucketed widths and batch sizes, with no host sync inside the
passes, so the host queues a whole decode without waiting; and its encoder and decoder passes
replay CUDA graphs (``cuda_graphs``, :mod:`gmlm.decoding.cuda_graphs`; the first batch of each
new bucket pays for its capture). Both default to on for a PaDIR model on a CUDA device and
off elsewhere (on a CPU the eager loop, which retires finished candidates, is faster); the
outputs are the same up to float rounding. An AR model's steps are not bucketed, so its
graphs (one per batch shape and step) stay opt-in.
"""

from __future__ import annotations

import re
import warnings
import weakref
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, Literal, NamedTuple

import torch
from torch import Tensor

from gmlm.checkpoint.languages import NOT_GIVEN, Languages
from gmlm.checkpoint.loading import load_for_inference
from gmlm.config import BATCH_SIZE, MAX_TOKENS, SEED, check_value
from gmlm.data.batching import cut_batches
from gmlm.data.cleaning import normalize
from gmlm.data.lengths import SHOWN, encode_inputs
from gmlm.data.tokenizer import Tokenizer
from gmlm.decoding.autoregressive import beam_search, greedy_search
from gmlm.decoding.cancel import checkpoint
from gmlm.decoding.cuda_graphs import graph_count, graphed
from gmlm.decoding.fixed import refine_fixed
from gmlm.decoding.options import (
    MAX_TOKENS_DEFAULT,
    OPTIONS,
    DecodingOptions,
    Precision,
    RefinementOptions,
    changed_fields,
    decoding_options,
    rows_per_sentence,
)
from gmlm.decoding.refinement import (
    PaddingStats,
    candidate_lengths,
    refine,
)
from gmlm.errors import GmlmError
from gmlm.models import AutoregressiveModel, ModelKind, PadirModel
from gmlm.models.padir import PadirEncoderOutput
from gmlm.nn.config import ModelConfig
from gmlm.translation.language_check import Flag, LanguageCheck, check_lines, check_mode
from gmlm.translation.precision import at_precision, check_precision

OverLengthPolicy = Literal["error", "split", "report"]

# Bytes of encoder states PaDIR's length pass keeps at once under a token budget: a window
# of this many bytes' worth of sentences (fp32 states, padded) is encoded, sorted by its
# predicted lengths and decoded before the next (see Translator._batches).
PLAN_BYTES = 64 << 20


class Planned(NamedTuple):
    """What PaDIR's length pass found for a batch: the lengths to decode (B, length_beam),
    and the encoding of its sources."""

    lengths: Tensor
    encoded: PadirEncoderOutput


# Where --over-length split cuts a line, in order: after sentence-final punctuation (Latin
# punctuation before a space, so "3.5" stays whole; CJK punctuation anywhere), then after
# clause punctuation, then between words. Each keeps its punctuation.
SENTENCE_BREAK = re.compile(r"(?<=[.!?])\s+|(?<=[。！？])\s*")
CLAUSE_BREAK = re.compile(r"(?<=[,;:])\s+|(?<=[，；：、])\s*")
WORD_BREAK = re.compile(r"\s+")


class Translator:
    """A model of `kind` ("ar" or "padir") with its tokenizer; `config` defaults to the
    model's own. The model is put in eval mode and stays on its device. `defaults`: decoding
    settings that replace the options class's defaults (a checkpoint's decoding.json, see
    :mod:`gmlm.checkpoint.decoding_defaults`); explicit settings still win. `cuda_graphs`:
    the model runs by CUDA graphs (see the module docstring; it must be on a GPU).
    `languages`: what it translates, as its checkpoint records it (:func:`load` reads it);
    :meth:`translate` checks its input against the source language
    (:mod:`gmlm.translation.language_check`; unknown: not checked). `fixed_shapes`:
    PaDIR decodes at fixed shapes (see the module docstring); None: on a CUDA device."""

    def __init__(
        self,
        kind: ModelKind,
        model: AutoregressiveModel | PadirModel,
        tokenizer: Tokenizer,
        config: ModelConfig | None = None,
        defaults: dict[str, Any] | None = None,
        cuda_graphs: bool | None = None,
        languages: Languages = NOT_GIVEN,
        fixed_shapes: bool | None = None,
    ) -> None:
        expected = {"ar": AutoregressiveModel, "padir": PadirModel}.get(kind)
        if expected is None:
            raise GmlmError(f"unknown model kind {kind!r}; expected 'ar' or 'padir'")
        if not isinstance(model, expected):
            raise GmlmError(
                f"kind={kind!r} needs a {expected.__name__}, got {type(model).__name__}"
            )
        config = config or model.config
        if tokenizer.vocab_size != config.vocab_size:
            raise GmlmError(
                f"the tokenizer has {tokenizer.vocab_size} pieces but the model's vocabulary "
                f"has {config.vocab_size}; they do not belong together"
            )
        self.kind: ModelKind = kind
        self.languages = languages
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.config = config
        self._copies: dict[str, AutoregressiveModel | PadirModel] = {}
        self._graphed: dict[str, AutoregressiveModel | PadirModel] = {}
        # Row-positions of every PaDIR pass so far, and how many were padding (the cost that
        # grouping candidates by length saves; `gmlm translate --timing` reports it).
        self.padding = PaddingStats()
        on_gpu = self.device.type == "cuda"
        self.cuda_graphs = on_gpu and kind == "padir" if cuda_graphs is None else cuda_graphs
        self.fixed_shapes = on_gpu if fixed_shapes is None else fixed_shapes
        if self.cuda_graphs and not on_gpu:
            raise GmlmError(
                f"CUDA graphs need a model on a CUDA device, but it is on {self.device}; use "
                '--device cuda (Python: gmlm.load(..., device="cuda")), or leave them out'
            )
        self.defaults: dict[str, Any] = dict(defaults or {})
        # The options objects `options` returned (by id, while they live): passed back, e.g.
        # to translate, they are used as they are (a variant with length_shift=0 stays 0).
        self._issued: weakref.WeakValueDictionary[int, DecodingOptions] = (
            weakref.WeakValueDictionary()
        )
        decoding_options(kind, config, None, self.defaults)  # fail here, not at first use

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def describe(self) -> str:
        """What this model is and translates, for messages: "padir model, languages de-en,
        as its meta.json records"."""
        return f"{self.kind} model, languages {self.languages.describe()}"

    def model_at(self, precision: Precision) -> AutoregressiveModel | PadirModel:
        """The model at `precision`: the fp32 model itself, or its bf16 or int8 copy, made on
        first use and kept (see :mod:`gmlm.translation.precision`); with cuda_graphs, its
        graphed copy (:func:`gmlm.decoding.cuda_graphs.graphed`), also kept."""
        check_precision(precision)
        model = self.model
        if precision != "fp32":
            if precision not in self._copies:
                self._copies[precision] = at_precision(self.model, precision)
            model = self._copies[precision]
        if not self.cuda_graphs:
            return model
        if precision not in self._graphed:
            self._graphed[precision] = graphed(model)
        return self._graphed[precision]

    def cuda_graph_count(self) -> int:
        """How many CUDA graphs (encoder and decoder shapes) the graphed copies hold so far."""
        return graph_count(list(self._graphed.values()))

    def options(
        self, options: DecodingOptions | None = None, /, **overrides: Any
    ) -> DecodingOptions:
        """The decoding options of this model's kind: `options` (default: its class's
        defaults) with this translator's `defaults` in place of the class defaults it keeps,
        then the field overrides applied (None keeps a value), checked and validated against
        the model (see :func:`gmlm.decoding.options.decoding_options`). So an options object
        and keyword settings both keep a checkpoint's decoding.json where they set nothing
        else; to decode with a class default the checkpoint replaces, name it
        (``length_shift=0``). Options this method returned are used as they are.

        Options or a setting of the other kind are a :class:`GmlmError` that names this
        checkpoint's kind; an unknown name is one that lists the valid names.
        """
        fresh = options is None or (
            isinstance(options, OPTIONS[self.kind]) and self._issued.get(id(options)) is not options
        )
        if self.defaults and fresh:
            chosen = {} if options is None else changed_fields(options)
            options = decoding_options(self.kind, self.config, None, self.defaults | chosen)
        resolved = decoding_options(self.kind, self.config, options, overrides)
        self._issued[id(resolved)] = resolved
        return resolved

    def translate(
        self,
        sentences: Iterable[str],
        options: DecodingOptions | None = None,
        *,
        batch_size: int | None = None,
        max_tokens: int | None = None,
        seed: int = 0,
        precision: Precision = "fp32",
        on_over_length: OverLengthPolicy = "error",
        origin: str = "input",
        check_language: LanguageCheck = "warn",
        **overrides: Any,
    ) -> list[str]:
        """Detokenized translations of raw `sentences` (a list, or any iterable, of str), one
        per sentence, in order.

        max_tokens, batch_size: a batch's padded decoder row-positions and its sentences at
        most (see the module docstring); neither: max_tokens=MAX_TOKENS_DEFAULT.
        seed: PaDIR's initial random tokens (see the module docstring).
        precision: "fp32", "bf16" (bf16 weights and activations) or "int8" (dynamically
        quantised Linear layers, CPU only); see the module docstring.
        on_over_length: "error", "split" or "report" (see the module docstring).
        origin: names the input (a file) in error messages; lines are counted from 1.
        check_language: lines with no letters, or confidently in another language than the
        checkpoint's source language (:mod:`gmlm.translation.language_check`; a translator
        whose languages are not known is not checked): "warn" translates them and names them
        in a :class:`~gmlm.translation.language_check.LanguageWarning`, "strict" translates
        nothing and raises a :class:`~gmlm.translation.language_check.LanguageCheckError` (a
        GmlmError) that names them, "off" does not check.
        options, overrides: the decoding settings, an options object of this model's kind
        and/or overrides of its fields by name, e.g. ``steps=10`` (see :meth:`options`).
        """
        texts = _sentence_list(sentences)
        check_mode(check_language)
        if "bf16" in overrides:
            raise GmlmError(
                f'bf16={overrides["bf16"]!r} is now precision="bf16" (bf16 weights and '
                'activations), or precision="fp32"'
            )
        for name, value, tp in (("seed", seed, int), ("origin", origin, str)):
            check_value(value, tp, name)
        batch_size, max_tokens = batch_limits(batch_size, max_tokens)
        SEED.check(seed, "seed")
        check_precision(precision)
        options = self.options(options, **overrides)
        self.check_language(texts, check_language, origin, stacklevel=2)
        segments, owners = self._segments(texts, on_over_length, origin)
        outputs = self.translate_ids(
            segments,
            options,
            batch_size=batch_size,
            max_tokens=max_tokens,
            seed=seed,
            precision=precision,
        )
        pieces: list[list[str]] = [[] for _ in texts]
        for owner, ids in zip(owners, outputs, strict=True):
            pieces[owner].append(self.text(ids))
        translations = [" ".join(p for p in parts if p) for parts in pieces]
        warn_if_all_empty(translations, set(owners), options, origin)
        return translations

    def check_language(
        self,
        sentences: Sequence[str],
        mode: LanguageCheck = "warn",
        origin: str = "input",
        stacklevel: int = 1,
    ) -> list[Flag]:
        """The lines of `sentences` that the input language check flags against this
        model's source language (none where its languages are not known), warned about or
        refused by `mode` as :meth:`translate`'s check_language; `stacklevel`: the frame
        a warning names, 1 the caller of this method."""
        pair = self.languages.pair
        source = None if pair is None else pair[0]
        return check_lines(sentences, source, mode, origin, stacklevel=stacklevel + 1)

    def text(self, ids: Sequence[int]) -> str:
        """Detokenized output ids on one line (byte-fallback pieces can spell a line break)."""
        return " ".join(self.tokenizer.decode(ids).splitlines())

    @torch.inference_mode()
    def translate_ids(
        self,
        sources: Sequence[Sequence[int]],
        options: DecodingOptions,
        *,
        batch_size: int | None = None,
        max_tokens: int | None = None,
        seed: int = 0,
        precision: Precision = "fp32",
    ) -> list[list[int]]:
        """Output ids (no EOS) of source ids (no EOS, each non-empty and within
        max_source_len - 1), in order; the best hypothesis of each sentence.

        Sources are decoded widest first in batches bounded by `max_tokens` and/or
        `batch_size` (see the module docstring). PaDIR's initial tokens of a source are keyed
        by `seed` and its ids, whatever its batch (see the module docstring). `precision`:
        see :meth:`translate`.
        """
        model = self.model_at(precision)
        batch_size, max_tokens = batch_limits(batch_size, max_tokens)
        outputs: list[list[int]] = [[] for _ in sources]
        for batch, planned in self._batches(model, sources, options, batch_size, max_tokens):
            checkpoint()  # between batches too (gmlm.decoding.cancel)
            src = self.source_tensor([sources[i] for i in batch])
            decoded = self._decode(model, src, options, seed, planned)
            for i, ids in zip(batch, decoded, strict=True):
                outputs[i] = ids
        return outputs

    def _batches(
        self,
        model: AutoregressiveModel | PadirModel,
        sources: Sequence[Sequence[int]],
        options: DecodingOptions,
        batch_size: int | None,
        max_tokens: int | None,
    ) -> Iterator[tuple[list[int], Planned | None]]:
        """The batches (indices of `sources`) in decoding order, widest first (see the module
        docstring), each with what PaDIR's length pass found for it under a token budget
        (else None)."""
        rows = rows_per_sentence(options)
        by_source = sorted(range(len(sources)), key=lambda i: -len(sources[i]))
        if not isinstance(options, RefinementOptions) or max_tokens is None:
            widths = [len(sources[i]) + 1 for i in by_source]
            for cut in cut_batches(widths, [rows] * len(widths), max_tokens, batch_size):
                yield [by_source[j] for j in cut], None
            return
        assert isinstance(model, PadirModel)
        # Windows of sentences of similar source length, each with its encoder states kept
        # for its batches (so the encoder runs once per sentence) within PLAN_BYTES.
        budget = max(1, PLAN_BYTES // (4 * self.config.d_model))
        start = 0
        while start < len(by_source):
            end = start + max(1, budget // (len(sources[by_source[start]]) + 1))
            window = by_source[start:end]
            start = end
            texts = [sources[i] for i in window]
            encoded, lengths = self._length_pass(model, texts, options, max_tokens)
            candidates = candidate_lengths(lengths, options, self.config)
            widths = candidates.max(1).values.tolist()
            local = sorted(range(len(window)), key=lambda j: -widths[j])  # stable: by source
            for cut in cut_batches(
                [widths[j] for j in local], [rows] * len(local), max_tokens, batch_size
            ):
                picked = [local[k] for k in cut]
                index = torch.tensor(picked, device=encoded.memory.device)
                width = max(len(sources[window[j]]) for j in picked) + 1
                mine = encoded.select(index)
                mine = PadirEncoderOutput(
                    mine.memory[:, :width], mine.padding_mask[:, :width], mine.length_state
                )
                yield [window[j] for j in picked], Planned(lengths[picked], mine)

    def _length_pass(
        self,
        model: PadirModel,
        sources: Sequence[Sequence[int]],
        options: RefinementOptions,
        max_tokens: int,
    ) -> tuple[PadirEncoderOutput, Tensor]:
        """The encoding of `sources` (longest first), padded to the first's length, and the
        (N, length_beam) lengths PaDIR decodes for them, on the CPU (its length head's top
        length_beam plus length_shift); encoded in batches of at most `max_tokens` padded
        source tokens."""
        widths = [len(ids) + 1 for ids in sources]
        lengths = torch.zeros(len(sources), options.length_beam, dtype=torch.long)
        parts = []
        for cut in cut_batches(widths, [1] * len(widths), max_tokens, None):
            src = self.source_tensor(sources[cut.start : cut.stop])
            encoded = model.encode(src)
            top = model.predict_lengths(encoded, options.length_beam) + options.length_shift
            lengths[cut.start : cut.stop] = top.cpu()
            pad = widths[0] - src.shape[1]
            parts.append(
                (
                    torch.nn.functional.pad(encoded.memory, (0, 0, 0, pad)),
                    torch.nn.functional.pad(encoded.padding_mask, (0, pad), value=True),
                    encoded.length_state,
                )
            )
        # copies (torch.cat), as they must be: a graphed encoder reuses its output buffers
        memory, mask, state = (torch.cat(tensors) for tensors in zip(*parts, strict=True))
        return PadirEncoderOutput(memory, mask, state), lengths

    def _decode(
        self,
        model: AutoregressiveModel | PadirModel,
        src: Tensor,
        options: DecodingOptions,
        seed: int,
        planned: Planned | None,
    ) -> list[list[int]]:
        if isinstance(options, RefinementOptions):
            assert isinstance(model, PadirModel)
            lengths, encoded = (None, None) if planned is None else planned
            decode = refine_fixed if self.fixed_shapes else refine
            refined = decode(model, src, options, seed, lengths, self.padding, encoded)
            return [r.tokens for r in refined]
        assert isinstance(model, AutoregressiveModel)
        if options.beam == 1:
            return [h.tokens for h in greedy_search(model, src, options)]
        return [nbest[0].tokens for nbest in beam_search(model, src, options)]

    def source_tensor(self, rows: Sequence[Sequence[int]]) -> Tensor:
        """(B, S) ids + EOS, right-padded, on the model's device: the encoder input of source
        ids (no EOS) as decoding builds it, for analyses that run the model themselves."""
        width = max(len(r) for r in rows) + 1
        src = torch.full((len(rows), width), self.config.pad_id, dtype=torch.long)
        for i, ids in enumerate(rows):
            src[i, : len(ids) + 1] = torch.tensor([*ids, self.config.eos_id])
        return src.to(self.device)

    def _segments(
        self, sentences: Sequence[str], policy: OverLengthPolicy, origin: str
    ) -> tuple[list[list[int]], list[int]]:
        """The id sequences to decode and the sentence each belongs to (empty lines have
        none; a split line has several)."""
        if policy not in ("error", "split", "report"):
            raise GmlmError(f"on_over_length={policy!r}: choose error, split or report")
        limit = self.config.max_source_len
        encoded = encode_inputs(
            self.tokenizer,
            sentences,
            limit,
            on_over_length="error" if policy == "error" else "report",
            origin=origin,
        )
        over = set(encoded.over_length)
        segments: list[list[int]] = []
        owners: list[int] = []
        for i, ids in enumerate(encoded.ids):
            if i in over and policy == "report":
                continue
            parts = self.split(sentences[i], limit) if i in over else [ids]
            for part in parts:
                if part:
                    segments.append(part)
                    owners.append(i)
        if over and policy == "report":
            lines = sorted(over)
            shown = ", ".join(f"line {i + 1} ({encoded.lengths[i]} tokens)" for i in lines[:SHOWN])
            more = f" and {len(lines) - SHOWN} more" if len(lines) > SHOWN else ""
            warnings.warn(
                f"{origin}: {len(over)} sentence(s) longer than the model's max_source_len="
                f"{limit} tokens (EOS included) left untranslated (empty output): {shown}{more}",
                stacklevel=3,
            )
        return segments, owners

    def split(self, line: str, limit: int) -> list[list[int]]:
        """Ids of the pieces of `line` (raw text) that --over-length split translates, in
        order, each within `limit` tokens with EOS, together every token of the line: one
        piece per sentence, and a sentence still too long cut at clause punctuation, then
        between words (consecutive clauses or words packed while they fit), then between
        tokens (a word longer than the limit)."""
        text = normalize(line)
        pieces: list[list[int]] = []
        for start, end in _spans(text, SENTENCE_BREAK):
            pieces.extend(self._fit(text[start:end], limit, (CLAUSE_BREAK, WORD_BREAK)))
        return pieces

    def _fit(self, text: str, limit: int, breaks: Sequence[re.Pattern[str]]) -> list[list[int]]:
        """Ids of `text` in pieces of at most `limit` - 1 tokens: cut at the first of `breaks`
        (its parts packed greedily while they fit), each part too long cut by the next."""
        ids = self.tokenizer.encode(text)
        if len(ids) < limit:
            return [ids] if ids else []
        if not breaks:  # one "word" longer than the limit: consecutive runs of its tokens
            return [ids[i : i + limit - 1] for i in range(0, len(ids), limit - 1)]
        spans = _spans(text, breaks[0])
        counts = [len(self.tokenizer.encode(text[start:end])) for start, end in spans]
        pieces: list[list[int]] = []
        first, total = 0, 0
        for i, count in enumerate(counts):
            if i > first and total + count >= limit:
                pieces.extend(self._fit(text[spans[first][0] : spans[i - 1][1]], limit, breaks[1:]))
                first, total = i, 0
            total += count
        pieces.extend(self._fit(text[spans[first][0] : spans[-1][1]], limit, breaks[1:]))
        return pieces


class EmptyTranslationsWarning(UserWarning):
    """Every line that was decoded got an empty translation (:func:`warn_if_all_empty`)."""


def warn_if_all_empty(
    translations: Sequence[str], decoded: set[int], options: DecodingOptions, origin: str
) -> None:
    """Warn (EmptyTranslationsWarning) when every line that was decoded (the indices
    `decoded`) got an empty translation: then the settings, not the input, are the likely
    cause, and a file of empty lines would otherwise pass for a result."""
    if not decoded or any(translations[i] for i in decoded):
        return
    changed = " ".join(f"{k}={v}" for k, v in changed_fields(options).items()) or "the defaults"
    warnings.warn(
        f"{origin}: every one of the {len(decoded)} non-empty line(s) was translated to an "
        f"empty line; the decoding settings ({changed}) likely leave no room for an output: "
        "check the length settings (length_shift, max_length, max_len_a, max_len_b) and the "
        "checkpoint",
        EmptyTranslationsWarning,
        stacklevel=3,
    )


def batch_limits(batch_size: int | None, max_tokens: int | None) -> tuple[int | None, int | None]:
    """(batch_size, max_tokens), each checked; neither given: (None, MAX_TOKENS_DEFAULT)."""
    for name, value, limits in (
        ("batch_size", batch_size, BATCH_SIZE),
        ("max_tokens", max_tokens, MAX_TOKENS),
    ):
        if value is not None:
            check_value(value, int, name)
            limits.check(value, name)
    if batch_size is None and max_tokens is None:
        return None, MAX_TOKENS_DEFAULT
    return batch_size, max_tokens


def _spans(text: str, separator: re.Pattern[str]) -> list[tuple[int, int]]:
    """(start, end) of the non-blank parts of `text` between matches of `separator`."""
    spans, start = [], 0
    for match in separator.finditer(text):
        if match.start() > start:
            spans.append((start, match.start()))
        start = max(start, match.end())
    if start < len(text):
        spans.append((start, len(text)))
    return [(a, b) for a, b in spans if text[a:b].strip()]


def _sentence_list(sentences: Any) -> list[str]:
    """`sentences` as a list, each checked to be a str (one string would be taken as a list
    of its characters, each translated on its own)."""
    if isinstance(sentences, (str, bytes)):
        raise GmlmError(
            f"sentences is a single {type(sentences).__name__}; pass a list of sentences, "
            'e.g. translate(["Ein Hund."]) for one'
        )
    if not isinstance(sentences, Iterable):
        raise GmlmError(f"sentences: expected a list of str, got {type(sentences).__name__}")
    items = list(sentences)
    for i, item in enumerate(items):
        if not isinstance(item, str):
            raise GmlmError(f"sentences[{i}]: expected a str, got {type(item).__name__}")
        try:
            item.encode("utf-8")
        except UnicodeEncodeError as err:
            raise GmlmError(
                f"sentences[{i}]: holds {item[err.start]!r} at character {err.start}, a lone "
                "surrogate, which is not text (a string decoded with errors='surrogateescape' "
                "or split inside a surrogate pair); decode the input as UTF-8 or drop it"
            ) from None
    return items


def resolve_device(name: str) -> torch.device:
    """ "auto" (CUDA when available, else CPU), "cpu", "cuda" or "cuda:N"."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cpu" or re.fullmatch(r"cuda(:\d+)?", name):
        if name.startswith("cuda") and not torch.cuda.is_available():
            raise GmlmError(f"device {name!r} requested but CUDA is not available here")
        return torch.device(name)
    raise GmlmError(f"device {name!r}: choose auto, cpu, cuda or cuda:N")


def load(
    checkpoint: str | Path,
    device: str = "auto",
    cuda_graphs: bool | None = None,
    fixed_shapes: bool | None = None,
) -> Translator:
    """A :class:`Translator` for a checkpoint folder (or a run folder's best checkpoint);
    `cuda_graphs`, `fixed_shapes`: see :class:`Translator` (None: on for PaDIR on a GPU)."""
    loaded = load_for_inference(checkpoint, device=resolve_device(device))
    model = loaded.model
    if not isinstance(model, (AutoregressiveModel, PadirModel)):
        raise GmlmError(f"{checkpoint}: holds a {type(model).__name__}, not a translation model")
    return Translator(
        loaded.kind,
        model,
        loaded.tokenizer,
        loaded.model_config,
        loaded.decoding,
        cuda_graphs,
        loaded.languages,
        fixed_shapes,
    )


__all__ = ["OverLengthPolicy", "Translator", "batch_limits", "load", "resolve_device"]
