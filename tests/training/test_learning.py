"""Slow tier: both tiny models learn a synthetic translation task to near-perfect quality.

The task is word-for-word translation over a 14-word vocabulary (tests/data/datahelpers.py)
without adjacent repeated target words, because PaDIR's post-processing drops adjacent repeats
(the paper's stutter removal) and would otherwise be penalised on correct output.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

import gmlm
from gmlm.data import load_dataset
from gmlm.evaluation.bleu import corpus_scores
from gmlm.training.config import load_train_config
from gmlm.training.trainer import Trainer
from tests.data.datahelpers import make_pairs, tiny_config, write_lines

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def task(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from gmlm.data.prepare import prepare_dataset

    root = tmp_path_factory.mktemp("learn")
    src, tgt = make_pairs(12000, seed=11)
    keep = [
        i
        for i, t in enumerate(tgt)
        if all(a != b for a, b in itertools.pairwise(t.lower().rstrip(".").split()))
    ]
    write_lines(root / "c.de", [src[i] for i in keep])
    write_lines(root / "c.en", [tgt[i] for i in keep])
    return prepare_dataset(tiny_config(f"files:{root / 'c.de'},{root / 'c.en'}"), root / "data")


# PaDIR decodes its top-1 length here: with B = 5 the paper's selection by summed token
# log-probability picks a wrong-length candidate for about 1 sentence in 6 on this task (BLEU
# 88 instead of 98), a selection weakness `length_weight` addresses, not a learning failure.
@pytest.mark.parametrize(
    ("kind", "steps", "decoding"), [("ar", 1200, {}), ("padir", 2500, {"length_beam": 1})]
)
def test_tiny_model_learns_word_translation(task, tmp_path, kind, steps, decoding):
    cfg = load_train_config(
        f"tiny-{kind}",
        [
            f"data={task}",
            f"out={tmp_path}",
            f"max_steps={steps}",
            *(["model.d_model=64", "model.d_ff=256"] if kind == "ar" else []),
            "valid_sentences=0",
            "threads=1",
        ],
    )
    Trainer(cfg, progress=False, log=lambda _m: None).run()
    data = load_dataset(task)
    sources = data.read_text("valid", "src")[:200]
    references = data.read_text("valid", "tgt")[:200]
    hyps = gmlm.load(tmp_path / "last").translate(sources, **decoding)
    bleu = corpus_scores(hyps, references)["bleu"].score
    exact = sum(h == r for h, r in zip(hyps, references, strict=True)) / len(references)
    print(f"{kind}: BLEU {bleu:.1f}, exact {exact:.2f}")
    assert bleu >= 90.0 and exact >= 0.7
