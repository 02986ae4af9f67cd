"""Typed results: files written before the classes existed read back and write out byte for
byte; a file missing a key or holding a wrong type is an error naming the file and the key."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from gmlm.analysis.results import AttentionResult, LengthResult
from gmlm.bench.result import BenchResult, Ctranslate2Info
from gmlm.errors import GmlmError
from gmlm.evaluation.results import Evaluation, EvaluationScores
from gmlm.records import FLATTEN, OMIT_NONE, Record, json_key
from gmlm.reproduce.stage_record import StageRecord
from gmlm.theory.verify import VerifyReport

FIXTURES = Path(__file__).resolve().parent / "fixtures"
RUN = FIXTURES / "run"

# Files as the writers of commit 51ba4ed wrote them (before the typed results): the pipeline's
# stages, `gmlm analyze length --out` (now --output), `gmlm theory verify` (with its environment).
INDENTED = [
    (BenchResult, RUN / "bench" / "bench.json"),
    (EvaluationScores, RUN / "eval" / "scores.json"),
    (AttentionResult, RUN / "attention" / "attention.json"),
    (VerifyReport, RUN / "theory" / "verify.json"),
    (VerifyReport, FIXTURES / "verify.json"),
    (LengthResult, FIXTURES / "length.json"),
    *((StageRecord, path) for path in sorted((RUN / "stages").glob("*.json"))),
]


@pytest.mark.parametrize(
    ("cls", "path"), INDENTED, ids=[str(p.relative_to(FIXTURES)) for _, p in INDENTED]
)
def test_files_of_the_old_writers_round_trip_exactly(
    cls: type[Record], path: Path, tmp_path: Path
) -> None:
    record = cls.read(path)
    again = tmp_path / path.name
    record.write(again)
    assert again.read_text(encoding="utf-8") == path.read_text(encoding="utf-8")
    assert cls.read(again) == record


def test_evaluate_json_line_round_trips_exactly() -> None:
    """`gmlm evaluate --json` printed one line with json.dumps' default separators."""
    text = (FIXTURES / "evaluate.json").read_text(encoding="utf-8")
    evaluation = Evaluation.read(FIXTURES / "evaluate.json")
    assert json.dumps(evaluation.to_json()) + "\n" == text
    assert evaluation.bleu.length_ratio is not None and evaluation.chrf.length_ratio is None


def test_typed_values_read_back() -> None:
    scores = EvaluationScores.read(RUN / "eval" / "scores.json")
    ar = scores.system("ar-beam5")
    padir = scores.system("padir-T4-B5")
    assert ar is not None and (ar.beam, ar.steps, ar.length_beam) == (5, None, None)
    assert padir is not None and (padir.beam, padir.steps, padir.length_beam) == (None, 4, 5)
    assert scores.signatures.bleu.startswith("nrefs:1|") and scores.system("nope") is None
    bench = BenchResult.read(RUN / "bench" / "bench.json")
    assert (
        bench.settings.batch_sizes == (1, 2)
        and bench.results[0].throughput["2"].sentences_per_s > 0
    )
    verify = VerifyReport.read(RUN / "theory" / "verify.json")
    assert verify.passed and verify.environment is None
    assert VerifyReport.read(FIXTURES / "verify.json").environment is not None
    assert VerifyReport.build(verify.settings, verify.rows, verify.seconds) == verify
    length = LengthResult.read(FIXTURES / "length.json")
    assert length.predictor.length_beam == length.settings.length_beam == 3


def edited(tmp_path: Path, source: Path, edit: Any) -> Path:
    data = json.loads(source.read_text(encoding="utf-8"))
    edit(data)
    path = tmp_path / source.name
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def test_a_missing_key_names_the_file_and_the_key(tmp_path: Path) -> None:
    path = edited(tmp_path, RUN / "eval" / "scores.json", lambda d: d["systems"][1].pop("bleu"))
    with pytest.raises(
        GmlmError, match=rf"{re.escape(str(path))}: key 'systems\[1\]\.bleu' is missing"
    ):
        EvaluationScores.read(path)
    path = edited(tmp_path, RUN / "bench" / "bench.json", lambda d: d["settings"].pop("cpu"))
    with pytest.raises(GmlmError, match=r"bench.json: key 'settings\.cpu' is missing"):
        BenchResult.read(path)
    # An optional key may be absent; then it is None.
    path = edited(tmp_path, RUN / "eval" / "scores.json", lambda d: d["systems"][0].pop("beam"))
    assert EvaluationScores.read(path).systems[0].beam is None


def test_the_theory_table_bug_is_an_error_not_an_empty_table(tmp_path: Path) -> None:
    """A verify.json whose claims sit under another key fails loudly (the report once read
    'worst' where the file has 'claims' and printed an empty table)."""

    def rename(data: dict[str, Any]) -> None:
        data["worst"] = data.pop("claims")

    path = edited(tmp_path, RUN / "theory" / "verify.json", rename)
    with pytest.raises(GmlmError, match=r"verify.json: key 'claims' is missing"):
        VerifyReport.read(path)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (
            lambda d: d["settings"].update(threads="2"),
            r"key 'settings\.threads' holds \"2\", expected an integer",
        ),
        (
            lambda d: d["settings"].update(threads=True),
            r"key 'settings\.threads' holds true, expected an integer",
        ),
        (
            lambda d: d["results"][3]["model"].update(p50_ms=None),
            r"key 'results\[3\]\.model\.p50_ms' holds null, expected a number",
        ),
        (lambda d: d.update(speedups={}), r"key 'speedups' holds \{\}, expected a list"),
        (
            lambda d: d["results"][0]["throughput"].update({"8": 3}),
            r"key 'results\[0\]\.throughput\.8' holds 3, expected a JSON object \(Rates\)",
        ),
        (
            lambda d: d["settings"].update(extra=1),
            r"key 'settings' has key\(s\) 'extra' that SpeedSettings does not declare",
        ),
        (
            lambda d: d["settings"].update(ctranslate2=3),
            r"key 'settings\.ctranslate2' holds 3, expected a JSON object \(Ctranslate2Info\) "
            r"or a string",
        ),
        (
            lambda d: d["settings"].update(ctranslate2={"version": "4.8.5", "load_s": 0.5}),
            r"key 'settings\.ctranslate2\.note' is missing",
        ),
    ],
)
def test_a_wrong_type_or_unknown_key_names_the_file_and_the_key(
    tmp_path: Path, edit: Any, message: str
) -> None:
    path = edited(tmp_path, RUN / "bench" / "bench.json", edit)
    with pytest.raises(GmlmError, match=rf"^{re.escape(str(path))}: {message}"):
        BenchResult.read(path)


def test_a_union_is_read_by_the_kind_of_json_value(tmp_path: Path) -> None:
    """bench.json's settings.ctranslate2: what ran the CTranslate2 rows (an object), why there
    are none (a string), or absent in files written before gmlm bench had them."""
    assert BenchResult.read(RUN / "bench" / "bench.json").settings.ctranslate2 is None
    info = {"version": "4.8.5", "load_s": 0.25, "note": "a worker process"}
    for value, expected in (
        (info, Ctranslate2Info(version="4.8.5", load_s=0.25, note="a worker process")),
        ("skipped (no --ctranslate2 given)", "skipped (no --ctranslate2 given)"),
    ):
        path = edited(
            tmp_path,
            RUN / "bench" / "bench.json",
            lambda d, value=value: d["settings"].update(ctranslate2=value),
        )
        result = BenchResult.read(path)
        assert result.settings.ctranslate2 == expected
        assert result.to_json() == json.loads(path.read_text(encoding="utf-8"))

    @dataclass(frozen=True, kw_only=True)
    class Ambiguous(Record):
        value: int | float

    with pytest.raises(TypeError, match="members must differ in JSON kind"):
        Ambiguous.from_json({"value": 1})


def test_length_predictor_key_and_bad_files(tmp_path: Path) -> None:
    def drop(data: dict[str, Any]) -> None:
        del data["predictor"]["reference_in_top_3"]

    path = edited(tmp_path, FIXTURES / "length.json", drop)
    with pytest.raises(GmlmError, match=r"key 'predictor\.reference_in_top_B' must appear"):
        LengthResult.read(path)
    path = edited(tmp_path, FIXTURES / "length.json", lambda d: d.update(analysis="attention"))
    with pytest.raises(GmlmError, match=r"key 'analysis' holds \"attention\", expected 'length'"):
        LengthResult.read(path)
    broken = tmp_path / "broken.json"
    broken.write_text('{"stage": ', encoding="utf-8")
    with pytest.raises(GmlmError, match=r"broken.json: not valid JSON"):
        StageRecord.read(broken)
    with pytest.raises(GmlmError, match=r"absent.json does not exist"):
        StageRecord.read(tmp_path / "absent.json")
    assert StageRecord.read_if_present(tmp_path / "absent.json") is None
    broken.write_text("[]", encoding="utf-8")
    with pytest.raises(GmlmError, match=r"broken.json: the top level holds \[\], expected"):
        StageRecord.read(broken)


@dataclass(frozen=True, kw_only=True)
class Inner(Record):
    a: int
    b: float


@dataclass(frozen=True, kw_only=True)
class Outer(Record):
    name: str = field(metadata=json_key("display name"))
    inner: Inner = field(metadata=FLATTEN)
    note: str | None = field(default=None, metadata=OMIT_NONE)
    values: tuple[float, ...]
    table: dict[str, Inner]
    free: Any


def test_field_options_and_number_types() -> None:
    data = {
        "display name": "x",
        "a": 1,
        "b": 2,
        "values": [1, 2.5],
        "table": {"k": {"a": 3, "b": 0.5}},
        "free": {"anything": [None]},
    }
    record = Outer.from_json(data, "outer.json")
    assert record == Outer(
        name="x",
        inner=Inner(a=1, b=2),
        values=(1, 2.5),
        table={"k": Inner(a=3, b=0.5)},
        free={"anything": [None]},
    )
    assert record.to_json() == data
    assert json.dumps(record.to_json()) == json.dumps(data)  # ints stay ints: same text
    noted = Outer.from_json({**data, "note": "n"}, "outer.json")
    assert noted.note == "n" and noted.to_json() == {**data, "note": "n"}
    with pytest.raises(GmlmError, match=r"outer.json: key 'a' holds 1.5, expected an integer"):
        Outer.from_json({**data, "a": 1.5}, "outer.json")
    with pytest.raises(GmlmError, match=r"key 'table\.k\.b' is missing"):
        Outer.from_json({**data, "table": {"k": {"a": 3}}}, "outer.json")
    with pytest.raises(GmlmError, match=r"key 'display name' is missing"):
        Outer.from_json({k: v for k, v in data.items() if k != "display name"}, "outer.json")
