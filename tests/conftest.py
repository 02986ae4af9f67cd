"""Fixtures shared across test folders: one torch thread, a tiny prepared translation dataset,
a tiny PaDIR run trained on it, tiny checkpoints that memorised its first test pairs, and the
toy models of the decoding and translation tests (untrained ones, and ones overfit for a
second or two on a reversal task so that they stop at different lengths and converge at
different passes). Helpers (plain functions) live in tests/helpers/."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from gmlm.data.tokenizer import Tokenizer
from gmlm.models import AutoregressiveModel, PadirModel
from gmlm.nn import ModelConfig, preset
from tests.helpers.corpora import make_pairs, tiny_config, write_corpus
from tests.helpers.learned import fit, memorised_checkpoint
from tests.helpers.reversal import CONFIG, reversal_pairs
from tests.helpers.sentences import sentences


@pytest.fixture
def one_thread() -> Iterator[None]:
    """Run the test on one torch thread. Tiny ops are dominated by thread hand-off: one thread
    is several times faster there, far more on a machine whose other core is busy. Modules opt
    in with `pytestmark = pytest.mark.usefixtures("one_thread")`."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def word_task_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """3,000 word-for-word 'translation' pairs, prepared (tokenizer vocabulary 400)."""
    from gmlm.data.prepare import prepare_dataset

    root = tmp_path_factory.mktemp("wordtask")
    src, tgt = make_pairs(3000, seed=1)
    return prepare_dataset(tiny_config(write_corpus(root, src, tgt)), root / "data")


@pytest.fixture(scope="session")
def padir_run(word_task_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny PaDIR trained for 40 steps on `word_task_data` (its run folder), in fp32: bf16
    autocast (precision=auto) rounds differently on every kind of CPU, and was measured 5x
    slower than fp32 on a CPU without bf16 hardware. Poor (it stutters, its top length is 13
    for every sentence), but on the first 64 test sentences, T=4 and the top 4 lengths stay
    clear of float near-ties: measured on one CPU, the smallest top-2 gap of a token's logits
    was 5e-5 and of the length logits at ranks 1-5 1e-2, against about 1e-6 of rounding noise
    from a sentence's batch. (Ranks 5 and 6 of the length logits nearly tie, by 4e-7.)"""
    from gmlm.training.config import load_train_config
    from gmlm.training.trainer import Trainer

    out = tmp_path_factory.mktemp("padir") / "padir"
    overrides = ["max_steps=40", "valid_every=40", "valid_sentences=0", "log_every=10"]
    overrides += ["threads=1", "precision=fp32"]
    cfg = load_train_config("tiny-padir", [f"data={word_task_data}", f"out={out}", *overrides])
    threads = torch.get_num_threads()
    Trainer(cfg, progress=False, log=lambda _message: None).run()
    torch.set_num_threads(threads)
    return out


@pytest.fixture(scope="session")
def learned_checkpoints(
    word_task_data: Path, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Path]:
    """An AR and a PaDIR checkpoint that memorised the first test pairs of `word_task_data`
    (tests/helpers/learned.py: what each has learned, and the sentences it has not seen);
    a few seconds of training."""
    root = tmp_path_factory.mktemp("learned")
    return {
        kind: memorised_checkpoint(root / kind, kind, word_task_data) for kind in ("ar", "padir")
    }


@pytest.fixture(scope="session")
def reversal() -> tuple[torch.Tensor, torch.Tensor]:
    return reversal_pairs(16)


def _train(model: torch.nn.Module, src: torch.Tensor, tgt: torch.Tensor, steps: int) -> None:
    fit(model, src, tgt, steps, lr=5e-3, stages=2, seed=0)


@pytest.fixture(scope="session")
def trained_ar(reversal: tuple[torch.Tensor, torch.Tensor]) -> AutoregressiveModel:
    torch.manual_seed(0)
    model = AutoregressiveModel(CONFIG)
    _train(model, *reversal, steps=150)
    return model


@pytest.fixture(scope="session")
def trained_padir(reversal: tuple[torch.Tensor, torch.Tensor]) -> PadirModel:
    torch.manual_seed(0)
    model = PadirModel(CONFIG)
    _train(model, *reversal, steps=150)
    return model


@pytest.fixture
def untrained_ar() -> AutoregressiveModel:
    torch.manual_seed(1)
    return AutoregressiveModel(CONFIG).eval()


@pytest.fixture(scope="session")
def tokenizer() -> Tokenizer:
    return Tokenizer.train(sentences(300), vocab_size=400, threads=1)


@pytest.fixture(scope="session")
def text_config(tokenizer: Tokenizer) -> ModelConfig:
    # Untied embeddings: a tied untrained model copies its input, and its PaDIR outputs are
    # then all dropped as unchanged initial tokens, which would make empty outputs pass.
    return preset(
        "tiny",
        vocab_size=tokenizer.vocab_size,
        max_source_len=24,
        max_target_len=24,
        tie_embeddings=False,
    )
