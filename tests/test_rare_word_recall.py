"""tools/rare_word_recall.py: recall per training-count bucket, counted by hand on a tiny case."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path

from tests.helpers.tools import load_tool

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "tools" / "rare_word_recall.py"


def _module():  # type: ignore[no-untyped-def]
    return load_tool("rare_word_recall")


def test_recall_is_clipped_per_sentence_and_bucketed_by_training_count() -> None:
    tool = _module()
    counts = Counter({"der": 5000, "Hund": 50, "Dackel": 2})
    refs = [["der", "Hund", "der", "Dackel"], ["Dackel", "Zebra"]]
    hyps = [["der", "der", "der", "Hund"], ["Hund", "Zebra"]]
    found = tool.recall(refs, hyps, counts)
    by_label = {tool.label(b): found[b] for b in range(len(tool.EDGES))}
    assert by_label["0"] == (1, 1)  # Zebra, never in training
    assert by_label["1-4"] == (0, 2)  # Dackel twice, never produced
    assert by_label["20-99"] == (1, 1)  # Hund (the second sentence's Hund is not in its ref)
    assert by_label["1000+"] == (2, 2)  # der twice in the ref: 3 produced, clipped to 2
    assert by_label["5-19"] == by_label["100-999"] == (0, 0)


def test_the_command_prints_a_row_per_bucket(tmp_path: Path) -> None:
    (tmp_path / "train.txt").write_text("der Hund\nder Hund läuft\nder Dackel\n", encoding="utf-8")
    (tmp_path / "ref.txt").write_text("der Dackel läuft\n", encoding="utf-8")
    (tmp_path / "a.txt").write_text("der Dackel läuft\n", encoding="utf-8")
    (tmp_path / "b.txt").write_text("der Hund läuft\n", encoding="utf-8")
    flags = ["--train", "train.txt", "--ref", "ref.txt", "--hyp", "a=a.txt", "--hyp", "b=b.txt"]
    done = subprocess.run(
        [sys.executable, str(SCRIPT), *flags],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "| 1-4 | 3 | 1.000 | 0.667 | -0.333 |" in done.stdout.splitlines()
