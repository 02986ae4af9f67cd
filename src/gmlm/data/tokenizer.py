"""The joint source+target SentencePiece tokenizer, with the special tokens the models need.

Ids 0-5 are fixed: pad 0, unk 1, bos 2, eos 3, mask 4, length 5. Mask and length are
SentencePiece *control* symbols: text can never produce them (a literal "<mask>" in a sentence
is ordinary text) and decoding drops them. The model uses identity normalisation and byte
fallback, so any cleaned string (see `gmlm.data.cleaning`) encodes without `<unk>` and decodes
back to itself exactly. The one exception is U+2581 (▁), SentencePiece's own space marker,
which decodes to a space.

A tokenizer is saved as two files, `tokenizer.model` (the SentencePiece model) and
`tokenizer.json` (ids and provenance), next to the prepared data and next to every checkpoint,
so a checkpoint alone can translate raw text.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import sentencepiece as spm

from gmlm.data.cleaning import normalize
from gmlm.errors import GmlmError
from gmlm.io import atomic_open, atomic_write_json

MODEL_FILE = "tokenizer.model"
META_FILE = "tokenizer.json"
SPECIAL_IDS: dict[str, int] = {"pad": 0, "unk": 1, "bos": 2, "eos": 3, "mask": 4, "length": 5}
CONTROL_SYMBOLS: tuple[str, ...] = ("<mask>", "<len>")
MIN_COVERAGE = 0.98  # SentencePiece refuses a lower character_coverage
# Batches of at least this many texts are encoded by SentencePiece's thread pool
# (Tokenizer.encode_batch); smaller ones on the calling thread.
THREADED_BATCH = 256


class Tokenizer:
    """Encode cleaned text to ids and back; see the module docstring for the id layout."""

    def __init__(self, model_proto: bytes, origin: str = "tokenizer") -> None:
        """`origin` names the model (its file) in error messages."""
        self._proto = bytes(model_proto)
        damaged = GmlmError(
            f"{origin}: not a SentencePiece model (the file is empty, damaged or of another "
            "kind); copy it again from where it was made, or train one with `gmlm data prepare`"
        )
        if not self._proto:  # sentencepiece loads b"" as a model without pieces
            raise damaged
        try:
            self._sp = spm.SentencePieceProcessor(model_proto=self._proto)
        except RuntimeError:  # its only word on a damaged file is a parser assertion
            raise damaged from None
        expected = {"<pad>": 0, "<unk>": 1, "<s>": 2, "</s>": 3, "<mask>": 4, "<len>": 5}
        actual = {self._sp.id_to_piece(i): i for i in range(min(6, self._sp.get_piece_size()))}
        if actual != expected:
            raise GmlmError(
                f"{origin}: not a gmlm SentencePiece model (ids 0-5 must be "
                f"{list(expected)}, found {list(actual)}); train one with `gmlm data prepare`"
            )
        self._special = frozenset(range(6))
        # Each byte-fallback piece's byte value ("<0xE2>" -> 0xE2).
        self._bytes = {
            i: int(self._sp.id_to_piece(i)[3:5], 16)
            for i in range(self._sp.get_piece_size())
            if self._sp.is_byte(i)
        }

    # --- training and persistence -------------------------------------------------------
    @classmethod
    def train(
        cls,
        sentences: Iterable[str],
        *,
        vocab_size: int = 8000,
        model_type: str = "unigram",
        character_coverage: float = 0.9995,
        byte_fallback: bool = True,
        input_sentence_size: int = 1_000_000,
        seed: int = 1,
        threads: int = 0,
    ) -> Tokenizer:
        """Train on cleaned sentences (source and target mixed, for a joint vocabulary).

        At most `input_sentence_size` sentences are sampled (seeded), which bounds the time on
        large corpora; the vocabulary size is a soft limit so tiny corpora still train.
        """
        spm.set_random_generator_seed(seed)
        model = io.BytesIO()
        try:
            spm.SentencePieceTrainer.train(
                sentence_iterator=iter(sentences),
                model_writer=model,
                vocab_size=vocab_size,
                model_type=model_type,
                character_coverage=character_coverage,
                byte_fallback=byte_fallback,
                normalization_rule_name="identity",
                pad_id=SPECIAL_IDS["pad"],
                unk_id=SPECIAL_IDS["unk"],
                bos_id=SPECIAL_IDS["bos"],
                eos_id=SPECIAL_IDS["eos"],
                control_symbols=list(CONTROL_SYMBOLS),
                input_sentence_size=input_sentence_size,
                shuffle_input_sentence=True,
                hard_vocab_limit=False,
                num_threads=threads or os.cpu_count() or 1,
                minloglevel=2,
            )
        except RuntimeError as err:
            problem = _training_problem(str(err), vocab_size, character_coverage)
            raise GmlmError(f"tokenizer training failed: {problem}") from None
        return cls(model.getvalue())

    def save(self, directory: str | Path) -> None:
        """Write `tokenizer.model` and `tokenizer.json` into `directory` (atomically)."""
        directory = Path(directory)
        with atomic_open(directory / MODEL_FILE, "wb") as handle:
            handle.write(self._proto)
        atomic_write_json(directory / META_FILE, self.metadata())

    @classmethod
    def load(cls, directory: str | Path) -> Tokenizer:
        """The tokenizer saved in `directory`, checked against the sha256 that its
        tokenizer.json recorded when it was saved: a model replaced or damaged since (another
        tokenizer copied over it, a truncated copy) would encode text into ids the model
        never learnt, and translate it into garbage without any other error."""
        path = Path(directory) / MODEL_FILE
        if not path.is_file():
            raise GmlmError(
                f"{path}: no tokenizer here; a prepared dataset or checkpoint folder holds "
                f"{MODEL_FILE} (create one with `gmlm data prepare`)"
            )
        try:
            proto = path.read_bytes()
        except OSError as err:
            raise GmlmError(f"{path}: cannot read: {err.strerror or err}") from None
        tokenizer = cls(proto, origin=str(path))
        recorded = _recorded_sha256(Path(directory) / META_FILE)
        actual = tokenizer.fingerprint
        if recorded is not None and recorded != actual:
            raise GmlmError(
                f"{path}: its sha256 {actual[:12]}... is not the {recorded[:12]}... that "
                f"{META_FILE} beside it recorded when it was saved: the tokenizer was replaced "
                "or damaged since, and would encode text into ids the model did not learn; "
                "restore the folder's tokenizer files from the dataset it was prepared with or "
                "a copy of the folder"
            )
        return tokenizer

    def metadata(self) -> dict[str, Any]:
        return {
            "type": "sentencepiece",
            "model_file": MODEL_FILE,
            "vocab_size": self.vocab_size,
            "special_ids": dict(SPECIAL_IDS),
            "sha256": self.fingerprint,
            "sentencepiece_version": spm.__version__,
        }

    # --- properties -------------------------------------------------------------------------
    @property
    def fingerprint(self) -> str:
        """SHA-256 of the model file: equal fingerprints encode identically."""
        return hashlib.sha256(self._proto).hexdigest()

    @property
    def vocab_size(self) -> int:
        return int(self._sp.get_piece_size())

    @property
    def pad_id(self) -> int:
        return SPECIAL_IDS["pad"]

    @property
    def unk_id(self) -> int:
        return SPECIAL_IDS["unk"]

    @property
    def bos_id(self) -> int:
        return SPECIAL_IDS["bos"]

    @property
    def eos_id(self) -> int:
        return SPECIAL_IDS["eos"]

    @property
    def mask_id(self) -> int:
        return SPECIAL_IDS["mask"]

    @property
    def length_id(self) -> int:
        return SPECIAL_IDS["length"]

    # --- encoding -----------------------------------------------------------------------------
    def encode(self, text: str) -> list[int]:
        """Ids of one cleaned sentence, without BOS/EOS (batches add those)."""
        return list(self._sp.encode(text))

    def encode_batch(self, texts: Sequence[str], threads: int = 0) -> list[list[int]]:
        """Ids of each text (as :meth:`encode`). A batch of fewer than
        :data:`THREADED_BATCH` texts is encoded on the calling thread: SentencePiece's threaded
        batch encoding starts its threads at every call, which costs a service answering one
        sentence more than the encoding itself (0.1 ms idle, milliseconds on busy cores)."""
        if len(texts) < THREADED_BATCH:
            return [list(self._sp.encode(text)) for text in texts]
        return list(self._sp.encode(list(texts), num_threads=threads or os.cpu_count() or 1))

    def decode(self, ids: Sequence[int]) -> str:
        """Text of `ids` up to the first EOS, in the cleaned form of the training text
        (:func:`gmlm.data.cleaning.normalize`: NFC, single spaces, none at either end, no line
        break), whatever pieces a model emits; pad, bos, mask and length ids are dropped, and
        so are byte pieces that do not spell a whole UTF-8 character (a model can emit a
        character's first bytes without the rest), which would otherwise decode to U+FFFD."""
        out = []
        for i in ids:
            i = int(i)
            if i == SPECIAL_IDS["eos"]:
                break
            if i not in self._special or i == SPECIAL_IDS["unk"]:
                out.append(i)
        return normalize(str(self._sp.decode(self._whole_characters(out))))

    def _whole_characters(self, ids: list[int]) -> list[int]:
        """`ids` without the byte pieces that belong to no complete UTF-8 character."""
        kept: list[int] = []
        start = 0
        while start < len(ids):
            if ids[start] not in self._bytes:
                kept.append(ids[start])
                start += 1
                continue
            end = start
            while end < len(ids) and ids[end] in self._bytes:
                end += 1
            kept.extend(valid_utf8_runs(ids[start:end], [self._bytes[i] for i in ids[start:end]]))
            start = end
        return kept

    def pieces(self, text: str) -> list[str]:
        return list(self._sp.encode(text, out_type=str))

    def id_to_piece(self, i: int) -> str:
        return str(self._sp.id_to_piece(int(i)))

    def __repr__(self) -> str:
        return f"Tokenizer(vocab_size={self.vocab_size}, sha256={self.fingerprint[:12]})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Tokenizer) and other._proto == self._proto

    def __hash__(self) -> int:
        return hash(self._proto)


def _recorded_sha256(meta: Path) -> str | None:
    """The sha256 that `meta` (a tokenizer.json) records, None when there is no such file;
    a file that records none, or not as JSON, is a GmlmError naming it."""
    if not meta.is_file():
        return None
    fix = "restore the folder's tokenizer files from the dataset it was prepared with"
    try:
        data = json.loads(meta.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise GmlmError(f"{meta}: unreadable ({err}); {fix}") from None
    sha = data.get("sha256") if isinstance(data, dict) else None
    if not isinstance(sha, str):
        raise GmlmError(f"{meta}: records no sha256 of {MODEL_FILE}; {fix}")
    return sha


def _training_problem(message: str, vocab_size: int, character_coverage: float) -> str:
    """SentencePiece's error in gmlm's terms (its own text names trainer flags gmlm lacks)."""
    match = re.search(r"smaller than required_chars\. \d+ vs (\d+)", message)
    if match is None:
        return message
    needed = int(match.group(1))
    lower = (
        f", or a lower coverage (down to tokenizer.character_coverage={MIN_COVERAGE}, "
        "SentencePiece's least) so that rare characters are spelled with byte pieces"
        if character_coverage > MIN_COVERAGE
        else ""
    )
    return (
        f"vocab_size={vocab_size} is too small for this text: its characters (those covering "
        f"character_coverage={character_coverage} of it) and the special and byte pieces "
        f"take {needed} pieces; use a larger vocabulary (`gmlm data prepare --vocab-size "
        f"{needed}` or more){lower}"
    )


def valid_utf8_runs(ids: Sequence[int], values: Sequence[int]) -> list[int]:
    """The ids of the bytes `values` (one per id) that form complete, valid UTF-8 characters,
    in order; a byte that starts no valid character is dropped and the next one tried."""
    kept: list[int] = []
    at = 0
    while at < len(values):
        lead = values[at]
        size = 1 if lead < 0x80 else 2 if lead >> 5 == 0b110 else 3 if lead >> 4 == 0b1110 else 4
        chunk = bytes(values[at : at + size])
        try:
            valid = len(chunk) == size and len(chunk.decode("utf-8")) == 1
        except UnicodeDecodeError:
            valid = False
        if valid:
            kept.extend(ids[at : at + size])
            at += size
        else:
            at += 1
    return kept
