"""A CTranslate2 export served beside gmlm's own models: its worker process answers, and its
translations are gmlm's AR's (the export follows gmlm's search rules)."""

from __future__ import annotations

import pytest

from tests.helpers.serving import running

pytest.importorskip("ctranslate2", reason="the optional extra gmlm[ctranslate2] is not installed")

pytestmark = pytest.mark.usefixtures("one_thread")


def test_ctranslate2_model_serves_gmlm_ar_translations(tiny_models, word_task_data, tmp_path):
    import httpx

    from gmlm.data.binarized import load_dataset
    from gmlm.export.ctranslate2 import export_ctranslate2
    from gmlm.serve.backends import load_backend
    from gmlm.translation.translator import load

    export = export_ctranslate2(tiny_models["ar"], tmp_path / "ct2")
    lines = load_dataset(word_task_data).read_text("test", "src")[:6]
    with running(lambda: {"ct2": load_backend("ct2", str(export), "fp32", 1)}) as url:
        models = httpx.get(url + "/v1/models").json()["models"]
        assert models == [
            {
                "name": "ct2",
                "kind": "ctranslate2",
                "source": str(export),
                "languages": None,
                "rescored_by": None,
            }
        ]
        for options in ({}, {"beam": 3}):
            body = {"model": "ct2", "text": [*lines, ""], "options": options}
            answer = httpx.post(url + "/v1/translate", json=body, timeout=60)
            assert answer.status_code == 200, answer.text
            want = load(tiny_models["ar"], device="cpu").translate([*lines, ""], **options)
            assert answer.json()["translations"] == want
        bad = {"model": "ct2", "text": ["a"], "options": {"steps": 4}}
        answer = httpx.post(url + "/v1/translate", json=bad, timeout=60)
        assert answer.status_code == 422 and "steps" in answer.json()["detail"]


@pytest.mark.parametrize("supervised", [True, False])
def test_a_killed_worker_is_restarted(tiny_models, tmp_path, monkeypatch, supervised):
    """kill -9 of the CTranslate2 worker (as the OOM killer would): the supervisor restarts
    it, /ready saying 503 until it is back; without the supervisor's round, the next request
    finds it dead, restarts it and is answered 503 (retry), and the one after it works."""
    import os
    import signal
    import time

    import httpx

    from gmlm.export.ctranslate2 import export_ctranslate2
    from gmlm.serve import lifecycle
    from gmlm.serve.backends import load_backend

    monkeypatch.setattr(lifecycle, "SUPERVISE_S", 0.1 if supervised else 3600.0)
    export = export_ctranslate2(tiny_models["ar"], tmp_path / "ct2")
    backend = load_backend("ct2", str(export), "fp32", 1)
    body = {"model": "ct2", "text": ["a b c"]}
    with running(lambda: {"ct2": backend}) as url:
        first = httpx.post(url + "/v1/translate", json=body, timeout=60).json()["translations"]
        os.kill(backend.worker._process.pid, signal.SIGKILL)  # type: ignore[attr-defined]
        backend.worker._process.wait()  # type: ignore[attr-defined]
        if supervised:
            deadline = time.monotonic() + 60
            while httpx.get(url + "/ready").status_code != 200:
                assert time.monotonic() < deadline
                time.sleep(0.05)
            metrics = httpx.get(url + "/metrics").text
            assert 'gmlm_worker_restarts_total{model="ct2"} 1.0' in metrics
        else:
            ready = httpx.get(url + "/ready")
            assert ready.status_code == 503 and ready.json()["models"] == ["ct2"]
            # found dead before the request: restarted first, then it translates
            answer = httpx.post(url + "/v1/translate", json=body, timeout=60)
            assert answer.status_code == 200 and answer.json()["translations"] == first
            # dying during a request: that request is answered 503, the worker restarted
            dying = backend.worker

            def die(*args):  # type: ignore[no-untyped-def]
                os.kill(dying._process.pid, signal.SIGKILL)  # type: ignore[attr-defined]
                dying._process.wait()  # type: ignore[attr-defined]
                raise BrokenPipeError(32, "Broken pipe")

            dying.translate_texts = die  # type: ignore[method-assign]
            answer = httpx.post(url + "/v1/translate", json=body, timeout=60)
            assert answer.status_code == 503 and "restarted: retry" in answer.json()["detail"]
            assert "status -9" in answer.json()["detail"]
        again = httpx.post(url + "/v1/translate", json=body, timeout=60)
        assert again.status_code == 200 and again.json()["translations"] == first
    assert backend.restarts == (1 if supervised else 2)
    backend.worker.close()  # closing again, after the service closed it, is quiet


def test_an_export_neither_is_rescored_nor_rescores(tiny_models, tmp_path, capsys):
    """Rescoring reads PaDIR's candidates and runs the AR model on them in this process:
    neither side may be a CTranslate2 export (refused before the service starts, and by
    load_backend for Python callers)."""
    from gmlm.errors import GmlmError
    from gmlm.export.ctranslate2 import export_ctranslate2
    from gmlm.serve.backends import load_backend
    from tests.helpers.cli import exit_status

    export = str(export_ctranslate2(tiny_models["ar"], tmp_path / "ct2"))
    padir = tiny_models["padir"]
    serve = ["serve", "--port", "0", "--model", f"padir={padir}", "--model", f"ct2={export}"]
    for extra, message in (
        (["--rescore", f"ct2={tiny_models['ar']}"], "rescores a ctranslate2 model with a ar one"),
        (["--rescore", f"padir={export}"], "rescores a padir model with a ctranslate2 one"),
    ):
        assert exit_status([*serve, *extra]) == 2
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err, err
    with pytest.raises(GmlmError, match="model ct2 is a CTranslate2 export"):
        load_backend("ct2", export, "fp32", 1, rescore=(tiny_models["ar"], 1.0))
    with pytest.raises(GmlmError, match=f"--rescore padir={export}: a CTranslate2 export"):
        load_backend("padir", padir, "fp32", 1, rescore=(export, 1.0))


def test_the_worker_stderr_goes_to_the_service_log(tiny_models, tmp_path, monkeypatch, caplog):
    """What the CTranslate2 worker writes on stderr reaches the service's log (whose bounded
    queue drops lines rather than wait), named by model: never the service's stderr, which a
    stalled reader would let fill and block the worker on, mid-request."""
    import logging
    import sys

    from gmlm.export import ctranslate2_worker
    from gmlm.export.ctranslate2 import export_ctranslate2
    from gmlm.serve.backends import load_backend

    real = ctranslate2_worker.worker_command

    def noisy(folder, threads, precision):
        talk = "import runpy, sys; print('loading', sys.argv[1], file=sys.stderr); "
        module = "gmlm.export.ctranslate2_worker"
        run = f"runpy.run_module({module!r}, run_name='__main__', alter_sys=True)"
        return [sys.executable, "-c", talk + run, *real(folder, threads, precision)[3:]]

    monkeypatch.setattr(ctranslate2_worker, "worker_command", noisy)
    export = export_ctranslate2(tiny_models["ar"], tmp_path / "ct2")
    caplog.set_level(logging.WARNING, logger="gmlm.serve")
    backend = load_backend("ct2", str(export), "fp32", 1)
    try:
        prepared = backend.prepare(["a b"], {}, 0)
        assert len(backend.translate(["a b"], prepared)) == 1
    finally:
        backend.close()  # waits for the worker's last stderr lines
    said = [r.getMessage() for r in caplog.records if r.name == "gmlm.serve"]
    assert said == [f"model 'ct2': CTranslate2 worker: loading {export}"]
