"""`gmlm serve --rescore NAME=FOLDER`: a served PaDIR model whose candidates an autoregressive
checkpoint rescores answers as `gmlm translate --rescore` does, says so in GET /v1/models,
and every wrong pairing is refused with one line, from one table, before or as it loads."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

import gmlm
from gmlm.errors import GmlmError
from gmlm.serve.backends import load_backend
from gmlm.serve.server import parse_rescorers
from gmlm.serve.settings import ServeSettings
from tests.helpers.checkpoints import write_checkpoint
from tests.helpers.cli import exit_status
from tests.helpers.sentences import sentences
from tests.helpers.serving import running

pytestmark = pytest.mark.usefixtures("one_thread")


def test_a_rescored_model_answers_as_translate_does(tiny_models: dict[str, str]) -> None:
    padir, ar = tiny_models["padir"], tiny_models["ar"]
    lines = ["der Hund läuft über die Katze .", "die Katze schläft .", "ein Hund"]

    def load() -> dict[str, object]:
        return {"padir": load_backend("padir", padir, "fp32", 1, rescore=(ar, 1e6))}

    with running(load, ServeSettings()) as url:  # type: ignore[arg-type]
        body = {"model": "padir", "text": lines, "options": {"prune_after": 0}}
        answer = httpx.post(url + "/v1/translate", json=body, timeout=30)
        models = httpx.get(url + "/v1/models").json()["models"]
    assert answer.status_code == 200, answer.text
    expected = gmlm.load(padir, device="cpu")
    plain = expected.translate(lines, prune_after=0)
    expected.rescore_with(gmlm.load(ar, device="cpu"), 1e6)
    rescored = expected.translate(lines, prune_after=0)
    assert answer.json()["translations"] == rescored != plain
    assert models == [
        {
            "name": "padir",
            "kind": "padir",
            "source": padir,
            "languages": expected.languages.name,
            "rescored_by": ar,
        }
    ]


def test_what_cannot_be_rescored_is_refused(
    tiny_models: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from gmlm.data.tokenizer import Tokenizer

    padir, ar = tiny_models["padir"], tiny_models["ar"]
    other_tokens = Tokenizer.train(sentences(200, seed=9), vocab_size=300, threads=1)
    stranger = str(write_checkpoint(tmp_path / "stranger", "ar", other_tokens))
    serve = ["serve", "--port", "0", "--model", f"padir={padir}", "--model", f"ar={ar}"]
    # Refused before the service starts: the command's exit status 2 and one line.
    before = {
        "expected NAME=FOLDER": ["--rescore", "padir"],
        "no model 'x' is served (--model gives padir, ar)": ["--rescore", f"x={ar}"],
        "--rescore padir: given twice": ["--rescore", f"padir={ar}", "--rescore", f"padir={ar}"],
        "no such folder": ["--rescore", f"padir={tmp_path / 'missing'}"],
        "rescores a ar model with a ar one": ["--rescore", f"ar={ar}"],
        "rescores a padir model with a padir one": ["--rescore", f"padir={padir}"],
        f"--rescore padir={tmp_path}: ": ["--rescore", f"padir={tmp_path}"],  # no checkpoint
        "--rescore-weight needs --rescore": ["--rescore-weight", "2"],
        "--rescore-weight: 0 must be in (0, 1e+06]": [
            "--rescore",
            f"padir={ar}",
            "--rescore-weight",
            "0",
        ],
    }
    for message, extra in before.items():
        assert exit_status([*serve, *extra]) == 2, message
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err and "listening" not in err, err
    # Refused as the models load (what needs them loaded): a GmlmError naming the flag.
    with pytest.raises(GmlmError, match=r"--rescore padir=.*stranger: .*tokenizers differ"):
        load_backend("padir", padir, "fp32", 1, rescore=(stranger, 1.0))
    with pytest.raises(GmlmError, match=r"rescoring weight 0\.0 must be in"):
        load_backend("padir", padir, "fp32", 1, rescore=(ar, 0.0))
    assert parse_rescorers(None, {"padir": padir}) == {}
    assert parse_rescorers([f"padir={ar}"], {"padir": padir}) == {"padir": ar}


def test_the_documented_command_serves_the_shipped_english_german_pair() -> None:
    """docs/serving.md's `gmlm serve --model en-de=... --rescore en-de=...` on the shipped
    checkpoints (on a free port, one thread): its answer is the rescored translation."""
    import os
    import re
    import signal
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    padir, ar = "checkpoints/multi30k-en-de/padir", "checkpoints/multi30k-en-de/ar"
    command = [sys.executable, "-m", "gmlm", "serve", "--model", f"en-de={padir}"]
    command += ["--rescore", f"en-de={ar}", "--port", "0", "--threads", "1"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    server = subprocess.Popen(command, cwd=root, stderr=subprocess.PIPE, text=True, env=env)
    lines = ["Two dogs play in the snow.", "A man in a red shirt is riding a bike."]
    options = {"prune_after": 0, "random_starts": 2}
    try:
        assert server.stderr is not None
        found = re.search(r"listening on (\S+)", server.stderr.readline())
        assert found is not None
        ready = server.stderr.readline()
        assert "ready at" in ready and f"rescored by {ar}" in ready, ready
        body = {"model": "en-de", "text": lines, "options": options}
        answer = httpx.post(found.group(1) + "/v1/translate", json=body, timeout=60)
    finally:
        server.send_signal(signal.SIGTERM)
        server.communicate(timeout=60)
    assert answer.status_code == 200, answer.text
    expected = gmlm.load(root / padir, device="cpu")
    expected.rescore_with(gmlm.load(root / ar, device="cpu"))
    assert answer.json()["translations"] == expected.translate(lines, **options)
    assert server.returncode == 0
