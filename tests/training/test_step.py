"""The training step without host reads (gmlm.training.step): none inside a step, the logged
numbers as before, a non-finite loss still found at its own step, and `gmlm throughput`'s
grouped timing."""

from __future__ import annotations

import copy

import pytest
import torch

from gmlm.data.batching import BatchIterator
from gmlm.data.binarized import TranslationDataset, load_dataset
from gmlm.distributed import DistInfo
from gmlm.errors import GmlmError
from gmlm.training import throughput
from gmlm.training import trainer as trainer_module
from gmlm.training.config import load_train_config
from gmlm.training.objective import LossModule, objective
from gmlm.training.step import LossWatch, NonFinite, optimizer_step
from gmlm.training.throughput import measure_throughput
from gmlm.training.throughput_settings import ThroughputSettings
from gmlm.training.trainer import Trainer
from tests.helpers.syncs import counting_syncs
from tests.helpers.training import FAST, fake_step_clock, metrics, train, weights


@pytest.mark.parametrize(
    ("kind", "extra"),
    [("ar", []), ("padir", []), ("padir", ["accum_steps=3", "padir.stages=2"])],
)
def test_a_training_step_reads_nothing_on_the_host(
    word_task_data, tmp_path, monkeypatch, kind, extra
):
    cfg = load_train_config(
        f"tiny-{kind}", [f"data={word_task_data}", f"out={tmp_path}", *FAST, *extra]
    )
    assert cfg.optim.clip_norm > 0  # the clipped step, as trained
    trainer = Trainer(cfg, progress=False, log=lambda _m: None)
    # The CPU's default AdamW reads its step counters (CPU tensors: no device to wait for);
    # a GPU's is the fused one (gmlm.training.optim), which does not.
    trainer.optimizer = torch.optim.AdamW(trainer.model.parameters(), fused=True)
    trainer.train_step()
    with counting_syncs(monkeypatch) as seen:
        values = [trainer.train_step() for _ in range(3)]
    assert not seen
    # Read when logged: the numbers of the step itself.
    row = values[-1].read(cfg, trainer.dist)
    assert set(row) == {"loss", "token_loss", "length_loss", "lr", "grad_norm"}
    assert all(torch.isfinite(torch.tensor(v)) for v in row.values())
    assert (row["length_loss"] == 0.0) == (kind == "ar")
    # and one read to learn that every loss was finite.
    with counting_syncs(monkeypatch) as seen:
        trainer.check_losses()
    assert seen == {"aten::_local_scalar_dense": 1}


def test_the_logged_rows_are_the_steps_own(word_task_data, tmp_path, monkeypatch):
    # The loss of a logged row is the step's own: what the loss module returned at that step.
    returned: list[float] = []
    original = LossModule.forward

    def recorded(self, src, tgt, generator):  # type: ignore[no-untyped-def]
        token_sum, length_sum = original(self, src, tgt, generator)
        returned.append(float(token_sum.detach()) / int((tgt != self.cfg.model.pad_id).sum()))
        return token_sum, length_sum

    monkeypatch.setattr(LossModule, "forward", recorded)
    train(word_task_data, tmp_path / "r", "ar", "max_steps=9", "valid_every=9", "log_every=4")
    rows = [r for r in metrics(tmp_path / "r") if "loss" in r]
    assert [r["step"] for r in rows] == [4, 8, 9]
    for row in rows:
        assert row["token_loss"] == pytest.approx(returned[row["step"] - 1], rel=1e-6)
        assert row["loss"] == row["token_loss"]  # AR: no length loss


@pytest.mark.parametrize(("log_every", "bad_steps"), [(1, {11, 12}), (5, {13})])
def test_a_non_finite_loss_is_named_at_its_step_and_nothing_after_it_is_saved(
    word_task_data, tmp_path, monkeypatch, log_every, bad_steps
):
    run = tmp_path / "r"
    train(word_task_data, run, "ar", "max_steps=10", "valid_every=10", f"log_every={log_every}")
    before = weights(run / "last")
    original = LossModule.forward
    calls = [10]

    def poisoned(self, src, tgt, generator):  # type: ignore[no-untyped-def]
        calls[0] += 1
        token_sum, length_sum = original(self, src, tgt, generator)
        return token_sum * (float("nan") if calls[0] in bad_steps else 1.0), length_sum

    monkeypatch.setattr(LossModule, "forward", poisoned)
    first = min(bad_steps)
    # The lines named: those of the first bad step's batch (1-based lines of the training text).
    split = TranslationDataset(load_dataset(word_task_data), "train")
    cfg = load_train_config("tiny-ar", [f"data={word_task_data}", f"out={run}"])
    epoch = BatchIterator(
        split, cfg.max_tokens, seed=cfg.seed, max_sentences=cfg.max_sentences or None
    )
    assert len(epoch) > 14  # every step here is in the first epoch
    rows = list(epoch)[first - 1].indices[:20]
    lines = [int(split.lines[r]) + 1 for r in rows]
    with pytest.raises(GmlmError) as raised:
        # A save due at step 14 (valid_every) checks first: no checkpoint holds step 13's NaN.
        train(word_task_data, run, "ar", "max_steps=20", "valid_every=14", f"log_every={log_every}")
    assert str(raised.value).startswith(
        f"non-finite loss at step {first} (micro-batch 0, lines {lines} of the prepared "
        f"training text); nothing was saved after it, the last good checkpoint is {run / 'last'}"
    )
    assert calls[0] == (first if log_every == 1 else 14)  # found at the next check
    after = weights(run / "last")
    assert all(torch.equal(before[k], after[k]) for k in before)


@pytest.mark.parametrize("kind", ["ar", "padir"])
def test_a_step_follows_the_gradient_of_the_mean_losses(word_task_data, tmp_path, kind):
    """With plain SGD at rate 1 and no clipping, two steps of 2 micro-batches each move every
    weight by minus the gradient of that step's objective: the token loss summed over both
    micro-batches over their target tokens, plus the length loss over their sentences
    (PaDIR's noise drawn alike), computed here on a copy; and the step's sums are theirs."""
    cfg = load_train_config(
        f"tiny-{kind}",
        [f"data={word_task_data}", f"out={tmp_path}", *FAST, "optim.clip_norm=0"],
    )
    trainer = Trainer(cfg, progress=False, log=lambda _m: None)
    model, batches = trainer.model, list(trainer.batches)[:4]
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    watch = LossWatch(torch.device("cpu"))
    for step, micro in enumerate((batches[:2], batches[2:]), start=1):
        tokens = float(sum(b.tgt_tokens for b in micro))
        sentences = float(sum(b.size for b in micro))
        reference = copy.deepcopy(model)
        noise_state = trainer.noise.get_state()
        sums = [LossModule(reference, cfg)(b.src, b.tgt, trainer.noise) for b in micro]
        token_sum = sum(t for t, _ in sums)
        length_sum = sum(n for _, n in sums)
        objective(token_sum / tokens, length_sum / sentences, cfg).backward()
        trainer.noise.set_state(noise_state)
        values = optimizer_step(
            cfg,
            model,
            trainer.loss_module,
            optimizer,
            micro,
            (tokens, sentences),
            lr=1.0,
            dtype=None,
            noise=trainer.noise,
            watch=watch,
            step=step,
        )
        assert float(values.token_sum) == pytest.approx(float(token_sum.detach()), rel=1e-6)
        assert float(values.length_sum) == pytest.approx(
            float(length_sum.detach()), rel=1e-6, abs=1e-9
        )
        assert values.grad_norm is None
        for (name, after), before in zip(
            model.named_parameters(), reference.parameters(), strict=True
        ):
            expected = before.detach() - (0 if before.grad is None else before.grad)
            assert torch.allclose(after, expected, atol=1e-6), name
    assert watch.check() is None


def test_loss_watch_finds_the_first_non_finite_loss():
    watch = LossWatch(torch.device("cpu"))
    assert watch.check() is None
    rows = torch.tensor([4, 2])
    for step, value in enumerate([1.0, float("inf"), float("nan"), 2.0], start=1):
        watch.record(torch.tensor(value), NonFinite(step, 0, rows))
    found = watch.check()
    assert found is not None and found.step == 2 and torch.equal(found.rows, rows)
    assert watch.check() is None  # the record starts over
    watch.record(torch.tensor(3.0), NonFinite(5, 0, rows))
    watch.record(torch.tensor(float("nan")), NonFinite(5, 1, rows))
    found = watch.check()
    assert found is not None and (found.step, found.micro_batch) == (5, 1)
    # The very first recorded is not overwritten by a later one.
    watch.record(torch.tensor(float("nan")), NonFinite(6, 0, rows))
    watch.record(torch.tensor(float("nan")), NonFinite(6, 1, rows))
    found = watch.check()
    assert found is not None and (found.step, found.micro_batch) == (6, 0)


def test_throughput_times_groups_of_steps(word_task_data, monkeypatch):
    # 1 s per fp32 step, 0.5 s per bf16 step, plus 8 s on the first (untimed) step of each;
    # groups of 3 steps after 1 warm-up.
    tokens, clock = fake_step_clock(
        monkeypatch,
        lambda name, call: (1.0 if name == "fp32" else 0.5) + (8.0 if not call else 0.0),
    )
    cfg = load_train_config("tiny-ar", [f"data={word_task_data}", "threads=1", "device=cpu"])
    settings = ThroughputSettings(steps=2, warmup=1, group=3)
    report = measure_throughput(cfg, settings, clock=clock)
    assert tokens["fp32"] == tokens["bf16"] and len(tokens["fp32"]) == 7
    groups = [sum(tokens["fp32"][1:4]), sum(tokens["fp32"][4:7])]
    assert report.rates == {"fp32": [g / 3.0 for g in groups], "bf16": [g / 1.5 for g in groups]}
    assert report.speedup_median == 2.0
    assert report.settings["timed_steps"] == 6 and report.settings["steps_per_sample"] == 3


def test_throughput_takes_more_than_one_epoch(word_task_data):
    cfg = load_train_config(
        "tiny-ar", [f"data={word_task_data}", "threads=1", "max_tokens=20000", "max_sentences=0"]
    )
    epoch = BatchIterator(TranslationDataset(load_dataset(word_task_data), "train"), 20000)
    assert len(epoch) < 7  # fewer batches an epoch than the 7 steps asked for
    settings = ThroughputSettings(steps=3, warmup=1, group=2, precisions=("fp32",))
    assert len(measure_throughput(cfg, settings).rates["fp32"]) == 3


def test_throughput_bounds_what_it_times_and_holds(word_task_data, monkeypatch):
    cfg = load_train_config("tiny-ar", [f"data={word_task_data}", "threads=1"])
    with pytest.raises(GmlmError, match=r"^steps=1000 x group=1000 = 1,000,000 timed steps"):
        measure_throughput(cfg, ThroughputSettings(steps=1000, group=1000))
    # More steps than HELD_BATCHES reuse the held batches in turn.
    monkeypatch.setattr(throughput, "HELD_BATCHES", 3)
    seen: list[int] = []
    forward = LossModule.forward

    def recorded(module, src, tgt, generator):  # type: ignore[no-untyped-def]
        seen.append(id(src))
        return forward(module, src, tgt, generator)

    monkeypatch.setattr(LossModule, "forward", recorded)
    settings = ThroughputSettings(steps=4, warmup=1, group=2, precisions=("fp32",))
    measure_throughput(cfg, settings)
    assert len(seen) == 9 and len(set(seen)) == 3
    assert seen == seen[:3] * 3


def test_under_torchrun_every_process_stops_when_any_found_a_non_finite_loss(
    word_task_data, tmp_path, monkeypatch
):
    """The check is a collective: a process whose own losses were finite stops too when
    another's were not (with one process, no collective). The collective is faked here: what
    the other process says is `others`."""
    cfg = load_train_config("tiny-ar", [f"data={word_task_data}", f"out={tmp_path}", *FAST])
    trainer = Trainer(cfg, progress=False, log=lambda _m: None)
    trainer.train_step()
    trainer.check_losses()  # one process: no collective, all finite
    trainer.dist = DistInfo(rank=1, world_size=2)
    calls: list[list[float]] = []

    def others(flag: float):  # type: ignore[no-untyped-def]
        def reduce(values, info):  # type: ignore[no-untyped-def]
            calls.append(values)
            return [values[0] + flag]

        return reduce

    monkeypatch.setattr(trainer_module, "all_reduce_sum", others(0.0))
    trainer.check_losses()
    assert calls == [[0.0]]
    monkeypatch.setattr(trainer_module, "all_reduce_sum", others(1.0))
    with pytest.raises(GmlmError, match=r"^non-finite loss on another process before step 1 "):
        trainer.check_losses()
    # Its own non-finite loss: its own message, after the same collective.
    trainer.watch.record(torch.tensor(float("nan")), NonFinite(2, 0, torch.tensor([0])))
    with pytest.raises(GmlmError, match=r"^non-finite loss at step 2 \(micro-batch 0, lines \[1\]"):
        trainer.check_losses()
    assert calls[-1] == [1.0]
