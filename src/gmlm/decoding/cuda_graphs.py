"""CUDA graphs for decoding on a GPU: the encoder and each decoder pass replayed as one
graph launch each.

At batch 1 a GPU spends most of a decoder pass launching kernels (hundreds per pass, each a
few microseconds of work); a CUDA graph records a pass's kernels once and replays them with
one launch. :func:`graphed` gives a model whose ``encode``, and ``decode`` (PaDIR: one
refinement pass) or ``decode_step`` (AR: one step on the key/value cache), replay graphs;
everything else (the cross-attention projections, the search, the host-side bookkeeping)
stays eager, so the decoding rules are those of :mod:`gmlm.decoding.refinement` and
:mod:`gmlm.decoding.autoregressive` unchanged.

A graph has fixed shapes and addresses. Each runner keeps one graph per *signature* and
copies a call's tensors into that graph's static input buffers before the replay:

* encoder: (rows rounded up to a bucket of :mod:`gmlm.decoding.buckets`, source width rounded
  up to a multiple of ``multiple``, default 8), the extra rows and positions padding (masked
  keys, outputs cut off); the source's padding mask is made
  and checked eagerly first (the check reads it on the host, which a graph cannot);
* PaDIR pass: (rows, width, source width, dtype), with the hypothesis width and the source
  width each rounded up to a multiple of ``multiple`` (a width is never rounded past the
  model's position table): the extra positions are padding (masked keys; their outputs are
  cut off), so a few graphs cover every sentence. A masked
  key changes no softmax, so the logits equal the eager pass's up to float rounding (the
  wider matrix products may be blocked differently): the same caveat as batching
  (:mod:`gmlm.translation.translator`). The decoder's position information for each padded
  width is made once and kept (the weights of an inference copy never change).
* PaDIR's whole refinement at fixed shapes (:func:`gmlm.decoding.fixed.fixed_passes`, the T
  passes and their bookkeeping: stutter remasking, early stopping and pruning as masks, then
  each sentence's choice of candidate): (rows,
  width, source width rounded up, dtype, K, the options), the rows and width already bucketed by
  the fixed-shape decoder, so a whole decode is the encoder's graph and this one;
* AR search at fixed shapes (:mod:`gmlm.decoding.autoregressive_fixed`, the default on a
  GPU): one graph per (sentences, beams, cache width, source width, dtype, the options), all
  bucketed, replayed once per step on the search's static state, which each replay updates in
  place; the host looks at the state only every few steps;
* AR step of the eager search: (rows, new tokens, cached positions, source width rounded up,
  dtype); the cache length is exact (it is the causal attention's width), so a graph serves
  one step index. The cross-attention memory's buffers are shared by the graphs of one (rows,
  source width), and copied only when the memory changes (once per sentence, not per step).

A signature seen for the first time is captured then (one eager warm-up call on a side
stream, then the capture), which costs far more than a replay: latency measurements warm up
on every timed sentence first (`gmlm bench --cuda-graphs`). All graphs of a runner share one
memory pool, so a replay may overwrite the outputs of any earlier replay of the runner: the
decoding loops consume each call's outputs (the encoding, a pass's logits, a step's new
cache) before the next call, which is all this needs. Calls the graphs do not cover run
eagerly: PaDIR passes that return attention weights or take an encoder output instead of a
projected memory.

``capture=False`` keeps the static buffers and padding but calls the pass directly instead
of replaying a graph: what a graph would compute, on any device (the tests check the
padding on a CPU with it).
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from time import perf_counter
from typing import Any, Generic, TypeVar

import torch
from torch import Tensor

from gmlm.decoding.autoregressive_fixed import FixedSearch, fixed_search_step, run_steps
from gmlm.decoding.buckets import bucket
from gmlm.decoding.cancel import cancellable, checkpoint
from gmlm.decoding.fixed import Passes, fixed_passes
from gmlm.decoding.options import RefinementOptions, SearchOptions
from gmlm.decoding.refinement import Selection
from gmlm.errors import GmlmError
from gmlm.models.autoregressive import AutoregressiveModel, DecoderCache
from gmlm.models.padir import DecoderPositions, PadirEncoderOutput, PadirModel
from gmlm.nn.attention import KVCache
from gmlm.nn.layers import DecoderOutput, EncoderOutput, source_padding_mask

Model = TypeVar("Model", bound=AutoregressiveModel | PadirModel)

MULTIPLE = 8
"""Hypothesis and source widths are rounded up to a multiple of this (see the docstring)."""


def _rounded(width: int, multiple: int) -> int:
    return -(-width // multiple) * multiple


def _put(buffer: Tensor, values: Tensor, pad: int | bool) -> None:
    """Copy `values` (rows, W) into the first W columns of the static `buffer` (rows, W'),
    W <= W', and fill the rest with `pad` (what an earlier, wider call left there goes)."""
    width = values.shape[1]
    buffer[:, :width].copy_(values)
    buffer[:, width:].fill_(pad)


@dataclass
class _Recording:
    """One signature's static inputs, the call that reads them, and its outputs: the graph
    replayed (or, without capture, the call made) by :meth:`run`."""

    inputs: tuple[Tensor, ...]
    call: Callable[[], tuple[Tensor, ...]]
    outputs: tuple[Tensor, ...] = ()
    graph: torch.cuda.CUDAGraph | None = None

    def record(self, capture: bool, pool: Any) -> None:
        if not capture:
            return
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # lazy initialisation happens outside the graph
            self.call()
        torch.cuda.current_stream().wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph, pool=pool):
            self.outputs = self.call()

    def run(self) -> tuple[Tensor, ...]:
        if self.graph is None:
            return self.call()
        self.graph.replay()
        return self.outputs


@dataclass
class _Memory:
    """Static cross-attention buffers (padded source width) shared by a runner's graphs of
    one (rows, width, dtype), and the memory last copied into them."""

    keys: list[Tensor]
    values: list[Tensor]
    padding_mask: Tensor
    source: KVCache | None = field(default=None)

    @classmethod
    def like(cls, memory: KVCache, width: int) -> _Memory:
        def buffer(t: Tensor) -> Tensor:
            return t.new_zeros((*t.shape[:2], width, *t.shape[3:]))

        mask = memory.padding_mask
        assert mask is not None
        return cls(
            [buffer(k) for k in memory.keys],
            [buffer(v) for v in memory.values],
            mask.new_ones((mask.shape[0], width)),
        )

    def load(self, memory: KVCache) -> None:
        """Copy `memory` in (its source positions first, the rest padding), unless it is the
        memory copied last."""
        if self.source is memory:
            return
        mask = memory.padding_mask
        assert mask is not None
        width = mask.shape[1]
        for buffer, tensor in zip(
            (*self.keys, *self.values), (*memory.keys, *memory.values), strict=True
        ):
            buffer[:, :, :width].copy_(tensor)
        _put(self.padding_mask, mask, True)
        self.source = memory

    def cache(self) -> KVCache:
        return KVCache(self.keys, self.values, self.padding_mask)


class _Runner(Generic[Model]):
    """What both runners share: the model, the recordings by signature, one memory pool,
    the memory buffers by (rows, padded source width, dtype), the encoder by graph."""

    def __init__(self, model: Model, capture: bool = True, multiple: int = MULTIPLE) -> None:
        if multiple < 1:
            raise GmlmError(f"multiple={multiple} must be at least 1")
        self.model = model
        self.capture = capture
        self.multiple = multiple
        self.pool = torch.cuda.graph_pool_handle() if capture else None
        self.recordings: dict[tuple[object, ...], _Recording] = {}
        self.memories: dict[tuple[object, ...], _Memory] = {}
        self.capture_seconds = 0.0  # the host's time in captures (the call waiting on them)

    @property
    def graphs(self) -> int:
        """How many signatures have been recorded (graphs captured, with capture)."""
        return len(self.recordings)

    def memory(self, memory: KVCache) -> tuple[_Memory, int]:
        """The static buffers for `memory`, loaded with it, and their padded width."""
        if memory.padding_mask is None:
            raise GmlmError("graphed decoding needs the memory's source padding mask")
        rows, width = memory.padding_mask.shape
        padded = _rounded(width, self.multiple)
        key = (rows, padded, memory.keys[0].dtype)
        if key not in self.memories:
            self.memories[key] = _Memory.like(memory, padded)
        buffers = self.memories[key]
        buffers.load(memory)
        return buffers, padded

    def padded(self, width: int, limit: int) -> int:
        """`width` rounded up to the multiple, at most `limit` (a position table's size)."""
        return max(width, min(_rounded(width, self.multiple), limit))

    def encode(self, src: Tensor) -> EncoderOutput:
        """The model's ``encode`` of src (B, S), by graph (module docstring): B rounded up to
        a bucket (:mod:`gmlm.decoding.buckets`; the extra rows padding, their outputs cut
        off), so batches of every size share a few graphs."""
        config = self.model.config
        mask = source_padding_mask(src, config.pad_id)
        rows, width = src.shape
        padded = self.padded(width, config.max_source_len)
        count = bucket(rows)
        key = ("encode", count, padded)
        recording = self.recording(key, lambda: self._encoder(count, padded, src.device))
        static_src, static_mask = recording.inputs
        _put(static_src[:rows], src, config.pad_id)
        _put(static_mask[:rows], mask, True)
        static_src[rows:].fill_(config.pad_id)
        static_mask[rows:].fill_(True)
        memory, *length_state = recording.run()
        if length_state:
            return PadirEncoderOutput(memory[:rows, :width], mask, length_state[0][:rows])
        return EncoderOutput(memory[:rows, :width], mask)

    def _encoder(self, rows: int, width: int, device: torch.device) -> _Recording:
        src = torch.full((rows, width), self.model.config.pad_id, device=device)
        mask = torch.ones((rows, width), dtype=torch.bool, device=device)

        def call() -> tuple[Tensor, ...]:
            enc = self.model.encode_masked(src, mask)
            if isinstance(enc, PadirEncoderOutput):
                return enc.memory, enc.length_state
            return (enc.memory,)

        return _Recording((src, mask), call)

    def recording(self, key: tuple[object, ...], make: Callable[[], _Recording]) -> _Recording:
        recording = self.recordings.get(key)
        if recording is None:
            started = perf_counter()
            recording = make()
            recording.record(self.capture, self.pool)
            self.recordings[key] = recording
            if self.capture:
                self.capture_seconds += perf_counter() - started
        return recording


class PadirGraphs(_Runner[PadirModel]):
    """``decode`` of a PaDIR model, by padded signature (module docstring). The positions of
    each padded width are the model's own, kept by the model (PadirModel.positions) and held
    by the recording's call while its graph lives."""

    def decode(
        self,
        memory: EncoderOutput | KVCache,
        hyp: Tensor,
        padding_mask: Tensor | None = None,
        return_attention: bool = False,
        positions: DecoderPositions | None = None,
    ) -> DecoderOutput:
        """:meth:`PadirModel.decode` by graph (`positions` are made here, at the padded
        width); eager with `return_attention` or an encoder output."""
        if return_attention or not isinstance(memory, KVCache):
            return self.model.decode(memory, hyp, padding_mask, return_attention, positions)
        if padding_mask is None:
            padding_mask = hyp == self.model.config.pad_id
        rows, width = hyp.shape
        buffers, source_width = self.memory(memory)
        padded = self.padded(width, self.model.config.max_target_len)
        key = (rows, padded, source_width, buffers.keys[0].dtype)
        recording = self.recording(key, lambda: self._recording(buffers, rows, padded))
        static_hyp, static_padding = recording.inputs
        _put(static_hyp, hyp, self.model.config.pad_id)
        _put(static_padding, padding_mask, True)
        (logits,) = recording.run()
        return DecoderOutput(logits[:, :width])

    def _recording(self, buffers: _Memory, rows: int, width: int) -> _Recording:
        device = buffers.padding_mask.device
        hyp = torch.full((rows, width), self.model.config.pad_id, device=device)
        padding = torch.ones((rows, width), dtype=torch.bool, device=device)
        positions = self.model.positions(width, project=True)
        cross = buffers.cache()

        def call() -> tuple[Tensor, ...]:
            out = self.model.decode(cross, hyp, padding_mask=padding, positions=positions)
            return (out.logits,)

        return _Recording((hyp, padding), call)

    def passes(
        self,
        memory: KVCache,
        positions: DecoderPositions,
        initial: Tensor,
        lengths: Tensor,
        length_log_probs: Tensor,
        candidates: int,
        options: RefinementOptions,
    ) -> Passes:
        """:func:`gmlm.decoding.fixed.fixed_passes`, all T passes, their bookkeeping and the
        choice of each sentence's candidate, as
        one graph per signature (candidates' rows and width, padded source width, dtype, K and
        the options): a whole refinement replayed with one launch. `positions` are made in
        the recording, at the same width. Cancellation (gmlm.decoding.cancel) is checked
        before the replay, not between the passes it holds."""
        del positions  # the recording's own, made once
        checkpoint()
        buffers, source_width = self.memory(memory)
        rows, width = initial.shape
        dtype = buffers.keys[0].dtype
        key = ("passes", rows, width, source_width, dtype, candidates, options)
        recording = self.recording(
            key, lambda: self._passes(buffers, rows, width, candidates, options)
        )
        static_initial, static_lengths, static_scores = recording.inputs
        static_initial.copy_(initial)
        static_lengths.copy_(lengths)
        static_scores.copy_(length_log_probs)
        *selected, content = recording.run()
        steps = selected.pop() if options.return_steps else None
        chosen, picked, scores, score, log_prob, length, passes, tokens, keep = selected
        choice = Selection(
            chosen, picked, scores, score, log_prob, length, passes, tokens, keep, steps
        )
        return Passes(choice, content)

    def _passes(
        self, buffers: _Memory, rows: int, width: int, candidates: int, options: RefinementOptions
    ) -> _Recording:
        device = buffers.padding_mask.device
        config = self.model.config
        initial = torch.full((rows, width), config.pad_id, device=device)
        lengths = torch.ones(rows, dtype=torch.long, device=device)
        scores = torch.zeros(rows, device=device)
        positions = self.model.positions(width, project=True)
        cross = buffers.cache()

        def call() -> tuple[Tensor, ...]:
            with cancellable(lambda: False):  # never stop inside a capture
                done = fixed_passes(
                    self.model, cross, positions, initial, lengths, scores, candidates, options
                )
            chosen = done.selection
            fields = (getattr(chosen, f.name) for f in dataclasses.fields(chosen))
            return (*(value for value in fields if value is not None), done.content)

        return _Recording((initial, lengths, scores), call)


class AutoregressiveGraphs(_Runner[AutoregressiveModel]):
    """``decode_step`` of an autoregressive model, by signature, and a fixed-shape search's
    step (module docstring)."""

    def __init__(
        self, model: AutoregressiveModel, capture: bool = True, multiple: int = MULTIPLE
    ) -> None:
        super().__init__(model, capture, multiple)
        self.states: dict[tuple[object, ...], FixedSearch] = {}

    def decode_step(self, tokens: Tensor, cache: DecoderCache) -> tuple[Tensor, DecoderCache]:
        """:meth:`AutoregressiveModel.decode_step` by graph."""
        buffers, source_width = self.memory(cache.cross)
        rows, count = tokens.shape
        past = cache.past.length
        key = (rows, count, past, source_width, buffers.keys[0].dtype)
        recording = self.recording(key, lambda: self._recording(buffers, tokens, cache.past))
        static_tokens, *static_past = recording.inputs
        static_tokens.copy_(tokens)
        for buffer, tensor in zip(static_past, (*cache.past.keys, *cache.past.values), strict=True):
            buffer.copy_(tensor)
        logits, *new_past = recording.run()
        layers = len(new_past) // 2
        return logits, DecoderCache(cache.cross, KVCache(new_past[:layers], new_past[layers:]))

    def search(self, state: FixedSearch, options: SearchOptions) -> FixedSearch:
        """:func:`gmlm.decoding.autoregressive_fixed.fixed_search`, each step a replay of one
        graph per signature (sentences, beams, cache width, source width, dtype, the
        options): `state` is copied into the graph's static state, which every replay
        updates in place and which is returned (read it before the next search)."""
        key = ("search", *(t.shape for t in state.tensors()), state.past_keys[0].dtype, options)
        recording = self.recording(key, lambda: self._search(key, state, options))
        static = self.states[key]
        static.load(state)  # after the recording, whose warm-up and capture ran steps
        run_steps(static, recording.run)
        return static

    def _search(
        self, key: tuple[object, ...], state: FixedSearch, options: SearchOptions
    ) -> _Recording:
        static = state.empty_like()
        static.load(state)  # the warm-up step runs on real values
        self.states[key] = static

        def call() -> tuple[Tensor, ...]:
            with cancellable(lambda: False):  # never stop inside a capture
                fixed_search_step(self.model, static, options)
            return ()

        return _Recording(tuple(static.tensors()), call)

    def _recording(self, buffers: _Memory, tokens: Tensor, past: KVCache) -> _Recording:
        static_tokens = torch.zeros_like(tokens)
        keys = [torch.zeros_like(k) for k in past.keys]
        values = [torch.zeros_like(v) for v in past.values]
        cross = buffers.cache()

        def call() -> tuple[Tensor, ...]:
            cache = DecoderCache(cross, KVCache(keys, values))
            logits, new = self.model.decode_step(static_tokens, cache)
            return (logits, *new.past.keys, *new.past.values)

        return _Recording((static_tokens, *keys, *values), call)


def graphed(model: Model, capture: bool = True, multiple: int = MULTIPLE) -> Model:
    """A shallow copy of `model` (sharing its weights) whose encoder and decoder pass or step
    run by CUDA graph (see the module docstring); the model must be on a CUDA device when
    `capture`. The copy's ``graphs`` attribute is its runner (``graphs.graphs``: how many
    signatures it recorded). The weights must not change while the copy is in use (graphs
    read them in place)."""
    device = next(model.parameters()).device
    if capture and device.type != "cuda":
        raise GmlmError(
            f"CUDA graphs need the model on a CUDA device, but it is on {device}; use "
            "--device cuda, or leave out --cuda-graphs"
        )
    clone = copy.copy(model)
    runner: PadirGraphs | AutoregressiveGraphs
    if isinstance(model, PadirModel):
        runner = PadirGraphs(model, capture, multiple)
        setattr(clone, "decode", runner.decode)  # noqa: B010 (an instance attribute)
        setattr(clone, "fixed_passes", runner.passes)  # noqa: B010 (read by decoding.fixed)
    else:
        runner = AutoregressiveGraphs(model, capture, multiple)
        setattr(clone, "decode_step", runner.decode_step)  # noqa: B010
        setattr(clone, "fixed_search", runner.search)  # noqa: B010 (read by autoregressive_fixed)
    setattr(clone, "encode", runner.encode)  # noqa: B010
    object.__setattr__(clone, "graphs", runner)
    return clone


def graph_count(models: Sequence[object]) -> int:
    """Signatures recorded by the graphed copies among `models` (0 for plain models)."""
    return sum(runner.graphs for runner in _runners(models))


def capture_seconds(models: Sequence[object]) -> float:
    """The host's seconds spent capturing the graphs of the graphed copies among `models`:
    the time the calls that met a new signature waited for its capture."""
    return sum(runner.capture_seconds for runner in _runners(models))


def _runners(models: Sequence[object]) -> list[_Runner[Any]]:
    runners = (getattr(m, "graphs", None) for m in models)
    return [runner for runner in runners if isinstance(runner, _Runner)]
