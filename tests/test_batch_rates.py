"""tools/batch_rates.py, the measurement behind docs/RESULTS.md "Batches by tokens", on tiny
checkpoints: one row per configuration with both models' rates, and a configuration whose
translations differ from the first one's stops the run."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

import pytest
import torch

from gmlm.checkpoint.files import fill_inference_files, write_checkpoint_dir
from gmlm.data.tokenizer import Tokenizer
from gmlm.models import build_model
from gmlm.nn import ModelConfig
from gmlm.training.config import TrainConfig
from gmlm.translation.translator import Translator
from tests.helpers.sentences import sentences
from tests.helpers.tools import load_tool

pytestmark = pytest.mark.usefixtures("one_thread")


def tool() -> ModuleType:
    return load_tool("batch_rates")


@pytest.fixture(scope="module")
def folders(
    tmp_path_factory: pytest.TempPathFactory, tokenizer: Tokenizer, text_config: ModelConfig
) -> tuple[Path, Path, Path]:
    root = tmp_path_factory.mktemp("batch-rates")
    torch.manual_seed(0)
    made = []
    for kind in ("padir", "ar"):
        cfg = TrainConfig(kind=kind, model=text_config)  # type: ignore[arg-type]
        model = build_model(kind, text_config)
        write_checkpoint_dir(
            root / kind,
            lambda tmp, m=model, c=cfg: fill_inference_files(tmp, m, c, tokenizer, {"step": 0}),
        )
        made.append(root / kind)
    source = root / "in.de"
    source.write_text("".join(s + "\n" for s in sentences(20, seed=5)), encoding="utf-8")
    return made[0], made[1], source


def argv(folders: tuple[Path, Path, Path], output: Path) -> list[str]:
    padir, ar, source = folders
    return [
        "--padir", str(padir), "--ar", str(ar), "--input", str(source), "--lines", "12",
        "--rounds", "2", "--configs", "batch_size=2,max_tokens=400", "--steps", "2",
        "--beam", "2", "--output", str(output),
    ]  # fmt: skip


def test_one_row_per_configuration_with_both_models(
    folders: tuple[Path, Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    output = tmp_path / "rates.json"
    assert tool().main(argv(folders, output)) == 0
    result = json.loads(output.read_text(encoding="utf-8"))
    assert [row["config"] for row in result["rows"]] == ["2 sentences", "400 tokens"]
    for row in result["rows"]:
        for kind in ("padir", "ar"):
            assert len(row[kind]["wall_rounds"]) == len(row[kind]["cpu_rounds"]) == 2
            assert row[kind]["wall_median"] > 0
        assert 0 <= row["padir"]["padded_share"] < 1
    assert result["lines"] == 12 and result["identical_outputs"]
    assert "| 400 tokens |" in capsys.readouterr().out


def test_a_configuration_that_changes_an_output_stops_the_run(
    folders: tuple[Path, Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    original = Translator.translate

    def batch_dependent(self: Translator, lines: list[str], **kwargs: object) -> list[str]:
        out = original(self, lines, **kwargs)  # type: ignore[arg-type]
        return [*out[:-1], "changed"] if kwargs.get("max_tokens") == 400 else out

    monkeypatch.setattr(Translator, "translate", batch_dependent)
    with pytest.raises(SystemExit, match="with 400 tokens changed 1 of 12 translations"):
        tool().main(argv(folders, tmp_path / "rates.json"))
    assert not (tmp_path / "rates.json").exists()
