"""No command writes an output over one of its inputs, however the output names it: the same
path, a symbolic link, a hard link (the same file under another name) or the file standard
input reads. One table walks every command that writes a file or folder named on its command
line; each case must be refused with exit status 2 before any work, the input left as it was.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gmlm.cli.main import main
from tests.helpers.outputs import COMMANDS, output_layout

# How the output names the input: the same path, a symbolic link, a hard link (files only).
FORMS = ("same path", "symlink", "hard link")

CASES = [
    pytest.param(command, form, id=f"{command} [{form}]")
    for command, (_, target, _stdin) in COMMANDS.items()
    for form in FORMS
    if not (form == "hard link" and "." not in target)  # a folder has no hard links
]


def _contents(path: Path) -> dict[str, bytes]:
    if path.is_file():
        return {"": path.read_bytes()}
    return {str(p.relative_to(path)): p.read_bytes() for p in path.rglob("*") if p.is_file()}


@pytest.mark.parametrize(("command", "form"), CASES)
def test_no_command_writes_an_output_over_its_input(
    command: str,
    form: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv, target, reads_stdin = COMMANDS[command]
    output_layout(tmp_path)
    protected = tmp_path / target
    out = protected
    if form == "symlink":
        out = tmp_path / "alias"
        out.symlink_to(protected)
    elif form == "hard link":
        out = tmp_path / "alias.txt"
        os.link(protected, out)
    before = _contents(protected)
    if reads_stdin:
        stdin = open(protected, encoding="utf-8")  # noqa: SIM115 (closed below)
        monkeypatch.setattr(sys, "stdin", stdin)
    else:  # a pipe-like stdin that is no file: only the output flags can alias an input
        monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    try:
        status = main([arg.format(tmp=tmp_path, out=out) for arg in argv.split()])
    finally:
        if reads_stdin:
            stdin.close()
    err = capsys.readouterr().err
    assert status == 2, err
    assert "this command reads" in err, err
    assert "Traceback" not in err
    assert _contents(protected) == before


def test_outputs_of_one_command_never_name_one_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two outputs of one command in one file, by path or by hard link: the second written
    would replace the first."""
    output_layout(tmp_path)
    first = tmp_path / "result.json"
    first.write_text("{}\n", encoding="utf-8")
    os.link(first, tmp_path / "linked.md")
    loadtest = ["loadtest", "--input", f"{tmp_path}/in.txt", "--output", str(first)]
    table1 = ["analyze", "table1", "--direction", f"de-en={tmp_path}/ckpt"]
    table1 += ["--multi30k", f"{tmp_path}/m30k", "--output", str(first)]
    for argv in (
        [*loadtest, "--markdown", str(first)],
        [*loadtest, "--plot", str(tmp_path / "linked.md")],
        [*table1, "--markdown", str(tmp_path / "linked.md")],
    ):
        status = main(argv)
        err = capsys.readouterr().err
        assert status == 2, (argv, err)
        assert f"--output and {argv[-2]} both name" in err, (argv, err)
        assert first.read_text(encoding="utf-8") == "{}\n"


# Folders gmlm wrote whole or is writing, by the file that marks them: no output lands in one.
OWNED = {
    "a prepared dataset folder": ("manifest.json", '{"format": "gmlm-translation-data"}'),
    "a reproduce run folder": ("reproduce.yaml", "description: x\n"),
    "a folder a gmlm command is writing": (".gmlm.lock", ""),  # held by another process
}
HOLD = """\
import sys
from pathlib import Path
from gmlm.locking import folder_lock
with folder_lock(Path(sys.argv[1]), "held"):
    print("held", flush=True)
    sys.stdin.read()
"""


@pytest.mark.parametrize("kind", OWNED)
def test_no_output_lands_in_a_folder_gmlm_owns(
    kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    output_layout(tmp_path)
    marker, text = OWNED[kind]
    owned = tmp_path / "owned"
    owned.mkdir()
    holder = None
    if marker == ".gmlm.lock":
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
        holder = subprocess.Popen(
            [sys.executable, "-c", HOLD, str(owned)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
        )  # fmt: skip
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
    else:
        (owned / marker).write_text(text, encoding="utf-8")
    before = _contents(owned)
    for output in (owned / "out.txt", owned / marker):
        argv = f"translate --checkpoint {tmp_path}/ckpt --input {tmp_path}/in.txt --output {output}"
        assert main(argv.split()) == 2
        err = capsys.readouterr().err
        said = f"--output {output} lies inside {owned}, {kind}, where only its writer"
        if output.name == ".gmlm.lock":  # refused by its name first
            said = f"--output {output} is the name of gmlm's lock files"
        assert said in err, err
    assert _contents(owned) == before
    if holder is not None:  # its holder gone, a lock file left behind (a kill) holds nothing
        assert holder.stdin is not None
        holder.stdin.close()
        assert holder.wait(timeout=30) == 0
        (owned / marker).write_text("12345\n", encoding="utf-8")
        out = owned / "out.txt"
        argv = f"translate --checkpoint {tmp_path}/ckpt --input {tmp_path}/in.txt --output {out}"
        assert main(argv.split()) == 2  # the fake checkpoint fails, but not the output rule
        assert "lies inside" not in capsys.readouterr().err


def test_a_lock_file_is_never_an_output_and_other_tools_manifests_are_not_gmlms(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from gmlm.io import check_output_file

    output_layout(tmp_path)
    argv = f"translate --checkpoint {tmp_path}/ckpt --input {tmp_path}/in.txt --output "
    assert main([*argv.split(), str(tmp_path / ".gmlm.lock")]) == 2
    assert "is the name of gmlm's lock files" in capsys.readouterr().err
    web = tmp_path / "web"
    web.mkdir()
    (web / "manifest.json").write_text('{"name": "an app"}', encoding="utf-8")
    check_output_file(web / "out.txt", "--output")  # another tool's manifest: no gmlm folder
