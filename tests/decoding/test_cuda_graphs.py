"""The CUDA-graph runners' static buffers and padding, checked on a CPU: with capture=False
a runner calls the pass on its padded static buffers instead of replaying a graph, i.e.
computes what its graph would (the graphs themselves run in tests/test_cuda.py, on a GPU)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

from gmlm.bench import BenchSettings, run_bench
from gmlm.cli.main import main
from gmlm.data.tokenizer import Tokenizer
from gmlm.decoding import RefinementOptions, cuda_graphs
from gmlm.decoding.autoregressive import SearchOptions, beam_search, greedy_search
from gmlm.decoding.cuda_graphs import capture_seconds, graph_count, graphed
from gmlm.decoding.fixed import refine_fixed
from gmlm.decoding.refinement import refine
from gmlm.errors import GmlmError
from gmlm.models import AutoregressiveModel, PadirModel
from gmlm.translation.translator import Translator
from tests.helpers.checkpoints import write_checkpoint
from tests.helpers.reversal import CONFIG


def _refined(model: PadirModel, src: torch.Tensor, **settings: object) -> list[list[int]]:
    options = RefinementOptions(**settings)  # type: ignore[arg-type]
    return [r.raw for r in refine(model, src, options, 0)]


@pytest.mark.parametrize("multiple", [1, 5, 8])
def test_padded_padir_passes_decode_as_the_model(
    trained_padir: PadirModel, reversal: tuple[torch.Tensor, torch.Tensor], multiple: int
) -> None:
    src, _ = reversal
    copy = graphed(trained_padir, capture=False, multiple=multiple)
    for settings in ({}, {"steps": 10, "length_beam": 3}, {"prune_after": 1, "prune_keep": 1}):
        for rows in (src[:1], src[3:4], src):  # batch 1 and a batch, several widths
            assert _refined(copy, rows, **settings) == _refined(trained_padir, rows, **settings)
    assert graph_count([copy]) > 1  # several signatures met, each padded to the multiple


def test_padded_pass_logits_match_with_relative_bias(
    reversal: tuple[torch.Tensor, torch.Tensor],
) -> None:
    """An untrained model with relative position bias (its padding is folded into the bias):
    the padded pass's logits are the unpadded pass's at every real position."""
    torch.manual_seed(0)
    model = PadirModel(dataclasses.replace(CONFIG, relative_bias=True)).eval()
    src, tgt = reversal
    copy = graphed(model, capture=False, multiple=8)
    with torch.inference_mode():
        memory = model.cross_memory(model.encode(src))
        hyp = tgt[:, :5]  # content, EOS and padding at width 5 (padded to 8 inside)
        expected = model.decode(memory, hyp).logits
        got = copy.decode(memory, hyp).logits
    assert got.shape == expected.shape
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("beam", [1, 4])
def test_static_ar_steps_decode_as_the_model(
    trained_ar: AutoregressiveModel, reversal: tuple[torch.Tensor, torch.Tensor], beam: int
) -> None:
    src, _ = reversal
    copy = graphed(trained_ar, capture=False, multiple=8)
    search = greedy_search if beam == 1 else beam_search
    options = SearchOptions(beam=beam)
    for rows in (src[:1], src[5:6], src):
        expected, got = search(trained_ar, rows, options), search(copy, rows, options)
        assert _tokens(got) == _tokens(expected)
    assert graph_count([copy]) > 1


def _tokens(found: list) -> list:  # type: ignore[type-arg]
    """Output ids of greedy (one hypothesis per sentence) or beam search (n-best lists)."""
    return [[h.tokens for h in x] if isinstance(x, list) else x.tokens for x in found]


def test_graphs_need_a_cuda_model(trained_padir: PadirModel, trained_ar: AutoregressiveModel):
    for model in (trained_padir, trained_ar):
        with pytest.raises(GmlmError, match="CUDA graphs need the model on a CUDA device"):
            graphed(model)


def test_translator_and_bench_refuse_graphs_where_they_cannot_run(
    tokenizer: Tokenizer, tmp_path: Path
) -> None:
    model = PadirModel(dataclasses.replace(CONFIG, vocab_size=tokenizer.vocab_size))
    with pytest.raises(GmlmError, match="--device cuda"):
        Translator("padir", model, tokenizer, cuda_graphs=True)
    with pytest.raises(GmlmError, match="--batch-sizes 1"):
        run_bench(
            tmp_path,
            tmp_path,
            tmp_path,
            BenchSettings(batch_sizes=(1, 8)),
            cuda_graphs=True,
        )


@pytest.mark.parametrize("kind", ["ar", "padir"])
def test_padded_encoder_and_position_cap(
    kind: str, reversal: tuple[torch.Tensor, torch.Tensor]
) -> None:
    """The graphed encoder pads the source (width 7 -> 10 here) and cuts it back; a width
    rounded past the position table (31 -> 35 > max_target_len 32) is capped at the table."""
    torch.manual_seed(0)
    model = (PadirModel if kind == "padir" else AutoregressiveModel)(CONFIG).eval()
    copy = graphed(model, capture=False, multiple=5)
    src, _ = reversal
    with torch.inference_mode():
        expected, got = model.encode(src), copy.encode(src)
        torch.testing.assert_close(got.memory, expected.memory, rtol=1e-5, atol=1e-5)
        assert torch.equal(got.padding_mask, expected.padding_mask)
        if isinstance(model, PadirModel):
            torch.testing.assert_close(
                model.length_logits(got), model.length_logits(expected), rtol=1e-5, atol=1e-5
            )
            memory = model.cross_memory(expected)
            hyp = torch.randint(CONFIG.n_special, CONFIG.vocab_size, (src.shape[0], 31))
            logits = copy.decode(memory, hyp).logits
            torch.testing.assert_close(logits, model.decode(memory, hyp).logits)


def test_cli_cuda_graphs_on_a_cpu_is_a_clean_error(
    tokenizer: Tokenizer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    checkpoint = write_checkpoint(tmp_path / "padir", "padir", tokenizer)
    source = tmp_path / "in.txt"
    source.write_text("ein Satz\n")
    argv = ["translate", "--checkpoint", str(checkpoint), "--input", str(source)]
    assert main([*argv, "--device", "cpu", "--cuda-graphs"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("gmlm: error: CUDA graphs need a model on a CUDA device")
    assert err.count("\n") == 1


def test_fixed_shape_decodes_of_every_batch_size_share_a_few_graphs(
    trained_padir: PadirModel, reversal: tuple[torch.Tensor, torch.Tensor]
) -> None:
    """What a GPU translator runs (fixed shapes, the graphed copy): the eager outputs, and
    batches of 1 to 16 sentences met by a handful of signatures (rows, widths and source
    widths bucketed), not one per batch."""
    src, _ = reversal
    copy = graphed(trained_padir, capture=False)
    options = RefinementOptions(length_beam=3)
    alone = [r.raw for r in refine(trained_padir, src, options, 0)]
    for size in range(1, 17):
        for start in range(0, src.shape[0], size):
            rows = src[start : start + size]
            rows = rows[:, : int((rows != CONFIG.pad_id).sum(1).max())]
            got = refine_fixed(copy, rows, options, 0)
            assert [r.raw for r in got] == alone[start : start + size]
    # 16 batch sizes: the row buckets 1, 2, 3, 4, 6, 8, 12, 16, each one encoder signature
    # and one whole-refinement signature per width bucket met (6 or 8 here), 3 rows a sentence
    runner = copy.graphs  # type: ignore[attr-defined]
    encoders = sorted(key[1] for key in runner.recordings if key[0] == "encode")
    assert encoders == [1, 2, 3, 4, 6, 8, 12, 16]
    passes = {key[1:3] for key in runner.recordings if key[0] == "passes"}
    assert {rows for rows, _ in passes} == {3 * b for b in encoders}
    assert {width for _, width in passes} <= {6, 8}
    assert graph_count([copy]) == len(encoders) + len(passes) <= 8 + 16


def test_the_graphed_whole_decode_returns_the_steps_and_scores(
    trained_padir: PadirModel, reversal: tuple[torch.Tensor, torch.Tensor]
) -> None:
    """The choice recorded with the passes (return_steps adds the steps to the recording's
    outputs): each sentence's steps, candidate scores and passes as the eager loop's."""
    src, _ = reversal
    options = RefinementOptions(length_beam=3, steps=5, return_steps=True)
    eager = refine(trained_padir, src[:7], options, 0)
    got = refine_fixed(graphed(trained_padir, capture=False), src[:7], options, 0)
    for a, b in zip(got, eager, strict=True):
        assert (a.tokens, a.raw, a.steps, a.candidate, a.passes) == (
            b.tokens,
            b.raw,
            b.steps,
            b.candidate,
            b.passes,
        )
        assert a.candidate_scores == pytest.approx(b.candidate_scores, abs=1e-5)
        assert len(a.steps) == options.steps + 1


def test_capture_time_is_counted_once_per_new_signature(
    trained_padir: PadirModel,
    reversal: tuple[torch.Tensor, torch.Tensor],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What the service's gmlm_cuda_graph_capture_seconds reads: the host's time in each new
    signature's recording, counted once (a clock moving 0.25 s per reading, recording made a
    no-op so that it runs without a GPU); none without capture."""
    src, _ = reversal
    copy = graphed(trained_padir, capture=False)
    refine_fixed(copy, src[:3], RefinementOptions(), 0)
    assert graph_count([copy]) > 0 and capture_seconds([copy]) == 0.0  # capture=False
    copy = graphed(trained_padir, capture=False)
    copy.graphs.capture = True  # type: ignore[attr-defined]
    monkeypatch.setattr(cuda_graphs._Recording, "record", lambda self, capture, pool: None)
    ticks = iter(range(1000))
    monkeypatch.setattr(cuda_graphs, "perf_counter", lambda: 0.25 * next(ticks))
    refine_fixed(copy, src[:3], RefinementOptions(), 0)
    first = graph_count([copy])
    assert capture_seconds([copy]) == 0.25 * first
    refine_fixed(copy, src[:3], RefinementOptions(), 0)  # the same signatures: no capture
    assert graph_count([copy]) == first and capture_seconds([copy]) == 0.25 * first
    assert capture_seconds([trained_padir]) == 0.0  # a plain model captures nothing
