"""tools/mutate.py, the mutation runner of docs/MUTATION.md, on a toy module: a mutant the
tests catch is killed, one they miss survives, one on a line they never run is "not reached",
one that loops forever is stopped by the CPU limit, and the source tree is left as it was."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

TOY = '''"""A toy module."""


def clamp(x: int, top: int) -> int:
    if x > top:
        return top
    return x


def never_tested(x: int) -> int:
    return x * 2


def count_down(n: int) -> int:
    while n > 0:
        n -= 1
    return n
'''

TESTS = """from toy.calc import clamp, count_down


def test_clamp():
    assert clamp(5, 3) == 3
    assert clamp(1, 3) == 1


def test_count_down():
    assert count_down(3) == 0
"""


def test_mutants_are_killed_survive_or_are_not_reached(tmp_path: Path) -> None:
    (tmp_path / "src" / "toy").mkdir(parents=True)
    (tmp_path / "src" / "toy" / "__init__.py").write_text("")
    module = tmp_path / "src" / "toy" / "calc.py"
    module.write_text(TOY)
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_calc.py").write_text(TESTS)
    record = tmp_path / "out" / "calc.json"
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "src")}
    argv = [sys.executable, str(ROOT / "tools" / "mutate.py"), "src/toy/calc.py"]
    argv += ["tests/test_calc.py", "--json", str(record), "--preload", "pytest", "--slack", "0.5"]
    done = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    outcomes = {
        (o["line"], o["what"]): o["status"] for o in json.loads(record.read_text())["outcomes"]
    }
    assert outcomes[(5, "> -> >=")] == "survived"  # clamp(3, 3) is never asked
    assert outcomes[(11, "* -> /")] == "not reached"
    assert outcomes[(15, "> -> >=")] == "killed"  # count_down(3) is -1
    assert outcomes[(16, "- -> +")] == "timeout"  # n grows: it loops until the CPU limit
    assert module.read_text() == TOY
    assert "| `src/toy/calc.py` |" in done.stdout

    # --after: the killed stay killed, only the survivors run again; a changed module is
    # refused (its mutants are other ones).
    again = tmp_path / "again.json"
    rerun = [*argv[:-6], "--json", str(again), "--after", str(record), *argv[-4:]]
    done = subprocess.run(rerun, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    rerun_outcomes = json.loads(again.read_text())["outcomes"]
    assert {(o["line"], o["what"]): o["status"] for o in rerun_outcomes} == outcomes
    assert [o["seconds"] > 0 for o in rerun_outcomes] == [
        o["status"] == "survived" for o in rerun_outcomes
    ]  # only the survivor ran again
    module.write_text(TOY.replace("x * 2", "x * 3"))
    done = subprocess.run(rerun, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode != 0 and "changed since" in done.stderr
