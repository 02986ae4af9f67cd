"""On-disk layout of a prepared dataset, and memory-mapped access to its splits.

A prepared dataset folder holds, for each split S (train, valid, test):

    S.src.bin, S.tgt.bin    all token ids of the kept pairs, concatenated (uint16 when the
                            vocabulary fits, else uint32); no BOS/EOS stored
    S.idx.npy               int64 (N, 3): source length, target length, and the line of the
                            pair in the text files below (so rows map back to raw sentences)
    S.src.txt, S.tgt.txt    the split's cleaned text, every pair, one per line (including pairs
                            dropped from the binarized rows): the references for evaluation
plus `tokenizer.model` / `tokenizer.json`, the resolved `config.yaml`, `stats.json` and
`manifest.json` (`DATASET_FILES` names them all). The manifest is written last and the
folder is renamed into place only once complete, so a folder with a manifest is a finished
dataset. The manifest records each split file's SHA-256 (its split entry's "sha256") and the
tokenizer's fingerprint ("tokenizer_sha256"); reading a split, its text or the tokenizer checks
them, so a file changed after preparation (a bad disk, a file copied over it from another
dataset) is an error, not training or scoring on other data in silence. Datasets prepared
before the digests were recorded are checked by size only.
"""

from __future__ import annotations

import functools
import itertools
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from gmlm.data.splits import SPLITS
from gmlm.data.stats import DatasetStats
from gmlm.data.tokenizer import META_FILE, MODEL_FILE, Tokenizer
from gmlm.errors import GmlmError
from gmlm.io import MANIFEST, atomic_open, file_sha256

STATS = "stats.json"
CONFIG = "config.yaml"
FORMAT = "gmlm-translation-data"
FORMAT_VERSION = 1
SPLIT_FILES = ("src.bin", "tgt.bin", "idx.npy", "src.txt", "tgt.txt")  # each S.<name>
# Every name a prepared dataset folder can hold; anything else in it is someone else's.
DATASET_FILES = frozenset(
    {MANIFEST, STATS, CONFIG, MODEL_FILE, META_FILE}
    | {f"{split}.{name}" for split in SPLITS for name in SPLIT_FILES}
)


def token_dtype(vocab_size: int) -> np.dtype[Any]:
    return np.dtype(np.uint16 if vocab_size <= np.iinfo(np.uint16).max + 1 else np.uint32)


def write_split(
    directory: Path,
    split: str,
    src_ids: Sequence[Sequence[int]],
    tgt_ids: Sequence[Sequence[int]],
    lines: Sequence[int] | np.ndarray,
    dtype: np.dtype[Any],
) -> dict[str, int]:
    """Write the binarized rows of one split; returns its manifest entry (counts)."""
    src_len = np.fromiter((len(x) for x in src_ids), dtype=np.int64, count=len(src_ids))
    tgt_len = np.fromiter((len(x) for x in tgt_ids), dtype=np.int64, count=len(tgt_ids))
    index = np.stack([src_len, tgt_len, np.asarray(lines, dtype=np.int64)], axis=1)
    for side, ids, total in (("src", src_ids, src_len.sum()), ("tgt", tgt_ids, tgt_len.sum())):
        flat = np.fromiter(itertools.chain.from_iterable(ids), dtype=dtype, count=int(total))
        with atomic_open(directory / f"{split}.{side}.bin", "wb") as handle:
            handle.write(flat.tobytes())
    with atomic_open(directory / f"{split}.idx.npy", "wb") as handle:
        np.save(handle, index, allow_pickle=False)
    return {"rows": len(index), "src_tokens": int(src_len.sum()), "tgt_tokens": int(tgt_len.sum())}


def split_digests(directory: Path, split: str) -> dict[str, str]:
    """The SHA-256 of each file of `split` in `directory`, as the manifest records them."""
    return {name: file_sha256(directory / f"{split}.{name}") for name in SPLIT_FILES}


def check_digest(path: Path, recorded: str | None) -> None:
    """Refuse the dataset file `path` where its bytes are not those the manifest records
    (`recorded`; None, a dataset prepared before digests were recorded: not checked)."""
    if recorded is None:
        return
    actual = file_sha256(path)
    if actual != recorded:
        raise GmlmError(
            f"{path}: its bytes (sha256 {actual[:12]}...) are not the {recorded[:12]}... that "
            f"{path.parent / MANIFEST} records: the dataset was damaged or changed after it was "
            "prepared; prepare it again with `gmlm data prepare --force`"
        )


def write_text(directory: Path, split: str, side: str, texts: Sequence[str]) -> None:
    with atomic_open(directory / f"{split}.{side}.txt", "w") as handle:
        for text in texts:
            handle.write(text + "\n")


def read_manifest(root: Path) -> dict[str, Any]:
    path = root / MANIFEST
    if not root.is_dir():
        raise GmlmError(f"{root}: no such dataset folder; create it with `gmlm data prepare`")
    if not path.is_file():
        raise GmlmError(
            f"{root}: not a prepared dataset (no {MANIFEST}; an interrupted preparation "
            "never leaves one); run `gmlm data prepare --out` for it again"
        )
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as err:
        raise GmlmError(f"{path}: unreadable manifest ({err}); prepare the dataset again") from None
    if manifest.get("format") != FORMAT or manifest.get("format_version") != FORMAT_VERSION:
        raise GmlmError(
            f"{path}: dataset format {manifest.get('format')} v{manifest.get('format_version')} "
            f"is not {FORMAT} v{FORMAT_VERSION}; prepare it again with this gmlm version"
        )
    return dict(manifest)


@dataclass
class PreparedDataset:
    """A prepared dataset folder: manifest, tokenizer, statistics and splits."""

    root: Path
    manifest: dict[str, Any]

    @property
    def splits(self) -> list[str]:
        return list(self.manifest["splits"])

    @property
    def content_hash(self) -> str:
        return str(self.manifest["content_hash"])

    @functools.cached_property
    def tokenizer(self) -> Tokenizer:
        """The dataset's tokenizer, refused where it is not the one the manifest records."""
        tokenizer = Tokenizer.load(self.root)
        recorded = self.manifest.get("tokenizer_sha256")
        if recorded is not None and tokenizer.fingerprint != recorded:
            raise GmlmError(
                f"{self.root / MODEL_FILE}: its tokenizer (sha256 {tokenizer.fingerprint[:12]}"
                f"...) is not the {str(recorded)[:12]}... that {self.root / MANIFEST} records, "
                "the one the dataset's ids were made with: it was copied from another folder; "
                "prepare the dataset again with `gmlm data prepare --force`"
            )
        return tokenizer

    def digest(self, split: str, name: str) -> str | None:
        """The SHA-256 the manifest records for the file `split`.`name` (None: none)."""
        recorded = self.manifest["splits"][split].get("sha256", {}).get(name)
        return None if recorded is None else str(recorded)

    def stats(self) -> DatasetStats:
        """The dataset's statistics (stats.json)."""
        return DatasetStats.read(self.root / STATS)

    def split(self, name: str) -> TranslationDataset:
        if name not in self.manifest["splits"]:
            raise GmlmError(
                f"{self.root}: no split '{name}'; this dataset has {', '.join(self.splits)}"
            )
        return TranslationDataset(self, name)

    def read_text(self, split: str, side: str) -> list[str]:
        """All cleaned sentences of one side ("src"/"tgt") of a split, in corpus order; a file
        missing, unreadable or with another line count than the manifest's is a GmlmError (a
        damaged dataset would pair sources with the wrong references, or index past them)."""
        if side not in ("src", "tgt"):
            raise ValueError("side must be 'src' or 'tgt'")
        self.split(split)
        path = self.root / f"{split}.{side}.txt"
        fix = "the dataset is damaged; prepare it again with `gmlm data prepare --force`"
        try:
            lines = path.read_text(encoding="utf-8").split("\n")[:-1]
        except (OSError, UnicodeDecodeError) as err:
            raise GmlmError(f"{path}: cannot read ({err}); {fix}") from None
        expected = self.manifest["splits"][split].get("text_lines")
        if expected is not None and len(lines) != expected:
            raise GmlmError(f"{path}: {len(lines):,} lines, the manifest says {expected:,}; {fix}")
        check_digest(path, self.digest(split, f"{side}.txt"))
        return lines


def load_dataset(root: str | Path) -> PreparedDataset:
    """Open a folder written by `prepare_dataset` (or `gmlm data prepare`)."""
    root = Path(root)
    return PreparedDataset(root, read_manifest(root))


class TranslationDataset:
    """One split of a prepared dataset, memory-mapped: `ds[i]` is (source ids, target ids).

    Ids exclude BOS/EOS. `src_lengths` / `tgt_lengths` (N,) and `lines` (N,) are in memory;
    `lines[i]` is the row's line in the split's text files.
    """

    def __init__(self, prepared: PreparedDataset, split: str) -> None:
        self.prepared = prepared
        self.root = prepared.root
        self.split = split
        info = prepared.manifest["splits"][split]
        self.dtype = np.dtype(prepared.manifest["token_dtype"])
        index_path = self.root / f"{split}.idx.npy"
        check_digest(index_path, prepared.digest(split, "idx.npy"))
        try:
            index = np.load(index_path, allow_pickle=False)
        except (OSError, ValueError) as err:
            raise GmlmError(
                f"{index_path}: unreadable ({err}); prepare the dataset again"
            ) from None
        if index.ndim != 2 or index.shape != (info["rows"], 3):
            raise GmlmError(f"{index_path}: {index.shape} rows, manifest says {info['rows']}")
        self.src_lengths: np.ndarray = index[:, 0].copy()
        self.tgt_lengths: np.ndarray = index[:, 1].copy()
        self.lines: np.ndarray = index[:, 2].copy()
        self.src_offsets = np.concatenate([[0], np.cumsum(self.src_lengths)])
        self.tgt_offsets = np.concatenate([[0], np.cumsum(self.tgt_lengths)])
        self.src_data = self._map("src", info["src_tokens"])
        self.tgt_data = self._map("tgt", info["tgt_tokens"])

    def _map(self, side: str, tokens: int) -> np.ndarray:
        path = self.root / f"{self.split}.{side}.bin"
        expected = tokens * self.dtype.itemsize
        size = path.stat().st_size if path.is_file() else -1
        if size != expected:
            raise GmlmError(
                f"{path}: {size} bytes, the manifest expects {expected}; the dataset is damaged, "
                "prepare it again with `gmlm data prepare --force`"
            )
        check_digest(path, self.prepared.digest(self.split, f"{side}.bin"))
        if tokens == 0:
            return np.zeros(0, dtype=self.dtype)
        return np.memmap(path, dtype=self.dtype, mode="r", shape=(tokens,))

    @classmethod
    def open(cls, root: str | Path, split: str) -> TranslationDataset:
        return load_dataset(root).split(split)

    @property
    def fingerprint(self) -> str:
        """Identifies the content: the dataset hash and the split name."""
        return f"{self.prepared.content_hash}:{self.split}"

    @property
    def tokenizer(self) -> Tokenizer:
        return self.prepared.tokenizer

    @property
    def pad_id(self) -> int:
        return int(self.prepared.manifest["special_ids"]["pad"])

    @property
    def eos_id(self) -> int:
        return int(self.prepared.manifest["special_ids"]["eos"])

    @property
    def src_lang(self) -> str | None:
        return self.prepared.manifest.get("src_lang")

    @property
    def tgt_lang(self) -> str | None:
        return self.prepared.manifest.get("tgt_lang")

    def __len__(self) -> int:
        return len(self.src_lengths)

    def __getitem__(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        if not -len(self) <= i < len(self):
            raise IndexError(f"row {i} out of range for {len(self)} rows")
        i = int(i) % len(self)
        src = np.asarray(self.src_data[self.src_offsets[i] : self.src_offsets[i + 1]])
        tgt = np.asarray(self.tgt_data[self.tgt_offsets[i] : self.tgt_offsets[i + 1]])
        return src.astype(np.int64), tgt.astype(np.int64)

    def __repr__(self) -> str:
        return f"TranslationDataset({str(self.root)!r}, {self.split!r}, rows={len(self)})"
