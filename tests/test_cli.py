import subprocess
import sys

from gmlm.cli.main import main


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
