"""The BLEU of the released checkpoints (checkpoints/multi30k-*/) on a fixed slice of the
Multi30k test set, pinned in docs/RESULTS-pinned.json beside docs/RESULTS.md.

tests/test_released_checkpoints.py recomputes them (slow tier, `make verify-results`) where the
test set is present (MULTI30K, tests/helpers/corpora.py) and compares them to two decimals: a
change that moves what the published models translate, in decoding, a default, the tokenizer
or the scoring, fails it instead of leaving docs/RESULTS.md silently out of date.

Protocol: the first SENTENCES lines of test_2016_flickr.{de,en}.gz as they are (the source
side the checkpoint's meta.json names, the other as references), translated by
`gmlm.load(...).translate` in fp32 on the CPU, one torch thread, in batches of BATCH_SIZE, with
each system's SETTINGS on top of the checkpoint's own decoding defaults (its decoding.json),
scored by sacreBLEU (gmlm.evaluation.bleu, 13a). After shipping new checkpoints, or after a
change meant to change the outputs (say why in its commit), regenerate the file with

    PYTHONPATH=src python -m tests.helpers.pinned_results

(MULTI30K=DIR where the test set is not at ../shared/data/multi30k) and commit it.

Float rounding differs between CPU models and thread counts, and moves an output only where two
scores nearly tie; BLEU to two decimals on these 100 sentences did not move with the batch size
(1, 8 or 64: the same output for every sentence), which changes the rounding as much.
PaDIR's BLEU moves with the draw of its initial random tokens about as much as with the seed
(docs/RESULTS.md, "Table 1, our version": a range of 0.50 BLEU over five seeds into English,
0.16 into German, on the whole test set); the file was last written after the draw became
keyed by each sentence's own ids (gmlm.decoding.draws), on an Intel Xeon with AMX.
"""

from __future__ import annotations

import gzip
from pathlib import Path
from typing import Any

import torch

import gmlm
from gmlm import provenance
from gmlm.evaluation.bleu import Score, corpus_scores
from gmlm.io import atomic_write_json
from tests.helpers.corpora import MULTI30K
from tests.helpers.released_golden import CHECKPOINTS

ROOT = Path(__file__).resolve().parents[2]
PINNED = ROOT / "docs" / "RESULTS-pinned.json"
COMMAND = "PYTHONPATH=src python -m tests.helpers.pinned_results"
SPLIT = "test_2016_flickr"
SENTENCES = 100
BATCH_SIZE = 64
# System: (released folder under checkpoints/, decoding settings): docs/RESULTS.md's rows of
# the released models.
SYSTEMS: dict[str, tuple[str, dict[str, Any]]] = {
    "de-en/ar-beam5": ("multi30k-de-en/ar", {"beam": 5}),
    "de-en/ar1-beam5": ("multi30k-de-en/ar1", {"beam": 5}),
    "de-en/padir-T4-B5": ("multi30k-de-en/padir", {"steps": 4, "length_beam": 5}),
    "en-de/ar-beam5": ("multi30k-en-de/ar", {"beam": 5}),
    "en-de/ar1-beam5": ("multi30k-en-de/ar1", {"beam": 5}),
    "en-de/padir-T4-B5": ("multi30k-en-de/padir", {"steps": 4, "length_beam": 5}),
}


def multi30k_slice(pair: tuple[str, str], folder: Path = MULTI30K) -> tuple[list[str], list[str]]:
    """The first SENTENCES sources and references of the test set, for the language `pair`."""
    sides = []
    for lang in pair:
        with gzip.open(folder / f"{SPLIT}.{lang}.gz", "rt", encoding="utf-8") as handle:
            sides.append(handle.read().splitlines()[:SENTENCES])
    return sides[0], sides[1]


def bleu(system: str, folder: Path = MULTI30K) -> Score:
    """The BLEU of `system` on the slice, by the protocol above."""
    name, settings = SYSTEMS[system]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        translator = gmlm.load(CHECKPOINTS / name, device="cpu")
        pair = translator.languages.pair
        assert pair is not None, f"{name}: its meta.json records no language pair"
        sources, references = multi30k_slice(pair, folder)
        hypotheses = translator.translate(sources, batch_size=BATCH_SIZE, **settings)
    finally:
        torch.set_num_threads(threads)
    return corpus_scores(hypotheses, references)["bleu"]


def protocol() -> dict[str, Any]:
    """What the file records besides the scores; the test checks it against this module."""
    return {
        "data": f"the first {SENTENCES} lines of {SPLIT}.{{de,en}}.gz (Multi30k)",
        "sentences": SENTENCES,
        "batch_size": BATCH_SIZE,
        "precision": "fp32",
        "device": "cpu",
        "threads": 1,
        "systems": {
            system: {"checkpoint": f"checkpoints/{name}", "settings": settings}
            for system, (name, settings) in SYSTEMS.items()
        },
    }


def main() -> None:
    found = protocol()
    signatures = set()
    for system, entry in found["systems"].items():
        score = bleu(system)
        entry["bleu"] = round(score.score, 2)
        signatures.add(score.signature)
        print(f"{system}: BLEU {entry['bleu']:.2f}")
    (signature,) = signatures
    pinned = {
        "about": "BLEU of the released checkpoints on a fixed slice of the Multi30k test set, "
        "recomputed by `make verify-results` (tests/helpers/pinned_results.py)",
        "command": COMMAND,
        **found,
        "bleu_signature": signature,
        "measured_on": {"cpu": provenance.cpu_model(), "torch": provenance.torch_version()},
    }
    atomic_write_json(PINNED, pinned)
    print(f"wrote {PINNED}")


if __name__ == "__main__":
    main()
