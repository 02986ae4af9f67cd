"""Every client error is a 4xx with a message, never a 500: hostile strings and values in
every field of a translation request, against real models (their own checks run)."""

from __future__ import annotations

import json

import httpx
import pytest

from gmlm.serve.settings import ServeSettings
from tests.helpers.serving import running

pytestmark = pytest.mark.usefixtures("one_thread")

# JSON text, spliced in raw: "\ud800" is a lone surrogate once parsed, which no UTF-8 encoder
# takes (echoing it in a message is what once gave a 500).
HOSTILE = [
    '"\\ud800"',
    '"\\udfff\\ud800"',
    '"\\u0000"',
    '"\\u202e\\u2028\\ufeff"',
    '"' + "\\u00e9" * 300 + '"',
    '"%s%n{0}{!r}"',
    '"\\\\x00 \\\\ud800"',
    "null",
    "12",
    "-1",
    "1e309",
    "true",
    "[]",
    '["a", ["b"]]',
    "{}",
    '{"a": {"b": "\\ud800"}}',
]

FIELDS = {
    "model": '{{"model": {v}, "text": ["ein Hund"]}}',
    "text": '{{"model": "padir", "text": {v}}}',
    "text item": '{{"model": "padir", "text": [{v}]}}',
    "option name": '{{"model": "padir", "text": ["x"], "options": {{{k}: 1}}}}',
    "option value": '{{"model": "padir", "text": ["x"], "options": {{"steps": {v}}}}}',
    "ar option value": '{{"model": "ar", "text": ["x"], "options": {{"beam": {v}}}}}',
    "options": '{{"model": "padir", "text": ["x"], "options": {v}}}',
    "seed": '{{"model": "padir", "text": ["x"], "seed": {v}}}',
    "timeout_s": '{{"model": "padir", "text": ["x"], "timeout_s": {v}}}',
    "unknown field": '{{"model": "padir", "text": ["x"], {k}: {v}}}',
}


def test_hostile_values_in_every_field_are_4xx_with_a_message(tiny_models) -> None:  # type: ignore[no-untyped-def]
    from gmlm.serve.backends import load_backend

    backends = {name: load_backend(name, folder, "fp32", 1) for name, folder in tiny_models.items()}
    settings = ServeSettings(max_chars=200)
    seen: dict[int, int] = {}
    with running(lambda: backends, settings) as url, httpx.Client(timeout=60) as client:
        for field, template in FIELDS.items():
            for value in HOSTILE:
                key = value if value.startswith('"') else json.dumps(value)
                body = template.format(v=value, k=key).encode("utf-8")
                answer = client.post(
                    url + "/v1/translate",
                    content=body,
                    headers={"content-type": "application/json"},
                )
                seen[answer.status_code] = seen.get(answer.status_code, 0) + 1
                where = f"{field} = {value}: {answer.status_code} {answer.text[:200]}"
                assert answer.status_code < 500, where
                if answer.status_code != 200:
                    detail = answer.json()["detail"]
                    assert isinstance(detail, str) and detail, where
        # Not JSON, not UTF-8, not an object: 4xx too.
        for raw in (b"\xff\xfe", b"[1, 2]", b'{"model": "padir", "text": ["x"]', b"\x00"):
            answer = client.post(
                url + "/v1/translate", content=raw, headers={"content-type": "application/json"}
            )
            assert 400 <= answer.status_code < 500, (raw, answer.status_code, answer.text)
    assert seen.get(422, 0) > 100  # most of them are refused, by name
