"""What a checkpoint translates (gmlm.checkpoint.languages): recorded by training in
meta.json, kept by an export, read from the training data's manifest for older checkpoints,
and checked where a checkpoint meets text of a known pair."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gmlm.checkpoint.export import export_checkpoint
from gmlm.checkpoint.languages import check_languages, checkpoint_languages
from gmlm.data.binarized import load_dataset
from gmlm.errors import GmlmError
from tests.helpers.checkpoints import write_checkpoint
from tests.helpers.released_golden import RELEASED


def meta(folder: Path) -> dict[str, object]:
    return dict(json.loads((folder / "meta.json").read_text(encoding="utf-8")))


def set_meta(folder: Path, **values: object) -> None:
    (folder / "meta.json").write_text(json.dumps({**meta(folder), **values}), encoding="utf-8")


@pytest.mark.parametrize("name", ["ar", "ar1", "padir"])
def test_the_shipped_checkpoints_record_german_english(name: str) -> None:
    found = checkpoint_languages(RELEASED / name)
    assert (found.pair, found.describe()) == (("de", "en"), "de-en, as its meta.json records")


def test_meta_json_first_then_the_training_data_then_unknown(
    word_task_data: Path, tmp_path: Path
) -> None:
    tokenizer = load_dataset(word_task_data).tokenizer
    old = write_checkpoint(tmp_path / "old", "ar", tokenizer, data=str(word_task_data))
    assert checkpoint_languages(old).describe() == (
        f"de-en, as its training data {word_task_data} records"
    )
    set_meta(old, src_lang="fr", tgt_lang="en")  # what training recorded wins
    assert checkpoint_languages(old).describe() == "fr-en, as its meta.json records"
    gone = write_checkpoint(tmp_path / "gone", "ar", tokenizer, data=str(tmp_path / "absent"))
    assert checkpoint_languages(gone).describe() == (
        f"not checked: its training data {tmp_path / 'absent'} is not on this machine"
    )
    set_meta(gone, src_lang="de", tgt_lang="")  # half a pair is no pair
    assert checkpoint_languages(gone).pair is None


def test_an_export_records_the_languages_it_can_know(word_task_data: Path, tmp_path: Path) -> None:
    tokenizer = load_dataset(word_task_data).tokenizer
    old = write_checkpoint(tmp_path / "old", "padir", tokenizer, data=str(word_task_data))
    assert "src_lang" not in meta(old)
    exported = meta(export_checkpoint(old, tmp_path / "exported", None))
    assert (exported["src_lang"], exported["tgt_lang"], exported["step"]) == ("de", "en", 123)
    gone = write_checkpoint(tmp_path / "gone", "padir", tokenizer, data=str(tmp_path / "absent"))
    assert "src_lang" not in meta(export_checkpoint(gone, tmp_path / "exported-gone", None))
    shipped = meta(export_checkpoint(RELEASED / "ar", tmp_path / "shipped", None))
    assert (shipped["src_lang"], shipped["tgt_lang"]) == ("de", "en")


def test_another_pair_is_refused_with_the_fix(tmp_path: Path) -> None:
    fix = "give the {wanted} checkpoints, not these {pair} ones"
    assert check_languages("--x", RELEASED / "ar", ("de", "en"), fix).pair == ("de", "en")
    with pytest.raises(GmlmError) as err:
        check_languages("--x", RELEASED / "ar", ("en", "de"), fix)
    assert str(err.value) == (
        f"--x: {RELEASED / 'ar'} translates de-en (its meta.json says so), not en-de; "
        "give the en-de checkpoints, not these de-en ones"
    )


def test_a_dataset_is_checked_only_where_both_sides_record_a_pair(tmp_path: Path) -> None:
    """check_dataset: a known pair against another known pair is an error; where either side
    records none (or only half of one), nothing is checked."""
    from types import SimpleNamespace

    from gmlm.checkpoint.languages import Languages, check_dataset, pair_of

    def dataset(**record: object) -> object:
        return SimpleNamespace(manifest=record, root=tmp_path / "data")

    de_en = Languages(("de", "en"), "its meta.json")
    unknown = Languages(None, "its config.yaml names no training data")
    assert (
        pair_of({"src_lang": "de"}) is None and pair_of({"src_lang": "", "tgt_lang": "en"}) is None
    )
    for languages, record in [
        (de_en, {"src_lang": "de", "tgt_lang": "en"}),
        (de_en, {"src_lang": "de"}),  # half a pair records none
        (de_en, {}),
        (unknown, {"src_lang": "en", "tgt_lang": "de"}),
    ]:
        check_dataset("ckpt", languages, dataset(**record))  # type: ignore[arg-type]
    with pytest.raises(GmlmError, match=r"^ckpt translates de-en \(its meta.json says so\), but"):
        check_dataset("ckpt", de_en, dataset(src_lang="en", tgt_lang="de"))  # type: ignore[arg-type]
