"""The attention analysis: pairs of one hypothesis, grouping, and `gmlm analyze attention`
end to end on a tiny trained PaDIR checkpoint."""

from __future__ import annotations

import dataclasses
import itertools
import json
from pathlib import Path

import pytest
import torch

import gmlm
from gmlm.analysis import attention as attention_module
from gmlm.analysis import attention_analysis, render_markdown
from gmlm.analysis.attention import PairCollector, pair_metrics
from gmlm.analysis.metrics import cross_pair_metrics, self_pair_metrics
from gmlm.analysis.results import AttentionResult, MeanStd
from gmlm.cli.main import main
from gmlm.data.binarized import load_dataset
from gmlm.data.lengths import encode_inputs
from gmlm.decoding import RefinementOptions, refine
from gmlm.errors import GmlmError
from tests.helpers.attention import SELF

# Cross-attention of the same 4 positions over 3 source tokens, two heads.
CROSS = torch.tensor(
    [
        [[0.5, 0.3, 0.2], [0.5, 0.3, 0.2], [0.1, 0.2, 0.7], [0.2, 0.4, 0.4]],
        [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 1.0, 0.0], [0.3, 0.3, 0.4]],
    ]
)


def test_pair_metrics_of_one_hypothesis() -> None:
    stutter, self_m, cross_m = pair_metrics([4, 4, 9], SELF, CROSS)
    assert stutter.tolist() == [True, False]  # (0, 1) repeats token 4; (1, 2) does not
    starts = torch.tensor([0, 1])
    rows = SELF.transpose(0, 1)
    expected_self = self_pair_metrics(rows[starts], rows[starts + 1], starts)
    for name, values in expected_self.items():
        torch.testing.assert_close(self_m[name], values)
    # Pair (0, 1): equal rows in head 0, one-hot 0 vs 1 in head 1. Pair (1, 2): head 0
    # (0.4 + 0.1 + 0.5) / 2, equal one-hot rows in head 1.
    torch.testing.assert_close(cross_m["tv"], torch.tensor([[0.0, 1.0], [0.5, 0.0]]))
    assert cross_m["top1"].tolist() == [[1.0, 0.0], [0.0, 1.0]]
    # The EOS row (position 3) is never the first position of a pair.
    assert pair_metrics([4], SELF[:, :2, :2], CROSS[:, :2])[0].numel() == 0


def test_collector_groups_pairs() -> None:
    collector = PairCollector(heads=2)
    collector.add(*pair_metrics([4, 4, 9], SELF, CROSS))
    collector.add(*pair_metrics([7, 8], SELF[:, :3, :3], CROSS[:, :3]))
    assert (collector.pairs("stutter"), collector.pairs("non_stutter")) == (1, 2)
    stutter = collector.summary("cross_attention", "stutter")
    assert stutter.pairs == 1 and stutter.next is None
    assert (stutter.tv.max.mean, stutter.tv.max.std) == (pytest.approx(1.0), 0.0)
    assert stutter.p_top1 == 0.5
    non = collector.summary("cross_attention", "non_stutter")
    # Non-stutter pairs: (1, 2) of the first hypothesis (TV 0.5 and 0) and (0, 1) of the
    # second (TV 0 and 1): avg-over-heads TV 0.25 and 0.5.
    assert (non.tv.avg.mean, non.tv.avg.std) == (pytest.approx(0.375), pytest.approx(0.125))
    empty = PairCollector(heads=2).summary("self_attention", "stutter")
    assert empty.pairs == 0 and empty.p_top2 is None
    assert empty.next is not None and empty.next.avg == MeanStd(mean=None, std=None)
    assert cross_pair_metrics(CROSS[:, :0].transpose(0, 1), CROSS[:, :0].transpose(0, 1))[
        "tv"
    ].shape == (0, 2)


def expected_pairs(checkpoint: Path, data: Path, count: int, steps: int, beam: int) -> list[int]:
    """The counts (stutter, non-stutter) from decoding the first `count` test sources as
    one batch with the analysis's settings, independently of the analysis code."""
    translator = gmlm.load(checkpoint, device="cpu")
    texts = load_dataset(data).read_text("test", "src")[:count]
    encoded = encode_inputs(translator.tokenizer, texts, translator.config.max_source_len)
    lines = sorted(range(count), key=lambda i: -len(encoded.ids[i]))
    options = dataclasses.replace(RefinementOptions(), steps=steps, length_beam=beam)
    src = translator.source_tensor([encoded.ids[i] for i in lines])
    results = refine(translator.model, src, options, 0)  # type: ignore[arg-type]
    stutter = sum(a == b for r in results for a, b in itertools.pairwise(r.raw))
    total = sum(max(len(r.raw) - 1, 0) for r in results)
    return [stutter, total - stutter]


def test_cli_json_end_to_end(
    padir_run: Path, word_task_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "deep" / "attention.json"
    args = ["analyze", "attention", "--checkpoint", str(padir_run), "--data", str(word_task_data)]
    flags = ["--sentences", "12", "--steps", "3", "--length-beam", "2", "--batch-size", "16"]
    assert main([*args, *flags, "--device", "cpu", "--json", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    result = json.loads(printed)
    assert AttentionResult.read(out).to_json() == result
    json.dumps(result, allow_nan=False)  # n/a is null, never NaN
    assert result["sentences"]["decoded"] == 12
    pairs = [result["pairs"]["stutter"], result["pairs"]["non_stutter"]]
    assert pairs == expected_pairs(padir_run, word_task_data, 12, steps=3, beam=2)
    assert sum(pairs) == result["output_tokens"] - 12  # every output here has a token
    assert all(pairs), "the tiny model should give both kinds of pairs"
    assert result["settings"]["decoding"]["steps"] == 3
    assert result["model"]["layer"] == result["model"]["decoder_layers"] == 2
    for table, metrics in (
        ("self_attention", ("next", "prev", "tv", "cosine")),
        ("cross_attention", ("tv", "cosine")),
    ):
        for group, count in zip(("stutter", "non_stutter"), pairs, strict=True):
            stats = result[table][group]
            assert stats["pairs"] == count
            for name in metrics:
                low, mid, high = (stats[name][a]["mean"] for a in ("min", "avg", "max"))
                assert 0.0 <= low <= mid <= high <= 1.0
            assert 0.0 <= stats["p_top1"] <= stats["p_top2"] <= 1.0
    assert result["paper"]["cross_attention"]["stutter"]["tv"]["avg"] == 0.13


def test_table_output_and_zero_stutter_pairs(
    padir_run: Path,
    word_task_data: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # No pair counts as a stutter: the stutter group is empty and must read n/a.
    monkeypatch.setattr(
        attention_module, "stutter_mask", lambda t: torch.zeros(max(len(t) - 1, 0), dtype=bool)
    )
    result = attention_analysis(
        padir_run, word_task_data, sentences=4, steps=1, length_beam=1, device="cpu"
    )
    assert result.pairs["stutter"] == 0 and result.pairs["non_stutter"] > 0
    assert result.sentences_with_stutter == 0
    stutter = result.cross_attention["stutter"]
    assert stutter.tv.avg == MeanStd(mean=None, std=None) and stutter.p_top1 is None
    json.dumps(result.to_json(), allow_nan=False)
    text = render_markdown(result)
    assert "**Self-attention (paper Table 4)**" in text
    assert "**Cross-attention (paper Table 5)**" in text
    tv_avg = next(line for line in text.splitlines() if "total variation distance, avg" in line)
    cells = [c.strip() for c in tv_avg.strip("|").split("|")]
    assert cells[1] == "n/a" and "±" in cells[2] and cells[3:] == ["0.13", "0.23"]
    assert "| pairs | 0 |" in text


def test_wrong_kind_and_bad_input_are_clean_errors(
    ar_checkpoint: Path,
    padir_run: Path,
    word_task_data: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    base = ["analyze", "attention", "--data", str(word_task_data), "--device", "cpu"]
    assert main([*base, "--checkpoint", str(ar_checkpoint)]) == 2
    err = capsys.readouterr().err
    assert "autoregressive checkpoint (kind 'ar')" in err and "PaDIR" in err
    assert main([*base, "--checkpoint", str(padir_run), "--split", "nope"]) == 2
    assert "no split 'nope'" in capsys.readouterr().err
    with pytest.raises(GmlmError, match="sentences=0"):
        attention_analysis(padir_run, word_task_data, sentences=0)
