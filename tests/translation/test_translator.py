"""Translator (raw text in, text out) and the `gmlm translate` command."""

from __future__ import annotations

import gzip
import inspect
import io
import math
import random
import re
import sys
from collections.abc import Callable
from dataclasses import fields as fields_of
from pathlib import Path
from typing import Any

import pytest
import torch

import gmlm
import gmlm.translation.batch_plan
from gmlm.checkpoint.files import fill_inference_files, weights_digest, write_checkpoint_dir
from gmlm.checkpoint.meta import Meta
from gmlm.cli.main import main
from gmlm.data.binarized import load_dataset
from gmlm.data.lengths import OverLengthError
from gmlm.data.tokenizer import Tokenizer
from gmlm.decoding import RefinementOptions, SearchOptions
from gmlm.decoding.options import MAX_TOKENS_DEFAULT
from gmlm.errors import GmlmError
from gmlm.models import PadirModel, build_model
from gmlm.nn import ModelConfig
from gmlm.training.config import TrainConfig
from gmlm.translation.translator import Translator
from tests.helpers.sentences import WORDS, sentences

LONG = " ".join(WORDS * 3) + "."  # about 60 tokens; the limit is 24


@pytest.fixture(scope="module")
def translators(tokenizer: Tokenizer, text_config: ModelConfig) -> dict[str, Translator]:
    torch.manual_seed(0)
    return {
        kind: Translator(kind, build_model(kind, text_config), tokenizer)  # type: ignore[arg-type]
        for kind in ("ar", "padir")
    }


@pytest.mark.parametrize("kind", ["ar", "padir"])
def test_one_output_per_line_and_empty_lines_stay_empty(
    kind: str, translators: dict[str, Translator]
) -> None:
    lines = ["der Hund läuft.", "", "   ", "die Katze springt über einen Baum.", "\t"]
    out = translators[kind].translate(lines, batch_size=2, max_len_b=4 if kind == "ar" else None)
    assert len(out) == len(lines)
    assert out[1] == out[2] == out[4] == "" and out[0] and out[3]
    assert not any("\n" in line or "\r" in line for line in out)
    assert translators[kind].translate([]) == []


def test_batching_and_sorting_do_not_change_outputs(translators: dict[str, Translator]) -> None:
    # AR greedy is deterministic, so each line must get what it gets alone.
    lines = sentences(7, seed=4)
    batched = translators["ar"].translate(lines, batch_size=3, max_len_b=4)
    alone = [translators["ar"].translate([line], max_len_b=4)[0] for line in lines]
    assert batched == alone
    assert any(batched)
    for budget in (1, 30, 100_000):  # each alone, a few per batch, all in one
        assert translators["ar"].translate(lines, max_tokens=budget, max_len_b=4) == alone


def test_a_cancelled_translation_stops_before_its_next_batch(
    translators: dict[str, Translator], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once the thread's check says nobody waits (gmlm.decoding.cancel), no further batch
    reaches the decoder (not even its encoder, which runs before the decoder's own check)."""
    import gmlm.translation.translator as translator_module
    from gmlm.decoding.cancel import Cancelled, cancellable

    started, finished = [], []
    original = translator_module.refine

    def refine(*args: Any, **kwargs: Any) -> Any:
        started.append(1)
        results = original(*args, **kwargs)
        finished.append(1)
        return results

    monkeypatch.setattr(translator_module, "refine", refine)
    with cancellable(lambda: len(finished) >= 1), pytest.raises(Cancelled):
        translators["padir"].translate(sentences(3, seed=6), batch_size=1, steps=1)
    assert (len(started), len(finished)) == (1, 1)
    started.clear()
    translators["padir"].translate(sentences(3, seed=6), batch_size=1, steps=1)
    assert len(started) == 3


@pytest.mark.parametrize("kind", ["ar", "padir"])
def test_progress_is_reported_after_each_batch(
    kind: str, translators: dict[str, Translator]
) -> None:
    """The callback hears after every batch how many sentences are done of how many; the
    empty lines are not decoded and not counted, a split line counts as its pieces."""
    lines = [*sentences(5, seed=7), "", LONG]
    calls: list[tuple[int, int]] = []
    extra = {"max_len_b": 4} if kind == "ar" else {"steps": 1}
    out = translators[kind].translate(
        lines,
        batch_size=2,
        on_over_length="split",
        progress=lambda done, total: calls.append((done, total)),
        **extra,
    )
    assert len(out) == len(lines)
    total = calls[-1][1]
    assert total > 6  # 5 sentences and LONG's pieces
    assert calls[-1] == (total, total) and len(calls) == math.ceil(total / 2)
    assert [done for done, _ in calls] == sorted({done for done, _ in calls})
    assert {t for _, t in calls} == {total}


def test_padir_seed_makes_runs_repeatable(translators: dict[str, Translator]) -> None:
    lines = sentences(4, seed=5)
    first = translators["padir"].translate(lines, seed=3, steps=2, length_beam=2)
    assert translators["padir"].translate(lines, seed=3, steps=2, length_beam=2) == first
    assert translators["padir"].translate(lines, seed=4, steps=2, length_beam=2) != first


@pytest.mark.parametrize("pruning", [{"prune_after": 0}, {}, {"prune_after": 1, "prune_keep": 1}])
def test_padir_line_depends_only_on_the_line_and_the_seed(
    pruning: dict[str, int], learned_checkpoints: dict[str, Path], word_task_data: Path
) -> None:
    """Not on the batch size, the other lines, the order or the line's place: each line's random
    tokens are keyed by its own ids, and pruning ranks a sentence's own candidates only. The
    learned PaDIR model (tests/helpers/learned.py) predicts different lengths for different
    sentences, so a batch's candidates have different widths (random tokens drawn at the batch's
    width would differ with the batch), and its output depends on the random tokens. On these 64
    sentences (32 seen in training, 32 not), T=4, the top 4 lengths, measured on one CPU: the
    smallest top-2 gap of a token's logits was 4e-4, of a sentence's candidate scores 1e-4 and
    of the length logits at ranks 1-5 8e-4, against about 1e-6 of rounding noise from a
    sentence's batch."""
    translator = gmlm.load(learned_checkpoints["padir"], device="cpu")
    lines = load_dataset(word_task_data).read_text("test", "src")[:64]
    model = translator.model
    assert isinstance(model, PadirModel)
    with torch.no_grad():
        src = translator.source_tensor([translator.tokenizer.encode(line) for line in lines])
        widths = model.predict_lengths(model.encode(src), 4).max(1).values.tolist()
    assert len(set(widths)) >= 5  # each sentence's longest candidate

    def translate(sentences: list[str], **settings: Any) -> list[str]:
        return translator.translate(sentences, length_beam=4, **pruning, **settings)

    whole = translate(lines, batch_size=32)
    assert translate(lines, batch_size=1) == whole
    # batches by tokens (sorted by predicted length): 4 candidates of up to ~15 tokens each
    for budget in (1, 150, 600, 100_000):
        assert translate(lines, max_tokens=budget) == whole
    assert translate(lines, max_tokens=600, batch_size=3) == whole
    assert translate(lines[:20], batch_size=32) == whole[:20]
    order = random.Random(0).sample(range(len(lines)), len(lines))
    shuffled = translate([lines[i] for i in order], batch_size=7)
    assert [shuffled[order.index(i)] for i in range(len(lines))] == whole
    assert translate(lines[40:50]) == whole[40:50]
    # A repeated line translates alike wherever it stands; another seed starts from other
    # random tokens (and this model's output depends on them).
    doubled = translate([*lines[:16], *lines[:16][::-1]], batch_size=5)
    assert doubled == [*whole[:16], *whole[:16][::-1]]
    assert translate(lines, seed=1) != whole


def test_padir_batches_by_tokens_of_its_predicted_candidates(
    learned_checkpoints: dict[str, Path], word_task_data: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under a token budget the length head runs once per sentence, before any pass; each
    batch then holds sentences of similar predicted length, widest first, its candidates
    (rows) times its widest candidate within the budget, and decodes the lengths predicted."""
    translator = gmlm.load(learned_checkpoints["padir"], device="cpu")
    model = translator.model
    assert isinstance(model, PadirModel)
    lines = load_dataset(word_task_data).read_text("test", "src")[:48]
    predicted: list[int] = []
    predict, encode = model.predict_lengths, model.encode
    monkeypatch.setattr(
        model,
        "predict_lengths",
        lambda enc, top_b=1: predicted.append(enc.memory.shape[0]) or predict(enc, top_b),
    )
    encoded: list[int] = []
    monkeypatch.setattr(model, "encode", lambda src: encoded.append(len(src)) or encode(src))
    batches: list[torch.Tensor] = []
    refine = gmlm.translation.translator.refine

    def spy(*args: Any, **kwargs: Any) -> Any:
        batches.append(args[4])  # the batch's lengths (B, length_beam), predicted before
        return refine(*args, **kwargs)

    monkeypatch.setattr(gmlm.translation.translator, "refine", spy)
    budget, beam = 120, 3
    # length_shift 1, as the released PaDIR models decode: the planned lengths carry it
    settings = {"length_beam": beam, "length_offsets": (1,), "length_shift": 1}
    out = translator.translate(lines, max_tokens=budget, **settings)
    assert sum(predicted) == sum(encoded) == len(lines)  # once per sentence
    widths = [int(lengths.max()) + 1 for lengths in batches]  # with offset 1
    assert widths == sorted(widths, reverse=True) and len(set(widths)) >= 3
    rows = [lengths.shape[0] * beam * 2 for lengths in batches]
    assert all(r * w <= budget for r, w in zip(rows, widths, strict=True) if r > beam * 2)
    assert max(rows) > beam * 2 and len(batches) > 3
    assert sum(lengths.shape[0] for lengths in batches) == len(lines)
    assert out == translator.translate(lines, batch_size=48, **settings)
    # windows of a few sentences each (the encoder states kept at once): the same outputs
    monkeypatch.setattr(
        gmlm.translation.batch_plan, "PLAN_BYTES", 4 * translator.config.d_model * 60
    )
    encoded.clear()
    assert translator.translate(lines, max_tokens=budget, **settings) == out
    assert len(encoded) >= 8 and sum(encoded) == len(lines)


def test_over_length_is_an_error_naming_line_and_limit(
    translators: dict[str, Translator],
) -> None:
    with pytest.raises(
        OverLengthError, match=r"corpus\.de: 1 sentence.*line 3 \(\d+ tokens\)"
    ) as err:
        translators["ar"].translate(["der Hund.", "", LONG], origin="corpus.de")
    # ... and the two ways out that need no editing.
    assert '--over-length split (Python: on_over_length="split")' in str(err.value)
    assert "--over-length report" in str(err.value)
    with pytest.raises(OverLengthError, match="max_len=24"):
        translators["padir"].translate([LONG])


def test_over_length_split_at_punctuation(translators: dict[str, Translator]) -> None:
    translator = translators["ar"]
    text = " ".join(sentences(12, seed=6))
    pieces = translator.split(text, 24)
    assert len(pieces) > 1 and all(len(p) + 1 <= 24 for p in pieces)
    joined = translator.tokenizer.decode([i for p in pieces for i in p])
    assert joined.replace(" ", "") == text.replace(" ", "")
    out = translator.translate(["der Hund.", text], on_over_length="split", max_len_b=4)
    assert len(out) == 2 and out[1]


def spy_on_decoding(monkeypatch: pytest.MonkeyPatch) -> list[list[list[int]]]:
    """The sources of every Translator.translate_ids call from now on, as they reach it."""
    calls: list[list[list[int]]] = []
    original = Translator.translate_ids

    def spy(self, sources, options, **kw):  # type: ignore[no-untyped-def]
        calls.append([list(s) for s in sources])
        return original(self, sources, options, **kw)

    monkeypatch.setattr(Translator, "translate_ids", spy)
    return calls


@pytest.mark.parametrize("kind", ["ar", "padir"])
def test_a_split_line_reaches_the_decoder_sentence_by_sentence(
    kind: str, translators: dict[str, Translator], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A line of 14 sentences, twice the limit: each sentence is its own piece (packing several
    # into one input made a model trained on single sentences drop most of them), every
    # piece is decoded, and their tokens together are the whole line's.
    translator = translators[kind]
    tokenizer = translator.tokenizer
    lines = sentences(14, seed=8)
    text = " ".join(lines)
    assert len(tokenizer.encode(text)) + 1 > 2 * 24
    assert all(len(tokenizer.encode(line)) + 1 <= 24 for line in lines)
    calls = spy_on_decoding(monkeypatch)
    settings = {"max_len_b": 4} if kind == "ar" else {"steps": 2}
    out = translator.translate(["der Hund.", text], on_over_length="split", **settings)
    ((_, *pieces),) = calls
    assert pieces == [tokenizer.encode(line) for line in lines]
    assert len(out) == 2


@pytest.mark.parametrize(
    "text",
    [
        LONG,  # one sentence of ~60 tokens: cut between words
        " ".join(WORDS * 3) + ", " + " ".join(WORDS) + ".",  # at the comma, then words
        "x" * 120 + ".",  # one word of more tokens than the limit: cut between tokens
        "3.5 " * 40,  # no sentence break ("3.5" stays whole), cut between words
    ],
    ids=["words", "clause-then-words", "one-long-word", "decimals"],
)
def test_a_split_line_never_loses_text(
    text: str, translators: dict[str, Translator], monkeypatch: pytest.MonkeyPatch
) -> None:
    translator = translators["ar"]
    pieces = translator.split(text, 24)
    assert len(pieces) > 1 and all(1 <= len(p) <= 23 for p in pieces)
    joined = translator.tokenizer.decode([i for p in pieces for i in p])
    assert joined.replace(" ", "") == text.replace(" ", "")
    calls = spy_on_decoding(monkeypatch)
    (out,) = translator.translate([text], on_over_length="split", max_len_b=4)
    assert calls == [pieces] and out


def test_a_long_sentence_is_cut_between_words_and_at_its_clauses(
    translators: dict[str, Translator],
) -> None:
    """A sentence over the limit is cut at clause punctuation, then between words, never
    inside a word while a word boundary is left."""
    translator = translators["ar"]
    decode = translator.tokenizer.decode
    words = set(WORDS) | {word + "." for word in WORDS} | {word + "," for word in WORDS}
    pieces = translator.split(LONG, 24)
    assert len(pieces) > 1
    assert [set(decode(piece).split()) - words for piece in pieces] == [set()] * len(pieces)
    # Words of several tokens each (doubled words), so that a cut between tokens would split
    # one: the first clause is cut between words, its last piece ends at the comma.
    long_words = [word + word.lower() for word in WORDS]
    text = " ".join(long_words * 2) + ", " + " ".join(WORDS) + "."
    assert len(translator.tokenizer.encode(long_words[0])) > 1
    clauses = translator.split(text, 24)
    words |= set(long_words) | {word + "," for word in long_words}
    assert [set(decode(piece).split()) - words for piece in clauses] == [set()] * len(clauses)
    assert [decode(piece).split()[-1][-1] for piece in clauses].count(",") == 1


def test_each_precision_decodes_with_a_copy_of_its_own(translators: dict[str, Translator]) -> None:
    """fp32 is the model itself; bf16 and int8 are copies made once and kept (an fp32 model
    decoding whatever the precision said escaped the suite once: issue 37)."""
    translator = translators["ar"]
    assert translator.model_at("fp32") is translator.model
    bf16 = translator.model_at("bf16")
    assert bf16 is not translator.model and bf16 is translator.model_at("bf16")
    assert {p.dtype for p in bf16.parameters()} == {torch.bfloat16}
    int8 = translator.model_at("int8")
    assert int8 is not translator.model and int8 is translator.model_at("int8")


@pytest.mark.skipif(torch.cuda.is_available(), reason="the error of a machine without CUDA")
def test_devices_are_checked_before_loading() -> None:
    from gmlm.translation.translator import resolve_device

    assert resolve_device("cpu") == resolve_device("auto") == torch.device("cpu")
    with pytest.raises(GmlmError, match="'cuda:1' requested but CUDA is not available"):
        resolve_device("cuda:1")
    with pytest.raises(GmlmError, match="device 'gpu': choose auto, cpu, cuda or cuda:N"):
        resolve_device("gpu")


def test_bad_batch_size_and_seed_are_clear_errors(translators: dict[str, Translator]) -> None:
    """Checked first, before the lines are read (an over-long line is not what it says)."""
    for settings, message in (({"batch_size": 0}, "batch_size"), ({"seed": -1}, "seed")):
        with pytest.raises(GmlmError, match=message):
            translators["ar"].translate(["der Hund.", LONG], **settings)  # type: ignore[arg-type]


def test_a_split_line_translates_as_its_pieces_do_alone(translators: dict[str, Translator]) -> None:
    translator = translators["padir"]
    text = " ".join(sentences(12, seed=6))
    lines = ["der Hund.", text, "", "die Katze."]
    out = translator.translate(lines, on_over_length="split", steps=2)
    alone = translator.translate([text], on_over_length="split", steps=2)
    assert alone == [out[1]]
    pieces = translator.translate_ids(translator.split(text, 24), translator.options(steps=2))
    assert out[1] == " ".join(t for t in (translator.text(p) for p in pieces) if t)
    with pytest.raises(GmlmError, match=r"unknown.*lines"):
        translator.translate(lines, lines=[0, 1, 2, 3])


def test_over_length_report_leaves_the_line_empty_with_a_warning(
    translators: dict[str, Translator],
) -> None:
    with pytest.warns(UserWarning, match=r"line 2 \(\d+ tokens\)"):
        out = translators["padir"].translate(["der Hund.", LONG], on_over_length="report")
    assert len(out) == 2 and out[1] == ""


def test_settings_of_the_other_kind_name_the_checkpoint_kind(
    translators: dict[str, Translator],
) -> None:
    with pytest.raises(GmlmError, match=r"beam only applies to an autoregressive.*kind 'padir'"):
        translators["padir"].translate(["der Hund."], beam=5)
    with pytest.raises(GmlmError, match=r"steps, remask only apply to a PaDIR.*kind 'ar'"):
        translators["ar"].translate(["der Hund."], steps=4, remask="linear")
    with pytest.raises(GmlmError, match="needs a PadirModel"):
        Translator("padir", translators["ar"].model, translators["ar"].tokenizer)


def test_an_unknown_setting_is_an_error_listing_the_valid_ones(
    translators: dict[str, Translator],
) -> None:
    with pytest.raises(
        GmlmError,
        match=r"unknown decoding setting stepz for a PaDIR model.*are steps, length_beam,",
    ):
        translators["padir"].translate(["der Hund."], stepz=4)
    with pytest.raises(GmlmError, match=r"unknown decoding settings bem, x for an autoregressive"):
        translators["ar"].translate(["der Hund."], bem=2, x=1)


def test_an_options_object_of_its_kind_with_overrides(translators: dict[str, Translator]) -> None:
    padir, ar = translators["padir"], translators["ar"]
    lines = sentences(4, seed=5)
    by_name = padir.translate(lines, steps=2, length_beam=2, seed=3)
    assert padir.translate(lines, RefinementOptions(steps=2, length_beam=2), seed=3) == by_name
    assert padir.translate(lines, RefinementOptions(steps=2), length_beam=2, seed=3) == by_name
    assert padir.options(RefinementOptions(steps=9), steps=2) == RefinementOptions(steps=2)
    assert ar.translate(lines, SearchOptions(beam=2, max_len_b=4)) == ar.translate(
        lines, beam=2, max_len_b=4
    )
    wrong = r"SearchOptions are the settings of an autoregressive.*'padir'\); pass Refinement"
    with pytest.raises(GmlmError, match=wrong):
        padir.translate(lines, SearchOptions())
    with pytest.raises(GmlmError, match=r"RefinementOptions are the settings of a PaDIR"):
        ar.options(RefinementOptions())
    with pytest.raises(GmlmError, match=r"steps=0 must be between 1"):  # validated as a whole
        padir.translate(lines, RefinementOptions(steps=0))
    # Neither options object: named as what it is, not as the other kind's settings.
    wrong_type = r"^options: expected RefinementOptions .*got (dict|str)$"
    for given in ({"steps": 3}, "beam=3"):
        with pytest.raises(GmlmError, match=wrong_type):
            padir.translate(lines, given)  # type: ignore[arg-type]
    with pytest.raises(GmlmError, match=r"^options: expected SearchOptions .*, got dict$"):
        ar.translate(lines, {"beam": 3})  # type: ignore[arg-type]
    # A length limit that would overflow is refused.
    with pytest.raises(GmlmError, match=r"^max_len_a=1e\+18 must be between 0 and 65536"):
        ar.translate(lines, max_len_a=1e18)

    # Length moves are bounded by the model's own maximum, not only by the static range.
    most = padir.config.max_target_len
    assert padir.options(length_shift=most - 1, length_offsets=(1 - most,)).length_shift == most - 1
    for moves, named in [
        ({"length_shift": most}, f"length_shift={most} moves"),
        ({"length_shift": -most}, f"length_shift={-most} moves"),
        ({"length_offsets": (1, -most)}, rf"length_offsets=\(1, {-most}\) moves"),
    ]:
        with pytest.raises(GmlmError, match=f"^{named} lengths by the model's max_target_len="):
            padir.options(**moves)


def test_no_setting_is_restated_as_a_keyword() -> None:
    """Decoding settings reach translate() only as an options object or overrides."""
    fields = {f.name for cls in (SearchOptions, RefinementOptions) for f in fields_of(cls)}
    assert fields.isdisjoint(inspect.signature(Translator.translate).parameters)
    assert fields.isdisjoint(inspect.signature(Translator.options).parameters)


def test_a_string_is_not_a_list_of_sentences(translators: dict[str, Translator]) -> None:
    # Iterating a str gives its characters: one translation each, silently.
    with pytest.raises(GmlmError, match=r"sentences is a single str; pass a list of sentences"):
        translators["ar"].translate("der Hund.")
    with pytest.raises(GmlmError, match=r"sentences is a single bytes"):
        translators["ar"].translate(b"der Hund.")  # type: ignore[arg-type]
    with pytest.raises(GmlmError, match=r"sentences: expected a list of str, got int"):
        translators["ar"].translate(3)  # type: ignore[arg-type]
    with pytest.raises(GmlmError, match=r"sentences\[1\]: expected a str, got NoneType"):
        translators["ar"].translate(["der Hund.", None])  # type: ignore[list-item]
    with pytest.raises(GmlmError, match=r"sentences\[0\]: expected a str, got bytes"):
        translators["padir"].translate([b"der Hund."])  # type: ignore[list-item]
    with pytest.raises(
        GmlmError, match=r"^sentences\[1\]: holds '\\ud800' at character 4, a lone surrogate"
    ):
        translators["padir"].translate(["der Hund.", "Ein \ud800 Hund."])
    lines = sentences(3, seed=9)  # any iterable of str will do, in its order
    expected = translators["ar"].translate(lines, max_len_b=4)
    assert translators["ar"].translate((line for line in lines), max_len_b=4) == expected


@pytest.mark.parametrize(
    ("kind", "settings", "message"),
    [
        ("padir", {"steps": "4"}, r"steps: expected an integer, got '4'"),
        ("padir", {"steps": 2.5}, r"steps: expected an integer"),
        ("padir", {"dedup": 1}, r"dedup: expected true/false"),
        ("padir", {"remask": "lin"}, r"remask: 'lin' is not one of"),
        ("padir", {"length_offsets": "-1,1"}, r"length_offsets: expected a list"),
        (
            "padir",
            {"length_score_weight": math.nan},
            r"length_score_weight=nan: expected a finite number",
        ),
        ("padir", {"steps": 10**8, "remask": "linear"}, r"steps=100000000 must be between 1"),
        ("ar", {"beam": True}, r"beam: expected an integer"),
        ("ar", {"max_len_a": math.inf}, r"max_len_a=inf: expected a finite number"),
        ("ar", {"batch_size": "8"}, r"batch_size: expected an integer, got '8'"),
        ("ar", {"seed": 1.0}, r"seed: expected an integer, got 1\.0"),
        ("ar", {"batch_size": 0}, r"batch_size=0 must be between 1 and 1000000"),
        ("padir", {"max_tokens": 0}, r"max_tokens=0 must be between 1 and 16777216"),
        ("ar", {"max_tokens": 2.0}, r"max_tokens: expected an integer, got 2\.0"),
        ("ar", {"seed": -1}, r"seed=-1 must be between 0 and 4294967295"),
        ("ar", {"beam": 100000}, r"beam=100000 must be between 1 and 1000 \(1 is greedy"),
        ("padir", {"random_starts": 100000}, r"random_starts=100000 must be between 1 and 1000"),
        ("ar", {"precision": "yes"}, r"precision='yes': choose from fp32, bf16, int8"),
        ("ar", {"bf16": True}, r"bf16=True is now precision=\"bf16\" \(bf16 weights and"),
        ("ar", {"origin": Path("x")}, r"origin: expected a string"),
    ],
    ids=[
        "steps-str",
        "steps-float",
        "dedup-int",
        "remask-typo",
        "offsets-str",
        "length-weight-nan",
        "steps-unbounded",
        "beam-bool",
        "max-len-a-inf",
        "batch-size-str",
        "seed-float",
        "batch-size-0",
        "max-tokens-0",
        "max-tokens-float",
        "seed-negative",
        "beam-unbounded",
        "random-starts-unbounded",
        "precision-str",
        "bf16-renamed",
        "origin-path",
    ],
)
def test_bad_arguments_are_errors_naming_them(
    kind: str, settings: dict[str, object], message: str, translators: dict[str, Translator]
) -> None:
    with pytest.raises(GmlmError, match=message):
        translators[kind].translate(["der Hund."], **settings)  # type: ignore[arg-type]


def save_checkpoint(folder: Path, translator: Translator, config: ModelConfig) -> Path:
    """The translator's model and tokenizer as a real checkpoint folder (the trainer's writer)."""
    cfg = TrainConfig(kind=translator.kind, model=config)  # type: ignore[arg-type]
    write_checkpoint_dir(
        folder,
        lambda tmp: fill_inference_files(
            tmp, translator.model, cfg, translator.tokenizer, {"step": 0}
        ),
    )
    return folder


@pytest.fixture
def checkpoint_dir(
    tmp_path: Path, translators: dict[str, Translator], text_config: ModelConfig
) -> Path:
    """The PaDIR translator saved as a checkpoint folder."""
    return save_checkpoint(tmp_path / "ckpt", translators["padir"], text_config)


def test_gmlm_load_gives_a_translator(
    checkpoint_dir: Path, translators: dict[str, Translator]
) -> None:
    translator = gmlm.load(checkpoint_dir, device="cpu")
    assert isinstance(translator, gmlm.Translator) and translator.kind == "padir"
    original = translators["padir"].model.state_dict()
    loaded = translator.model.state_dict()
    assert loaded.keys() == original.keys()
    assert all(torch.equal(loaded[name], original[name]) for name in original)
    lines = sentences(3, seed=8)
    out = translator.translate(lines)
    assert out == translators["padir"].translate(lines) and all(out)


def test_cli_file_round_trip(
    checkpoint_dir: Path, tmp_path: Path, translators: dict[str, Translator]
) -> None:
    lines = ["der Hund läuft.", "", "die Katze springt.", "das ist ein Baum."]
    source = tmp_path / "in.de"
    source.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    target = tmp_path / "out" / "hyp.en"
    args = ["translate", "--checkpoint", str(checkpoint_dir), "--input", str(source)]
    assert main([*args, "--output", str(target), "--steps", "2", "--seed", "1"]) == 0
    written = target.read_bytes().decode("utf-8").split("\n")
    assert written[-1] == "" and len(written) - 1 == len(lines)
    expected = translators["padir"].translate(lines, steps=2, seed=1)
    assert written[:-1] == expected
    assert written[1] == "" and all(expected[i] for i in (0, 2, 3))


def test_cli_timing_reports_the_rate_and_padirs_padded_share(
    checkpoint_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from gmlm.decoding.refinement import PaddingStats
    from gmlm.translation import translator as translator_module

    lines = ["der Hund läuft über einen großen Hund.", "", "die Katze springt.", "das ist."]
    source = tmp_path / "in.de"
    source.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    stats = PaddingStats()
    translator = translator_module.load(checkpoint_dir, device="cpu")
    translator.padding = stats
    translator.translate(lines, length_offsets=(-2, 3))  # candidates of several lengths
    args = ["translate", "--checkpoint", str(checkpoint_dir), "--input", str(source)]
    assert main([*args, "--timing", "--length-offsets=-2,3"]) == 0
    said = capsys.readouterr().err.strip().splitlines()[-1]
    padded = stats.computed - stats.content
    assert re.fullmatch(
        rf"gmlm: translated 4 lines in [0-9.]+ s \([0-9.]+ sentences/s, max tokens "
        rf"{MAX_TOKENS_DEFAULT}, fp32\); padded share of PaDIR's row-positions "
        rf"{100 * stats.padded_share:.1f}% \({padded} of {stats.computed}\)",
        said,
    ), said
    assert stats.computed > stats.content > 0
    for flags, said in (
        (["--batch-size", "2"], "batch size 2"),
        (["--max-tokens", "90", "--batch-size", "2"], "max tokens 90, batch size 2"),
    ):
        assert main([*args, "--timing", *flags]) == 0
        assert f"sentences/s, {said}, fp32); padded" in capsys.readouterr().err


def test_cli_output_named_gz_is_gzip_and_a_full_disk_is_one_line(
    checkpoint_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "in.de"
    source.write_text("der Hund läuft.\n\ndie Katze.\n", encoding="utf-8")
    args = ["translate", "--checkpoint", str(checkpoint_dir), "--input", str(source)]
    assert main([*args, "--output", str(tmp_path / "hyp.en")]) == 0
    assert main([*args, "--output", str(tmp_path / "hyp.en.gz")]) == 0
    with gzip.open(tmp_path / "hyp.en.gz", "rt", encoding="utf-8") as handle:
        assert handle.read() == (tmp_path / "hyp.en").read_text(encoding="utf-8")
    capsys.readouterr()
    refused = {
        str(checkpoint_dir / "hyp.en"): "lies inside --checkpoint",
        str(source): "is the --input file this command reads",
    }
    if Path("/dev/full").exists():
        refused["/dev/full"] = "cannot write /dev/full: No space left on device; free some space"
    for output, message in refused.items():
        assert main([*args, "--output", output]) == 2
        err = capsys.readouterr().err  # the error, after what loading said of the checkpoint
        assert err.endswith("\n") and "Traceback" not in err
        last = err.splitlines()[-1]
        assert last.startswith("gmlm: error: ") and message in last and err.count("error") == 1
    assert source.read_text(encoding="utf-8") == "der Hund läuft.\n\ndie Katze.\n"


def test_cli_beam_search_from_an_ar_checkpoint(
    tmp_path: Path, translators: dict[str, Translator], text_config: ModelConfig
) -> None:
    translator = translators["ar"]
    folder = save_checkpoint(tmp_path / "ar", translator, text_config)
    lines = ["der Hund läuft.", "", "die Katze springt."]
    source = tmp_path / "in.de"
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    target = tmp_path / "out.en"
    args = ["--checkpoint", str(folder), "--input", str(source), "--output", str(target)]
    assert main(["translate", *args, "--beam", "2", "--device", "cpu"]) == 0
    expected = translator.translate(lines, beam=2)
    assert target.read_bytes().decode("utf-8") == "".join(f"{line}\n" for line in expected)


def test_cli_stdin_to_stdout(
    checkpoint_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    data = "\ufeffder Hund.\n\ndie Katze.".encode()  # BOM, blank line, no final newline
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))
    used = []
    original = Translator.options

    def spy(self, options=None, /, **settings):  # type: ignore[no-untyped-def]
        used.append(original(self, options, **settings))
        return used[-1]

    monkeypatch.setattr(Translator, "options", spy)
    args = ["--length-offsets=-1,1", "--no-dedup", "--keep-initial-tokens", "--remask", "linear"]
    args += ["--selection", "mean"]
    assert main(["translate", "--checkpoint", str(checkpoint_dir), *args]) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 3 and out.split("\n")[1] == ""
    (options,) = used
    assert options == RefinementOptions(
        length_offsets=(-1, 1),
        dedup=False,
        keep_initial_tokens=True,
        remask="linear",
        selection="mean",
    )


@pytest.mark.parametrize(
    ("terminal", "flags", "shown"),
    [
        (True, [], True),
        (True, ["--no-progress"], False),
        (False, [], False),  # a pipe or a log file: no bar
    ],
)
def test_cli_draws_a_progress_bar_only_on_a_terminal(
    checkpoint_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    terminal: bool,
    flags: list[str],
    shown: bool,
) -> None:
    source = tmp_path / "in.de"
    source.write_text("".join(f"{line}\n" for line in sentences(5, seed=8)), encoding="utf-8")
    target = tmp_path / "hyp.en"
    monkeypatch.setattr(sys.stderr, "isatty", lambda: terminal)
    args = ["translate", "--checkpoint", str(checkpoint_dir), "--input", str(source)]
    assert main([*args, "--output", str(target), "--steps", "1", "--batch-size", "2", *flags]) == 0
    err = capsys.readouterr().err
    assert ("translate: 100%" in err and "5/5" in err) is shown, err
    assert len(target.read_text(encoding="utf-8").splitlines()) == 5


def test_cli_errors_are_clean(
    checkpoint_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "latin1.de"
    bad.write_bytes("der Hund.\nok\nFu\xdfball\n".encode("latin-1"))
    target = tmp_path / "hyp.en"
    target.write_text("previous\n", encoding="utf-8")
    base = ["translate", "--checkpoint", str(checkpoint_dir), "--output", str(target)]
    assert main([*base, "--input", str(bad)]) == 2
    assert f"{bad}:3: invalid UTF-8" in capsys.readouterr().err
    good = tmp_path / "in.de"
    good.write_text("der Hund.\n", encoding="utf-8")
    assert main([*base, "--input", str(good), "--beam", "5"]) == 2
    assert "kind 'padir'" in capsys.readouterr().err
    long_input = tmp_path / "long.de"
    long_input.write_text(f"der Hund.\n{LONG}\n", encoding="utf-8")
    assert main([*base, "--input", str(long_input)]) == 2
    assert "line 2" in capsys.readouterr().err
    assert target.read_text(encoding="utf-8") == "previous\n"  # failed runs leave it alone
    assert main([*base, "--input", str(long_input), "--over-length", "report"]) == 0
    assert "gmlm: warning:" in capsys.readouterr().err
    assert target.read_text(encoding="utf-8").split("\n")[1:] == ["", ""]


def test_cli_checks_the_output_before_translating(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def load(*args: object, **kwargs: object) -> None:
        raise AssertionError("the model was loaded before the output was checked")

    monkeypatch.setattr("gmlm.translation.translator.load", load)
    source = tmp_path / "in.de"
    source.write_text("der Hund.\n", encoding="utf-8")
    (tmp_path / "file.txt").write_text("mine", encoding="utf-8")
    bad = {
        tmp_path: "is a folder; give a file path",
        tmp_path / "file.txt" / "hyp.en": "file.txt is a file, not a folder",
        tmp_path / "file.txt" / "sub" / "hyp.en": "file.txt is a file, not a folder",
    }
    if Path("/proc/self").is_dir():  # Linux: no one, root included, creates files in /proc
        bad[Path("/proc/gmlm-hyp.en")] = "cannot create files in /proc"
    for output, message in bad.items():
        args = ["translate", "--checkpoint", str(tmp_path), "--input", str(source)]
        assert main([*args, "--output", str(output)]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"gmlm: error: --output {output}") and message in err
    assert (tmp_path / "file.txt").read_text(encoding="utf-8") == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file.txt", "in.de"]


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--input", "{tmp}"], "{tmp} is a folder; give the path of a file inside it"),
        (
            ["--length-score-weight", "nan"],
            "argument --length-score-weight: nan: expected a finite number",
        ),
        (["--steps", "100000000", "--remask", "linear"], "100000000 must be between 1 and 1000"),
        (["--beam", "100000"], "argument --beam: 100000 must be between 1 and 1000 (1 is greedy"),
        (["--random-starts", "100000"], "argument --random-starts: 100000 must be between 1"),
        (["--remask-ratio", "inf"], "argument --remask-ratio: inf: expected a finite number"),
        (["--length-offsets=-1,99999999"], "argument --length-offsets: 99999999 must be between"),
        (["--batch-size", "0"], "argument --batch-size: 0 must be between 1 and 1000000"),
        (["--max-tokens", "0"], "argument --max-tokens: 0 must be between 1 and 16777216"),
        (["--seed", "-3"], "argument --seed: -3 must be between 0 and 4294967295"),
        (["--stutter-ngram", "0"], "argument --stutter-ngram: 0 must be between 1"),
    ],
    ids=[
        "input-folder",
        "length-weight-nan",
        "steps-unbounded",
        "beam-unbounded",
        "random-starts-unbounded",
        "remask-ratio-inf",
        "offset-unbounded",
        "batch-size-0",
        "max-tokens-0",
        "seed-negative",
        "stutter-ngram-0",
    ],
)
def test_cli_refuses_bad_settings_before_translating(
    flags: list[str],
    message: str,
    checkpoint_dir: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    source = tmp_path / "in.de"
    source.write_text("der Hund.\n", encoding="utf-8")
    flags = [flag.format(tmp=tmp_path) for flag in flags]
    argv = ["translate", "--checkpoint", str(checkpoint_dir), "--input", str(source), *flags]
    try:
        status = main(argv)
    except SystemExit as exit_info:  # a flag out of its range: refused as it is parsed
        status = exit_info.code  # type: ignore[assignment]
    assert status == 2
    captured = capsys.readouterr()
    line = captured.err.splitlines()[-1]
    assert re.match("gmlm( translate)?: error: ", line) and message.format(tmp=tmp_path) in line
    assert captured.out == ""


def _replace_tokenizer(folder: Path) -> None:
    # Another valid tokenizer of the same size over the checkpoint's: it loads, and would
    # encode text into ids the model did not learn.
    other = Tokenizer.train(sentences(300, seed=9), vocab_size=400, threads=1)
    other.save(folder / "elsewhere")
    (folder / "tokenizer" / "tokenizer.model").write_bytes(
        (folder / "elsewhere" / "tokenizer.model").read_bytes()
    )


def _poison_weights(folder: Path) -> None:
    from safetensors.torch import load_file, save_file

    tensors = load_file(str(folder / "model.safetensors"))
    name = sorted(tensors)[0]
    tensors[name][0] = math.nan  # what a diverged run saves, its digest recorded
    save_file(tensors, str(folder / "model.safetensors"))
    Meta.of(folder).updated(weights_sha256=weights_digest(folder)).write(folder)


def _overwrite_weights(folder: Path) -> None:
    # Bytes of the weights changed after writing, the header intact: the file still parses.
    data = bytearray((folder / "model.safetensors").read_bytes())
    data[-4:] = b"\x7f\x7f\x7f\x7f"
    (folder / "model.safetensors").write_bytes(bytes(data))


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (
            lambda f: (f / "config.yaml").write_text("kind: [padir\n"),
            r"config\.yaml:2: invalid YAML \(expected ',' or '\]'",
        ),
        (lambda f: (f / "config.yaml").write_text("- padir\n"), r"config\.yaml: holds a list"),
        (
            lambda f: (f / "tokenizer" / "tokenizer.model").write_bytes(b"\x00garbage" * 9),
            r"tokenizer\.model: not a SentencePiece model \(the file is empty, damaged",
        ),
        (
            lambda f: (f / "tokenizer" / "tokenizer.model").write_bytes(b""),
            r"tokenizer\.model: not a SentencePiece model",
        ),
        (
            _replace_tokenizer,
            r"tokenizer\.model: its sha256 [0-9a-f]{12}\.\.\. is not the [0-9a-f]{12}\.\.\. "
            r"that tokenizer\.json beside it recorded when it was saved",
        ),
        (_poison_weights, r"model\.safetensors: 1 weight tensor\(s\) hold NaN or infinite"),
        (_overwrite_weights, r"model\.safetensors: its content \(sha256 [0-9a-f]{12}\.\.\.\) "),
    ],
    ids=[
        "yaml",
        "yaml-list",
        "tokenizer",
        "tokenizer-empty",
        "tokenizer-replaced",
        "nan-weights",
        "overwritten-weights",
    ],
)
def test_damaged_checkpoints_are_clean_errors(
    damage: Callable[[Path], object],
    message: str,
    translators: dict[str, Translator],
    text_config: ModelConfig,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    folder = save_checkpoint(tmp_path / "ckpt", translators["padir"], text_config)
    source = tmp_path / "in.de"
    source.write_text("der Hund.\n", encoding="utf-8")
    argv = ["translate", "--checkpoint", str(folder), "--input", str(source), "--device", "cpu"]
    assert main(argv) == 0  # intact, it translates
    capsys.readouterr()
    damage(folder)
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert re.match(r"gmlm: error: .*" + message, captured.err) and captured.out == ""
    with pytest.raises(GmlmError, match=message):
        gmlm.load(folder, device="cpu")


def test_an_ar_batch_plan_counts_each_source_with_its_eos() -> None:
    """Without PaDIR's length pass a batch is planned on the sources' widths, EOS counted:
    with beam 2 and a budget of 24 row-positions, two 5-token sources (width 6: 2 x 2 x 6 = 24)
    fill a batch, and the three 3-token ones (width 4: 3 x 2 x 4 = 24) the next; widest
    first, ties in input order."""
    from gmlm.translation.batch_plan import plan_batches

    config = ModelConfig(vocab_size=16, d_model=8, n_heads=2, d_ff=16)
    sources = [[7] * 3, [7] * 5, [7] * 3, [7] * 5, [7] * 3]
    planned = plan_batches(
        None,  # type: ignore[arg-type]  # not read without a token-budgeted PaDIR plan
        config,
        sources,
        SearchOptions(beam=2),
        batch_size=None,
        max_tokens=24,
        device=torch.device("cpu"),
    )
    assert [(batch, plan) for batch, plan in planned] == [([1, 3], None), ([0, 2, 4], None)]


@pytest.mark.parametrize("kind", ["ar", "padir"])
def test_lines_encoded_already_translate_as_their_text_does(
    kind: str, translators: dict[str, Translator]
) -> None:
    """translate_lines (the service's path: the ids its checks encoded) gives translate's
    outputs under the same defaults, an empty line included."""
    from gmlm.data.lengths import encode_inputs

    translator = translators[kind]
    lines = [*sentences(5, seed=6), ""]
    ids = encode_inputs(translator.tokenizer, lines, translator.config.max_source_len).ids
    expected = translator.translate(lines)
    assert translator.translate_lines(ids) == expected and expected[-1] == ""
    assert translator.translate_lines(ids, seed=1) == translator.translate(lines, seed=1)


def test_a_language_warning_names_the_frame_that_asked(translators: dict[str, Translator]):
    """check_language called directly warns at its caller (stacklevel 1: this file)."""
    from gmlm.checkpoint.languages import Languages

    translator = translators["ar"]
    translator.languages, kept = Languages("de", "en"), translator.languages
    try:
        with pytest.warns(UserWarning) as caught:
            translator.check_language(["1234 5678"])
        with pytest.warns(UserWarning) as through:  # translate's own check: at its caller too
            translator.translate(["1234 5678"], max_len_b=2)
    finally:
        translator.languages = kept
    assert caught[0].filename == __file__
    assert through and all(w.filename == __file__ for w in through)


def test_a_cpu_translator_decodes_eagerly_unless_asked(
    tokenizer: Tokenizer, translators: dict[str, Translator]
) -> None:
    """Off a GPU, neither CUDA graphs nor fixed shapes by default (the eager loops are
    faster there); fixed shapes when asked."""
    model = translators["padir"].model
    plain = Translator("padir", model, tokenizer)
    assert plain.cuda_graphs is False and plain.fixed_shapes is False
    assert Translator("padir", model, tokenizer, fixed_shapes=True).fixed_shapes is True


def test_an_ar_translator_searches_at_fixed_shapes_when_asked(
    tokenizer: Tokenizer, translators: dict[str, Translator]
) -> None:
    """fixed_shapes=True on a CPU (the default on a GPU: gmlm.decoding.autoregressive_fixed):
    the eager search's translations, greedy and beam, at batch sizes 1 and 16."""
    fixed = Translator("ar", translators["ar"].model, tokenizer, fixed_shapes=True)
    assert fixed.fixed_shapes and not translators["ar"].fixed_shapes
    lines = sentences(16)
    for beam in (1, 5):
        expected = translators["ar"].translate(lines, beam=beam, max_len_b=4)
        for size in (1, 16):
            assert fixed.translate(lines, beam=beam, max_len_b=4, batch_size=size) == expected


def test_each_beam_runs_the_search_it_names(translators: dict[str, Translator]) -> None:
    """beam=1 is greedy search and any wider beam beam search, each as the decoding layer
    gives it (an untrained model: beam 2 and greedy differ on some line)."""
    from gmlm.decoding.autoregressive import beam_search, greedy_search

    ar = translators["ar"]
    lines = sentences(12, seed=5)
    src = ar.source_tensor([ar.tokenizer.encode(line) for line in lines])
    with torch.inference_mode():
        greedy = [h.tokens for h in greedy_search(ar.model, src, ar.options(beam=1))]
        beam2 = [n[0].tokens for n in beam_search(ar.model, src, ar.options(beam=2))]
    texts = {1: [ar.text(t) for t in greedy], 2: [ar.text(t) for t in beam2]}
    assert texts[1] != texts[2]
    for beam, expected in texts.items():
        assert ar.translate(lines, beam=beam, batch_size=len(lines)) == expected
