import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from gmlm.cli.main import main
from gmlm.config import ConfigError
from gmlm.errors import GmlmError
from gmlm.training import checkpoint as ckpt
from gmlm.training.config import OptimConfig, load_train_config
from gmlm.training.optim import lr_at
from gmlm.training.throughput import measure_throughput
from gmlm.training.trainer import LossModule, Trainer

FAST = ["valid_sentences=0", "log_every=1", "threads=1"]


def train(data, out, kind="ar", *extra):
    cfg = load_train_config(f"tiny-{kind}", [f"data={data}", f"out={out}", *FAST, *extra])
    return Trainer(cfg, progress=False, log=lambda _m: None).run()


def weights(path):
    return load_file(str(Path(path) / "model.safetensors"))


def metrics(run):
    return [json.loads(line) for line in (Path(run) / "metrics.jsonl").read_text().splitlines()]


def test_schedules():
    cfg = OptimConfig(lr=1.0, warmup_steps=10, min_lr=0.1)
    assert lr_at(5, cfg, 110) == pytest.approx(0.5)
    assert lr_at(10, cfg, 110) == pytest.approx(1.0)
    assert lr_at(60, cfg, 110) == pytest.approx(0.55)
    assert lr_at(110, cfg, 110) == pytest.approx(0.1)
    inv = OptimConfig(lr=1.0, warmup_steps=4, schedule="inverse_sqrt")
    assert lr_at(16, inv, 100) == pytest.approx(0.5)


@pytest.mark.parametrize("kind", ["ar", "padir"])
def test_run_writes_checkpoints_and_learns(word_task_data, tmp_path, kind):
    run = tmp_path / kind
    result = train(word_task_data, run, kind, "max_steps=60", "valid_every=30", "valid_sentences=8")
    assert result.step == 60
    rows = [r for r in metrics(run) if "loss" in r]
    assert len(rows) == 60 and rows[-1]["loss"] < 0.7 * rows[0]["loss"]
    valid = [r for r in metrics(run) if "valid_loss" in r]
    assert [r["step"] for r in valid] == [30, 60]
    assert all(0.0 <= r["valid_bleu"] <= 100.0 for r in valid)
    for name in ("last", "best"):
        folder = tmp_path / kind / name
        assert {p.name for p in folder.iterdir()} >= {
            "model.safetensors",
            "config.yaml",
            "tokenizer",
            "meta.json",
        }
    loaded = ckpt.load_for_inference(tmp_path / kind)
    assert loaded.kind == kind and loaded.path.name == "best"
    assert not loaded.model.training


def test_resume_is_exact(word_task_data, tmp_path):
    straight = train(word_task_data, tmp_path / "a", "padir", "max_steps=30", "valid_every=10")
    train(word_task_data, tmp_path / "b", "padir", "max_steps=20", "valid_every=10")
    resumed = train(word_task_data, tmp_path / "b", "padir", "max_steps=30", "valid_every=10")
    assert straight.step == resumed.step == 30
    a, b = weights(tmp_path / "a" / "last"), weights(tmp_path / "b" / "last")
    assert all(torch.equal(a[k], b[k]) for k in a)
    losses_a = [r["loss"] for r in metrics(tmp_path / "a") if "loss" in r]
    losses_b = [r["loss"] for r in metrics(tmp_path / "b") if "loss" in r]
    assert losses_a == losses_b


def test_resume_after_kill_9(word_task_data, tmp_path):
    args = [
        sys.executable,
        "-m",
        "gmlm",
        "train",
        "--config",
        "tiny-ar",
        "--no-progress",
        f"data={word_task_data}",
        *FAST,
        "valid_every=10",
    ]
    straight = subprocess.run(
        [*args, f"out={tmp_path / 'a'}", "max_steps=40"], capture_output=True, text=True
    )
    assert straight.returncode == 0, straight.stderr
    proc = subprocess.Popen(
        [*args, f"out={tmp_path / 'b'}", "max_steps=40"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    state = tmp_path / "b" / "last" / "state.json"
    deadline = time.time() + 120
    while time.time() < deadline and not (
        state.exists() and json.loads(state.read_text())["step"] >= 10
    ):
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert json.loads(state.read_text())["step"] < 40, "the run finished before it was killed"
    resumed = subprocess.run(
        [*args, f"out={tmp_path / 'b'}", "max_steps=40"], capture_output=True, text=True
    )
    assert resumed.returncode == 0, resumed.stderr
    a, b = weights(tmp_path / "a" / "last"), weights(tmp_path / "b" / "last")
    assert all(torch.equal(a[k], b[k]) for k in a)
    steps = [r["step"] for r in metrics(tmp_path / "b") if "loss" in r]
    assert steps == list(range(1, 41))  # no step logged twice after the resume


def test_checkpoint_averaging(word_task_data, tmp_path):
    train(
        word_task_data,
        tmp_path / "r",
        "ar",
        "max_steps=30",
        "valid_every=10",
        "keep_history=3",
        "average_last=3",
    )
    history = sorted((tmp_path / "r" / "history").glob("*.safetensors"))
    assert [p.name for p in history] == [f"step-{s:08d}.safetensors" for s in (10, 20, 30)]
    parts = [load_file(str(p)) for p in history]
    averaged = weights(tmp_path / "r" / "averaged")
    for key, value in averaged.items():
        torch.testing.assert_close(value, sum(p[key] for p in parts) / 3, rtol=0, atol=1e-6)


def test_bad_configs_and_resume_errors(word_task_data, tmp_path):
    with pytest.raises(ConfigError, match=r"unknown config key 'optim\.lrr'"):
        load_train_config("tiny-ar", ["optim.lrr=1"])
    with pytest.raises(GmlmError, match="no data"):
        Trainer(load_train_config("tiny-ar", [f"out={tmp_path}"]))
    train(word_task_data, tmp_path / "r", "ar", "max_steps=10", "valid_every=10")
    with pytest.raises(GmlmError, match=r"changed model shape.*d_model: 32 -> 48"):
        train(word_task_data, tmp_path / "r", "ar", "max_steps=20", "model.d_model=48")
    with pytest.raises(GmlmError, match="kind=ar"):
        train(word_task_data, tmp_path / "r", "padir", "max_steps=20")
    with pytest.raises(GmlmError, match="max_target_len"):
        train(word_task_data, tmp_path / "short", "ar", "model.max_target_len=4")
    model_file = tmp_path / "r" / "last" / "model.safetensors"
    model_file.write_bytes(model_file.read_bytes()[:100])
    with pytest.raises(GmlmError, match="corrupt or truncated"):
        train(word_task_data, tmp_path / "r", "ar", "max_steps=20")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    with pytest.raises(GmlmError, match="not a gmlm run folder"):
        train(word_task_data, tmp_path / "other", "ar")


def test_nan_loss_stops_and_keeps_last_checkpoint(word_task_data, tmp_path, monkeypatch):
    train(word_task_data, tmp_path / "r", "ar", "max_steps=10", "valid_every=10")
    before = weights(tmp_path / "r" / "last")
    from gmlm.training import trainer as trainer_module

    original = trainer_module.LossModule.forward

    def poisoned(self, src, tgt, generator):
        token_sum, length_sum = original(self, src, tgt, generator)
        return token_sum * float("nan"), length_sum

    monkeypatch.setattr(trainer_module.LossModule, "forward", poisoned)
    with pytest.raises(GmlmError, match=r"non-finite loss at step 11 .*lines \["):
        train(word_task_data, tmp_path / "r", "ar", "max_steps=20", "valid_every=10")
    after = weights(tmp_path / "r" / "last")
    assert all(torch.equal(before[k], after[k]) for k in before)


def test_cli_prints_resolved_config(word_task_data, tmp_path, capsys):
    code = main(
        [
            "train",
            "--config",
            "tiny-ar",
            "--no-progress",
            f"data={word_task_data}",
            f"out={tmp_path / 'r'}",
            "max_steps=5",
            "valid_every=5",
            *FAST,
        ]
    )
    assert code == 0
    out = capsys.readouterr().out
    assert out.index("resolved config:") < out.index("training ar")
    assert "max_steps: 5" in out
    assert main(["train", "--config", "nope", "data=x", "out=y"]) == 2


def test_two_process_data_parallel_matches_one_process(word_task_data, tmp_path):
    # Same global batches (8 sentences: 4 per process vs 8 in one), fp32, no dropout.
    common = [
        "--config",
        "tiny-ar",
        "--no-progress",
        f"data={word_task_data}",
        *FAST,
        "max_steps=8",
        "valid_every=8",
        "precision=fp32",
        "max_tokens=100000",
    ]
    single = subprocess.run(
        [
            sys.executable,
            "-m",
            "gmlm",
            "train",
            *common,
            f"out={tmp_path / 'one'}",
            "max_sentences=8",
        ],
        capture_output=True,
        text=True,
    )
    assert single.returncode == 0, single.stderr
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    double = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc_per_node",
            "2",
            "--master_port",
            "29533",
            "-m",
            "gmlm",
            "train",
            *common,
            f"out={tmp_path / 'two'}",
            "max_sentences=4",
        ],
        capture_output=True,
        text=True,
        env=env,
    )
    assert double.returncode == 0, double.stderr[-3000:]
    one = [r["loss"] for r in metrics(tmp_path / "one") if "loss" in r]
    two = [r["loss"] for r in metrics(tmp_path / "two") if "loss" in r]
    assert len(one) == len(two) == 8
    assert one == pytest.approx(two, rel=1e-5)
    a, b = weights(tmp_path / "one" / "last"), weights(tmp_path / "two" / "last")
    for key in a:
        torch.testing.assert_close(a[key], b[key], rtol=1e-4, atol=1e-5)


def test_throughput_command_reports_both_precisions(word_task_data, capsys):
    code = main(
        [
            "throughput",
            "--config",
            "tiny-ar",
            "--steps",
            "1",
            "--warmup",
            "1",
            f"data={word_task_data}",
            "threads=1",
        ]
    )
    assert code == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert set(report["tokens_per_s"]) == set(report["rates"]) == {"fp32", "bf16"}
    assert all(len(rates) == 1 for rates in report["rates"].values())
    settings = report["settings"]
    assert (settings["threads"], settings["timed_steps"], settings["warmup_steps"]) == (1, 1, 1)


def test_throughput_statistics_follow_from_known_step_times(word_task_data, monkeypatch):
    # A fake clock that moves only inside the loss forward, by these seconds per call: the
    # first call of each precision is the warm-up; dyadic values keep every sum exact.
    seconds = {"fp32": [8.0, 0.5, 0.25, 0.75], "bf16": [0.0625, 0.25, 0.5, 0.125]}
    tokens: dict[str, list[int]] = {"fp32": [], "bf16": []}
    now = [0.0]
    forward = LossModule.forward

    def timed(module, src, tgt, generator):  # type: ignore[no-untyped-def]
        out = forward(module, src, tgt, generator)
        name = "bf16" if torch.is_autocast_enabled("cpu") else "fp32"
        now[0] += seconds[name][len(tokens[name])]
        tokens[name].append(int((tgt != module.cfg.model.pad_id).sum()))
        return out

    monkeypatch.setattr(LossModule, "forward", timed)
    cfg = load_train_config("tiny-ar", [f"data={word_task_data}", "threads=1", "device=cpu"])
    report = measure_throughput(cfg, steps=3, warmup=1, clock=lambda: now[0])
    assert tokens["fp32"] == tokens["bf16"] and len(tokens["fp32"]) == 4  # the same batches
    timed_tokens = tokens["fp32"][1:]
    for name in ("fp32", "bf16"):
        expected = [t / s for t, s in zip(timed_tokens, seconds[name][1:], strict=True)]
        assert report.rates[name] == expected
        assert report.tokens_per_s[name] == sorted(expected)[1]
    # Per pair, bf16 rate / fp32 rate = fp32 seconds / bf16 seconds: 2, 0.5 and 6; the
    # warm-up pair (128) would move the median to 4.
    assert report.speedup_median == 2.0
    assert report.settings["mean_batch_target_tokens"] == sum(timed_tokens) / 3


def test_export_bf16_halves_the_size_and_translates(word_task_data, tmp_path):
    train(word_task_data, tmp_path / "r", "padir", "max_steps=20", "valid_every=10")
    assert main(["export", "--checkpoint", str(tmp_path / "r"), "--out", str(tmp_path / "x")]) == 0
    full = tmp_path / "r" / "best" / "model.safetensors"
    small = tmp_path / "x" / "model.safetensors"
    assert small.stat().st_size < 0.6 * full.stat().st_size
    exported = weights(tmp_path / "x")
    assert all(t.dtype == torch.bfloat16 for t in exported.values())
    original = weights(tmp_path / "r" / "best")
    assert all(torch.equal(exported[k], original[k].to(torch.bfloat16)) for k in exported)
    # It loads into fp32 parameters: same output as the fp32 model with bf16-rounded weights.
    loaded = ckpt.load_for_inference(tmp_path / "x")
    assert all(p.dtype == torch.float32 for p in loaded.model.parameters())
    import gmlm

    assert len(gmlm.load(tmp_path / "x").translate(["der Hund läuft.", ""])) == 2
    with pytest.raises(GmlmError, match="not a checkpoint folder"):
        ckpt.export_checkpoint(tmp_path / "r", tmp_path / "r", torch.bfloat16)
