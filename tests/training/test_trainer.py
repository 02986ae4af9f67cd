import errno
import json
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from gmlm.checkpoint.loading import load_for_inference
from gmlm.cli.main import main
from gmlm.config import ConfigError
from gmlm.data.binarized import load_dataset
from gmlm.data.cleaning import normalize
from gmlm.data.prepare import prepare_dataset
from gmlm.data.tokenizer import Tokenizer
from gmlm.distributed import process_device
from gmlm.errors import GmlmError
from gmlm.provenance import cpu_model
from gmlm.training import checkpoint as ckpt
from gmlm.training import trainer as trainer_module
from gmlm.training.config import OptimConfig, load_train_config
from gmlm.training.objective import LossModule
from gmlm.training.optim import lr_at
from gmlm.training.precision import precision_name
from gmlm.training.throughput import ThroughputReport, measure_throughput, precision_verdict
from gmlm.training.throughput_settings import ThroughputSettings
from gmlm.training.trainer import Trainer
from gmlm.training.validation import validation_pairs
from tests.helpers.corpora import make_pairs, tiny_config, write_corpus, write_lines
from tests.helpers.training import FAST, fake_step_clock, metrics, train, weights


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
        recorded = json.loads((folder / "meta.json").read_text(encoding="utf-8"))
        manifest = load_dataset(word_task_data).manifest
        assert (recorded["src_lang"], recorded["tgt_lang"]) == (
            manifest["src_lang"],
            manifest["tgt_lang"],
        )
    loaded = load_for_inference(tmp_path / kind)
    assert loaded.kind == kind and loaded.path.name == "best"
    assert not loaded.model.training


def test_resume_is_exact(word_task_data, tmp_path):
    """With dropout on (the tiny presets have none, the real recipes 0.1 to 0.3), so that
    training draws from torch's generator: a resumed run restores its state too."""
    settings = ("valid_every=10", "model.dropout=0.1")
    straight = train(word_task_data, tmp_path / "a", "padir", "max_steps=30", *settings)
    train(word_task_data, tmp_path / "b", "padir", "max_steps=20", *settings)
    resumed = train(word_task_data, tmp_path / "b", "padir", "max_steps=30", *settings)
    assert straight.step == resumed.step == 30
    a, b = weights(tmp_path / "a" / "last"), weights(tmp_path / "b" / "last")
    assert all(torch.equal(a[k], b[k]) for k in a)
    losses_a = [r["loss"] for r in metrics(tmp_path / "a") if "loss" in r]
    losses_b = [r["loss"] for r in metrics(tmp_path / "b") if "loss" in r]
    assert losses_a == losses_b


def test_a_run_takes_the_threads_it_is_given(word_task_data, tmp_path):
    """threads=N sets torch's thread count (1 included: the CPU recipes' setting beside other
    work), threads=0 leaves it as it is."""
    threads = torch.get_num_threads()
    settings = [f"data={word_task_data}", f"out={tmp_path / 'r'}"]
    try:
        for given, expected in ((1, 1), (0, 2)):
            torch.set_num_threads(2)
            Trainer(load_train_config("tiny-ar", [*settings, f"threads={given}"]), progress=False)
            assert torch.get_num_threads() == expected, given
    finally:
        torch.set_num_threads(threads)


def test_the_gradient_norm_is_clipped_and_logged_unless_clipping_is_off(word_task_data, tmp_path):
    """optim.clip_norm (default 1.0) clips the gradients and logs their norm before clipping;
    0 turns clipping off, and there is no norm to log."""
    for clip, run in (("1.0", "a"), ("0", "b")):
        train(word_task_data, tmp_path / run, "ar", "max_steps=2", f"optim.clip_norm={clip}")
    norms = {run: [r["grad_norm"] for r in metrics(tmp_path / run) if "loss" in r] for run in "ab"}
    assert len(norms["a"]) == 2 and all(0 < n < float("inf") for n in norms["a"])
    assert len(norms["b"]) == 2 and all(n != n for n in norms["b"])  # NaN


def test_saves_between_validations_resume_exactly(word_task_data, tmp_path, monkeypatch):
    """save_minutes writes `last` between validations (here at every logged step); a run
    stopped after such a save resumes there, without a validation, exactly as if never
    stopped, and the history for averaging keeps validation steps only."""
    common = ("max_steps=30", "valid_every=10")
    straight = train(word_task_data, tmp_path / "a", "padir", *common, "save_minutes=0")
    original = Trainer.train_step

    def stop_at_25(self):
        if self.step == 25:
            raise KeyboardInterrupt
        return original(self)

    often = (*common, "save_minutes=1e-9", "keep_history=5")
    monkeypatch.setattr(Trainer, "train_step", stop_at_25)
    with pytest.raises(KeyboardInterrupt):
        train(word_task_data, tmp_path / "b", "padir", *often)
    monkeypatch.undo()
    state = json.loads((tmp_path / "b" / "last" / "state.json").read_text())
    assert (state["step"], state["validation_pending"]) == (25, False)
    messages: list[str] = []
    resumed = train(word_task_data, tmp_path / "b", "padir", *often, log=messages.append)
    assert f"resumed {tmp_path / 'b'} at step 25" in messages
    assert resumed.step == straight.step == 30
    a, b = weights(tmp_path / "a" / "last"), weights(tmp_path / "b" / "last")
    assert all(torch.equal(a[k], b[k]) for k in a)
    losses = [[r["loss"] for r in metrics(tmp_path / run) if "loss" in r] for run in "ab"]
    assert losses[0] == losses[1] and len(losses[0]) == 30
    valid_steps = [r["step"] for r in metrics(tmp_path / "b") if "valid_loss" in r]
    assert valid_steps == [10, 20, 30]
    history = sorted(p.name for p in (tmp_path / "b" / "history").iterdir())
    assert history == [f"step-{s:08d}.safetensors" for s in (10, 20, 30)]


def test_resume_after_kill_9(word_task_data, tmp_path):
    """A run killed (-9, in a process of its own) after its step-10 save resumes to the
    weights of an uninterrupted run (the reference run and the resume run in-process)."""
    args = [
        "train",
        "--config",
        "tiny-ar",
        "--no-progress",
        f"data={word_task_data}",
        *FAST,
        "valid_every=10",
        "model.dropout=0.1",  # training draws from torch's generator, which resumes too
    ]
    assert main([*args, f"out={tmp_path / 'a'}", "max_steps=40"]) == 0
    proc = subprocess.Popen(
        [sys.executable, "-m", "gmlm", *args, f"out={tmp_path / 'b'}", "max_steps=40"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    # No deadline (a loaded machine may take minutes): the run ends by itself in any case.
    while proc.poll() is None and checkpoint_step(tmp_path / "b" / "last") < 10:
        time.sleep(0.01)
    proc.kill()  # SIGKILL; does nothing if the run already ended
    code = proc.wait()
    assert code == -signal.SIGKILL, f"the run ended (exit code {code}) before it was killed"
    assert 10 <= checkpoint_step(tmp_path / "b" / "last") < 40
    assert main([*args, f"out={tmp_path / 'b'}", "max_steps=40"]) == 0
    a, b = weights(tmp_path / "a" / "last"), weights(tmp_path / "b" / "last")
    assert all(torch.equal(a[k], b[k]) for k in a)
    steps = [r["step"] for r in metrics(tmp_path / "b") if "loss" in r]
    assert steps == list(range(1, 41))  # no step logged twice after the resume


def test_a_second_run_on_the_same_out_fails_until_the_first_is_gone(
    word_task_data, tmp_path, capsys
):
    """Two `gmlm train ... out=SAME`: the second fails at once naming the folder and the first
    run's PID, and writes nothing; once the first is killed (-9) the folder resumes."""
    run = tmp_path / "run"
    args = ["train", "--config", "tiny-ar", "--no-progress", f"data={word_task_data}", *FAST]
    args += [f"out={run}", "valid_every=5"]
    first = subprocess.Popen(
        [sys.executable, "-m", "gmlm", *args, "max_steps=100000"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        while first.poll() is None and checkpoint_step(run / "last") < 5:
            time.sleep(0.01)
        config = (run / "config.yaml").read_text()
        assert main([*args, "max_steps=5"]) == 2  # (at or past it: nothing to train)
        err = capsys.readouterr().err
        assert f"gmlm: error: out={run} is in use by another gmlm process (PID {first.pid})" in err
        assert (run / "config.yaml").read_text() == config
    finally:
        first.kill()
        first.wait()
    step = checkpoint_step(run / "last")
    assert step >= 5
    assert main([*args, f"max_steps={step + 5}"]) == 0
    assert checkpoint_step(run / "last") == step + 5


def checkpoint_step(folder: Path) -> int:
    """The step of the checkpoint in `folder`; 0 while there is none, also in the instant a
    new one replaces it (the old folder is moved aside first)."""
    try:
        return int(json.loads((folder / "state.json").read_text())["step"])
    except FileNotFoundError:
        return 0


def test_checkpoint_averaging(word_task_data, tmp_path):
    # more kept than averaged: the average is of the newest `average_last`, not the oldest
    train(
        word_task_data,
        tmp_path / "r",
        "ar",
        "max_steps=30",
        "valid_every=10",
        "keep_history=3",
        "average_last=2",
    )
    history = sorted((tmp_path / "r" / "history").glob("*.safetensors"))
    assert [p.name for p in history] == [f"step-{s:08d}.safetensors" for s in (10, 20, 30)]
    newest = [load_file(str(p)) for p in history[1:]]
    averaged = weights(tmp_path / "r" / "averaged")
    assert set(averaged) == set(newest[0])
    for key, value in averaged.items():
        mean = ((newest[0][key].double() + newest[1][key].double()) / 2).float()
        assert torch.equal(value, mean), key
    meta = json.loads((tmp_path / "r" / "averaged" / "meta.json").read_text())
    assert meta["averaged"] == [p.name for p in history[1:]]
    # Every file and folder of the run has the permissions the umask gives, safetensors' too
    # (which it writes private), as the released checkpoints have.
    umask = os.umask(0)
    os.umask(umask)
    for path in [*(tmp_path / "r").rglob("*")]:
        if path.name != ".gmlm.lock":
            wanted = (0o777 if path.is_dir() else 0o666) & ~umask
            assert stat.S_IMODE(path.stat().st_mode) == wanted, path


def test_vocab_size_comes_from_the_data_and_a_different_one_is_an_error(word_task_data, tmp_path):
    pieces = Tokenizer.load(word_task_data).vocab_size
    paths = [f"data={word_task_data}", f"out={tmp_path / 'r'}"]
    other = load_train_config("tiny-ar", [*paths, "model.vocab_size=123"])
    with pytest.raises(
        ConfigError,
        match=rf"model\.vocab_size=123, but the tokenizer of data=.* has {pieces} pieces",
    ):
        Trainer(other, progress=False)  # it used to be replaced silently
    assert not (tmp_path / "r").exists()
    unset = load_train_config("tiny-ar", paths)
    assert unset.model.vocab_size == 0  # "from the data", until the data is read
    assert Trainer(unset, progress=False).cfg.model.vocab_size == pieces
    same = load_train_config("tiny-ar", [*paths, f"model.vocab_size={pieces}"])
    assert Trainer(same, progress=False).cfg.model.vocab_size == pieces


def test_bad_configs_and_resume_errors(word_task_data, tmp_path):
    with pytest.raises(ConfigError, match=r"unknown config key 'optim\.lrr'"):
        load_train_config("tiny-ar", ["optim.lrr=1"])
    no_data = r"^no data: pass data=DIR \(a folder made by `gmlm data prepare`\)$"
    with pytest.raises(GmlmError, match=no_data):
        Trainer(load_train_config("tiny-ar", [f"out={tmp_path}"]))
    with pytest.raises(GmlmError, match=no_data):  # the same words where throughput reads it
        measure_throughput(load_train_config("tiny-ar", []), ThroughputSettings(steps=1))
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


def test_out_must_be_a_run_folder(word_task_data, tmp_path):
    run = tmp_path / "r"
    train(word_task_data, run, "ar", "max_steps=2", "valid_every=2")
    dataset = tmp_path / "data"
    shutil.copytree(word_task_data, dataset)
    refused = {
        run / "best": "is a checkpoint folder .*model.safetensors.*choose a new out=",
        dataset: "is a prepared dataset folder .*manifest.json.*pass it as data=",
        run / "config.yaml": "is a file, not a folder",
        tmp_path / "mine": r"not a gmlm run folder \(it holds config.yaml, notes.txt;",
        run / "best" / "sub": r"lies inside .*best, a checkpoint folder",
        tmp_path / "notes.txt" / "sub": r"sub: .*notes.txt is a file, not a folder",
        run / "config.yaml" / "sub": r"sub: .*config.yaml is a file, not a folder",
    }
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("mine")
    (tmp_path / "mine" / "config.yaml").write_text("kind: ar\n")
    (tmp_path / "notes.txt").write_text("mine")
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    for out, message in refused.items():
        with pytest.raises(GmlmError, match=message):
            train(word_task_data, out, "ar", "max_steps=4")
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before
    assert load_for_inference(run / "best").kind == "ar"
    # A run folder resumes, also with a file of the user's in it; an empty folder starts one.
    (run / "notes.txt").write_text("mine")
    assert train(word_task_data, run, "ar", "max_steps=4", "valid_every=2").step == 4
    assert [r["step"] for r in metrics(run) if "loss" in r] == [1, 2, 3, 4]
    assert (run / "notes.txt").read_text() == "mine"
    (tmp_path / "empty").mkdir()
    assert train(word_task_data, tmp_path / "empty", "ar", "max_steps=1").step == 1


def test_run_killed_while_replacing_last_resumes(word_task_data, tmp_path):
    run = tmp_path / "r"
    train(word_task_data, run, "ar", "max_steps=2", "valid_every=2")
    # replace_dir's first rename done, its second not: `last` waits in .last.old-*/last.
    (run / ".last.old-x").mkdir()
    (run / "last").rename(run / ".last.old-x" / "last")
    (run / ".last.tmp-y").mkdir()
    messages = []
    assert train(word_task_data, run, "ar", "max_steps=3", "valid_every=3", log=messages.append)
    assert f"resumed {run} at step 2" in messages
    assert [r["step"] for r in metrics(run) if "loss" in r] == [1, 2, 3]
    assert sorted(p.name for p in run.iterdir() if p.name.startswith(".")) == []


def test_nan_loss_stops_and_keeps_last_checkpoint(word_task_data, tmp_path, monkeypatch):
    train(word_task_data, tmp_path / "r", "ar", "max_steps=10", "valid_every=10")
    before = weights(tmp_path / "r" / "last")
    original = LossModule.forward

    def poisoned(self, src, tgt, generator):
        token_sum, length_sum = original(self, src, tgt, generator)
        return token_sum * float("nan"), length_sum

    monkeypatch.setattr(LossModule, "forward", poisoned)
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
    # Same global batches (8 sentences: 4 per process vs 8 in one), fp32, no dropout; on the
    # CPU (gloo) also where CUDA is present: one GPU cannot serve two processes.
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
        "device=cpu",
    ]
    assert main(["train", *common, f"out={tmp_path / 'one'}", "max_sentences=8"]) == 0
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    double = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",  # rendezvous on a free port of localhost, not a fixed one
            "--nproc_per_node",
            "2",
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
            "device=cpu",
        ]
    )
    assert code == 0
    printed = capsys.readouterr().out.strip().splitlines()
    report = json.loads(printed[-1])
    assert set(report["tokens_per_s"]) == set(report["rates"]) == {"fp32", "bf16"}
    assert all(len(rates) == 1 for rates in report["rates"].values())
    settings = report["settings"]
    assert (settings["threads"], settings["timed_steps"], settings["warmup_steps"]) == (1, 1, 1)
    assert settings["auto_precision"] == "fp32"  # on every CPU
    assert settings["cpu"] == cpu_model()
    assert printed[-2] == precision_verdict(ThroughputReport(**report_fields(report)))


def report_fields(report):
    return {k: report[k] for k in ("settings", "tokens_per_s", "speedup_median", "rates")}


@pytest.mark.parametrize(
    ("speedup", "device", "auto", "end"),
    [
        (
            0.62,
            "cpu",
            "bf16",
            "on EPYC: precision=auto picks bf16 here; set precision=fp32 for speed",
        ),
        (1.80, "cpu", "bf16", "on EPYC: precision=auto (bf16) is the faster choice here"),
        (1.03, "cpu", "bf16", "on EPYC: within 5%, either precision (precision=auto: bf16)"),
        (
            1.50,
            "cuda:0",
            "fp32",
            "on cuda:0: precision=auto picks fp32 here; set precision=bf16 for speed",
        ),
    ],
)
def test_precision_verdict_measures_rather_than_assumes(speedup, device, auto, end):
    settings = {"device": device, "cpu": "EPYC", "auto_precision": auto}
    verdict = precision_verdict(ThroughputReport(settings, {}, speedup, {}))
    assert verdict == f"bf16 autocast trained at {speedup:.2f}x the fp32 rate {end}"


def test_throughput_statistics_follow_from_known_step_times(word_task_data, monkeypatch):
    # A fake clock that moves only inside the loss forward, by these seconds per call: the
    # first call of each precision is the warm-up; dyadic values keep every sum exact.
    seconds = {"fp32": [8.0, 0.5, 0.25, 0.75], "bf16": [0.0625, 0.25, 0.5, 0.125]}
    tokens, clock = fake_step_clock(monkeypatch, lambda name, call: seconds[name][call])
    cfg = load_train_config("tiny-ar", [f"data={word_task_data}", "threads=1", "device=cpu"])
    report = measure_throughput(cfg, ThroughputSettings(steps=3, warmup=1), clock=clock)
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


def test_throughput_of_one_precision(word_task_data, capsys):
    cfg = load_train_config("tiny-ar", [f"data={word_task_data}", "threads=1", "device=cpu"])
    report = measure_throughput(cfg, ThroughputSettings(1, 0, ("fp32",)))
    assert set(report.rates) == set(report.tokens_per_s) == {"fp32"}
    assert report.speedup_median is None
    assert precision_verdict(report) == (
        "bf16 against fp32 not measured (timed: fp32); precision=auto picks fp32 here"
    )
    with pytest.raises(GmlmError, match="give fp32 and/or bf16"):
        measure_throughput(cfg, ThroughputSettings(1, 0, ("int8",)))  # type: ignore[arg-type]
    # Steps the timing cannot take (-2 timed and 2 warm-up steps collected no batch at all).
    for steps, warmup, message in ((-2, 2, "steps=-2"), (0, 2, "steps=0"), (1, -1, "warmup=-1")):
        with pytest.raises(GmlmError, match=f"^{message} must be between"):
            measure_throughput(cfg, ThroughputSettings(steps, warmup, ("fp32",)))
    with pytest.raises(SystemExit) as exit_info:
        main(["throughput", "--precision", "int8", f"data={word_task_data}"])
    assert exit_info.value.code == 2
    assert "choose from fp32, bf16" in capsys.readouterr().err


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
    loaded = load_for_inference(tmp_path / "x")
    assert all(p.dtype == torch.float32 for p in loaded.model.parameters())
    import gmlm

    assert len(gmlm.load(tmp_path / "x").translate(["der Hund läuft.", ""])) == 2


def test_export_never_writes_over_what_it_did_not_write(word_task_data, tmp_path, capsys):
    """Not its input, not a run's checkpoints (`last` must stay resumable), not a folder of
    another kind; an earlier export only with --force."""
    run = tmp_path / "r"
    train(word_task_data, run, "ar", "max_steps=2", "valid_every=2")
    before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("mine")
    refused = {
        (run, run / "last"): "--out .*last lies inside --checkpoint .*r, which this command",
        (run / "best", run / "best"): "is the --checkpoint folder this command reads",
        (run / "best", run / "exported"): r"lies inside .*r, a training run folder",
        (run / "best", run): "holds --checkpoint",
        (run, tmp_path / "mine"): "is not empty and is not a gmlm export; refusing",
    }
    for (source, out), message in refused.items():
        assert main(["export", "--checkpoint", str(source), "--out", str(out), "--force"]) == 2
        err = capsys.readouterr().err
        assert re.search(message, err) and err.count("\n") == 1, err
    assert {p: p.read_bytes() for p in run.rglob("*") if p.is_file()} == before
    assert (tmp_path / "mine" / "notes.txt").read_text() == "mine"
    args = ["export", "--checkpoint", str(run), "--out", str(tmp_path / "x")]
    assert main(args) == 0
    assert main(args) == 2
    assert "holds a gmlm export written earlier; pass --force" in capsys.readouterr().err
    assert main([*args, "--force", "--precision", "fp32"]) == 0
    assert all(t.dtype == torch.float32 for t in weights(tmp_path / "x").values())
    # The resumable `last` is intact: training goes on from it.
    assert train(word_task_data, run, "ar", "max_steps=3", "valid_every=2").step == 3


def test_a_failed_checkpoint_save_keeps_the_previous_last(word_task_data, tmp_path, monkeypatch):
    """A full disk at the step-4 save is one error; `last` keeps step 2, and the same command
    resumes from it once there is room."""
    run = tmp_path / "r"
    real_save = ckpt.save_tensors

    def full_at_step_4(tensors, path):  # type: ignore[no-untyped-def]
        last = run / "last" / "state.json"
        saving = path.name == "optimizer.safetensors" and last.is_file()
        if saving and json.loads(last.read_text())["step"] == 2:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_save(tensors, path)

    monkeypatch.setattr(ckpt, "save_tensors", full_at_step_4)
    with pytest.raises(GmlmError) as caught:
        train(word_task_data, run, "ar", "max_steps=6", "valid_every=2")
    assert str(caught.value).startswith(
        f"cannot write {run / 'last'}: No space left on device; free some space"
    )
    assert "Saving step 4 failed; the checkpoint of step 2 in it is intact" in str(caught.value)
    assert json.loads((run / "last" / "state.json").read_text())["step"] == 2
    assert load_for_inference(run / "last").kind == "ar"
    assert not [p.name for p in run.iterdir() if p.name.startswith(".")]  # no temporary folder
    monkeypatch.undo()
    assert train(word_task_data, run, "ar", "max_steps=6", "valid_every=2").step == 6
    assert [r["step"] for r in metrics(run) if "loss" in r] == [1, 2, 3, 4, 5, 6]


def test_a_full_disk_at_the_start_of_training_is_one_line(
    word_task_data, tmp_path, monkeypatch, capsys
):
    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full)
    argv = ["train", "--config", "tiny-ar", f"data={word_task_data}", f"out={tmp_path / 'r'}"]
    assert main([*argv, "max_steps=2", "threads=1", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"gmlm: error: cannot write {tmp_path / 'r' / 'config.yaml'}: No space")
    assert err.count("\n") == 1


LONG_VALID, EMPTY_VALID = 2, 5  # the valid lines the preparation drops


@pytest.fixture(scope="module")
def long_valid_data(tmp_path_factory):
    """Data prepared with max_len 64, the tiny models' maximum (as the reproduction presets
    do), whose valid split holds a sentence longer than that and an empty one."""
    root = tmp_path_factory.mktemp("longvalid")
    src, tgt = make_pairs(1000, seed=1)
    corpus = write_corpus(root, src, tgt)
    valid_src, valid_tgt = make_pairs(30, seed=7)
    valid_src[LONG_VALID] = "Hund " * 80
    valid_src[EMPTY_VALID] = ""
    tsv = write_lines(
        root / "v.tsv", [f"{s}\t{t}" for s, t in zip(valid_src, valid_tgt, strict=True)]
    )
    cfg = tiny_config(corpus, valid=f"tsv:{tsv}")
    assert cfg.filter.max_len == load_train_config("tiny-ar", []).model.max_source_len
    return prepare_dataset(cfg, root / "data"), valid_src, valid_tgt


def test_validation_scores_the_pairs_the_dataset_kept(long_valid_data):
    data, valid_src, valid_tgt = long_valid_data
    prepared = load_dataset(data)
    kept = [i for i in range(30) if i not in (LONG_VALID, EMPTY_VALID)]
    pairs = validation_pairs(prepared, 50)
    assert (pairs.pairs, pairs.kept, pairs.skipped) == (30, 28, 2)
    assert pairs.dropped == {"empty": 1, "too_long": 1, "length_ratio": 0}
    assert pairs.references == [normalize(valid_tgt[i]) for i in kept]
    decoded = [prepared.tokenizer.decode(ids) for ids in pairs.sources]
    assert decoded == [normalize(valid_src[i]) for i in kept]
    first = validation_pairs(prepared, 3)
    assert first.references == pairs.references[:3] and first.sources == pairs.sources[:3]
    assert "2 of the 30 valid pairs skipped" in pairs.describe()
    assert "1 empty, 1 too_long" in pairs.describe()


def test_over_length_valid_sentence_does_not_stop_training(long_valid_data, tmp_path):
    data, _, _ = long_valid_data
    messages = []
    extra = ("max_steps=2", "valid_every=1", "valid_sentences=50")
    result = train(data, tmp_path / "r", "ar", *extra, log=messages.append)
    assert result.step == 2
    assert [r["step"] for r in metrics(tmp_path / "r") if "valid_bleu" in r] == [1, 2]
    assert any("2 of the 30 valid pairs skipped" in m for m in messages)


def test_validation_error_loses_no_step(word_task_data, tmp_path, monkeypatch):
    settings = ("max_steps=4", "valid_every=2", "valid_sentences=8")
    train(word_task_data, tmp_path / "a", "padir", *settings)
    from gmlm.training import trainer as trainer_module

    original = trainer_module.validate

    def broken(*args, **kwargs):
        raise RuntimeError("decoder exploded")

    monkeypatch.setattr(trainer_module, "validate", broken)
    with pytest.raises(
        GmlmError,
        match=r"validation at step 2 failed: RuntimeError: decoder "
        r"exploded\. Training up to step 2 is saved in .*last.*repeats this",
    ):
        train(word_task_data, tmp_path / "b", "padir", *settings)
    state = json.loads((tmp_path / "b" / "last" / "state.json").read_text())
    assert state["step"] == 2 and state["validation_pending"] is True
    monkeypatch.setattr(trainer_module, "validate", original)
    resumed = train(word_task_data, tmp_path / "b", "padir", *settings)
    assert resumed.step == 4
    a, b = weights(tmp_path / "a" / "last"), weights(tmp_path / "b" / "last")
    assert all(torch.equal(a[k], b[k]) for k in a)
    timing = ("target_tokens_per_s", "elapsed_s")
    rows = [{k: v for k, v in r.items() if k not in timing} for r in metrics(tmp_path / "a")]
    assert [
        {k: v for k, v in r.items() if k not in timing} for r in metrics(tmp_path / "b")
    ] == rows
    assert [r["step"] for r in rows if "valid_loss" in r] == [2, 4]  # step 2 validated once
    final = json.loads((tmp_path / "b" / "last" / "state.json").read_text())
    assert final["validation_pending"] is False
    assert final["best"] == json.loads((tmp_path / "a" / "last" / "state.json").read_text())["best"]


def test_data_must_fit_with_its_eos(word_task_data, tmp_path):
    prepared = load_dataset(word_task_data)
    splits = [prepared.split(name) for name in ("train", "valid")]
    longest_src = max(int(s.src_lengths.max()) for s in splits)
    longest_tgt = max(int(s.tgt_lengths.max()) for s in splits)

    def trainer(*extra):
        cfg = load_train_config("tiny-ar", [f"data={word_task_data}", f"out={tmp_path}", *extra])
        return Trainer(cfg, progress=False, log=lambda _m: None)

    fits = [f"model.max_source_len={longest_src + 1}", f"model.max_target_len={longest_tgt + 1}"]
    trainer(*fits)
    with pytest.raises(GmlmError, match=f"sources up to {longest_src + 1} .*max_source_len"):
        trainer(fits[1], f"model.max_source_len={longest_src}")
    with pytest.raises(GmlmError, match=f"targets up to {longest_tgt + 1} tokens"):
        trainer(fits[0], f"model.max_target_len={longest_tgt}")


@pytest.mark.parametrize(("precision", "expected"), [("auto", None), ("fp32", None)])
def test_precision_auto_is_fp32_on_every_cpu(precision, expected):
    """auto depends on the device type only (never on CPU flags), so a run means the same on
    every CPU; bf16 on a CPU is taken only when asked for."""
    from gmlm.training.config import TrainConfig
    from gmlm.training.precision import resolve_precision

    cpu = torch.device("cpu")
    assert resolve_precision(TrainConfig(precision=precision), cpu) is expected
    assert resolve_precision(TrainConfig(precision="bf16"), cpu) is torch.bfloat16


def test_sigterm_stops_after_the_step_in_progress_with_last_saved(word_task_data, tmp_path):
    """A stop signal during a step: the step finishes, `last` is written at it (no save was
    due: save_minutes=0, no validation), the command exits 128 + SIGTERM saying how to resume
    and ignores further signals while it exits, and the resumed run equals an uninterrupted
    one."""
    settings = ["max_steps=12", "valid_every=100", "save_minutes=0"]
    straight = train(word_task_data, tmp_path / "a", "ar", *settings)
    original = Trainer.train_step

    def signalled_in_step_5(self):
        if self.step == 4:  # the 5th step
            os.kill(os.getpid(), signal.SIGTERM)
        return original(self)

    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    args = ["train", "--config", "tiny-ar", "--no-progress", f"data={word_task_data}", *FAST]
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(Trainer, "train_step", signalled_in_step_5)
            code = main([*args, f"out={tmp_path / 'b'}", *settings])
        assert code == 128 + signal.SIGTERM
        assert all(signal.getsignal(sig) is signal.SIG_IGN for sig in handlers)
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    state = json.loads((tmp_path / "b" / "last" / "state.json").read_text())
    assert (state["step"], state["validation_pending"]) == (5, False)
    assert [r["step"] for r in metrics(tmp_path / "b")] == [1, 2, 3, 4, 5]
    assert main([*args, f"out={tmp_path / 'b'}", *settings]) == 0
    a, b = weights(tmp_path / "a" / "last"), weights(tmp_path / "b" / "last")
    assert straight.step == 12 and all(torch.equal(a[k], b[k]) for k in a)


def test_signals_after_the_first_change_nothing_but_say_so(word_task_data, tmp_path, capfd):
    """Ctrl-C pressed again during the step in progress and during the save of `last`: the
    run still saves that step whole and stops with the first signal's message; each signal
    says on stderr what is going on; the handlers are put back."""
    original_step, original_save = Trainer.train_step, Trainer.save_last

    def signalled(self):
        if self.step == 2:  # during the 3rd step
            os.kill(os.getpid(), signal.SIGTERM)
            os.kill(os.getpid(), signal.SIGINT)
        return original_step(self)

    def interrupted_save(self, validate=True):
        os.kill(os.getpid(), signal.SIGINT)
        original_save(self, validate)
        os.kill(os.getpid(), signal.SIGINT)

    cfg = load_train_config(
        "tiny-ar",
        [f"data={word_task_data}", f"out={tmp_path}", *FAST, "max_steps=9", "save_minutes=0"],
    )
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Trainer, "train_step", signalled)
        patch.setattr(Trainer, "save_last", interrupted_save)
        with pytest.raises(GmlmError, match=r"stopped by SIGTERM after step 3 of 9, saved in"):
            Trainer(cfg, progress=False, log=lambda _m: None).run()
    assert {sig: signal.getsignal(sig) for sig in handlers} == handlers
    assert ckpt.check_run_folder(tmp_path)  # `last` is a whole checkpoint
    state = json.loads((tmp_path / "last" / "state.json").read_text())
    assert state["step"] == 3
    said = capfd.readouterr().err.splitlines()
    assert len(said) == 4
    assert said[0].startswith("gmlm: SIGTERM: stopping after the step in progress")
    assert all(line.startswith("gmlm: SIGINT again: already stopping") for line in said[1:])
    assert all(f"kill -9 {os.getpid()}" in line for line in said)


def test_three_quick_ctrl_c_stop_a_training_cleanly(word_task_data, tmp_path):
    """A real process, three SIGINTs: the first during a step, the second right after it
    (during the step or the save; or coalesced with the first by the system), the third once
    the process reports the stop (while it exits). No traceback: the stop message, exit
    status 130, `last` saved whole at the step the message names."""
    run = tmp_path / "run"
    args = [sys.executable, "-m", "gmlm", "train", "--config", "tiny-ar", "--no-progress"]
    args += [f"data={word_task_data}", f"out={run}", *FAST, "max_steps=100000"]
    args += ["valid_every=100000", "save_minutes=0"]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    # No deadline (a loaded machine may take minutes): the run stops on the signals.
    while proc.poll() is None and not (
        (run / "metrics.jsonl").is_file() and len(metrics(run)) >= 3
    ):
        time.sleep(0.01)
    proc.send_signal(signal.SIGINT)
    time.sleep(0.001)
    proc.send_signal(signal.SIGINT)
    lines = []
    for line in proc.stderr:
        lines.append(line)
        if "stopped by SIGINT" in line:
            proc.send_signal(signal.SIGINT)  # during the exit
    assert proc.wait() == 128 + signal.SIGINT, "".join(lines)
    text = "".join(lines)
    assert "Traceback" not in text and "interrupted" not in text, text
    step = json.loads((run / "last" / "state.json").read_text())["step"]
    assert f"stopped by SIGINT after step {step} of 100000, saved in {run / 'last'}" in text
    assert [r["step"] for r in metrics(run)] == list(range(1, step + 1))


def test_each_process_of_a_cuda_run_needs_a_gpu_of_its_own(monkeypatch):
    """Under torchrun a CUDA device becomes the local rank's GPU; a rank beyond the visible
    GPUs is a clean error before the process group is joined (checked without a GPU)."""
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert process_device(torch.device("cuda:0")) == torch.device("cuda:1")
    assert process_device(torch.device("cpu")) == torch.device("cpu")
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.raises(GmlmError, match=r"but 1 is visible: .*--nproc_per_node 1.*device=cpu"):
        process_device(torch.device("cuda:0"))
    monkeypatch.setenv("WORLD_SIZE", "1")
    assert process_device(torch.device("cuda:0")) == torch.device("cuda:0")


@pytest.mark.parametrize(("bf16_seconds", "chosen"), [(0.25, "bf16"), (2.0, "fp32"), (1.0, "bf16")])
def test_auto_precision_follows_a_measurement(
    word_task_data, tmp_path, monkeypatch, bf16_seconds, chosen
):  # type: ignore[no-untyped-def]
    """Where bf16 is an option (a bf16 GPU; made so here by resolve_precision), precision=auto
    trains in what a few timed steps of each show to be faster (a tie: bf16), on the run's own
    batches and copies of its model, and records it: a fake clock moves 1 s per fp32 forward
    and `bf16_seconds` per bf16 one."""
    step = {"fp32": 1.0, "bf16": bf16_seconds}
    _, clock = fake_step_clock(monkeypatch, lambda name, call: step[name])
    monkeypatch.setattr(trainer_module, "resolve_precision", lambda cfg, device: torch.bfloat16)
    real = trainer_module.measured_precision
    monkeypatch.setattr(
        trainer_module,
        "measured_precision",
        lambda cfg, model, batches: real(cfg, model, batches, clock=clock),
    )
    common = [f"data={word_task_data}", f"out={tmp_path / 'run'}", "threads=1", "device=cpu"]
    cfg = load_train_config("tiny-ar", [*common, "precision=auto"])
    before = [p.detach().clone() for p in Trainer(cfg, progress=False).model.parameters()]
    trainer = Trainer(cfg, progress=False, log=lambda _msg: None)
    assert precision_name(trainer.dtype) == chosen
    assert set(trainer.precision_rates) == {"fp32", "bf16"}
    # The measurement trained copies: the run's model starts where it would have.
    for a, b in zip(before, trainer.model.parameters(), strict=True):
        assert torch.equal(a, b)
    # precision=fp32 or bf16 as asked: no measurement.
    asked = load_train_config("tiny-ar", [*common, "precision=fp32"])
    assert Trainer(asked, progress=False).precision_rates == {}


def test_model_flop_utilisation_and_peaks() -> None:
    from gmlm.training.throughput import PEAKS, model_flop_utilisation, peak_tflops

    # 6 x 15M parameters x 250k tokens/s = 22.5 TFLOP/s: 2.3% of an H100's bf16 peak.
    assert model_flop_utilisation(15_000_000, 250_000, 989.4) == pytest.approx(22.5 / 989.4)
    assert model_flop_utilisation(15_000_000, 250_000, None) is None
    assert peak_tflops(torch.device("cpu")) is None
    # A PCIe H100 is found before the SXM entry that its name also contains.
    names = [key for key, _ in PEAKS]
    assert names.index("H100 PCIe") < names.index("H100")
