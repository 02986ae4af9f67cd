"""The fixed run's bench result (tests/fixtures/run/bench/bench.json: fp32, 12 systems, batch
sizes 1 and 2, a BLEU per row), shared by the bench's report, plot and command-line tests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gmlm.bench import BenchResult

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "run" / "bench" / "bench.json"


def fixture(bleu: dict[str, float | None] | None = None) -> BenchResult:
    """The fixed run's bench result, with the BLEU of the rows named in `bleu` replaced (None:
    removed, as in files written before rows had one)."""
    data: dict[str, Any] = json.loads(FIXTURE.read_text(encoding="utf-8"))
    for row in data["results"]:
        if bleu and row["system"] in bleu:
            if bleu[row["system"]] is None:
                del row["bleu"]
            else:
                row["bleu"] = bleu[row["system"]]
    return BenchResult.from_json(data, str(FIXTURE))
