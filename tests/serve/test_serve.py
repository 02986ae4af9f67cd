"""`gmlm serve` on a real server at an ephemeral loopback port: outputs equal to `gmlm
translate`'s under concurrent clients, every kind of bad request, overload, deadlines, client
disconnects, a failing batch, metrics, and SIGTERM under load."""

from __future__ import annotations

import asyncio
import gc
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
import torch

from gmlm.cli.main import main
from gmlm.errors import GmlmError
from gmlm.serve.server import parse_models
from gmlm.serve.settings import ServeSettings
from tests.helpers.serving import GatedBackend, running

pytestmark = pytest.mark.usefixtures("one_thread")


def post(url: str, body: object, **kwargs: object) -> httpx.Response:
    return httpx.post(url + "/v1/translate", json=body, timeout=30, **kwargs)  # type: ignore[arg-type]


def test_outputs_equal_gmlm_translate_under_concurrent_clients(tiny_models, word_task_data):
    from gmlm.data.binarized import load_dataset
    from gmlm.serve.backends import load_backend
    from gmlm.translation.translator import load

    # Sentences of different lengths, so that candidate lengths differ inside a batch; the
    # first 64 test sentences at T=4 and 4 lengths are clear of float near-ties (padir_run).
    lines = load_dataset(word_task_data).read_text("test", "src")[:48]
    requests = [lines[i : i + 3] for i in range(0, 48, 3)]  # 16 requests of 3 lines
    options = {"padir": {"length_beam": 4}, "ar": {"beam": 2}}
    settings = ServeSettings(max_wait_ms=200, max_batch_sentences=64)

    def backends():
        return {name: load_backend(name, folder, "fp32", 1) for name, folder in tiny_models.items()}

    async def send_all(url: str, model: str) -> list[dict]:
        async with httpx.AsyncClient(base_url=url, timeout=60) as client:
            answers = await asyncio.gather(
                *(
                    client.post(
                        "/v1/translate",
                        json={"model": model, "text": text, "options": options[model]},
                    )
                    for text in requests
                )
            )
        assert [a.status_code for a in answers] == [200] * len(requests), answers[0].text
        return [a.json() for a in answers]

    with running(backends, settings) as url:
        for model, folder in tiny_models.items():
            got = asyncio.run(send_all(url, model))
            translator = load(folder, device="cpu")
            # Each request as `gmlm translate` of a file of its lines.
            want = [translator.translate(text, **options[model]) for text in requests]
            assert [g["translations"] for g in got] == want, model
            # The batcher did share batches between requests, and says so.
            assert max(g["timings"]["batch_requests"] for g in got) > 1
            assert all(g["timings"]["total_ms"] >= g["timings"]["batch_ms"] for g in got)
            assert got[0]["options"][next(iter(options[model]))] == 4 if model == "padir" else 2
        # A model on the CPU runs without CUDA graphs: it exports no capture counts.
        assert "gmlm_cuda_graph_captures_total{" not in httpx.get(url + "/metrics").text


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        ("not json", 422, "JSON"),
        ({"model": "fake", "text": "a string"}, 422, "text: Input should be a valid list"),
        ({"model": "fake", "text": [1, 2]}, 422, "text.0: Input should be a valid string"),
        ({"model": "nope", "text": ["a"]}, 422, "unknown model 'nope'; served: fake"),
        ({"model": "fake", "text": ["a"], "bogus": 1}, 422, "bogus: Extra inputs"),
        ({"model": "fake", "text": []}, 422, "give at least one sentence"),
        ({"model": "fake", "text": ["a"] * 9}, 422, "9 lines, more than --max-lines 8"),
        ({"model": "fake", "text": ["a" * 101]}, 422, r"text\[0\]: 101 characters"),
        ({"model": "fake", "text": ["BAD"]}, 422, "BAD is refused"),
        ({"model": "fake", "text": ["a"], "seed": -1}, 422, "seed: Input should be greater"),
        ({"model": "fake", "text": ["a"], "seed": 2**63}, 422, "seed: Input should be less"),
        ({"model": "fake", "text": ["a"], "seed": 0}, 200, None),  # the smallest seed
        ({"model": "fake", "text": ["a"], "seed": 2**63 - 1}, 200, None),  # the largest seed
        ({"model": "fake", "text": ["a"], "timeout_s": 0}, 422, "timeout_s"),
    ],
)
def test_bad_requests_get_a_4xx_naming_the_problem(gated, body, status, message):
    url, _ = gated
    kwargs = {"content": body} if isinstance(body, str) else {"json": body}
    answer = httpx.post(
        url + "/v1/translate", headers={"content-type": "application/json"}, timeout=10, **kwargs
    )
    assert answer.status_code == status
    if message is not None:
        assert re.search(message, answer.json()["detail"]), answer.json()


def test_invalid_utf8_and_oversized_bodies(gated):
    url, _ = gated
    answer = httpx.post(
        url + "/v1/translate",
        content=b'{"model": "fake", "text": ["\xff"]}',
        headers={"content-type": "application/json"},
    )
    assert answer.status_code == 400 and "not UTF-8" in answer.json()["detail"]
    big = json.dumps({"model": "fake", "text": ["a" * 50] * 60})  # > 2,000 bytes
    answer = httpx.post(
        url + "/v1/translate", content=big, headers={"content-type": "application/json"}
    )
    assert answer.status_code == 413 and "--max-body-bytes" in answer.json()["detail"]

    def chunks():  # no Content-Length: counted as it streams in
        for _ in range(10):
            yield b" " * 500
        yield b'{"model": "fake", "text": ["a"]}'

    answer = httpx.post(
        url + "/v1/translate", content=chunks(), headers={"content-type": "application/json"}
    )
    assert answer.status_code == 413


@pytest.fixture
def gated():
    backend = GatedBackend()
    settings = ServeSettings(
        max_lines=8, max_chars=100, max_body_bytes=2000, max_queue_sentences=4,
        max_batch_sentences=2, max_wait_ms=0, timeout_s=20,
    )  # fmt: skip
    with running(lambda: {"fake": backend}, settings) as url:
        yield url, backend


def _in_thread(fn, *args):
    out: dict[str, object] = {}

    def target():
        out["answer"] = fn(*args)

    thread = threading.Thread(target=target)
    thread.start()
    return thread, out


def _queued(url: str) -> float:
    return _metric(httpx.get(url + "/metrics").text, "gmlm_queue_sentences", "fake")


def _started(url: str) -> float:
    """Batches of the fake model that have begun decoding."""
    return _metric(httpx.get(url + "/metrics").text, "gmlm_batch_sentences_count", "fake")


def _metric(text: str, name: str, model: str) -> float:
    found = re.search(rf'^{name}\{{model="{model}"\}} (\S+)$', text, re.M)
    return float(found.group(1)) if found else 0.0


def _accepted_sentences(url: str, model: str) -> float:
    text = httpx.get(url + "/metrics").text
    started = _metric(text, "gmlm_batch_sentences_sum", model)
    return started + _metric(text, "gmlm_queue_sentences", model)


def _wait_for(condition, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)


def test_overload_answers_503_at_once_and_recovers(gated):
    url, backend = gated
    backend.gate.clear()  # the first batch holds the decoding thread
    first = _in_thread(post, url, {"model": "fake", "text": ["a", "b"]})
    _wait_for(lambda: _started(url) == 1)
    queued = [_in_thread(post, url, {"model": "fake", "text": ["c", "d"]}) for _ in range(2)]
    _wait_for(lambda: _queued(url) == 4)
    start = time.monotonic()
    refused = post(url, {"model": "fake", "text": ["e"]})
    assert time.monotonic() - start < 1.0
    assert refused.status_code == 503 and int(refused.headers["Retry-After"]) >= 1
    assert "at capacity" in refused.json()["detail"]
    backend.gate.set()
    for thread, out in [first, *queued]:
        thread.join(timeout=30)
        assert out["answer"].status_code == 200  # type: ignore[attr-defined]
    assert post(url, {"model": "fake", "text": ["f"]}).json()["translations"] == ["F"]
    metrics = httpx.get(url + "/metrics").text
    assert 'gmlm_requests_total{model="fake",status="503"} 1.0' in metrics
    assert 'gmlm_requests_total{model="fake",status="200"} 4.0' in metrics
    assert 'gmlm_batch_sentences_count{model="fake"} 4.0' in metrics
    # sentences, not requests: 2 + 2 + 2 + 1 in 4 requests
    assert 'gmlm_sentences_total{model="fake"} 7.0' in metrics
    assert "gmlm_request_seconds_bucket" in metrics and "gmlm_queue_wait_seconds_sum" in metrics
    # The device's busy seconds: the batches' decoding time, summed (the first batch was
    # held for at least the time the others queued and one was refused).
    busy = float(
        re.search(r'^gmlm_device_busy_seconds_total\{device="cpu"\} (\S+)$', metrics, re.M).group(1)
    )  # type: ignore[union-attr]
    decoded = _metric(metrics, "gmlm_batch_seconds_sum", "fake")
    assert busy == pytest.approx(decoded) and busy > 0


def test_deadline_gives_504_and_the_expired_work_is_never_decoded(gated):
    url, backend = gated
    backend.gate.clear()
    first = _in_thread(post, url, {"model": "fake", "text": ["a"]})
    _wait_for(lambda: _started(url) == 1)  # its batch has started and holds the thread
    late = post(url, {"model": "fake", "text": ["late"], "timeout_s": 0.2})
    assert late.status_code == 504 and "deadline" in late.json()["detail"]
    assert _queued(url) == 0  # withdrawn at once, while the first batch still holds the thread
    assert first[0].is_alive()  # the 504 came at the deadline, not once the first batch ended
    backend.gate.set()
    first[0].join(timeout=30)
    assert first[1]["answer"].status_code == 200  # type: ignore[attr-defined]
    assert post(url, {"model": "fake", "text": ["b"]}).status_code == 200
    assert ["late"] not in backend.batches and _queued(url) == 0


def test_a_request_answered_504_leaves_no_unretrieved_exception_behind(gated, caplog):
    """A request answered 504 while its batch runs, and the batch then fails: nobody awaits
    its error any more, so nothing may log "Future exception was never retrieved" (asyncio
    does, with a traceback, for every such request: under overload, on the event loop)."""
    url, backend = gated
    backend.gate.clear()
    late = _in_thread(post, url, {"model": "fake", "text": ["FAIL"], "timeout_s": 0.3})
    _wait_for(lambda: _started(url) == 1)  # its batch holds the decoding thread
    late[0].join(timeout=30)
    assert late[1]["answer"].status_code == 504  # type: ignore[attr-defined]
    backend.gate.set()  # the batch now fails, after its only request was answered
    assert post(url, {"model": "fake", "text": ["b"]}).status_code == 200
    gc.collect()
    assert ["FAIL"] in backend.batches
    assert not [r for r in caplog.records if "never retrieved" in r.getMessage()]


def test_a_client_that_leaves_frees_its_queued_work(gated):
    url, backend = gated
    backend.gate.clear()
    first = _in_thread(post, url, {"model": "fake", "text": ["a"]})
    _wait_for(lambda: _started(url) == 1)
    with pytest.raises(httpx.TimeoutException):
        httpx.post(url + "/v1/translate", json={"model": "fake", "text": ["gone"]}, timeout=0.3)
    _wait_for(lambda: _queued(url) == 0)  # withdrawn while the first batch still runs
    backend.gate.set()
    first[0].join(timeout=30)
    assert post(url, {"model": "fake", "text": ["b"]}).status_code == 200
    assert ["gone"] not in backend.batches


def test_a_failing_batch_fails_its_own_requests_only(gated):
    url, _ = gated
    failed = post(url, {"model": "fake", "text": ["FAIL"]})
    assert failed.status_code == 500 and "this batch fails" in failed.json()["detail"]
    assert post(url, {"model": "fake", "text": ["ok"]}).json()["translations"] == ["OK"]
    assert httpx.get(url + "/health").status_code == 200


def test_not_ready_until_loaded_then_ready():
    backend = GatedBackend()
    loaded = threading.Event()

    def load():
        loaded.wait(timeout=30)
        return {"fake": backend}

    with running(load, wait_ready=False) as url:
        assert httpx.get(url + "/health").json() == {"status": "alive"}
        assert httpx.get(url + "/ready").status_code == 503
        assert post(url, {"model": "fake", "text": ["a"]}).status_code == 503
        loaded.set()
        _wait_for(lambda: httpx.get(url + "/ready").status_code == 200)
        assert post(url, {"model": "fake", "text": ["a"]}).json()["translations"] == ["A"]
        assert httpx.get(url + "/v1/models").json()["models"][0]["name"] == "fake"
        assert "/v1/translate" in httpx.get(url + "/openapi.json").json()["paths"]


def test_real_models_bound_settings_rows_and_lengths(tiny_models):
    from gmlm.serve.backends import load_backend

    settings = ServeSettings(max_rows=40)
    with running(lambda: {"ar": load_backend("ar", tiny_models["ar"], "fp32", 1)}, settings) as url:
        cases = [
            ({"beam": 100000}, "beam=100000 must be between 1 and 1000"),
            ({"beam": 50}, "50 decoder rows"),  # within the beam's range, over --max-rows 40
            ({"beam": 0}, "beam=0 must be between 1 and 1000"),
            ({"steps": 4}, "unknown decoding setting steps"),
            ({"min_length": 3}, "unknown decoding setting min_length"),  # Python-only setting
        ]
        for options, message in cases:
            answer = post(url, {"model": "ar", "text": ["der Hund"], "options": options})
            assert answer.status_code == 422 and message in answer.json()["detail"], answer.text
        long = " ".join(["Hund"] * 200)
        answer = post(url, {"model": "ar", "text": ["der Hund", long]})
        detail = answer.json()["detail"]
        assert answer.status_code == 422 and detail.startswith(
            "1 line(s) longer than the model's max_len="
        ), detail
        assert "text[1] (" in detail and "as a line of its own" in detail, detail
        assert "--over-length" not in detail and "Python" not in detail  # no CLI hints
        answer = httpx.post(  # a JSON escape that decodes to a lone surrogate
            url + "/v1/translate",
            content=b'{"model": "ar", "text": ["\\ud800"]}',
            headers={"content-type": "application/json"},
        )
        assert answer.status_code == 422 and "lone surrogate" in answer.json()["detail"]


def test_parse_models_and_settings_errors(tmp_path):
    with pytest.raises(GmlmError, match="expected NAME=FOLDER"):
        parse_models(["padir"])
    with pytest.raises(GmlmError, match="no such folder"):
        parse_models([f"x={tmp_path / 'missing'}"])
    with pytest.raises(GmlmError, match="given twice"):
        parse_models([f"x={tmp_path}", f"x={tmp_path}"])
    with pytest.raises(GmlmError, match="max_batch_sentences=0 must be between 1 and 4096"):
        ServeSettings(max_batch_sentences=0).validate()
    with pytest.raises(GmlmError, match="max_wait_ms"):
        ServeSettings(max_wait_ms=float("nan")).validate()
    with pytest.raises(GmlmError, match="is more than --max-queue-sentences"):
        ServeSettings(max_batch_sentences=64, max_queue_sentences=8).validate()


def test_sigterm_under_load_answers_every_accepted_request(tiny_models):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "gmlm", "serve", "--port", "0", "--threads", "1"]
    command += ["--model", f"padir={tiny_models['padir']}", "--max-wait-ms", "0"]
    server = subprocess.Popen(command, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert server.stderr is not None
        url = re.search(r"listening on (\S+)", server.stderr.readline()).group(1)  # type: ignore[union-attr]
        assert "ready at" in server.stderr.readline()
        body = {"model": "padir", "text": ["der Hund läuft über die Katze ."] * 4}
        sent = [_in_thread(post, url, body) for _ in range(8)]
        # Every request accepted (queued or decoding or done) before the signal.
        _wait_for(lambda: _accepted_sentences(url, "padir") == 32, timeout=60)
        server.send_signal(signal.SIGTERM)
        for thread, out in sent:
            thread.join(timeout=60)
            assert out["answer"].status_code == 200  # type: ignore[attr-defined]
        assert server.wait(timeout=60) == 0
        with pytest.raises(httpx.TransportError):
            httpx.get(url + "/health", timeout=2)
    finally:
        if server.poll() is None:
            server.kill()
        server.wait()


def test_the_service_turns_nagle_off_on_every_connection():
    """The connections the service's socket accepts have TCP_NODELAY set (asyncio sets it
    only on sockets that say TCP). Without it, every answer on a kept-alive connection after
    the first waited for the client's delayed ACK: about 40 ms, each /health included."""
    import socket

    from gmlm.serve.server import bind

    sock = bind("127.0.0.1", 0)

    async def accepted_nodelay() -> int:
        seen: asyncio.Future[int] = asyncio.get_running_loop().create_future()

        def connected(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            conn = writer.get_extra_info("socket")
            seen.set_result(conn.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            writer.close()

        server = await asyncio.start_server(connected, sock=sock)
        async with server:
            _, writer = await asyncio.open_connection(*sock.getsockname()[:2])
            value = await asyncio.wait_for(seen, 30)
            writer.close()
        return value

    assert asyncio.run(accepted_nodelay()) != 0


def test_cli_errors_are_one_line(tmp_path, capsys, tiny_models):
    assert main(["serve", "--model", f"x={tmp_path}", "--port", "0"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1].startswith("gmlm: error:")
    assert Path(tmp_path).is_dir()
    # A model that fails to load while the server starts: the error, and no claim that
    # requests were answered.
    broken = tmp_path / "broken"
    shutil.copytree(tiny_models["ar"], broken)
    weights = broken / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])
    assert main(["serve", "--model", f"x={broken}", "--port", "0", "--threads", "1"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "corrupt or truncated" in err, err
    assert "every accepted request answered" not in err, err
    assert "stopped: the models did not start, so no request was translated" in err, err


def test_replicas_share_the_port_and_stop_together(tiny_models):
    """--workers 2: two processes, each with the model, answer on one port (uvicorn's own
    replicas; docs/DESIGN.md), give the same translations, and SIGTERM stops both (exit 0)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "gmlm", "serve", "--port", "0", "--workers", "2"]
    command += ["--threads", "1", "--model", f"padir={tiny_models['padir']}"]
    command += ["--log-format", "json"]  # each replica logs as the service was told
    server = subprocess.Popen(command, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert server.stderr is not None
        listening = json.loads(server.stderr.readline())["message"]
        url = re.search(r"listening on (\S+)", listening).group(1)  # type: ignore[union-attr]
        ready = [json.loads(server.stderr.readline())["message"] for _ in range(2)]
        assert all("ready at" in line and "replica" in line for line in ready), ready
        body = {"model": "padir", "text": ["der Hund läuft .", "die Katze springt ."]}
        replicas, outputs = set(), set()
        for _ in range(10):  # 8 at once, each on a new connection: the kernel spreads them
            sent = [_in_thread(post, url, body) for _ in range(8)]
            for thread, out in sent:
                thread.join(timeout=60)
                answer = out["answer"]
                assert answer.status_code == 200  # type: ignore[attr-defined]
                replicas.add(answer.headers["X-Gmlm-Replica"])  # type: ignore[attr-defined]
                outputs.add(tuple(answer.json()["translations"]))  # type: ignore[attr-defined]
            if len(replicas) == 2:
                break
        assert len(replicas) == 2 and len(outputs) == 1
        server.send_signal(signal.SIGTERM)
        assert server.wait(timeout=60) == 0
    finally:
        if server.poll() is None:
            server.kill()
        server.wait()


def test_models_list_the_language_pair_their_checkpoints_record(tiny_models):
    from gmlm.serve.backends import load_backend

    models = {
        "padir": load_backend("padir", tiny_models["padir"], "fp32", 1),  # trained: meta.json
        "ar": load_backend("ar", tiny_models["ar"], "fp32", 1),  # written by hand: no pair
    }
    with running(lambda: models) as url:
        listed = httpx.get(url + "/v1/models").json()["models"]
    assert {m["name"]: m["languages"] for m in listed} == {"padir": "de-en", "ar": None}


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        ([], (32, 1024, 256)),
        (["--device", "auto"], (256, 8192, 4096) if torch.cuda.is_available() else (32, 1024, 256)),
        (["--device", "cuda"], (256, 8192, 4096)),
        (["--device", "cuda:1", "--max-batch-tokens", "2048"], (256, 2048, 4096)),
        (["--max-batch-sentences", "8"], (8, 1024, 256)),
    ],
)
def test_a_gpu_service_batches_larger_by_default(flags, expected, monkeypatch):
    """`gmlm serve --device cuda` takes GPU_BATCHING's batching defaults; flags given win, and
    the CPU keeps its own."""
    import gmlm.serve.server
    from gmlm.cli.main import main

    seen = []
    monkeypatch.setattr(
        gmlm.serve.server, "serve", lambda models, settings, *rest: seen.append(settings) or 0
    )
    assert main(["serve", *flags]) == 0
    (settings,) = seen
    assert (
        settings.max_batch_sentences,
        settings.max_batch_tokens,
        settings.max_queue_sentences,
    ) == expected
