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
"""

from gmlm.data.batching import Batch, BatchIterator
from gmlm.data.binarized import PreparedDataset, TranslationDataset, load_dataset
from gmlm.data.cleaning import normalize
from gmlm.data.corpora import read_corpus
from gmlm.data.lengths import EncodedInputs, OverLengthError, encode_inputs
from gmlm.data.parallel import Corpus, ParallelText
from gmlm.data.prepare import DataConfig, FilterConfig, TokenizerConfig, prepare_dataset
from gmlm.data.tokenizer import Tokenizer

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
