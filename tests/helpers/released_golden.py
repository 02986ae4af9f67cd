"""The golden outputs of the checkpoints shipped under checkpoints/ (one folder per language
pair, e.g. checkpoints/multi30k-de-en/), which tests/test_released_checkpoints.py compares
against.

Run `python -m tests.helpers.released_golden` after shipping new checkpoints and paste what it
prints into that test: it records what the shipped weights give under the code of the day, so a
later change that alters a released model's outputs fails the test instead of passing silently.
Its GOLDEN_TRANSLATIONS go into this module (below), in place of the ones there.
"""

from __future__ import annotations

from pathlib import Path

import torch

from gmlm.checkpoint.loading import load_for_inference
from gmlm.models import teacher_forcing_input

CHECKPOINTS = Path(__file__).resolve().parents[2] / "checkpoints"
# The German-English models: `make demo`'s, and those the tests of one released model use.
RELEASED = CHECKPOINTS / "multi30k-de-en"

# Token ids of three random "sentences" and targets (EOS = 3, pad = 0), within every shipped
# tokenizer's 8,000 pieces.
GOLDEN_SRC = [
    [1228, 7359, 4451, 7372, 63, 6091, 3939, 1745, 3],
    [3833, 239, 1980, 1386, 4547, 2640, 3202, 6562, 3],
    [878, 7855, 1370, 267, 3363, 3, 0, 0, 0],
]
GOLDEN_TGT = [
    [2193, 6545, 1130, 2359, 6488, 6541, 3],
    [7065, 3615, 2326, 6441, 3, 0, 0],
    [1791, 104, 3343, 6417, 7591, 7431, 3],
]

# Eight fixed sentences in each source language (Multi30k-style captions, written for this
# test: no test set needed), which every shipped model translates exactly into its
# GOLDEN_TRANSLATIONS by TRANSLATION_SETTINGS (docs/RESULTS.md's systems: AR beam 5, PaDIR
# T=4 B=5, each on top of its checkpoint's decoding.json).
GOLDEN_SENTENCES = {
    "de": [
        "Ein Mann fährt Fahrrad.",
        "Zwei Hunde spielen im Schnee.",
        "Eine Frau mit einem roten Hut sitzt auf einer Bank.",
        "Ein kleines Mädchen klettert auf einen Baum.",
        "Drei Männer arbeiten an einer Straße in der Stadt.",
        "Ein Junge springt mit seinem Skateboard über eine Treppe.",
        "Eine Gruppe von Menschen steht vor einem großen Gebäude.",
        "Ein schwarzer Hund rennt über das grüne Gras.",
    ],
    "en": [
        "A man rides a bicycle.",
        "Two dogs play in the snow.",
        "A woman with a red hat sits on a bench.",
        "A little girl climbs a tree.",
        "Three men are working on a street in the city.",
        "A boy jumps over some stairs with his skateboard.",
        "A group of people stands in front of a large building.",
        "A black dog runs across the green grass.",
    ],
}
# By the folder's name (checkpoints/PAIR/NAME).
TRANSLATION_SETTINGS: dict[str, dict[str, int]] = {
    "ar": {"beam": 5},
    "ar1": {"beam": 5},
    "padir": {"steps": 4, "length_beam": 5},
}
# What `python -m tests.helpers.released_golden` printed (released_translations: fp32, CPU, one
# torch thread, the default batching by tokens) on an Intel Xeon with torch 2.13.0+cpu. Every
# output was the same in batches of 1 and 8 and with 2 threads there: no sentence sits at a
# near-tie that another CPU's float rounding could tip (PaDIR's random initial tokens are keyed
# by the seed and each sentence's own ids, so they do not depend on the batch either).
GOLDEN_TRANSLATIONS = {
    "multi30k-de-en/ar": [
        "A man is riding a bicycle.",
        "Two dogs play in the snow.",
        "A woman in a red hat is sitting on a bench.",
        "A little girl climbs a tree.",
        "Three men are working on a city street.",
        "A boy jumps his skateboard over a staircase.",
        "A group of people standing in front of a large building.",
        "A black dog runs across the green grass.",
    ],
    "multi30k-de-en/ar1": [
        "A man is riding a bicycle.",
        "Two dogs play in the snow.",
        "A woman in a red hat is sitting on a bench.",
        "A little girl climbs a tree.",
        "Three men are working on a street in the city.",
        "A boy jumps his skateboard over a staircase.",
        "A group of people are standing in front of a large building.",
        "A black dog runs across the green grass.",
    ],
    "multi30k-de-en/padir": [
        "A man is riding a bicycle.",
        "Two dogs play in the snow.",
        "A woman in a red hat is sitting on a bench.",
        "A little girl climbs a tree on a tree.",
        "Three men are working on a city street.",
        "A boy jumps over a staircase with his skateboard.",
        "A group of people standing in front of a large building.",
        "A black dog runs across the green grass.",
    ],
    "multi30k-en-de/ar": [
        "Ein Mann fährt Fahrrad.",
        "Zwei Hunde spielen im Schnee.",
        "Eine Frau mit einem roten Hut sitzt auf einer Bank.",
        "Ein kleines Mädchen klettert auf einen Baum.",
        "Drei Männer arbeiten auf einer Straße in der Stadt.",
        "Ein Junge springt mit seinem Skateboard über eine Treppe.",
        "Eine Gruppe von Menschen steht vor einem großen Gebäude.",
        "Ein schwarzer Hund rennt über das grüne Gras.",
    ],
    "multi30k-en-de/ar1": [
        "Ein Mann fährt ein Fahrrad.",
        "Zwei Hunde spielen im Schnee.",
        "Eine Frau mit einem roten Hut sitzt auf einer Bank.",
        "Ein kleines Mädchen klettert einen Baum.",
        "Drei Männer arbeiten auf einer Straße in der Stadt.",
        "Ein Junge springt mit seinem Skateboard über eine Treppe.",
        "Eine Gruppe von Menschen steht vor einem großen Gebäude.",
        "Ein schwarzer Hund rennt über das grüne Gras.",
    ],
    "multi30k-en-de/padir": [
        "Ein Mann fährt ein Fahrrad.",
        "Zwei Hunde spielen im Schnee.",
        "Eine Frau mit einem roten Hut sitzt auf einer Bank.",
        "Ein kleines Mädchen klettert auf einen Baum.",
        "Drei Männer arbeiten auf einer Straße in der Stadt.",
        "Ein Junge springt mit seinem Skateboard über eine Treppe.",
        "Eine Gruppe von Menschen steht vor einem großen Gebäude.",
        "Ein schwarzer Hund rennt über das grünes Gras.",
    ],
}


def released_translations(folder: Path, batch_size: int | None = None) -> list[str]:
    """The shipped model in `folder` translating GOLDEN_SENTENCES of its source language by
    TRANSLATION_SETTINGS, in fp32 on the CPU on one torch thread; in batches of `batch_size`
    sentences, or by default as `gmlm translate` batches them (by tokens)."""
    import gmlm

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        translator = gmlm.load(folder, device="cpu")
        pair = translator.languages.pair
        assert pair is not None, f"{folder}: its meta.json records no language pair"
        settings = TRANSLATION_SETTINGS[folder.name]
        return translator.translate(GOLDEN_SENTENCES[pair[0]], batch_size=batch_size, **settings)
    finally:
        torch.set_num_threads(threads)


@torch.no_grad()
def released_outputs(folder: Path) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The log-probability of each golden target token, teacher-forced (AR) or decoded in
    parallel from the targets themselves (PaDIR), and for PaDIR the length log-probability of
    each target's length (None for AR)."""
    loaded = load_for_inference(folder)
    config = loaded.model_config
    src, tgt = torch.tensor(GOLDEN_SRC), torch.tensor(GOLDEN_TGT)
    lengths = None
    if loaded.kind == "padir":
        logits, length_logits = loaded.model(src, tgt)
        rows = torch.arange(len(GOLDEN_TGT))
        lengths = length_logits.log_softmax(-1)[rows, (tgt != config.pad_id).sum(1) - 1]
    else:
        logits = loaded.model(src, teacher_forcing_input(tgt, config))
    log_probs = logits.log_softmax(-1).gather(2, tgt.unsqueeze(2)).squeeze(2)
    return log_probs, lengths


def released_folders() -> list[str]:
    """The checkpoint folders shipped under CHECKPOINTS, as "PAIR/NAME" (e.g.
    "multi30k-de-en/padir"), in name order."""
    configs = CHECKPOINTS.glob("*/*/config.yaml")
    return sorted(p.parent.relative_to(CHECKPOINTS).as_posix() for p in configs)


def _rounded(values: torch.Tensor) -> list[object]:
    """The values to 4 decimals, as nested lists (what the test file holds)."""
    return [_rounded(row) if row.dim() else round(float(row), 4) for row in values]


def main() -> None:
    token_lines, length_lines = [], []
    for name in released_folders():
        log_probs, lengths = released_outputs(CHECKPOINTS / name)
        token_lines.append(f"    {name!r}: {_rounded(log_probs)},")
        if lengths is not None:
            length_lines.append(f"    {name!r}: {_rounded(lengths)},")
    print("GOLDEN_TOKEN_LOG_PROBS = {", *token_lines, "}", sep="\n")
    print("GOLDEN_LENGTH_LOG_PROBS = {", *length_lines, "}", sep="\n")
    print("GOLDEN_TRANSLATIONS = {")
    for name in released_folders():
        outputs = released_translations(CHECKPOINTS / name)
        print(f"    {name!r}: [", *(f"        {o!r}," for o in outputs), "    ],", sep="\n")
        for batch_size in (1, 8):
            other = released_translations(CHECKPOINTS / name, batch_size)
            for sentence, (a, b) in enumerate(zip(outputs, other, strict=True)):
                if a != b:  # a near-tie: another CPU's rounding may tip it too
                    print(f"    # sentence {sentence}: {b!r} in batches of {batch_size}: drop it")
    print("}")


if __name__ == "__main__":
    main()
