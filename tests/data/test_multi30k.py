from pathlib import Path

import pytest

from gmlm.data.batching import BatchIterator
from gmlm.data.binarized import load_dataset
from gmlm.data.prepare import DataConfig, prepare_dataset
from tests.helpers.corpora import MULTI30K

pytestmark = pytest.mark.skipif(
    not MULTI30K.is_dir(), reason=f"Multi30k not found at {MULTI30K} (../shared/data/multi30k)"
)


@pytest.mark.slow
def test_prepare_multi30k_end_to_end(tmp_path: Path) -> None:
    root = prepare_dataset(DataConfig(corpus=f"multi30k:{MULTI30K}"), tmp_path / "m30k")
    prepared = load_dataset(root)
    stats = prepared.stats()
    assert stats.tokenizer.vocab_size == 8000
    assert {s: v.pairs for s, v in stats.splits.items()} == {
        "train": 29000,
        "valid": 1014,
        "test": 1000,
    }
    assert stats.splits["test"].kept == 1000 and stats.splits["train"].kept > 28900
    tok = prepared.tokenizer
    test_src = prepared.read_text("test", "src")
    ds = prepared.split("test")
    assert all(tok.decode(ds[i][0]) == test_src[ds.lines[i]] for i in range(len(ds)))
    batches = list(BatchIterator(prepared.split("train"), max_tokens=4096, seed=1))
    assert sum(b.size for b in batches) == len(prepared.split("train"))
