import re
import sys
from pathlib import Path
from typing import Any

import pytest

from gmlm.data.binarized import load_dataset
from gmlm.data.corpora import read_corpus
from gmlm.data.hf import corpus_from_hf, import_datasets
from gmlm.data.prepare import prepare_dataset
from gmlm.errors import GmlmError
from tests.helpers.corpora import make_pairs, tiny_config

SKIP = "Hugging Face `datasets` is not installed (optional extra: pip install 'gmlm[hf]')"


def local_wmt(datasets: Any) -> Any:
    """A DatasetDict laid out like the hub's WMT datasets, built in memory."""

    def split(n: int, seed: int) -> Any:
        src, tgt = make_pairs(n, seed)
        rows = [{"de": s, "en": t} for s, t in zip(src, tgt, strict=True)]
        return datasets.Dataset.from_dict({"translation": rows})

    return datasets.DatasetDict(
        {"train": split(300, 0), "validation": split(20, 1), "test": split(20, 2)}
    )


def test_missing_extra_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "datasets", None)  # makes `import datasets` fail
    with pytest.raises(GmlmError, match=r"optional Hugging Face extra: pip install 'gmlm\[hf\]'"):
        import_datasets()
    with pytest.raises(GmlmError, match="optional Hugging Face extra"):
        read_corpus("hf:wmt14:de-en")


def test_local_dataset_to_prepared_data(tmp_path: Path) -> None:
    datasets = pytest.importorskip("datasets", reason=SKIP)
    data = local_wmt(datasets)
    corpus = corpus_from_hf(data, "en", "de", name="local-wmt")
    assert {k: len(v) for k, v in corpus.splits.items()} == {"train": 300, "valid": 20, "test": 20}
    assert corpus.splits["valid"].src[0] == data["validation"][0]["translation"]["en"]
    root = prepare_dataset(tiny_config("unused"), tmp_path / "out", corpus=corpus)
    prepared = load_dataset(root)
    assert prepared.manifest["src_lang"] == "en" and prepared.manifest["corpus"] == "local-wmt"
    assert prepared.read_text("test", "tgt")[3] == data["test"][3]["translation"]["de"]


def test_spec_loads_hub_name_and_saved_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    datasets = pytest.importorskip("datasets", reason=SKIP)
    data = local_wmt(datasets)
    calls = []

    def fake_load_dataset(name: str, config: str) -> Any:
        calls.append((name, config))
        return data

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    corpus = read_corpus("hf:wmt14:en-de")
    assert calls == [("wmt14", "de-en")]  # WMT names its configs with English last
    assert corpus.splits["train"].tgt[0] == data["train"][0]["translation"]["de"]
    read_corpus("hf:wmt16:de-en:custom")
    assert calls[-1] == ("wmt16", "custom")
    data.save_to_disk(str(tmp_path / "saved"))
    saved = read_corpus(f"hf:{tmp_path / 'saved'}:de-en")
    assert saved.splits["test"].src == corpus.splits["test"].tgt
    with pytest.raises(GmlmError, match="expected hf:NAME:PAIR"):
        read_corpus("hf:wmt14")
    column_layout = datasets.DatasetDict(
        {"train": datasets.Dataset.from_dict({"de": ["a"], "fr": ["b"]})}
    )
    with pytest.raises(GmlmError, match="expected a 'translation' column or columns 'de' and 'en'"):
        corpus_from_hf(column_layout, "de", "en", name="x")


HUB_README = """---
configs:
- config_name: de-en
  data_files:
  - split: train
    path: de-en/train-*
  - split: validation
    path: de-en/validation-*
  - split: test
    path: de-en/test-*
---
"""


def hub_copy(root: Path, datasets: Any, fmt: str) -> Path:
    """A local copy of a WMT dataset as the hub serves wmt/wmt14: per config a folder of
    `SPLIT-0000N-of-0000M.parquet` files (or json lines) of a `translation` column, and the
    README.md whose `configs` map them. Loaded with `load_dataset`, not `load_from_disk`."""
    root.mkdir()
    (root / "README.md").write_text(HUB_README.replace("-*", f"-*.{fmt}"), encoding="utf-8")
    (root / "de-en").mkdir()
    sizes = {"train": (400, 2), "validation": (20, 1), "test": (20, 1)}
    for seed, (split, (pairs, shards)) in enumerate(sizes.items()):
        src, tgt = make_pairs(pairs, seed=10 + seed)
        rows = [{"de": s, "en": t} for s, t in zip(src, tgt, strict=True)]
        for shard in range(shards):
            part = datasets.Dataset.from_dict({"translation": rows[shard::shards]})
            path = root / "de-en" / f"{split}-{shard:05d}-of-{shards:05d}.{fmt}"
            part.to_parquet(str(path)) if fmt == "parquet" else part.to_json(str(path))
    return root


@pytest.mark.parametrize("fmt", ["parquet", "json"])
def test_hub_layout_through_the_reader_and_the_paper_data_stage(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fmt: str
) -> None:
    """The `paper` preset's hf: path end to end on a stand-in for wmt/wmt14: the corpus reader
    and the reproduction's data stage with the preset's settings, made tiny."""
    datasets = pytest.importorskip("datasets", reason=SKIP)
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))  # no cache outside tmp_path
    local = hub_copy(tmp_path / "wmt14", datasets, fmt)
    corpus = read_corpus(f"hf:{local}:en-de")
    assert {k: len(v) for k, v in corpus.splits.items()} == {"train": 400, "valid": 20, "test": 20}
    src, tgt = make_pairs(20, seed=12)
    assert sorted(corpus.splits["test"].src) == sorted(tgt)  # en-de: English is the source
    assert (corpus.src_lang, corpus.tgt_lang) == ("en", "de")

    from gmlm.reproduce.config import load_reproduce_config
    from gmlm.reproduce.pipeline import run_reproduce

    cfg = load_reproduce_config("paper")
    assert cfg.data.corpus == "hf:wmt/wmt14:de-en"
    overrides = [f"data.corpus=hf:{local}:de-en", "data.vocab_size=400", "threads=1"]
    cfg = load_reproduce_config("paper", overrides)
    out = tmp_path / "paper"
    run_reproduce(cfg, out, ["data"], progress=False, log=lambda _m: None)
    prepared = load_dataset(out / "data")
    assert prepared.splits == ["train", "valid", "test"]
    assert prepared.manifest["max_len"] == 256  # the preset's setting
    assert sorted(prepared.read_text("test", "src")) == sorted(src)
    assert prepared.stats().splits["train"].pairs == 400


def test_every_hf_example_names_the_dataset_the_paper_preset_reads(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`data prepare --help` and the error of a malformed spec give the hub's name of WMT14,
    wmt/wmt14, as the `paper` preset and the README do (issue 37: the help said hf:wmt14)."""
    from gmlm.cli.main import main
    from gmlm.reproduce.config import load_reproduce_config

    paper = load_reproduce_config("paper").data.corpus
    assert paper == "hf:wmt/wmt14:de-en"
    with pytest.raises(SystemExit):
        main(["data", "prepare", "--help"])
    examples = re.findall(r"\bhf:(?!NAME)\S+", capsys.readouterr().out)
    assert examples == [paper]
    with pytest.raises(GmlmError, match=re.escape(f"e.g. {paper}")):
        read_corpus("hf:wmt14")
