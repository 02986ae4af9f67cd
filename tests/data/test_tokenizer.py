import random
import re
from pathlib import Path

import pytest

from gmlm.data.cleaning import normalize
from gmlm.data.tokenizer import THREADED_BATCH, Tokenizer
from gmlm.errors import GmlmError
from tests.helpers.corpora import make_pairs


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    src, tgt = make_pairs(500)
    return Tokenizer.train(src + tgt, vocab_size=400, threads=1)


def test_special_ids(tokenizer: Tokenizer) -> None:
    ids = (tokenizer.pad_id, tokenizer.unk_id, tokenizer.bos_id, tokenizer.eos_id)
    assert ids == (0, 1, 2, 3)
    assert (tokenizer.mask_id, tokenizer.length_id) == (4, 5)
    assert [tokenizer.id_to_piece(i) for i in range(6)] == [
        "<pad>", "<unk>", "<s>", "</s>", "<mask>", "<len>"
    ]  # fmt: skip
    assert 300 < tokenizer.vocab_size <= 400


@pytest.mark.parametrize(
    "text",
    [
        "Der Hund läuft schnell über die Straße.",
        "Unseen: Ωμέγα, 汉字， emoji 🐕, quotes „so“ and `tick`!",
        "a <mask> <len> </s> <pad> literal",
        "Ünïcödé NFC: é, Ångström, ﬁ, ２",
    ],
)
def test_round_trip(tokenizer: Tokenizer, text: str) -> None:
    clean = normalize(text)
    ids = tokenizer.encode(clean)
    assert tokenizer.unk_id not in ids  # byte fallback covers unseen characters
    assert not set(ids) & {0, 2, 3, 4, 5}  # text never produces special ids
    assert tokenizer.decode(ids) == clean


def test_decode_stops_at_eos_and_drops_specials(tokenizer: Tokenizer) -> None:
    ids = tokenizer.encode("der Hund")
    noisy = [tokenizer.bos_id, tokenizer.mask_id, *ids, tokenizer.length_id, tokenizer.eos_id]
    assert tokenizer.decode([*noisy, *tokenizer.encode("die Katze"), 0, 0]) == "der Hund"
    assert tokenizer.decode([*ids, 3, *ids]) == "der Hund"


def test_a_character_cut_short_is_dropped_not_decoded_to_a_replacement_mark(
    tokenizer: Tokenizer,
) -> None:
    """A model may emit a character's first byte pieces without the rest (or a stray
    continuation byte): those bytes are dropped, the text around them and every whole
    character kept, instead of U+FFFD in the translation."""
    ids = tokenizer.encode("ein ✓ und 🐕 Haus")
    bytes_at = [n for n, i in enumerate(ids) if tokenizer.id_to_piece(i).startswith("<0x")]
    assert len(bytes_at) == 7  # ✓: 3 bytes, 🐕: 4
    check, dog = bytes_at[:3], bytes_at[3:]
    for cut in ([check[2]], [check[0]], [dog[1]], [*check[1:], dog[3]]):
        text = tokenizer.decode([i for n, i in enumerate(ids) if n not in cut])
        assert "\ufffd" not in text and text.startswith("ein") and text.endswith("Haus")
        assert ("✓" in text) == (not set(cut) & set(check))
        assert ("🐕" in text) == (not set(cut) & set(dog))
    # A valid U+FFFD of the text itself stays; random ids never decode to a broken character.
    assert tokenizer.decode(tokenizer.encode("a \ufffd b")) == "a \ufffd b"
    rng = random.Random(0)
    for _ in range(300):
        noise = [rng.randrange(6, tokenizer.vocab_size) for _ in range(rng.randint(1, 12))]
        assert "\ufffd" not in tokenizer.decode(noise)


def test_any_pieces_decode_to_the_cleaned_form(tokenizer: Tokenizer) -> None:
    """Whatever pieces a model emits (spaces, tabs, line breaks as byte pieces, a leading or
    trailing space), the text is in the cleaned form of the training text: single spaces,
    none at either end, one line, as `normalize` leaves it."""
    byte = {b: tokenizer._sp.piece_to_id(f"<0x{b:02X}>") for b in (0x09, 0x0A, 0x20)}
    ids = [
        byte[0x20],
        *tokenizer.encode("der"),
        byte[0x20],
        byte[0x09],
        byte[0x0A],
        *tokenizer.encode("Hund"),
        byte[0x20],
        *tokenizer.encode("läuft."),
        byte[0x0A],
    ]
    assert tokenizer.decode(ids) == "der Hund läuft."
    rng = random.Random(1)
    for _ in range(300):
        noise = [rng.randrange(6, tokenizer.vocab_size) for _ in range(rng.randint(1, 12))]
        text = tokenizer.decode(noise)
        assert text == normalize(text)


def test_save_load(tokenizer: Tokenizer, tmp_path: Path) -> None:
    tokenizer.save(tmp_path)
    loaded = Tokenizer.load(tmp_path)
    assert loaded == tokenizer and loaded.fingerprint == tokenizer.fingerprint
    assert loaded.encode_batch(["der Hund", "Katze"]) == [
        tokenizer.encode("der Hund"),
        tokenizer.encode("Katze"),
    ]
    assert (tmp_path / "tokenizer.json").read_text().count(tokenizer.fingerprint) == 1
    with pytest.raises(GmlmError, match="no tokenizer here"):
        Tokenizer.load(tmp_path / "missing")


def test_a_replaced_model_file_fails_its_recorded_checksum(
    tokenizer: Tokenizer, tmp_path: Path
) -> None:
    tokenizer.save(tmp_path)
    src, tgt = make_pairs(300, seed=5)
    other = Tokenizer.train(src + tgt, vocab_size=350, threads=1)
    assert other.fingerprint != tokenizer.fingerprint
    (tmp_path / "tokenizer.model").write_bytes(other._proto)  # a valid model, not this one
    model = re.escape(str(tmp_path / "tokenizer.model"))
    with pytest.raises(
        GmlmError,
        match=rf"^{model}: its sha256 {other.fingerprint[:12]}\.\.\. is not the "
        rf"{tokenizer.fingerprint[:12]}\.\.\. that tokenizer\.json beside it recorded .*"
        "restore the folder's tokenizer files",
    ):
        Tokenizer.load(tmp_path)
    (tmp_path / "tokenizer.json").write_text('{"type": "sentencepiece"}')
    with pytest.raises(GmlmError, match=r"tokenizer\.json: records no sha256"):
        Tokenizer.load(tmp_path)
    (tmp_path / "tokenizer.json").write_text("{not json")
    with pytest.raises(GmlmError, match=r"tokenizer\.json: unreadable"):
        Tokenizer.load(tmp_path)
    (tmp_path / "tokenizer.json").unlink()  # nothing recorded: nothing to check against
    assert Tokenizer.load(tmp_path) == other


def test_training_is_deterministic() -> None:
    src, tgt = make_pairs(300, seed=3)
    a = Tokenizer.train(src + tgt, vocab_size=350, threads=1, input_sentence_size=200)
    b = Tokenizer.train(src + tgt, vocab_size=350, threads=1, input_sentence_size=200)
    assert a.fingerprint == b.fingerprint


def test_rejects_foreign_sentencepiece_model(tmp_path: Path) -> None:
    import io

    import sentencepiece as spm

    src, _ = make_pairs(200)
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(src), model_writer=model, vocab_size=40, minloglevel=2
    )
    with pytest.raises(GmlmError, match="not a gmlm SentencePiece model"):
        Tokenizer(model.getvalue())


@pytest.mark.parametrize("content", [b"", b"not a model\n", bytes(range(256))])
def test_damaged_model_file_names_the_file(tmp_path: Path, content: bytes) -> None:
    (tmp_path / "tokenizer.model").write_bytes(content)
    with pytest.raises(GmlmError, match=r"tokenizer\.model: not a SentencePiece model"):
        Tokenizer.load(tmp_path)


def test_too_small_vocabulary_is_explained_in_gmlm_terms() -> None:
    # 200 distinct CJK characters + 256 byte pieces + specials do not fit in 300 pieces.
    rng = random.Random(0)
    alphabet = [chr(0x4E00 + i) for i in range(200)]
    text = ["".join(rng.choice(alphabet) for _ in range(10)) for _ in range(400)]
    with pytest.raises(GmlmError) as err:
        Tokenizer.train(text, vocab_size=300, threads=1)
    message = str(err.value)
    needed = re.search(r"take (\d+) pieces", message)
    assert needed is not None and int(needed.group(1)) > 456, message
    assert f"--vocab-size {needed.group(1)}" in message
    assert "tokenizer.character_coverage=0.98" in message
    assert "--character_coverage" not in message  # SentencePiece's flag, not gmlm's


def test_small_and_threaded_batches_encode_alike(tokenizer: Tokenizer) -> None:
    """A batch under THREADED_BATCH is encoded on the calling thread (no thread start per
    request in a service), a larger one by SentencePiece's pool: the same ids either way."""
    src, _ = make_pairs(THREADED_BATCH + 10)
    texts = src[: THREADED_BATCH + 10]
    threaded = tokenizer.encode_batch(texts, threads=2)
    assert threaded == [tokenizer.encode(t) for t in texts]
    assert tokenizer.encode_batch(texts[:5]) == threaded[:5]
