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
            {"name": "ct2", "kind": "ctranslate2", "source": str(export), "languages": None}
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
