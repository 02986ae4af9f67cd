"""meta.json as a typed record (gmlm.checkpoint.meta): the shipped files read and written
again are the same to the byte, entries keep their order, and a wrong type names the file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gmlm.checkpoint.meta import META_FILE, Meta
from gmlm.errors import GmlmError

CHECKPOINTS = Path(__file__).resolve().parents[2] / "checkpoints"
SHIPPED = sorted(CHECKPOINTS.glob(f"*/*/{META_FILE}"))


def test_there_are_shipped_checkpoints() -> None:
    assert len(SHIPPED) >= 6


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: str(p.relative_to(CHECKPOINTS)))
def test_a_shipped_meta_json_round_trips_to_the_byte(path: Path, tmp_path: Path) -> None:
    meta = Meta.read(path)
    assert meta.step and meta.kind in ("ar", "padir") and meta.pair is not None
    assert meta.tokenizer_sha256 and meta.averaged and not meta.other
    meta.write(tmp_path)
    assert (tmp_path / META_FILE).read_bytes() == path.read_bytes()


def test_updated_entries_keep_their_place_or_come_last_as_a_dict_merge() -> None:
    data = {"kind": "ar", "future": {"x": [1]}, "step": 3, "nothing": None, "weights_dtype": None}
    meta = Meta.from_json(data)
    assert meta.to_json() == data and list(meta.to_json()) == list(data)
    assert meta.other == {"future": {"x": [1]}, "nothing": None}
    changes = {"tgt_lang": "en", "step": 4, "src_lang": "de"}
    assert list(meta.updated(**changes).to_json().items()) == list({**data, **changes}.items())
    assert Meta.from_json({}).to_json() == {} and Meta().to_json() == {}


def test_a_record_made_in_python_writes_its_entries_in_field_order(tmp_path: Path) -> None:
    Meta(tokenizer_sha256="f" * 64, step=7, averaged=("a", "b")).write(tmp_path)
    text = (tmp_path / META_FILE).read_text(encoding="utf-8")
    assert (
        text
        == json.dumps({"step": 7, "averaged": ["a", "b"], "tokenizer_sha256": "f" * 64}, indent=2)
        + "\n"
    )
    assert Meta.of(tmp_path) == Meta.from_json(json.loads(text))
    assert Meta.of(tmp_path / "nowhere") == Meta()


@pytest.mark.parametrize(
    "entries",
    [{"step": "3"}, {"step": True}, {"src_lang": 1}, {"averaged": ["a", 2]}, {"averaged": "a"}],
    ids=str,
)
def test_an_entry_of_the_wrong_type_is_an_error_naming_the_file(
    entries: dict[str, object], tmp_path: Path
) -> None:
    (tmp_path / META_FILE).write_text(json.dumps(entries), encoding="utf-8")
    key = next(iter(entries))
    with pytest.raises(GmlmError, match=rf"{META_FILE}: corrupt checkpoint metadata: {key} "):
        Meta.of(tmp_path)


def test_the_languages_are_a_pair_only_when_both_are_given() -> None:
    assert Meta(src_lang="de", tgt_lang="en").pair == ("de", "en")
    assert Meta(src_lang="de", tgt_lang="").pair is None and Meta(src_lang="de").pair is None
