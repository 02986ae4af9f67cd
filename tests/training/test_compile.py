"""compile=true: training runs its step's forward through torch.compile (here the aot_eager
backend, which needs no C compiler) and trains what the eager run trains."""

from __future__ import annotations

import pytest
import torch

from gmlm.training import objective
from tests.helpers.training import metrics, train, weights


@pytest.mark.parametrize("kind", ["ar", "padir"])
def test_a_compiled_run_trains_as_the_eager_run(kind, word_task_data, tmp_path, monkeypatch):
    """The same losses step by step (up to float rounding: the compiled graph may order
    sums differently) and the same checkpoint names, so a compiled run's checkpoints load and
    resume as any other; the step really went through torch.compile."""
    monkeypatch.setattr(objective, "COMPILE_BACKEND", "aot_eager")
    compiled_calls = []
    original = torch.compile

    def counted(module, **kwargs):  # type: ignore[no-untyped-def]
        compiled_calls.append(kwargs["backend"])
        return original(module, **kwargs)

    monkeypatch.setattr(torch, "compile", counted)
    settings = ("max_steps=4", "valid_every=4", "log_every=1")
    train(word_task_data, tmp_path / "eager", kind, *settings)
    train(word_task_data, tmp_path / "compiled", kind, *settings, "compile=true")
    assert compiled_calls == ["aot_eager"]
    eager = [r["loss"] for r in metrics(tmp_path / "eager") if "loss" in r]
    compiled = [r["loss"] for r in metrics(tmp_path / "compiled") if "loss" in r]
    assert len(eager) == 4 and compiled == pytest.approx(eager, rel=1e-4)
    a, b = weights(tmp_path / "eager" / "last"), weights(tmp_path / "compiled" / "last")
    assert a.keys() == b.keys()
    assert all(torch.allclose(a[k], b[k], atol=1e-4) for k in a)
