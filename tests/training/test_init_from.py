"""`init_from=CHECKPOINT`: a new run starts from a trained checkpoint's weights (fine-tuning),
with a fresh optimizer and step; a checkpoint of another kind, shape or tokenizer is refused
before any step, and a resumed run keeps its own weights."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from gmlm.cli.main import main
from gmlm.data.prepare import prepare_dataset
from gmlm.errors import GmlmError
from tests.helpers.corpora import make_pairs, tiny_config, write_corpus
from tests.helpers.training import FAST, metrics, train, weights

pytestmark = pytest.mark.usefixtures("one_thread")

# One step too small to move a weight measurably: what the run ends with is where it started.
STILL = ["max_steps=1", "valid_every=1", "optim.lr=1e-12", "optim.warmup_steps=0"]
STILL += ["optim.schedule=constant"]


@pytest.fixture(scope="module")
def ar_run(word_task_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("init") / "ar"  # another seed than the runs below
    train(word_task_data, folder, "ar", "max_steps=40", "valid_every=40", "seed=3")
    return folder


def _gap(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    return max(float((a[k].float() - b[k].float()).abs().max()) for k in a)


def test_a_run_starts_from_the_checkpoints_weights(
    ar_run: Path, word_task_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tuned = tmp_path / "tuned"
    argv = ["train", "--config", "tiny-ar", f"data={word_task_data}", f"out={tuned}"]
    argv += [*FAST, *STILL, "model.dropout=0.3", f"init_from={ar_run}"]  # dropout may differ
    assert main([*argv, "--no-progress"]) == 0
    said = capsys.readouterr().out
    assert "steps 0 -> 1" in said  # a fresh step count
    assert f"starting from the weights of {ar_run / 'best'} (init_from)" in said  # its best
    started = weights(ar_run / "best")
    assert _gap(weights(tuned / "last"), started) < 1e-6
    fresh = train(word_task_data, tmp_path / "fresh", "ar", *STILL)
    assert fresh.step == 1 and _gap(weights(tmp_path / "fresh" / "last"), started) > 1e-2

    def valid_loss(run: Path) -> float:
        return float([r for r in metrics(run) if "valid_loss" in r][-1]["valid_loss"])

    # Validated as the checkpoint was at its last step; a fresh model is far worse.
    assert valid_loss(tuned) == pytest.approx(valid_loss(ar_run), rel=1e-5)
    assert valid_loss(tmp_path / "fresh") > valid_loss(ar_run) + 0.1


def test_a_resumed_run_keeps_its_own_weights(
    ar_run: Path, word_task_data: Path, tmp_path: Path
) -> None:
    run = tmp_path / "tuned"
    train(word_task_data, run, "ar", "max_steps=2", "valid_every=2", f"init_from={ar_run}")
    own = weights(run / "last")
    messages: list[str] = []
    train(
        word_task_data,
        run,
        "ar",
        "max_steps=3",
        "valid_every=2",
        "optim.lr=1e-12",
        "optim.min_lr=0",
        f"init_from={ar_run}",
        log=messages.append,
    )
    assert any(m.startswith(f"resumed {run} at step 2") for m in messages)
    assert not any("init_from" in m for m in messages)
    assert _gap(weights(run / "last"), own) < 1e-6


@pytest.fixture(scope="module")
def other_tokenizer_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Data of the same vocabulary size as word_task_data's, with a tokenizer of its own."""
    root = tmp_path_factory.mktemp("other")
    src, tgt = make_pairs(3000, seed=7)
    return prepare_dataset(tiny_config(write_corpus(root, src, tgt)), root / "data")


@pytest.mark.parametrize(
    ("kind", "extra", "message"),
    [
        ("padir", [], r"holds a ar model, this run trains kind=padir"),
        ("ar", ["model.d_model=48"], r"set model\.d_model=32 \(this run: 48\) as the checkpoint"),
        ("ar", ["model.n_decoder_layers=1"], r"set model\.n_decoder_layers=2 \(this run: 1\)"),
        ("ar", ["data={other}"], r"was trained with another tokenizer than the one of data="),
        ("ar", ["init_from={tmp}/nowhere"], r"checkpoint not found: .*nowhere"),
    ],
    ids=["kind", "width", "layers", "tokenizer", "missing"],
)
def test_a_checkpoint_that_does_not_fit_is_refused_before_any_step(
    kind: str,
    extra: list[str],
    message: str,
    ar_run: Path,
    word_task_data: Path,
    other_tokenizer_data: Path,
    tmp_path: Path,
) -> None:
    overrides = [f"init_from={ar_run}"] + [
        e.format(other=other_tokenizer_data, tmp=tmp_path) for e in extra
    ]
    run = tmp_path / "run"
    with pytest.raises(GmlmError, match=message):
        train(word_task_data, run, kind, "max_steps=2", *overrides)
    assert not (run / "last").exists()
