"""Translation data: corpora, cleaning, the joint SentencePiece tokenizer, binarized datasets
and token-budget batching.

Typical use (library)::

    from gmlm.data import DataConfig, prepare_dataset, TranslationDataset, BatchIterator

    root = prepare_dataset(DataConfig(corpus="multi30k:../shared/data/multi30k"), "runs/m30k")
    train = TranslationDataset.open(root, "train")
    batches = BatchIterator(train, max_tokens=4096, seed=1)   # rank/world_size from torchrun
    for batch in batches:                                     # one epoch
        batch.src, batch.tgt                                  # (B, S), (B, T) int64, EOS added

Command line: `gmlm data prepare`, `gmlm data stats`, `gmlm data bench`.

The names below are imported on first use (PEP 562), so that importing a light submodule such
as `gmlm.data.textfiles` (what `gmlm --help` does) does not load torch with the batching code.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gmlm.lazy import lazy_names

if TYPE_CHECKING:
    from gmlm.data.batching import Batch, BatchIterator
    from gmlm.data.binarized import PreparedDataset, TranslationDataset, load_dataset
    from gmlm.data.cleaning import normalize
    from gmlm.data.corpora import read_corpus
    from gmlm.data.lengths import EncodedInputs, OverLengthError, encode_inputs
    from gmlm.data.parallel import Corpus, ParallelText
    from gmlm.data.prepare import DataConfig, FilterConfig, TokenizerConfig, prepare_dataset
    from gmlm.data.tokenizer import Tokenizer

# Every name of __all__ and the module that defines it.
_HOMES: dict[str, str] = {
    "Batch": "gmlm.data.batching",
    "BatchIterator": "gmlm.data.batching",
    "Corpus": "gmlm.data.parallel",
    "DataConfig": "gmlm.data.prepare",
    "EncodedInputs": "gmlm.data.lengths",
    "FilterConfig": "gmlm.data.prepare",
    "OverLengthError": "gmlm.data.lengths",
    "ParallelText": "gmlm.data.parallel",
    "PreparedDataset": "gmlm.data.binarized",
    "Tokenizer": "gmlm.data.tokenizer",
    "TokenizerConfig": "gmlm.data.prepare",
    "TranslationDataset": "gmlm.data.binarized",
    "encode_inputs": "gmlm.data.lengths",
    "load_dataset": "gmlm.data.binarized",
    "normalize": "gmlm.data.cleaning",
    "prepare_dataset": "gmlm.data.prepare",
    "read_corpus": "gmlm.data.corpora",
}

__all__ = [
    "Batch",
    "BatchIterator",
    "Corpus",
    "DataConfig",
    "EncodedInputs",
    "FilterConfig",
    "OverLengthError",
    "ParallelText",
    "PreparedDataset",
    "Tokenizer",
    "TokenizerConfig",
    "TranslationDataset",
    "encode_inputs",
    "load_dataset",
    "normalize",
    "prepare_dataset",
    "read_corpus",
]


__getattr__ = lazy_names(__name__, _HOMES)
