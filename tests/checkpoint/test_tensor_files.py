"""Safetensors files that carry their own content digest (gmlm.checkpoint.tensor_files): every
byte changed in such a file is an error or changes nothing read, and every safetensors file a
run writes (weights, optimizer and RNG state, the history kept for averaging) is refused by the
command that reads it once its bytes change."""

from __future__ import annotations

import json
import shutil
import struct
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from gmlm.checkpoint.loading import load_for_inference
from gmlm.checkpoint.tensor_files import DIGEST_KEY, load_tensors, save_tensors
from gmlm.errors import GmlmError
from gmlm.training.averaging import average_run, history_steps
from tests.helpers.training import train

pytestmark = pytest.mark.usefixtures("one_thread")

TENSORS = {
    "b.weight": torch.arange(6, dtype=torch.float32).reshape(2, 3),
    "a.step": torch.tensor(3.0),
    "c.half": torch.tensor([1.5, -2.0], dtype=torch.bfloat16),
}


def _equal(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return set(a) == set(b) and all(
        a[k].dtype == b[k].dtype and a[k].shape == b[k].shape and torch.equal(a[k], b[k]) for k in a
    )


def test_writing_holds_one_serialized_copy_at_a_time(tmp_path: Path) -> None:
    """The digest needs the file's bytes once before they are written with it: the first
    serialized copy is freed before the second is made, so writing a checkpoint costs its size
    once, not twice (tracemalloc sees the bytes objects, not torch's own memory)."""
    import tracemalloc

    big = {"w": torch.zeros(2_000_000)}  # 8 MB of data
    size = 8_000_000
    tracemalloc.start()
    try:
        save_tensors(big, tmp_path / "big.safetensors")
        _current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert size <= peak < 1.5 * size
    assert torch.equal(load_tensors(tmp_path / "big.safetensors")["w"], big["w"])


def test_tensors_round_trip_with_their_digest_in_the_header(tmp_path: Path) -> None:
    path = tmp_path / "t.safetensors"
    save_tensors(TENSORS, path)
    assert _equal(load_tensors(path), TENSORS)
    (length,) = struct.unpack("<Q", path.read_bytes()[:8])
    header = json.loads(path.read_bytes()[8 : 8 + length])
    assert len(header["__metadata__"][DIGEST_KEY]) == 64
    assert _equal(load_file(str(path)), TENSORS)  # a plain safetensors file for other tools


def test_no_tensors_round_trip(tmp_path: Path) -> None:
    """An empty file (an optimizer with no state yet): a header and no data."""
    path = tmp_path / "t.safetensors"
    save_tensors({}, path)
    assert load_tensors(path) == {}


def test_every_changed_byte_is_an_error_or_changes_nothing_read(tmp_path: Path) -> None:
    """Each byte of the file in turn, flipped: loading either refuses the file or returns
    exactly the tensors written (a flip in the digest's own key leaves the file unchecked but
    intact). Never other tensors in silence."""
    path = tmp_path / "t.safetensors"
    save_tensors(TENSORS, path)
    original = path.read_bytes()
    refused = 0
    for i in range(len(original)):
        for flip in (0x01, 0x80):
            data = bytearray(original)
            data[i] ^= flip
            path.write_bytes(bytes(data))
            try:
                read = load_tensors(path)
            except GmlmError as err:
                assert str(err).startswith(f"{path}: ")
                refused += 1
                continue
            assert _equal(read, TENSORS), (i, flip)
    assert refused > 1.5 * len(original)  # nearly every flip is caught


def test_a_file_without_a_digest_loads_unchecked(tmp_path: Path) -> None:
    """Files written by an earlier gmlm or another tool record no digest: they load as they
    are (safetensors' own checks only)."""
    path = tmp_path / "t.safetensors"
    save_file(TENSORS, str(path))
    data = bytearray(path.read_bytes())
    data[-1] ^= 0x01
    path.write_bytes(bytes(data))
    assert not torch.equal(load_tensors(path)["c.half"], TENSORS["c.half"])


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"\x00" * 4, r"corrupt or truncated safetensors file"),
        (struct.pack("<Q", 2**62) + b"{}", r"corrupt or truncated safetensors file"),
        (struct.pack("<Q", 2) + b"[]", r"corrupt or truncated safetensors file"),
    ],
    ids=["short", "huge-header", "not-an-object"],
)
def test_a_broken_header_is_an_error_naming_the_file(
    data: bytes, message: str, tmp_path: Path
) -> None:
    path = tmp_path / "t.safetensors"
    path.write_bytes(data)
    with pytest.raises(GmlmError, match=rf"^{path}: {message}"):
        load_tensors(path)


@pytest.fixture(scope="module")
def run(word_task_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny AR run of 4 steps, keeping the weights of steps 2 and 4."""
    folder = tmp_path_factory.mktemp("digests") / "run"
    train(word_task_data, folder, "ar", "max_steps=4", "valid_every=2", "keep_history=2")
    return folder


def _resume(data: Path, run: Path, _: Path) -> object:
    return train(data, run, "ar", "max_steps=6", "valid_every=2", "keep_history=2")


def _average(_data: Path, run: Path, tmp: Path) -> object:
    return average_run(run, tmp / "avg")


def _translate_last(_data: Path, run: Path, _: Path) -> object:
    return load_for_inference(run / "last")


# Every safetensors file a run writes, and the reader of each.
FILES: list[tuple[Callable[[Path], Path], Callable[[Path, Path, Path], object]]] = [
    (lambda run: run / "last" / "model.safetensors", _translate_last),
    (lambda run: run / "last" / "model.safetensors", _resume),
    (lambda run: run / "last" / "optimizer.safetensors", _resume),
    (lambda run: run / "last" / "state.safetensors", _resume),
    (lambda run: history_steps(run)[2], _average),
]


@pytest.mark.parametrize(
    ("file", "reader"),
    FILES,
    ids=["weights-load", "weights-resume", "optimizer-resume", "rng-resume", "history-average"],
)
def test_each_file_a_run_writes_is_refused_once_its_bytes_change(
    file: Callable[[Path], Path],
    reader: Callable[[Path, Path, Path], object],
    run: Path,
    word_task_data: Path,
    tmp_path: Path,
) -> None:
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    damaged = file(copy)
    data = bytearray(damaged.read_bytes())
    data[-1] ^= 0x01  # the last byte of the last tensor: the header still parses
    damaged.write_bytes(bytes(data))
    with pytest.raises(GmlmError, match=rf"^{damaged}: its content \(sha256 "):
        reader(word_task_data, copy, tmp_path)
    assert damaged.read_bytes() == bytes(data)  # nothing was written over it
