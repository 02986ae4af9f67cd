"""The CTranslate2 rows of `gmlm bench`: a worker process of their own that never loads torch,
answers with gmlm's decoding, and rows in fp32 beside the others."""

from __future__ import annotations

import contextlib
import io
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any, ClassVar

import pytest

from gmlm.bench.result import BenchResult, Ctranslate2Info
from gmlm.cli.main import main
from gmlm.data import load_dataset
from gmlm.decoding.autoregressive import SearchOptions
from gmlm.errors import GmlmError
from tests.helpers.checkpoints import write_checkpoint

pytest.importorskip("ctranslate2", reason="the optional extra gmlm[ctranslate2] is not installed")

from gmlm.bench import BenchSettings, run_bench
from gmlm.export.ctranslate2 import export_ctranslate2
from gmlm.export.ctranslate2_runtime import Ct2Translator
from gmlm.export.ctranslate2_worker import Ct2Worker

pytestmark = pytest.mark.usefixtures("one_thread")
CT2_SYSTEMS = ["ar ct2 greedy", "ar ct2 beam5"]


@pytest.fixture(scope="module")
def checkpoints(
    word_task_data: Path,
    learned_checkpoints: dict[str, Path],
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[str, Path]:
    """The learned AR model (it translates the first test sentences, which the bench times),
    an untrained PaDIR one and the AR model's CTranslate2 export."""
    root = tmp_path_factory.mktemp("ct2-bench")
    tokenizer = load_dataset(word_task_data).tokenizer
    ar = learned_checkpoints["ar"]
    return {
        "ar": ar,
        "padir": write_checkpoint(root / "padir", "padir", tokenizer),
        "ct2": export_ctranslate2(ar, root / "ct2"),
    }


def test_the_worker_never_imports_torch() -> None:
    code = (
        "import sys, gmlm.export.ctranslate2_worker, gmlm.export.ctranslate2_runtime; "
        "sys.exit('torch' in sys.modules)"
    )
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


def test_worker_answers_like_the_translator_in_process(
    checkpoints: dict[str, Path], word_task_data: Path
) -> None:
    texts = load_dataset(word_task_data).read_text("test", "src")[:3]
    local = Ct2Translator.load(checkpoints["ct2"])
    sources = [local.tokenizer.encode(t) for t in texts]
    with Ct2Worker(checkpoints["ct2"], threads=1) as worker:
        assert worker.load_s > 0
        for options in (SearchOptions(beam=1), SearchOptions(beam=5)):
            one = worker.time(sources[:1], texts[0], options)
            assert one.outputs == local.translate_ids(sources[:1], options)
            assert one.model_s > 0 and one.e2e_s is not None and one.e2e_s > 0
            assert one.translation == local.translate(texts[:1], options)[0]
            batch = worker.time(sources, None, options)
            assert batch.outputs == local.translate_ids(sources, options)
            assert batch.e2e_s is None and batch.translation is None
    # int8: the export quantised as it is loaded, in the worker as in this process.
    local8 = Ct2Translator.load(checkpoints["ct2"], precision="int8")
    with Ct2Worker(checkpoints["ct2"], threads=1, precision="int8") as worker:
        for options in (SearchOptions(beam=1), SearchOptions(beam=5)):
            assert worker.time(sources, None, options).outputs == local8.translate_ids(
                sources, options
            )


def test_an_unknown_ctranslate2_precision_is_an_error(checkpoints: dict[str, Path]) -> None:
    with pytest.raises(GmlmError, match=r"CTranslate2 precision 'bf16': choose from fp32, int8"):
        Ct2Translator.load(checkpoints["ct2"], precision="bf16")


def test_worker_reports_a_bad_folder(tmp_path: Path) -> None:
    with pytest.raises(GmlmError, match=r"CTranslate2 worker: .*not a CTranslate2 export"):
        Ct2Worker(tmp_path, threads=1)


def test_bench_times_ctranslate2_rows_in_fp32_and_int8(
    checkpoints: dict[str, Path], word_task_data: Path
) -> None:
    args = ["bench", "--ar", str(checkpoints["ar"]), "--padir", str(checkpoints["padir"])]
    args += ["--data", str(word_task_data), "--sentences", "2", "--warmup", "1"]
    args += ["--threads", "1", "--batch-sizes", "1,2", "--steps", "1", "--length-beams", "1"]
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        assert main([*args, "--ctranslate2"]) == 0
    text = stdout.getvalue()
    result = json.loads(text.strip().splitlines()[-1])
    assert result["systems"][-2:] == CT2_SYSTEMS
    rows = {(r["precision"], r["system"]): r for r in result["results"]}
    assert {precision for precision, _ in rows} == {"fp32", "bf16", "int8"}
    for name in CT2_SYSTEMS:
        assert ("bf16", name) not in rows  # CTranslate2 has no bf16 on a CPU
        for precision in ("fp32", "int8"):
            row = rows[(precision, name)]
            assert row["kind"] == "ar" and row["model"]["p50_ms"] > 0
            assert row["e2e"]["p50_ms"] > 0 and row["throughput"]["2"]["sentences_per_s"] > 0
    for precision in ("fp32", "int8"):
        vs = {s["ar"] for s in result["speedups"] if s["precision"] == precision}
        assert vs >= set(CT2_SYSTEMS)
    settings = result["settings"]["ctranslate2"]
    assert "worker process of its own" in settings["note"]
    # Each model and precision on the faster of CTranslate2's two GEMM backends, measured.
    for precision in ("fp32", "int8"):
        choice = rf"ar {precision}: MKL [0-9.]+, no MKL [0-9.]+ ms: (MKL|no MKL)(;|$)"
        assert re.search(choice, settings["backend"])
    assert f"settings: ctranslate2 backend: {settings['backend']}" in text
    assert f"settings: ctranslate2 {settings['version']} (loaded in" in text
    typed = BenchResult.from_json(result, "the JSON line")
    assert typed.to_json() == result
    assert isinstance(typed.settings.ctranslate2, Ctranslate2Info)
    assert typed.settings.ctranslate2.load_s > 0


def test_bench_refuses_ctranslate2_off_the_cpu(
    checkpoints: dict[str, Path], word_task_data: Path
) -> None:
    with pytest.raises(GmlmError, match="--device cpu"):
        run_bench(
            checkpoints["ar"],
            checkpoints["padir"],
            word_task_data,
            BenchSettings(ctranslate2=True),
            device="cuda",
        )


def test_bench_converts_ar1_too(
    checkpoints: dict[str, Path],
    word_task_data: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With --ar1, the 1-layer-decoder AR gets CTranslate2 rows of its own, run on its own
    export (not --ar's)."""
    from gmlm.bench import backends

    converted: list[Path] = []

    def export(checkpoint: Path, out: Path) -> Path:
        converted.append(Path(checkpoint))
        return export_ctranslate2(checkpoint, out)

    tokenizer = load_dataset(word_task_data).tokenizer
    ar1 = write_checkpoint(tmp_path / "ar1", "ar", tokenizer, seed=1, n_decoder_layers=1)
    monkeypatch.setattr(backends, "export_ctranslate2", export)
    result = run_bench(
        checkpoints["ar"],
        checkpoints["padir"],
        word_task_data,
        BenchSettings(
            sentences=2,
            warmup=1,
            threads=1,
            precisions=("fp32",),
            batch_sizes=(1,),
            padir_steps=(1,),
            length_beams=(1,),
            ctranslate2=True,
        ),
        ar1=ar1,
    )
    assert converted == [checkpoints["ar"], ar1]
    assert result.systems[-4:] == (*CT2_SYSTEMS, "ar1 ct2 greedy", "ar1 ct2 beam5")
    rows = {r.system: r for r in result.results}
    assert rows["ar1 ct2 beam5"].kind == "ar"
    assert {s.ar for s in result.speedups} >= {"ar1 ct2 greedy", "ar1 ct2 beam5"}
    # Each CTranslate2 row translates as its own model does in gmlm (same weights, same rules):
    # the learned --ar model well, the untrained --ar1 model not at all.
    assert rows["ar1 ct2 beam5"].bleu == rows["ar1 beam5"].bleu < 50.0
    assert rows["ar ct2 beam5"].bleu == rows["ar beam5"].bleu > 50.0


class FakeWorker:
    """Stands in for a CTranslate2 worker whose backend takes a known time per sentence."""

    made: ClassVar[list[FakeWorker]] = []

    def __init__(self, folder: Path, threads: int, precision: str, mkl: bool) -> None:
        self.precision, self.mkl, self.threads, self.closed = precision, mkl, threads, False
        self.seconds = {"fp32": {True: 0.163, False: 0.022}, "int8": {True: 0.01, False: 0.02}}[
            precision
        ][mkl]
        if threads == 2:  # MKL int8 several times slower on 2 threads than on 1, as measured
            self.seconds = {"fp32": {True: 0.15, False: 0.015}, "int8": {True: 0.04, False: 0.03}}[
                precision
            ][mkl]
        FakeWorker.made.append(self)

    def time(self, sources: list[list[int]], text: str | None, options: object) -> Any:
        return type("Timing", (), {"model_s": self.seconds})()

    def close(self) -> None:
        self.closed = True


def test_the_faster_ctranslate2_backend_is_kept(
    checkpoints: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    from gmlm.bench import backends

    monkeypatch.setattr(backends, "Ct2Worker", FakeWorker)
    FakeWorker.made = []
    probes = {"ar": ([[5, 6, 7]] * 9, SearchOptions(beam=5))}
    pairs, note = backends.start_ctranslate2({"ar": checkpoints["ar"]}, 1, ["fp32", "int8"], probes)
    kept = [worker for _, worker in pairs]
    assert [(w.precision, w.mkl) for w in kept] == [("fp32", False), ("int8", True)]
    assert all(w.closed != (w in kept) for w in FakeWorker.made) and len(FakeWorker.made) == 4
    assert note.endswith(
        "ar fp32: MKL 163.0, no MKL 22.0 ms: no MKL; ar int8: MKL 10.0, no MKL 20.0 ms: MKL"
    )


def test_with_more_threads_the_ctranslate2_probe_also_tries_one(
    checkpoints: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    from gmlm.bench import backends

    monkeypatch.setattr(backends, "Ct2Worker", FakeWorker)
    FakeWorker.made = []
    probes = {"ar": ([[5, 6, 7]] * 9, SearchOptions(beam=5))}
    pairs, note = backends.start_ctranslate2({"ar": checkpoints["ar"]}, 2, ["fp32", "int8"], probes)
    kept = [worker for _, worker in pairs]
    assert [(w.precision, w.mkl, w.threads) for w in kept] == [
        ("fp32", False, 2),
        ("int8", True, 1),
    ]
    assert all(w.closed != (w in kept) for w in FakeWorker.made) and len(FakeWorker.made) == 8
    assert "on and off, at 2 threads and at 1, each in a worker" in note
    assert note.endswith(
        "ar fp32: MKL 2t 150.0, MKL 1t 163.0, no MKL 2t 15.0, no MKL 1t 22.0 ms: no MKL 2t; "
        "ar int8: MKL 2t 40.0, MKL 1t 10.0, no MKL 2t 30.0, no MKL 1t 20.0 ms: MKL 1t"
    )


def test_the_worker_sets_ct2_use_mkl(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gmlm.export import ctranslate2_worker

    seen: list[str | None] = []

    def popen(*args: object, env: dict[str, str], **kwargs: object) -> None:
        seen.append(env.get("CT2_USE_MKL"))
        raise OSError("not started")

    monkeypatch.setattr(ctranslate2_worker.subprocess, "Popen", popen)
    monkeypatch.delenv("CT2_USE_MKL", raising=False)
    for mkl in (True, False, None):
        with pytest.raises(OSError, match="not started"):
            Ct2Worker(tmp_path, threads=1, mkl=mkl)
    assert seen == ["1", "0", None]
