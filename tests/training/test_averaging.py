"""`gmlm average` (gmlm.training.averaging.average_run): a range of a run's kept history
weights averaged into a checkpoint folder, equal to the mean computed here and to the run's
own `averaged/` over the same steps; bad ranges, folders that are no run and outputs that
are not new are errors that say what to do."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

import gmlm
from gmlm.cli.main import main
from gmlm.training.averaging import history_steps
from tests.helpers.training import train, weights

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def run(word_task_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny AR run of 40 steps that keeps the weights of steps 10, 20, 30 and 40, and
    averages the newest 2 at its end."""
    folder = tmp_path_factory.mktemp("avg") / "run"
    train(
        word_task_data,
        folder,
        "ar",
        "max_steps=40",
        "valid_every=10",
        "keep_history=4",
        "average_last=2",
    )
    assert list(history_steps(folder)) == [10, 20, 30, 40]
    return folder


def _mean(files: list[Path]) -> dict[str, torch.Tensor]:
    loaded = [load_file(str(f)) for f in files]
    return {key: (sum(t[key].double() for t in loaded) / len(loaded)).float() for key in loaded[0]}


def test_a_range_of_steps_averages_to_the_mean_of_its_files(
    run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "avg-10-30"
    assert (
        main(["average", "--run", str(run), "--out", str(out), "--first", "10", "--last", "30"])
        == 0
    )
    assert "the mean of 3 checkpoint(s)" in capsys.readouterr().out
    kept = history_steps(run)
    expected = _mean([kept[10], kept[20], kept[30]])
    got = weights(out)
    assert set(got) == set(expected)
    assert all(torch.equal(got[key], expected[key]) for key in expected)
    meta = json.loads((out / "meta.json").read_text())
    assert meta["step"] == 30
    assert meta["averaged"] == [kept[s].name for s in (10, 20, 30)]
    assert gmlm.load(out, device="cpu").translate(["der Hund läuft."])  # a checkpoint


def test_the_runs_own_average_is_the_same_range_averaged_again(run: Path, tmp_path: Path) -> None:
    out = tmp_path / "avg"
    assert main(["average", "--run", str(run), "--out", str(out), "--first", "30"]) == 0
    own, again = weights(run / "averaged"), weights(out)
    assert all(torch.equal(own[key], again[key]) for key in own)
    assert json.loads((out / "meta.json").read_text()) == json.loads(
        (run / "averaged" / "meta.json").read_text()
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--first", "11", "--last", "19"],
            r"no kept weights between steps 11 and 19; its "
            r"history keeps 4 step\(s\), 10 to 40: 10, 20, 30, 40",
        ),
        (["--first", "30", "--last", "20"], r"--first 30 is after --last 20"),
    ],
)
def test_a_range_with_no_kept_step_is_an_error_listing_those_kept(
    run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    out = tmp_path / "x"
    assert main(["average", "--run", str(run), "--out", str(out), *args]) == 2
    assert re.search(message, capsys.readouterr().err)
    assert not out.exists()


def test_what_is_not_a_run_or_not_a_new_output_is_refused(
    run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def refused(run_arg: Path, out: Path) -> str:
        assert main(["average", "--run", str(run_arg), "--out", str(out)]) == 2
        return capsys.readouterr().err

    assert "not a training run folder" in refused(run / "averaged", tmp_path / "a")
    assert "not a training run folder" in refused(tmp_path / "missing", tmp_path / "a")
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "notes.txt").write_text("mine\n")
    assert "--out" in refused(run, taken)
    assert (taken / "notes.txt").read_text() == "mine\n"  # left as it was
    assert "--out" in refused(run, run / "inside")  # never inside the run
    assert not (run / "inside").exists()
