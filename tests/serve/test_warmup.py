"""The service's warm-up before /ready: WARMUP twice for every model, and for a model that
decodes by CUDA graphs, first a batch of every row bucket up to the batch limits."""

from __future__ import annotations

from gmlm.serve.metrics import Captures
from gmlm.serve.server import GRAPH_WARMUP, WARMUP, warm_up
from gmlm.serve.settings import ServeSettings
from tests.helpers.serving import GatedBackend


class GraphedBackend(GatedBackend):
    """A fake model that says it captures CUDA graphs: one per batch size it has seen."""

    def graph_captures(self) -> Captures | None:
        return Captures(len({len(batch) for batch in self.batches}), 0.0)


class CpuBackend(GatedBackend):
    """A fake model that runs without graphs, as a real one on a CPU says."""

    def graph_captures(self) -> Captures | None:
        return None


def test_a_graphed_model_first_meets_every_row_bucket_up_to_the_batch_limits():
    graphed, cpu, plain = GraphedBackend(), CpuBackend(), GatedBackend()
    settings = ServeSettings(max_batch_sentences=10, max_batch_tokens=1000)
    rates = warm_up({"g": graphed, "c": cpu, "p": plain}, settings)
    assert set(rates) == {"g", "c", "p"}
    warmup = [list(WARMUP)] * 2
    assert cpu.batches == plain.batches == warmup
    # The buckets 1, 2, 3, 4, 6, 8, 12 (a batch of at most 10), each for every sentence.
    sizes = [1, 2, 3, 4, 6, 8, 10]
    assert (
        graphed.batches
        == [[sentence] * size for size in sizes for sentence in GRAPH_WARMUP] + warmup
    )
    # A batch over the token limit (this fake's tokens are its lines) is one the batcher never
    # forms: left out, but one sentence alone always goes.
    graphed = GraphedBackend()
    warm_up({"g": graphed}, ServeSettings(max_batch_sentences=10, max_batch_tokens=3))
    assert [len(b) for b in graphed.batches] == [1] * 3 + [2] * 3 + [3] * 3 + [2, 2]
