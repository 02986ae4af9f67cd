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

On a GPU, decoding runs at fixed shapes (``fixed_shapes``): PaDIR
(:mod:`gmlm.decoding.fixed`) every candidate in every pass at bucketed widths and batch sizes,
with no host sync inside the passes, so the host queues a whole decode without waiting; AR
search (:mod:`gmlm.decoding.autoregressive_fixed`) on a preallocated cache at a bucketed
length, with no host sync inside a step and a look at the device every few steps. And the
encoder, PaDIR's passes and each AR step replay CUDA graphs (``cuda_graphs``,
:mod:`gmlm.decoding.cuda_graphs`; the first batch of each new bucket pays for its capture).
Both default to on on a CUDA device and off elsewhere (on a CPU the eager loops, which retire
finished candidates and sentences, are faster); the outputs are the same up to float
rounding. With ``fixed_shapes=False`` an AR model's graphs are one per batch shape and step.

A PaDIR translator can have an autoregressive translator of the same vocabulary rescore its
candidates before the final choice (:meth:`Translator.rescore_with`,
:mod:`gmlm.decoding.rescoring`): each candidate's score gains ``weight`` times that model's
mean log-probability per token, at the cost of its encoder and one decoder pass over the
candidates. Rescoring decodes eagerly (not at fixed shapes) and without CUDA graphs.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from gmlm.checkpoint.languages import NOT_GIVEN, Languages
from gmlm.checkpoint.loading import load_for_inference
from gmlm.config import SEED, check_value
from gmlm.data.tokenizer import Tokenizer
from gmlm.decoding.autoregressive import beam_search, greedy_search
from gmlm.decoding.autoregressive_fixed import search_fixed
from gmlm.decoding.cancel import checkpoint
from gmlm.decoding.fixed import refine_fixed
from gmlm.decoding.options import (
    RESCORE_WEIGHT,
    DecodingOptions,
    Precision,
    RefinementOptions,
)
from gmlm.decoding.refinement import PaddingStats, refine
from gmlm.decoding.rescoring import rescorer
from gmlm.errors import GmlmError
from gmlm.models import AutoregressiveModel, ModelKind, PadirModel
from gmlm.nn.config import ModelConfig
from gmlm.translation.batch_plan import Planned, batch_limits, plan_batches, source_tensor
from gmlm.translation.language_check import Flag, LanguageCheck, check_lines, check_mode
from gmlm.translation.lines import (
    OverLengthPolicy,
    segments,
    sentence_list,
    split_line,
    warn_if_all_empty,
)
from gmlm.translation.model_copies import ModelCopies
from gmlm.translation.option_resolution import OptionResolver
from gmlm.translation.precision import check_precision
from gmlm.translation.word_repeats import drop_repeated_words

Progress = Callable[[int, int], None]
"""Called after each batch with the sentences decoded so far and the sentences in all."""


class Translator:
    """A model of `kind` ("ar" or "padir") with its tokenizer; `config` defaults to the
    model's own. The model is put in eval mode and stays on its device. `defaults`: decoding
    settings that replace the options class's defaults (a checkpoint's decoding.json, see
    :mod:`gmlm.checkpoint.decoding_defaults`); explicit settings still win. `cuda_graphs`:
    the model runs by CUDA graphs (see the module docstring; it must be on a GPU).
    `languages`: what it translates, as its checkpoint records it (:func:`load` reads it);
    :meth:`translate` checks its input against the source language
    (:mod:`gmlm.translation.language_check`; unknown: not checked). `fixed_shapes`:
    decoding runs at fixed shapes (see the module docstring); None: on a CUDA device."""

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
        # Row-positions of every PaDIR pass so far, and how many were padding (the cost that
        # grouping candidates by length saves; `gmlm translate --timing` reports it).
        self.padding = PaddingStats()
        on_gpu = self.device.type == "cuda"
        self.cuda_graphs = on_gpu if cuda_graphs is None else cuda_graphs
        self.fixed_shapes = on_gpu if fixed_shapes is None else fixed_shapes
        if self.cuda_graphs and not on_gpu:
            raise GmlmError(
                f"CUDA graphs need a model on a CUDA device, but it is on {self.device}; use "
                '--device cuda (Python: gmlm.load(..., device="cuda")), or leave them out'
            )
        self.copies = ModelCopies(self.model, self.cuda_graphs)
        self.resolver = OptionResolver(kind, config, defaults or {})
        self.rescoring: tuple[Translator, float] | None = None

    def rescore_with(self, other: Translator | None, weight: float = 1.0) -> None:
        """Have the autoregressive translator `other` rescore this PaDIR translator's
        candidates from now on: each candidate's score gains `weight` (within
        RESCORE_WEIGHT) times `other`'s mean log-probability per token of its output
        (:mod:`gmlm.decoding.rescoring`); None stops rescoring. `other` must have the same
        tokenizer, special ids and device, limits at least this model's, the same language
        pair where both record theirs, and neither may run
        by CUDA graphs (rescoring decodes eagerly). It decodes at the precision of each
        translation."""
        if other is None:
            self.rescoring = None
            return
        weight = check_value(weight, float, "the rescoring weight")
        problem = RESCORE_WEIGHT.problem(weight)
        if problem:
            raise GmlmError(
                f"the rescoring weight {weight}{'' if problem[0] == ':' else ' '}{problem}"
            )
        problems = rescoring_problems(self, other)
        if problems:
            raise GmlmError(
                f"cannot rescore a {self.kind} model with a {other.kind} model: {problems}"
            )
        self.rescoring = (other, float(weight))

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def describe(self) -> str:
        """What this model is and translates, for messages: "padir model, languages de-en,
        as its meta.json records"."""
        return f"{self.kind} model, languages {self.languages.describe()}"

    @property
    def defaults(self) -> dict[str, Any]:
        """The checkpoint's decoding settings that replace the options class's defaults."""
        return self.resolver.defaults

    def model_at(self, precision: Precision) -> AutoregressiveModel | PadirModel:
        """The model at `precision`: the fp32 model itself, or its bf16 or int8 copy, made on
        first use and kept (see :mod:`gmlm.translation.precision`); with cuda_graphs, its
        graphed copy (:func:`gmlm.decoding.cuda_graphs.graphed`), also kept."""
        return self.copies.at(precision)

    def cuda_graph_count(self) -> int:
        """How many CUDA graphs (encoder and decoder shapes) the graphed copies hold so far."""
        return self.copies.graph_count()

    def cuda_graph_capture_seconds(self) -> float:
        """The seconds translations have waited for CUDA graph captures so far (a new batch
        shape's first translation captures its graphs)."""
        return self.copies.capture_seconds()

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
        return self.resolver.resolve(options, overrides)

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
        progress: Progress | None = None,
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
        texts = sentence_list(sentences)
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
        found, owners = segments(
            self.tokenizer, texts, self.config.max_source_len, on_over_length, origin
        )
        outputs = self.translate_ids(
            found,
            options,
            batch_size=batch_size,
            max_tokens=max_tokens,
            seed=seed,
            precision=precision,
            progress=progress,
        )
        pieces: list[list[str]] = [[] for _ in texts]
        for owner, ids in zip(owners, outputs, strict=True):
            pieces[owner].append(self.text(ids, options))
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

    def text(self, ids: Sequence[int], options: DecodingOptions | None = None) -> str:
        """Detokenized output ids, on one line (:meth:`gmlm.data.Tokenizer.decode`), without
        the word repeats PaDIR's final dedup drops where `options`, those the ids were decoded
        with (default: this translator's), ask for it (`dedup_words`:
        :mod:`gmlm.translation.word_repeats`)."""
        text = self.tokenizer.decode(ids)
        options = self.options() if options is None else options
        if isinstance(options, RefinementOptions) and options.dedup and options.dedup_words:
            return drop_repeated_words(text, options.stutter_ngram)
        return text

    def translate_lines(
        self,
        lines: Sequence[Sequence[int]],
        options: DecodingOptions | None = None,
        *,
        batch_size: int | None = None,
        max_tokens: int | None = None,
        seed: int = 0,
        precision: Precision = "fp32",
    ) -> list[str]:
        """Detokenized translations of lines encoded already (ids, no EOS, each within
        max_source_len - 1 as :func:`gmlm.data.lengths.encode_inputs` encodes a line; an
        empty line gives ""): what :meth:`translate` does after its checks, for a caller that
        encoded the text itself (`gmlm serve`, which checks a request's lines as it comes)."""
        options = self.options(options)
        decoded = [i for i, ids in enumerate(lines) if ids]
        outputs = self.translate_ids(
            [lines[i] for i in decoded],
            options,
            batch_size=batch_size,
            max_tokens=max_tokens,
            seed=seed,
            precision=precision,
        )
        texts = [""] * len(lines)
        for i, ids in zip(decoded, outputs, strict=True):
            texts[i] = self.text(ids, options)
        return texts

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
        progress: Progress | None = None,
    ) -> list[list[int]]:
        """Output ids (no EOS) of source ids (no EOS, each non-empty and within
        max_source_len - 1), in order; the best hypothesis of each sentence.

        Sources are decoded widest first in batches bounded by `max_tokens` and/or
        `batch_size` (see the module docstring). PaDIR's initial tokens of a source are keyed
        by `seed` and its ids, whatever its batch (see the module docstring). `precision`,
        `progress`: see :meth:`translate`.
        """
        model = self.model_at(precision)
        batch_size, max_tokens = batch_limits(batch_size, max_tokens)
        outputs: list[list[int]] = [[] for _ in sources]
        planned_batches = plan_batches(
            model, self.config, sources, options, batch_size, max_tokens, self.device
        )
        done = 0
        for batch, planned in planned_batches:
            checkpoint()  # between batches too (gmlm.decoding.cancel)
            src = self.source_tensor([sources[i] for i in batch])
            decoded = self._decode(model, src, options, seed, planned, precision)
            for i, ids in zip(batch, decoded, strict=True):
                outputs[i] = ids
            done += len(batch)
            if progress is not None:
                progress(done, len(sources))
        return outputs

    def _decode(
        self,
        model: AutoregressiveModel | PadirModel,
        src: Tensor,
        options: DecodingOptions,
        seed: int,
        planned: Planned | None,
        precision: Precision,
    ) -> list[list[int]]:
        if isinstance(options, RefinementOptions):
            assert isinstance(model, PadirModel)
            lengths, encoded = (None, None) if planned is None else planned
            if self.rescoring is not None:
                other, weight = self.rescoring
                scorer = other.model_at(precision)
                assert isinstance(scorer, AutoregressiveModel)
                rescore = rescorer(scorer, src, options, weight)
                refined = refine(model, src, options, seed, lengths, self.padding, encoded, rescore)
                return [r.tokens for r in refined]
            decode = refine_fixed if self.fixed_shapes else refine
            refined = decode(model, src, options, seed, lengths, self.padding, encoded)
            return [r.tokens for r in refined]
        assert isinstance(model, AutoregressiveModel)
        if self.fixed_shapes:
            return [nbest[0].tokens for nbest in search_fixed(model, src, options)]
        if options.beam == 1:
            return [h.tokens for h in greedy_search(model, src, options)]
        return [nbest[0].tokens for nbest in beam_search(model, src, options)]

    def source_tensor(self, rows: Sequence[Sequence[int]]) -> Tensor:
        """(B, S) ids + EOS, right-padded, on the model's device: the encoder input of source
        ids (no EOS) as decoding builds it, for analyses that run the model themselves."""
        return source_tensor(self.config, rows, self.device)

    def split(self, line: str, limit: int) -> list[list[int]]:
        """Ids of the pieces of `line` that --over-length split translates
        (:func:`gmlm.translation.lines.split_line`)."""
        return split_line(self.tokenizer, line, limit)


def rescoring_problems(translator: Translator, other: Translator) -> str:
    """Why `other` cannot rescore `translator`'s candidates ("" when it can)."""
    if translator.kind != "padir" or other.kind != "ar":
        return "the translator rescored must be PaDIR and the rescoring one autoregressive"
    if translator.cuda_graphs or other.cuda_graphs:
        return "rescoring decodes eagerly: load both without CUDA graphs (--no-cuda-graphs)"
    pairs = (translator.languages.pair, other.languages.pair)
    if None not in pairs and pairs[0] != pairs[1]:
        return (
            f"they translate different language pairs ({translator.languages.name}, "
            f"{other.languages.name}): the rescoring model must score translations in the "
            "PaDIR model's direction"
        )
    if translator.device != other.device:
        return f"they are on different devices ({translator.device}, {other.device})"
    if translator.tokenizer != other.tokenizer:
        return (
            f"their tokenizers differ ({translator.tokenizer!r}, {other.tokenizer!r}): "
            "rescoring reads PaDIR's ids, so they must be the same SentencePiece model"
        )
    mine, theirs = translator.config, other.config
    names = ("pad_id", "bos_id", "eos_id", "vocab_size")
    differ = [n for n in names if getattr(mine, n) != getattr(theirs, n)]
    if differ:
        return f"their {', '.join(differ)} differ"
    for limit in ("max_source_len", "max_target_len"):
        if getattr(theirs, limit) < getattr(mine, limit):
            return (
                f"the rescoring model's {limit} {getattr(theirs, limit)} is below the "
                f"PaDIR model's {getattr(mine, limit)}"
            )
    return ""


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
    `cuda_graphs`, `fixed_shapes`: see :class:`Translator` (None: on on a GPU)."""
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
