"""A checkpoint's files: written a folder at a time (atomically), read back with errors that
name the file.

Every folder is written to a temporary sibling and renamed into place, so a crash (even
`kill -9`) leaves either the previous checkpoint or the new one, never a mix.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from gmlm.checkpoint.meta import CONFIG_FILE as CONFIG_FILE
from gmlm.checkpoint.meta import META_FILE, Meta
from gmlm.checkpoint.meta import TOKENIZER_DIR as TOKENIZER_DIR
from gmlm.checkpoint.meta import load_json as load_json
from gmlm.checkpoint.tensor_files import load_tensors as load_tensors
from gmlm.checkpoint.tensor_files import save_tensors as save_tensors
from gmlm.config import save_config
from gmlm.data.tokenizer import Tokenizer
from gmlm.errors import GmlmError
from gmlm.io import MODEL_FILE, file_sha256, make_dirs, replace_dir, share_permissions, writing

# The meta.json entry recording the tokenizer the weights were made with (its fingerprint,
# Meta.tokenizer_sha256): another tokenizer of the same vocabulary size copied into the folder
# would load, and translate badly without any other error.
TOKENIZER_KEY = "tokenizer_sha256"


def write_checkpoint_dir(path: Path, fill: Callable[[Path], None]) -> None:
    """Create `path` atomically: `fill(tmp)` writes a temporary folder that then replaces it.
    A failed write (a full disk) is a WriteError naming `path`, which is left as it was."""
    make_dirs(path.parent, f"cannot write {path}")
    with writing(path):
        tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.tmp-", dir=path.parent))
        try:
            fill(tmp)
            share_permissions(tmp)
            replace_dir(tmp, path)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise


def fill_inference_files(
    tmp: Path,
    model: nn.Module,
    config: Any,
    tokenizer: Tokenizer,
    meta: Meta | Mapping[str, Any],
    dtype: torch.dtype | None = None,
) -> None:
    """Write weights, config, tokenizer and meta into the folder `tmp`, the meta with the
    tokenizer's fingerprint (TOKENIZER_KEY). `config`: the dataclass saved as config.yaml,
    the resolved training configuration that made the model
    (`gmlm.training.config.TrainConfig`), of which inference reads the model part."""
    save_weights(tmp, model, dtype)
    save_config(config, tmp / CONFIG_FILE)
    tokenizer.save(tmp / TOKENIZER_DIR)
    record = meta if isinstance(meta, Meta) else Meta.from_json(meta)
    record.updated(
        tokenizer_sha256=tokenizer.fingerprint, weights_sha256=weights_digest(tmp)
    ).write(tmp)


def weights_digest(folder: Path) -> str:
    """The SHA-256 of `folder`/model.safetensors, as meta.json records it (weights_sha256)."""
    return file_sha256(Path(folder) / MODEL_FILE)


def check_weights_digest(folder: Path) -> None:
    """Refuse `folder`/model.safetensors where its bytes are not those meta.json records
    (weights_sha256): a file damaged or overwritten after it was written still loads when
    its header is intact, and translates to garbage without any other error. Checkpoints
    written before the digest was recorded are not checked."""
    recorded = Meta.of(folder).weights_sha256
    if recorded is None:
        return
    actual = weights_digest(folder)
    if actual != recorded:
        raise GmlmError(
            f"{Path(folder) / MODEL_FILE}: its bytes (sha256 {actual[:12]}...) are not the "
            f"{recorded[:12]}... that {Path(folder) / META_FILE} records: the file was "
            "damaged or changed after it was written; restore it (from the run's `last`, "
            "`best` or history, or by exporting again), or train again"
        )


def load_checkpoint_tokenizer(folder: Path) -> Tokenizer:
    """The tokenizer of the checkpoint in `folder`, refused where its meta.json records
    another (TOKENIZER_KEY; checkpoints written before it was recorded are not checked)."""
    tokenizer_dir = Path(folder) / TOKENIZER_DIR
    if not tokenizer_dir.is_dir():
        raise GmlmError(f"{folder}: missing {TOKENIZER_DIR}/ folder; the checkpoint is incomplete")
    tokenizer = Tokenizer.load(tokenizer_dir)
    meta = Path(folder) / META_FILE
    recorded = Meta.of(folder).tokenizer_sha256
    if recorded is not None and recorded != tokenizer.fingerprint:
        raise GmlmError(
            f"{tokenizer_dir}: its tokenizer (sha256 {tokenizer.fingerprint[:12]}...) is not "
            f"the {str(recorded)[:12]}... that {meta} records, the one the weights were "
            "trained with: it was copied from another checkpoint or dataset, and would encode "
            "text into ids this model did not learn; restore this checkpoint's own "
            f"{TOKENIZER_DIR}/ folder (from the run or dataset that made it)"
        )
    return tokenizer


def save_weights(tmp: Path, model: nn.Module, dtype: torch.dtype | None = None) -> None:
    """`model`'s weights as `tmp`/model.safetensors, cast to `dtype` (None: as they are), with
    their content digest (gmlm.checkpoint.tensor_files)."""
    state = _unique_state(model)
    save_tensors(
        {k: v if dtype is None else v.to(dtype) for k, v in state.items()}, tmp / MODEL_FILE
    )


def _unique_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """The state dict without the second name of tied parameters (stored once)."""
    seen: set[int] = set()
    out = {}
    for name, tensor in model.state_dict().items():
        key = tensor.data_ptr()
        if key in seen:
            continue
        seen.add(key)
        out[name] = tensor
    return out


def load_weights(model: nn.Module, path: Path) -> None:
    """Load `path`/model.safetensors into `model`, with errors that name the mismatch (and
    bytes that are not those meta.json records: `check_weights_digest`)."""
    file = path / MODEL_FILE
    tensors = load_tensors(file)
    check_weights_digest(path)
    own = model.state_dict()
    shapes = {k: tuple(v.shape) for k, v in own.items()}
    mismatched = [
        f"{k}: checkpoint {tuple(v.shape)} vs model {shapes[k]}"
        for k, v in tensors.items()
        if k in shapes and tuple(v.shape) != shapes[k]
    ]
    if mismatched:
        raise GmlmError(f"{file}: weights do not fit the model shape: " + "; ".join(mismatched[:5]))
    # A diverged run can save NaN weights; they would decode to garbage without any error.
    broken = [k for k, v in tensors.items() if v.is_floating_point() and not v.isfinite().all()]
    if broken:
        raise GmlmError(
            f"{file}: {len(broken)} weight tensor(s) hold NaN or infinite values "
            f"({', '.join(sorted(broken)[:5])}{', ...' if len(broken) > 5 else ''}) and are "
            "unusable (did training diverge?): use an earlier checkpoint, or train again with "
            "a lower optim.lr"
        )
    try:
        missing, unexpected = model.load_state_dict(tensors, strict=False)
    except RuntimeError as err:
        raise GmlmError(f"{file}: cannot load weights ({err})") from None
    if unexpected or [m for m in missing if m not in _tied_aliases(model)]:
        raise GmlmError(
            f"{file}: weights do not match the model: missing {sorted(missing)[:5]}, "
            f"unexpected {sorted(unexpected)[:5]}"
        )


def _tied_aliases(model: nn.Module) -> set[str]:
    names = list(model.state_dict())
    return set(names) - set(_unique_state(model))
