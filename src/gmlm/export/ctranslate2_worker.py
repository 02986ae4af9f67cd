"""CTranslate2 translations timed in a worker process of its own (the CTranslate2 rows of
`gmlm bench`).

CTranslate2 brings its own OpenMP runtime. In the benchmark's process, next to torch's, the
two fight over the cores, and CTranslate2 runs several times slower (docs/DESIGN.md section
7). So the bench starts this module as a child
process (``python -m gmlm.export.ctranslate2_worker FOLDER THREADS PRECISION``; it never
imports torch, and it lives here rather than in gmlm.bench, whose package imports torch) that
loads the export on `THREADS` CPU threads at `PRECISION` (fp32 or int8: CTranslate2's compute
types float32 and int8) and answers requests, one JSON object per line on
stdin/stdout:

    request  {"sources": [[ids]], "text": str | null, "options": {SearchOptions fields}}
    answer   {"outputs": [[ids]], "model_s": float, "e2e_s": float | null,
              "translation": str | null}

or, for `gmlm serve` (text in, text out, nothing timed):

    request  {"texts": [str], "options": {SearchOptions fields}}
    answer   {"translations": [str]}

``model_s`` times :meth:`Ct2Translator.translate_ids` of all sources (ids in, ids out) and
``e2e_s`` :meth:`Ct2Translator.translate` of the text (raw text in, text out), both inside
the worker with the garbage collector off, so the pipe is not counted; ``translation`` is
that text's translation (for the benchmark's BLEU of the row). A failure is answered
``{"error": message}``. The first line the worker writes is ``{"ready": ..., "load_s": ...}``.

What the worker writes on stderr (CTranslate2's warnings, a Python traceback) never goes to
the parent's stderr directly: a thread of the parent reads it line by line, keeps the last
lines for the error of a worker that exits without answering, and hands each line to the
parent's `messages` (the bench: its own stderr; the service: its log, whose bounded queue
drops lines rather than wait on a stderr nobody reads). A worker writing on an inherited,
undrained stderr pipe would block in the middle of a request, and the service with it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import json
import os
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import IO, Any

from gmlm import provenance
from gmlm.errors import GmlmError

# Lines of the worker's stderr kept for the error of a worker that exits without answering.
KEPT_LINES = 20
# How long the parent waits for the worker's last stderr lines once it has exited (seconds).
RELAY_JOIN_S = 2.0


class WorkerExited(GmlmError):
    """The worker process ended without answering."""


@dataclass(frozen=True)
class Timing:
    """One request's answer: output ids of each source, the seconds inside the worker, and
    the translation of the request's text (None without one)."""

    outputs: list[list[int]]
    model_s: float
    e2e_s: float | None
    translation: str | None


class Ct2Worker:
    """The parent's handle on a worker process (a context manager that stops it)."""

    def __init__(
        self,
        folder: Path,
        threads: int,
        precision: str = "fp32",
        mkl: bool | None = None,
        messages: Callable[[str], None] | None = None,
    ) -> None:
        """`mkl`: CTranslate2's Intel MKL backend on (True) or off (False: its other GEMM
        backends), set through CT2_USE_MKL; None leaves CTranslate2's own choice (MKL on Intel
        CPUs, off on others) or the caller's CT2_USE_MKL. `messages` receives each line the
        worker writes on stderr, from a thread of its own (default: this process's stderr)."""
        self.precision = precision
        self.mkl = mkl
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(_python_path())}
        if mkl is not None:
            env["CT2_USE_MKL"] = "1" if mkl else "0"
        self._process = subprocess.Popen(
            worker_command(folder, threads, precision),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            encoding="utf-8",
            errors="replace",
            env=env,
        )
        self._said: deque[str] = deque(maxlen=KEPT_LINES)
        self._relay = threading.Thread(
            target=self._relay_stderr,
            args=(messages or _to_stderr,),
            name="ctranslate2-worker-stderr",
            daemon=True,
        )
        self._relay.start()
        try:
            ready = self._receive()
        except BaseException:
            self.close()
            raise
        self.load_s = float(ready["load_s"])
        self.version = str(ready["ctranslate2"])

    def time(self, sources: list[list[int]], text: str | None, options: Any) -> Timing:
        """Translate `sources` (and `text`, when given) with `options` (SearchOptions)."""
        request = {"sources": sources, "text": text, "options": dataclasses.asdict(options)}
        assert self._process.stdin is not None
        self._process.stdin.write(json.dumps(request) + "\n")
        self._process.stdin.flush()
        answer = self._receive()
        return Timing(answer["outputs"], answer["model_s"], answer["e2e_s"], answer["translation"])

    def translate_texts(self, texts: list[str], options: Any) -> list[str]:
        """Translations of raw `texts` with `options` (SearchOptions), as
        :meth:`gmlm.export.ctranslate2_runtime.Ct2Translator.translate` gives them (the service's
        CTranslate2 models)."""
        request = {"texts": texts, "options": dataclasses.asdict(options)}
        assert self._process.stdin is not None
        self._process.stdin.write(json.dumps(request) + "\n")
        self._process.stdin.flush()
        return list(self._receive()["translations"])

    def alive(self) -> bool:
        """Whether the worker process is still running."""
        return self._process.poll() is None

    def exit_status(self) -> int | None:
        """The worker's exit status (negative: killed by that signal), None while it runs."""
        return self._process.poll()

    def _receive(self) -> dict[str, Any]:
        assert self._process.stdout is not None
        line = self._process.stdout.readline()
        if not line:
            code = self._process.wait()
            self._relay.join(RELAY_JOIN_S)
            said = "\n  ".join(self._said) if self._said else "nothing"
            raise WorkerExited(
                f"the CTranslate2 worker process exited (status {code}) without answering; "
                f"it last wrote on stderr:\n  {said}"
            )
        answer: dict[str, Any] = json.loads(line)
        if "error" in answer:
            raise GmlmError(f"CTranslate2 worker: {answer['error']}")
        return answer

    def close(self) -> None:
        """Stop the worker (its end of input tells it to exit); quiet if it has died."""
        if self._process.stdin is not None:
            with contextlib.suppress(OSError):  # a dead worker's pipe: nothing to flush
                self._process.stdin.close()
        try:
            self._process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        if self._process.stdout is not None:
            self._process.stdout.close()
        self._relay.join(RELAY_JOIN_S)

    def _relay_stderr(self, messages: Callable[[str], None]) -> None:
        """Read the worker's stderr to its end: keep the last lines, pass each on."""
        assert self._process.stderr is not None
        with self._process.stderr as stream:
            for line in stream:
                text = line.rstrip("\n")
                self._said.append(text)
                with contextlib.suppress(Exception):  # a failing receiver must not stop the reading
                    messages(text)

    def __enter__(self) -> Ct2Worker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def worker_command(folder: Path, threads: int, precision: str) -> list[str]:
    """The command line that starts a worker."""
    module = "gmlm.export.ctranslate2_worker"
    return [sys.executable, "-m", module, str(folder), str(threads), precision]


def _to_stderr(line: str) -> None:
    print(f"CTranslate2 worker: {line}", file=sys.stderr, flush=True)


def _python_path() -> list[str]:
    """PYTHONPATH for the worker: this gmlm's folder first, so it runs the same code."""
    source = str(Path(__file__).resolve().parents[2])
    return [source, *(p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p)]


def serve(folder: str, threads: int, precision: str, requests: IO[str], answers: IO[str]) -> None:
    """The worker's loop: load the export, then answer each request line until EOF."""
    from gmlm.export.ctranslate2_runtime import Ct2Translator

    def send(message: dict[str, Any]) -> None:
        answers.write(json.dumps(message) + "\n")
        answers.flush()

    try:
        start = time.perf_counter()
        translator = Ct2Translator.load(folder, threads=threads, precision=precision)
        load_s = time.perf_counter() - start
    except GmlmError as err:
        send({"error": str(err)})
        return
    version = provenance.package_version("ctranslate2")
    send({"ready": True, "load_s": load_s, "ctranslate2": version})
    for line in requests:
        request = json.loads(line)
        options = SimpleNamespace(**request["options"])
        if "texts" in request:  # the service: text in, text out, nothing timed
            try:
                send({"translations": translator.translate(request["texts"], options)})
            except GmlmError as err:
                send({"error": str(err)})
            continue
        try:
            gc.collect()
            gc.disable()
            try:
                start = time.perf_counter()
                outputs = translator.translate_ids(request["sources"], options)
                model_s = time.perf_counter() - start
                e2e_s = translation = None
                if request["text"] is not None:
                    start = time.perf_counter()
                    translation = translator.translate([request["text"]], options)[0]
                    e2e_s = time.perf_counter() - start
            finally:
                gc.enable()
        except GmlmError as err:
            send({"error": str(err)})
            continue
        send({"outputs": outputs, "model_s": model_s, "e2e_s": e2e_s, "translation": translation})


if __name__ == "__main__":
    serve(sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.stdin, sys.stdout)
