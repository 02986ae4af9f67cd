"""The CUDA path, on a machine with a GPU (skipped with the reason elsewhere): the shipped
Multi30k models translate on the GPU as on the CPU, CUDA graphs change no output, a tiny
training run trains and resumes on the GPU, and `gmlm bench` runs there with graphs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import gmlm
from gmlm.bench import BenchSettings, run_bench
from gmlm.data.binarized import load_dataset
from gmlm.training.config import load_train_config
from gmlm.training.trainer import Trainer
from tests.helpers.checkpoints import write_checkpoint
from tests.helpers.released_golden import RELEASED

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available(), reason="no CUDA device here: the GPU tests need one"
)

SOURCES = [
    "Ein Mann fährt Fahrrad.",
    "Zwei Hunde spielen im Schnee.",
    "Eine Frau mit einem roten Hut sitzt auf einer Bank.",
    "Ein kleines Mädchen in einem rosa Kleid klettert eine Treppe hinauf.",
    "Drei Männer stehen vor einem Gebäude und unterhalten sich.",
    "Ein Junge springt in einen See.",
]
SETTINGS = {"ar": [{"beam": 1}, {"beam": 5}], "padir": [{}, {"steps": 10, "length_beam": 1}]}


@pytest.mark.parametrize("name", ["ar", "padir"])
def test_cuda_translates_as_the_cpu(name: str) -> None:
    """fp32 on the GPU against fp32 on the CPU: the same outputs (float rounding differs,
    which could only move a near-tie)."""
    cpu = gmlm.load(RELEASED / name, device="cpu")
    cuda = gmlm.load(RELEASED / name, device="cuda")
    for settings in SETTINGS[name]:
        expected = cpu.translate(SOURCES, **settings)
        assert cuda.translate(SOURCES, **settings) == expected
        assert cuda.translate(SOURCES, batch_size=1, **settings) == expected


@pytest.mark.parametrize("name", ["ar", "padir", "ar1"])
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_cuda_graphs_change_no_output(name: str, precision: str) -> None:
    """Graphs of the eager loops (a PaDIR pass, an AR step) change no output."""
    eager = gmlm.load(RELEASED / name, device="cuda", cuda_graphs=False, fixed_shapes=False)
    graphs = gmlm.load(RELEASED / name, device="cuda", cuda_graphs=True, fixed_shapes=False)
    for settings in SETTINGS["padir" if name == "padir" else "ar"]:
        expected = eager.translate(SOURCES, batch_size=1, precision=precision, **settings)
        for _ in range(2):  # captured, then replayed
            got = graphs.translate(SOURCES, batch_size=1, precision=precision, **settings)
            assert got == expected
        # A batch: other signatures, the source memory padded across sentences.
        batched = graphs.translate(SOURCES, batch_size=4, precision=precision, **settings)
        assert batched == eager.translate(SOURCES, batch_size=4, precision=precision, **settings)
    assert graphs.cuda_graph_count() > 0


def test_training_runs_and_resumes_on_cuda(word_task_data: Path, tmp_path: Path) -> None:
    def train(steps: int) -> object:
        cfg = load_train_config(
            "tiny-padir",
            [
                f"data={word_task_data}",
                f"out={tmp_path / 'run'}",
                "device=cuda",
                "log_every=1",
                "valid_every=10",
                "valid_sentences=8",
                f"max_steps={steps}",
            ],
        )
        messages: list[str] = []
        result = Trainer(cfg, progress=False, log=messages.append).run()
        return result, messages

    first, _ = train(20)
    second, messages = train(40)
    assert (first.step, second.step) == (20, 40)  # type: ignore[attr-defined]
    assert any("resumed" in m for m in messages), messages
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    losses = [r["loss"] for r in rows if "loss" in r]
    assert len(losses) == 40 and all(loss == loss for loss in losses)  # finite, no NaN
    assert sum(losses[-5:]) < sum(losses[:5])
    translator = gmlm.load(tmp_path / "run", device="cuda")
    assert len(translator.translate(["a b c"])) == 1


def test_bench_with_cuda_graphs(word_task_data: Path, tmp_path: Path) -> None:
    tokenizer = load_dataset(word_task_data).tokenizer
    ar = write_checkpoint(tmp_path / "ar", "ar", tokenizer)
    padir = write_checkpoint(tmp_path / "padir", "padir", tokenizer)
    result = run_bench(
        ar,
        padir,
        word_task_data,
        BenchSettings(
            sentences=3,
            precisions=("fp32", "bf16"),
            batch_sizes=(1,),
            padir_steps=(4,),
            length_beams=(5,),
        ),
        device="cuda",
        cuda_graphs=True,
    )
    settings = result.settings
    assert settings.gpu and settings.cuda_graphs and "graphs captured" in settings.cuda_graphs
    assert settings.warmup == 3  # every timed sentence
    assert {r.system for r in result.results} == {"padir T=4 B=5", "ar greedy", "ar beam5"}


def test_no_cudnn_attention_in_a_bf16_decode() -> None:
    """cuDNN's attention plans per shape (nn/attention.py GPU_KERNELS): a bf16 decode of
    batches of several shapes runs none of its kernels even where torch would pick it."""
    torch.backends.cuda.enable_cudnn_sdp(True)
    padir = gmlm.load(RELEASED / "padir", device="cuda")
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for size in (1, 3, 6):
            padir.translate(SOURCES[:size], precision="bf16")
    names = {event.name for event in prof.key_averages()}
    assert not [n for n in names if "cudnn_attention" in n], sorted(names)
    assert any("scaled_dot_product" in n for n in names)


def test_fixed_shapes_and_whole_refinement_graphs_by_default_on_a_gpu() -> None:
    """PaDIR on a GPU decodes at fixed shapes with its refinement replayed as one graph per
    bucket, by default; the outputs are the eager CPU loop's, at every batch size."""
    cpu = gmlm.load(RELEASED / "padir", device="cpu")
    gpu = gmlm.load(RELEASED / "padir", device="cuda")
    assert gpu.fixed_shapes and gpu.cuda_graphs and not cpu.fixed_shapes
    expected = cpu.translate(SOURCES)
    for size in (1, 2, 5, 6):
        for _ in range(2):  # captured, then replayed
            assert gpu.translate(SOURCES, batch_size=size) == expected
    assert gpu.cuda_graph_count() <= 2 * 4 * 3  # encoder + refinement, few buckets


@pytest.mark.parametrize("name", ["ar", "ar1"])
def test_ar_search_at_fixed_shapes_by_default_on_a_gpu(name: str) -> None:
    """AR greedy and beam search on a GPU run at fixed shapes, each step one graph per bucket,
    by default; the outputs are the eager CPU search's, at every batch size."""
    cpu = gmlm.load(RELEASED / name, device="cpu")
    gpu = gmlm.load(RELEASED / name, device="cuda")
    assert gpu.fixed_shapes and gpu.cuda_graphs and not cpu.fixed_shapes
    for settings in SETTINGS["ar"]:
        expected = cpu.translate(SOURCES, **settings)
        for size in (1, 2, 5, 6):
            for _ in range(2):  # captured, then replayed
                assert gpu.translate(SOURCES, batch_size=size, **settings) == expected
    assert gpu.cuda_graph_count() <= 2 * 4 * 3 * 2
