"""The copies of a model that decoding runs: the fp32 model itself, its bf16 and int8 copies
(:mod:`gmlm.translation.precision`), and with CUDA graphs the graphed copy of each
(:func:`gmlm.decoding.cuda_graphs.graphed`); each made on first use and kept."""

from __future__ import annotations

from gmlm.decoding.cuda_graphs import capture_seconds, graph_count, graphed
from gmlm.decoding.options import Precision
from gmlm.models import AutoregressiveModel, PadirModel
from gmlm.translation.precision import at_precision, check_precision

Model = AutoregressiveModel | PadirModel


class ModelCopies:
    """`model` (fp32, in eval mode) and the copies made of it; `cuda_graphs`: each copy runs
    by CUDA graphs."""

    def __init__(self, model: Model, cuda_graphs: bool) -> None:
        self.model = model
        self.cuda_graphs = cuda_graphs
        self._precise: dict[str, Model] = {}
        self._graphed: dict[str, Model] = {}

    def at(self, precision: Precision) -> Model:
        """The model at `precision` (graphed with cuda_graphs)."""
        check_precision(precision)
        model = self.model
        if precision != "fp32":
            if precision not in self._precise:
                self._precise[precision] = at_precision(self.model, precision)
            model = self._precise[precision]
        if not self.cuda_graphs:
            return model
        if precision not in self._graphed:
            self._graphed[precision] = graphed(model)
        return self._graphed[precision]

    def graph_count(self) -> int:
        """How many CUDA graphs (encoder and decoder shapes) the graphed copies hold so far."""
        return graph_count(list(self._graphed.values()))

    def capture_seconds(self) -> float:
        """The seconds translations have waited for graph captures so far."""
        return capture_seconds(list(self._graphed.values()))
