"""The sampled mutation pass that fits CI: a fixed draw of mutants from every line of
tools/mutation-plan.txt, its surviving share checked against tools/mutation-baseline.json.

    python tools/mutation_ci.py                   # run; exit 1 if the share rose
    python tools/mutation_ci.py --write-baseline  # run; record the share as the baseline

Each plan line runs `tools/mutate.py` on `--per-module` of its mutants (fewer where the line
asks for fewer), drawn with `--seed`: the same mutants on every run while the module's source
is unchanged, so a rise means a test that used to catch a bug no longer does, or new code came
with a bug its tests miss. The lines run in `--jobs` processes of one thread each (2 fill a
2-core machine), the longest first by the baseline's timings. The surviving share counts the
mutants that no test killed, the "not reached" among them, over all mutants drawn; it fails
when the share passes the baseline's by more than `--tolerance` (percentage points, default 0),
and when any line's tests fail on the unchanged module. Records and logs go to `--out`
(runs/mutation-ci/): one record per plan line as `tools/mutate.py --json` writes it, one log
per line, and summary.json with the survivors listed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TOOLS = Path(__file__).resolve().parent
sys.path.insert(0, str(TOOLS))
from mutate import module_name, table  # noqa: E402

COMMAND = "python tools/mutation_ci.py --write-baseline"


@dataclass(frozen=True)
class Line:
    """One plan line: the module, its tests, the rest of its options, and its CI draw."""

    module: str
    tests: list[str]
    options: list[str]
    sample: int  # the mutants drawn for CI (all of them where the module has fewer)

    @property
    def name(self) -> str:  # e.g. "serve.batcher" for src/gmlm/serve/batcher.py
        return module_name(Path(self.module)).removeprefix("gmlm.")


def plan_lines(plan: Path, per_module: int) -> list[Line]:
    """The plan's lines, each drawing min(per_module, its own --sample) mutants. Every option
    of a plan line takes a value (`--sample 20`, `--slack 30`)."""
    lines = []
    for text in plan.read_text(encoding="utf-8").splitlines():
        words = text.split("#")[0].split()
        if not words:
            continue
        tests: list[str] = []
        options: list[str] = []
        own = None
        rest = iter(words[1:])
        for word in rest:
            if word == "--sample":
                own = int(next(rest))
            elif word.startswith("--"):
                options += [word, next(rest)]
            else:
                tests.append(word)
        sample = per_module if own is None else min(per_module, own)
        lines.append(Line(words[0], tests, options, sample))
    return lines


def run_line(line: Line, seed: int, out: Path) -> tuple[Line, int, float]:
    """tools/mutate.py on the line's draw; (line, exit status, seconds)."""
    argv = [sys.executable, str(TOOLS / "mutate.py"), line.module, *line.tests, *line.options]
    argv += ["--sample", str(line.sample), "--seed", str(seed)]
    argv += ["--json", str(out / f"{line.name}.json")]
    start = time.monotonic()
    with open(out / f"{line.name}.log", "w", encoding="utf-8") as log:
        done = subprocess.run(
            argv, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "OMP_NUM_THREADS": "1"}
        )
    return line, done.returncode, time.monotonic() - start


def summary(records: dict[str, dict[str, Any]], seconds: dict[str, float]) -> dict[str, Any]:
    mutants = sum(r["mutants"] for r in records.values())
    survived = sum(r["survived"] for r in records.values())
    return {
        "mutants": mutants,
        "survived": survived,
        "not_reached": sum(r["not_reached"] for r in records.values()),
        "share": round(survived / max(mutants, 1), 4),
        "modules": {
            name: {
                "module": r["module"],
                "mutants": r["mutants"],
                "survived": r["survived"],
                "not_reached": r["not_reached"],
                "seconds": round(seconds[name], 1),
                "source_sha256": r["source_sha256"],
            }
            for name, r in sorted(records.items())
        },
        "survivors": [
            f"{r['module']}:{o['line']}: {o['what']} ({o['status']})"
            for r in records.values()
            for o in r["outcomes"]
            if o["status"] in ("survived", "not reached")
        ],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--plan", type=Path, default=TOOLS / "mutation-plan.txt")
    parser.add_argument("--baseline", type=Path, default=TOOLS / "mutation-baseline.json")
    parser.add_argument("--per-module", type=int, default=10, help="mutants drawn per plan line")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=2, help="processes of one thread each")
    parser.add_argument("--tolerance", type=float, default=0.0, help="percentage points")
    parser.add_argument("--out", type=Path, default=Path("runs/mutation-ci"))
    parser.add_argument("--write-baseline", action="store_true")
    args = parser.parse_args(argv)
    baseline = None
    if args.baseline.is_file():
        baseline = json.loads(args.baseline.read_text(encoding="utf-8"))
    if not args.write_baseline:
        if baseline is None:
            parser.error(f"no baseline at {args.baseline}: run with --write-baseline first")
        for key in ("per_module", "seed"):
            if baseline[key] != getattr(args, key):
                parser.error(
                    f"--{key.replace('_', '-')} differs from the baseline's {baseline[key]}"
                )
    lines = plan_lines(args.plan, args.per_module)
    known = baseline["modules"] if baseline else {}
    lines.sort(key=lambda line: -known.get(line.name, {}).get("seconds", 0.0))
    args.out.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    with ThreadPoolExecutor(args.jobs) as pool:
        results = list(pool.map(lambda line: run_line(line, args.seed, args.out), lines))
    wall = time.monotonic() - start
    failed = [line for line, status, _ in results if status != 0]
    for line in failed:
        log = (args.out / f"{line.name}.log").read_text(encoding="utf-8")
        print(f"mutation-ci: {line.module}: tools/mutate.py failed:\n{log[-2000:]}")
    if failed:
        return 2
    records = {
        line.name: json.loads((args.out / f"{line.name}.json").read_text(encoding="utf-8"))
        for line, _, _ in results
    }
    found = summary(records, {line.name: s for line, _, s in results})
    found = {"per_module": args.per_module, "seed": args.seed, "wall_seconds": round(wall), **found}
    (args.out / "summary.json").write_text(json.dumps(found, indent=1) + "\n", encoding="utf-8")
    print(table([records[name] for name in sorted(records)]), end="")
    for survivor in found["survivors"]:
        print(f"survived: {survivor}")
    share = 100 * found["share"]
    print(
        f"mutation-ci: {found['survived']} of {found['mutants']} mutants survived ({share:.1f}%) "
        f"in {wall:.0f} s"
    )
    if args.write_baseline:
        record = {"command": COMMAND, "jobs": args.jobs, "cpus": os.cpu_count(), **found}
        args.baseline.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
        print(f"mutation-ci: wrote {args.baseline}")
        return 0
    assert baseline is not None
    allowed = 100 * baseline["share"] + args.tolerance
    if share > allowed + 1e-9:
        changed = [
            name
            for name, entry in found["modules"].items()
            if known.get(name, {}).get("source_sha256") != entry["source_sha256"]
        ]
        print(
            f"mutation-ci: FAILED: {share:.1f}% of the mutants survived, above the baseline's "
            f"{100 * baseline['share']:.1f}% ({args.baseline}); modules changed since the "
            f"baseline (their draw changed too): {', '.join(changed) or 'none'}. Add tests that "
            f"kill the survivors above, or, where they change no behaviour, say so in "
            f"docs/MUTATION.md and rerun `{COMMAND}`"
        )
        return 1
    print(f"mutation-ci: at or below the baseline's {100 * baseline['share']:.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
