"""The CTranslate2 worker's stderr is read by its parent: never inherited, so a worker that
writes on it cannot block on a pipe nobody drains; its lines reach the parent's `messages`,
and the last of them the error of a worker that exits without answering. A stand-in worker
(a few lines of Python, neither torch nor CTranslate2) plays the child."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from gmlm.decoding.autoregressive import SearchOptions
from gmlm.export import ctranslate2_worker
from gmlm.export.ctranslate2_worker import KEPT_LINES, Ct2Worker, WorkerExited

# Far more than a pipe's buffer (64 KiB on Linux): a worker whose stderr nobody read would
# block writing it, before its first answer.
NOISE_LINES = 4_000


def stand_in(tmp_path: Path, body: str, monkeypatch: pytest.MonkeyPatch) -> None:
    script = tmp_path / "worker.py"
    script.write_text(textwrap.dedent(body))
    monkeypatch.setattr(
        ctranslate2_worker,
        "worker_command",
        lambda folder, threads, precision: [sys.executable, str(script)],
    )


def test_what_the_worker_writes_on_stderr_reaches_messages_not_stderr(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    stand_in(
        tmp_path,
        f"""
        import json, sys
        for i in range({NOISE_LINES}):
            print(f"warning {{i}}: " + "x" * 40, file=sys.stderr)
        print(json.dumps({{"ready": True, "load_s": 0.0, "ctranslate2": "0"}}), flush=True)
        for line in sys.stdin:
            texts = json.loads(line)["texts"]
            print("translating", len(texts), file=sys.stderr, flush=True)
            print(json.dumps({{"translations": [t.upper() for t in texts]}}), flush=True)
        """,
        monkeypatch,
    )
    said: list[str] = []
    with Ct2Worker(tmp_path, threads=1, messages=said.append) as worker:
        assert worker.translate_texts(["ein hund", ""], SearchOptions()) == ["EIN HUND", ""]
    assert len(said) == NOISE_LINES + 1
    assert said[0] == "warning 0: " + "x" * 40 and said[-1] == "translating 2"
    assert capfd.readouterr().err == ""


def test_a_worker_that_dies_is_reported_with_its_last_stderr_lines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stand_in(
        tmp_path,
        """
        import sys
        for i in range(100):
            print(f"line {i}", file=sys.stderr)
        print("RuntimeError: the model folder is unreadable", file=sys.stderr)
        sys.exit(3)
        """,
        monkeypatch,
    )
    said: list[str] = []
    with pytest.raises(WorkerExited) as caught:
        Ct2Worker(tmp_path, threads=1, messages=said.append)
    message = str(caught.value)
    assert "status 3" in message
    assert message.rstrip().endswith("RuntimeError: the model folder is unreadable")
    assert f"line {100 - KEPT_LINES + 1}" in message and f"line {100 - KEPT_LINES}\n" not in message
    assert len(said) == 101


def test_a_receiver_that_fails_does_not_stop_the_reading(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stand_in(
        tmp_path,
        f"""
        import json, sys
        for i in range({NOISE_LINES}):
            print("noise " + "x" * 40, file=sys.stderr)
        print(json.dumps({{"ready": True, "load_s": 0.0, "ctranslate2": "0"}}), flush=True)
        """,
        monkeypatch,
    )

    calls: list[str] = []

    def broken(line: str) -> None:
        calls.append(line)
        raise ValueError("a log that cannot take it")

    with Ct2Worker(tmp_path, threads=1, messages=broken) as worker:  # ready: stderr was read
        assert worker.version == "0"
    assert len(calls) == NOISE_LINES
