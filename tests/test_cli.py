import os
import subprocess
import sys
from pathlib import Path

import pytest

from gmlm.cli.main import main

SRC = Path(__file__).resolve().parents[1] / "src"


def test_help_lists_commands(capsys):
    try:
        main(["--help"])
    except SystemExit as exc:
        assert exc.code == 0
    out = capsys.readouterr().out
    assert "theory" in out and "reproduce" in out


def test_python_dash_m_works():
    result = subprocess.run(
        [sys.executable, "-m", "gmlm", "--version"], capture_output=True, text=True, check=True
    )
    assert result.stdout.startswith("gmlm ")


def test_a_closed_stdout_pipe_ends_quietly(tmp_path):
    # `gmlm evaluate ... | head -1`: the reader may be gone before gmlm writes. The read end
    # is closed before gmlm starts, so its first write always meets a broken pipe.
    lines = "".join(f"a dog runs in the park {i}\n" for i in range(50))
    (tmp_path / "hyp.en").write_text(lines)
    (tmp_path / "ref.en").write_text(lines)
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        result = subprocess.run(
            [sys.executable, "-m", "gmlm", "evaluate", "--hyp", "hyp.en", "--ref", "ref.en"],
            cwd=tmp_path,
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": str(SRC)},
            timeout=120,
        )
    finally:
        os.close(write_end)
    assert result.stderr == ""  # no traceback, no "Exception ignored" at exit
    assert result.returncode == 141  # as if killed by SIGPIPE, like other Unix tools


@pytest.mark.parametrize(
    "argv",
    [
        ["reproduce", "--preset", "smoke", "--out", "{file}"],
        ["theory", "figure1", "--out", "{file}"],
        ["theory", "figure3", "--out", "{file}/sub"],
        ["theory", "verify", "--out", "{file}"],
    ],
    ids=["reproduce", "figure1", "figure3-below-a-file", "verify"],
)
def test_an_output_folder_that_is_a_file_is_a_clean_error(argv, tmp_path, capsys):
    file = tmp_path / "taken"
    file.write_text("mine\n")
    assert main([arg.format(file=file) for arg in argv]) == 2
    captured = capsys.readouterr()
    assert captured.err.endswith(f": {file} is a file, not a folder; choose another path\n")
    assert captured.err.startswith("gmlm: error: --out ") and captured.err.count("\n") == 1
    assert file.read_text() == "mine\n"


@pytest.mark.parametrize("value", ["nan", ".inf", "-1e999"])
def test_non_finite_float_settings_are_clean_errors(value, capsys):
    assert main(["train", "--config", "tiny-ar", f"optim.lr={value}", "data=x", "out=y"]) == 2
    assert "gmlm: error: optim.lr=" in capsys.readouterr().err
