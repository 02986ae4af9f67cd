"""A checkpoint folder written and read back on a tiny model: the weights round-trip exactly
(or rounded to bf16 where asked), the model loads in eval mode with its tokenizer,
a run folder resolves to its best checkpoint, a failed write leaves the old folder as it was,
and every kind of damage is an error naming the file and the mismatch."""

from __future__ import annotations

import errno
import hashlib
import json
import re
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from gmlm.checkpoint.files import (
    TOKENIZER_KEY,
    fill_inference_files,
    load_tensors,
    save_tensors,
    save_weights,
    weights_digest,
    write_checkpoint_dir,
)
from gmlm.checkpoint.loading import load_for_inference, resolve_checkpoint
from gmlm.checkpoint.meta import Meta
from gmlm.data.tokenizer import Tokenizer
from gmlm.errors import GmlmError
from gmlm.io import MODEL_FILE, WriteError, current_umask
from gmlm.models import build_model
from gmlm.nn import preset
from gmlm.training.config import TrainConfig

pytestmark = pytest.mark.usefixtures("one_thread")


def _save(
    folder: Path,
    tokenizer: Tokenizer,
    kind: str = "ar",
    dtype: torch.dtype | None = None,
    **model: object,
) -> torch.nn.Module:
    """A tiny untrained `kind` model, saved to `folder`; in training mode, as a trainer
    leaves it."""
    config = preset(
        "tiny", vocab_size=tokenizer.vocab_size, max_source_len=16, max_target_len=16, **model
    )
    torch.manual_seed(0)
    network = build_model(kind, config)  # type: ignore[arg-type]
    network.train()
    cfg = TrainConfig(kind=kind, model=config)  # type: ignore[arg-type]
    write_checkpoint_dir(
        folder, lambda tmp: fill_inference_files(tmp, network, cfg, tokenizer, {"step": 7}, dtype)
    )
    return network


@pytest.mark.parametrize("kind", ["ar", "padir"])
def test_weights_round_trip_and_the_model_loads_in_eval_mode(kind, tokenizer, tmp_path):
    network = _save(tmp_path / "c", tokenizer, kind)
    loaded = load_for_inference(tmp_path / "c")
    assert not loaded.model.training and loaded.kind == kind
    saved, read = network.state_dict(), loaded.model.state_dict()
    assert set(read) == set(saved)
    assert all(torch.equal(read[name], saved[name]) for name in saved)
    assert loaded.tokenizer.fingerprint == tokenizer.fingerprint
    meta = json.loads((tmp_path / "c" / "meta.json").read_text())
    digest = hashlib.sha256((tmp_path / "c" / MODEL_FILE).read_bytes()).hexdigest()
    assert meta == {"step": 7, TOKENIZER_KEY: tokenizer.fingerprint, "weights_sha256": digest}
    # the folder gets the permissions of a folder made by hand
    assert (tmp_path / "c").stat().st_mode & 0o777 == 0o777 & ~current_umask()


def test_a_tied_weight_is_stored_once_in_any_dtype(tmp_path):
    """A module reachable by two names (tied weights) is stored under its first name only."""
    tied = torch.nn.Module()
    tied.first = torch.nn.Linear(2, 2)
    tied.second = tied.first
    assert len(tied.state_dict()) == 4  # two names for each of two tensors
    for dtype in (None, torch.bfloat16):
        folder = tmp_path / str(dtype)
        folder.mkdir()
        save_weights(folder, tied, dtype)
        assert set(load_tensors(folder / MODEL_FILE)) == {"first.weight", "first.bias"}


def test_weights_are_stored_in_the_dtype_asked_for(tokenizer, tmp_path):
    network = _save(tmp_path / "c", tokenizer, dtype=torch.bfloat16)
    stored = load_tensors(tmp_path / "c" / MODEL_FILE)
    assert {t.dtype for t in stored.values()} == {torch.bfloat16}
    read = load_for_inference(tmp_path / "c").model.state_dict()
    for name, value in network.state_dict().items():
        assert torch.equal(read[name], value.to(torch.bfloat16).float()), name


def test_a_run_folder_resolves_to_its_best_then_averaged_then_last_checkpoint(tmp_path):
    run = tmp_path / "run"
    for name in ("last", "averaged", "best"):
        (run / name).mkdir(parents=True)
        (run / name / MODEL_FILE).write_bytes(b"")
        assert resolve_checkpoint(run) == run / name
    assert resolve_checkpoint(run / "last") == run / "last"
    (run / "best" / MODEL_FILE).unlink()
    assert resolve_checkpoint(run) == run / "averaged"
    with pytest.raises(GmlmError, match="checkpoint not found"):
        resolve_checkpoint(tmp_path / "nowhere")
    with pytest.raises(GmlmError, match="not a checkpoint"):
        resolve_checkpoint(tmp_path)


def test_a_failed_write_leaves_the_old_folder_and_no_temporary_one(tokenizer, tmp_path):
    _save(tmp_path / "c", tokenizer)
    before = {p.name: p.read_bytes() for p in (tmp_path / "c").iterdir() if p.is_file()}

    def full_disk(tmp: Path) -> None:
        (tmp / MODEL_FILE).write_bytes(b"half")
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(WriteError, match=rf"cannot write {re.escape(str(tmp_path / 'c'))}: No"):
        write_checkpoint_dir(tmp_path / "c", full_disk)
    after = {p.name: p.read_bytes() for p in (tmp_path / "c").iterdir() if p.is_file()}
    assert after == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c"]


def _edit_weights(folder: Path, edit) -> None:  # type: ignore[no-untyped-def]
    """Weights edited as a writer would leave them: their digest recorded in meta.json (a
    diverged run's NaN weights, another configuration's shapes)."""
    tensors = load_file(str(folder / MODEL_FILE))
    edit(tensors)
    save_file(tensors, str(folder / MODEL_FILE))
    Meta.of(folder).updated(weights_sha256=weights_digest(folder)).write(folder)


def _replace_weights(folder: Path) -> None:
    """Other weights of the same shapes written over model.safetensors, themselves intact
    (their own content digest matches): only meta.json's digest tells."""
    tensors = load_file(str(folder / MODEL_FILE))
    tensors[_first(tensors)].view(-1)[0] += 1
    save_tensors(tensors, folder / MODEL_FILE)


def _overwrite_bytes(folder: Path) -> None:
    """Bytes of the last tensor's data changed after writing, its header intact: the file
    still parses, and only the digests tell."""
    data = bytearray((folder / MODEL_FILE).read_bytes())
    data[-8:] = bytes(b ^ 0x55 for b in data[-8:])
    (folder / MODEL_FILE).write_bytes(bytes(data))


def _first(tensors: dict[str, torch.Tensor]) -> str:
    return sorted(tensors)[0]


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (
            lambda f: _edit_weights(f, lambda t: t.update({_first(t): t[_first(t)][:1]})),
            r"model\.safetensors: weights do not fit the model shape: .*: checkpoint \(1,",
        ),
        (
            lambda f: _edit_weights(f, lambda t: t.update({"extra.weight": torch.zeros(2)})),
            r"model\.safetensors: weights do not match the model: missing \[\], "
            r"unexpected \['extra\.weight'\]",
        ),
        (
            lambda f: _edit_weights(f, lambda t: t.pop(_first(t))),
            r"model\.safetensors: weights do not match the model: missing \['",
        ),
        (
            lambda f: _edit_weights(f, lambda t: t[_first(t)].view(-1).__setitem__(0, torch.inf)),
            r"model\.safetensors: 1 weight tensor\(s\) hold NaN or infinite values",
        ),
        (
            lambda f: (f / MODEL_FILE).write_bytes((f / MODEL_FILE).read_bytes()[:100]),
            r"model\.safetensors: corrupt or truncated safetensors file",
        ),
        (
            _overwrite_bytes,
            r"model\.safetensors: its content \(sha256 [0-9a-f]{12}\.\.\.\) is not the "
            r"[0-9a-f]{12}\.\.\. its header records: the file was damaged or changed",
        ),
        (
            _replace_weights,
            r"model\.safetensors: its bytes \(sha256 [0-9a-f]{12}\.\.\.\) are not the "
            r"[0-9a-f]{12}\.\.\. that .*meta\.json records",
        ),
        (lambda f: (f / MODEL_FILE).unlink(), r"not a checkpoint"),
        (lambda f: (f / "meta.json").write_text("{"), r"meta\.json: corrupt JSON"),
        (lambda f: (f / "meta.json").write_text("[]"), r"meta\.json: corrupt checkpoint metadata"),
        (
            lambda f: (f / "meta.json").write_text(json.dumps({TOKENIZER_KEY: "0" * 64})),
            r"tokenizer/?: its tokenizer \(sha256 [0-9a-f]{12}\.\.\.\) is not the 000000000000",
        ),
    ],
    ids=[
        "shape",
        "unexpected",
        "missing",
        "infinite",
        "truncated",
        "overwritten",
        "replaced",
        "no-weights",
        "json",
        "json-list",
        "other-tokenizer",
    ],
)
def test_damaged_checkpoints_are_errors_naming_the_file(damage, message, tokenizer, tmp_path):
    _save(tmp_path / "c", tokenizer, tie_embeddings=False)
    load_for_inference(tmp_path / "c")  # intact, it loads
    damage(tmp_path / "c")
    with pytest.raises(GmlmError, match=message):
        load_for_inference(tmp_path / "c")
