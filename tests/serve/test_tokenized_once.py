"""A served request is tokenized once: the ids its lines were checked with are the ids the
decoder gets (and its translations are `gmlm translate`'s)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.usefixtures("one_thread")


def test_a_request_is_encoded_once_and_translates_as_translate_does(tiny_models, monkeypatch):
    from gmlm.serve.backends import joined, load_backend
    from gmlm.translation.translator import load

    backend = load_backend("padir", tiny_models["padir"], "fp32", 1)
    tokenizer = backend.translator.tokenizer  # type: ignore[attr-defined]
    encoded: list[int] = []
    original = tokenizer.encode_batch

    def counting(texts, *args, **kwargs):
        encoded.append(len(texts))
        return original(texts, *args, **kwargs)

    monkeypatch.setattr(tokenizer, "encode", lambda text: pytest.fail("encoded again"))
    monkeypatch.setattr(tokenizer, "encode_batch", counting)
    first = ["a b c", "", "c b"]
    second = ["b a"]
    batch = [backend.prepare(first, {"steps": 2}, 3), backend.prepare(second, {"steps": 2}, 3)]
    assert encoded == [3, 1]  # each request's lines once, when it was checked
    outputs = backend.translate(first + second, joined(batch))
    assert encoded == [3, 1]  # and not again to decode
    monkeypatch.undo()
    expected = load(tiny_models["padir"]).translate(first + second, steps=2, seed=3)
    assert outputs == expected and outputs[1] == ""
