"""A replica's configuration (--workers) travels in the environment as a typed record: written
and read by one pair of functions, the same on the way back, and a corrupt value is an error
that names the variable and the problem."""

from __future__ import annotations

import json

import pytest

from gmlm.errors import GmlmError
from gmlm.serve.replica import VARIABLE, ReplicaSpec, from_environment, to_environment
from gmlm.serve.settings import ServeSettings

SPEC = ReplicaSpec(
    {"padir": "runs/padir", "ar": "runs/ar"},
    ServeSettings(port=0, workers=2, max_wait_ms=5.0, log_format="json"),
    "int8",
    "cpu",
    "http://127.0.0.1:8123",
    {"padir": "runs/ar"},
    2.5,
)


def test_the_spec_survives_the_round_trip_through_the_environment():
    environ: dict[str, str] = {}
    to_environment(SPEC, environ)
    assert set(environ) == {VARIABLE}
    assert from_environment(environ) == SPEC
    assert ReplicaSpec.from_json(SPEC.to_json()) == SPEC
    assert SPEC.rescore("padir") == ("runs/ar", 2.5) and SPEC.rescore("ar") is None


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: "{not json", "not JSON"),
        (lambda d: json.dumps([1, 2]), "expected a JSON object, got list"),
        (lambda d: json.dumps({**d, "extra": 1}), "expected the keys"),
        (lambda d: json.dumps({**d, "models": {"a": 3}}), "models: expected an object"),
        (lambda d: json.dumps({**d, "settings": {**d["settings"], "port": -1}}), "port=-1"),
        (lambda d: json.dumps({**d, "settings": {**d["settings"], "bogus": 1}}), "bogus"),
        (lambda d: json.dumps({**d, "precision": "fp64"}), "precision: 'fp64' is not one of"),
        (lambda d: json.dumps({**d, "url": 5}), "url: expected a string"),
        (lambda d: json.dumps({**d, "rescorers": {"x": "runs/ar"}}), "rescorers: expected"),
        (lambda d: json.dumps({**d, "rescorers": {"padir": 1}}), "rescorers: expected"),
        (lambda d: json.dumps({**d, "rescore_weight": "1"}), "rescore_weight: expected a number"),
        (lambda d: json.dumps({**d, "rescore_weight": True}), "rescore_weight: expected a number"),
        (lambda d: json.dumps({**d, "rescore_weight": 0}), "rescore_weight=0 must be in (0,"),
    ],
)
def test_a_corrupt_value_is_an_error_naming_the_variable_and_the_problem(change, message):
    data = json.loads(SPEC.to_json())
    with pytest.raises(GmlmError, match="corrupt replica configuration") as caught:
        from_environment({VARIABLE: change(data)})
    assert str(caught.value).startswith(VARIABLE) and message in str(caught.value)


def test_a_missing_value_says_who_sets_it():
    with pytest.raises(GmlmError, match=f"{VARIABLE} is not set.*--workers"):
        from_environment({})
