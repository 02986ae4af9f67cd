"""tools/mutate.py, the mutation runner of docs/MUTATION.md, on a toy module: a mutant the
tests catch is killed, one they miss survives, one on a line they never run is "not reached",
one that loops forever is stopped by the CPU limit, one that sleeps forever by the wall-clock
limit, and the source tree is left as it was."""

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


def nap(tired: bool) -> int:
    if tired:
        import time

        time.sleep(3600)
    return 1


def triple(x: int) -> int:
    return x * 3


def label(n: int):
    return lambda f: f


@label(3)
def labelled() -> int:
    return 1
'''

TESTS = """import threading

from toy.calc import clamp, count_down, nap, triple


def test_clamp():
    assert clamp(5, 3) == 3
    assert clamp(1, 3) == 1


def test_count_down():
    assert count_down(3) == 0


def test_nap():
    assert nap(False) == 1


def test_triple_in_a_thread():
    out = []
    thread = threading.Thread(target=lambda: out.append(triple(2)))
    thread.start()
    thread.join()
    assert out == [6]
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
    # it sleeps, using no CPU: stopped by the wall-clock limit
    assert outcomes[(21, "negate condition")] == "timeout"
    assert outcomes[(29, "* -> /")] == "killed"  # reached in a thread the test started
    assert not [where for where in outcomes if where[0] == 36]  # a decorator is never mutated
    assert outcomes[(38, "1 -> 2")] == "not reached"
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


def test_the_plan_names_modules_and_tests_that_exist() -> None:
    """Every line of tools/mutation-plan.txt (`make mutation`, `make mutation-ci`) names a module
    under src/ and tests that exist: a renamed test file or function fails here, not an hour
    into a run."""
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        from mutation_ci import plan_lines
    finally:
        sys.path.remove(str(ROOT / "tools"))
    lines = plan_lines(ROOT / "tools" / "mutation-plan.txt", per_module=6)
    assert len(lines) >= 15
    for line in lines:
        assert (ROOT / line.module).is_file(), line.module
        assert line.tests, line.module
        for test in line.tests:
            path, _, function = test.partition("::")
            assert (ROOT / path).is_file(), test
            if function:
                assert f"def {function}(" in (ROOT / path).read_text(encoding="utf-8"), test
    names = [line.name for line in lines]
    assert len(set(names)) == len(names)  # one record per line in runs/mutation-ci/


def test_the_ci_pass_fails_when_the_surviving_share_rises(tmp_path: Path) -> None:
    """tools/mutation_ci.py on the toy module: --write-baseline records the share, a rerun of
    the same draw passes, and a baseline below the share fails with the survivors named."""
    (tmp_path / "src" / "toy").mkdir(parents=True)
    (tmp_path / "src" / "toy" / "__init__.py").write_text("")
    (tmp_path / "src" / "toy" / "calc.py").write_text(TOY)
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_calc.py").write_text(TESTS)
    plan = tmp_path / "plan.txt"
    plan.write_text("# the toy\nsrc/toy/calc.py tests/test_calc.py --preload pytest --slack 0.5\n")
    baseline = tmp_path / "baseline.json"
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "src")}
    argv = [sys.executable, str(ROOT / "tools" / "mutation_ci.py"), "--plan", str(plan)]
    argv += ["--baseline", str(baseline), "--out", str(tmp_path / "out"), "--per-module", "50"]

    def ci(*extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*argv, *extra], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
        )

    done = ci("--write-baseline")
    assert done.returncode == 0, done.stdout + done.stderr
    recorded = json.loads(baseline.read_text())
    # all the toy's mutants: clamp's `>` -> `>=` survives, never_tested's are not reached
    mutants, survived = recorded["mutants"], recorded["survived"]
    assert survived == 1 + recorded["not_reached"] and 0 < survived < mutants
    assert recorded["share"] == round(survived / mutants, 4)
    assert "src/toy/calc.py:5: > -> >= (survived)" in recorded["survivors"]
    assert recorded["modules"]["toy.calc"]["mutants"] == mutants
    assert ci().returncode == 0
    baseline.write_text(json.dumps({**recorded, "share": recorded["share"] - 0.01}))
    done = ci()
    assert done.returncode == 1 and "FAILED" in done.stdout
    assert "survived: src/toy/calc.py:5: > -> >= (survived)" in done.stdout
    done = ci("--per-module", "3")
    assert done.returncode == 2 and "differs from the baseline" in done.stderr
