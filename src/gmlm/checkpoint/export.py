"""`gmlm export`: a checkpoint's inference files copied to a new folder, the weights cast."""

from __future__ import annotations

import shutil
from pathlib import Path

import torch

from gmlm.checkpoint.files import save_weights, weights_digest, write_checkpoint_dir
from gmlm.checkpoint.languages import checkpoint_languages, language_meta
from gmlm.checkpoint.loading import load_for_inference, resolve_checkpoint
from gmlm.checkpoint.meta import (
    CONFIG_FILE,
    DECODING_FILE,
    META_FILE,
    MODEL_FILE,
    TOKENIZER_DIR,
    Meta,
)
from gmlm.checkpoint.source import ExportSource, check_replaceable
from gmlm.errors import GmlmError
from gmlm.locking import output_folder

# The meta.json entries of an export that name its source (gmlm.checkpoint.source; the
# record's Meta.exported_from and Meta.exported_from_fingerprint).
EXPORTED_FROM = "exported_from"
EXPORTED_FINGERPRINT = "exported_from_fingerprint"


def is_export(folder: Path) -> bool:
    """Whether `folder` holds a checkpoint that `export_checkpoint` wrote (what `gmlm export
    --force` may replace, if of the same checkpoint): its meta.json records where it was
    exported from."""
    meta = folder / META_FILE
    if not ((folder / MODEL_FILE).is_file() and meta.is_file()):
        return False
    try:
        return EXPORTED_FROM in Meta.read(meta).order
    except GmlmError:
        return False


def recorded_source(folder: Path) -> ExportSource:
    """The checkpoint that the export in `folder` (:func:`is_export`) was made from."""
    meta = Meta.read(folder / META_FILE)
    return ExportSource(str(meta.exported_from), meta.exported_from_fingerprint)


def export_checkpoint(
    source: str | Path, out: str | Path, dtype: torch.dtype | None, *, force: bool = False
) -> Path:
    """Copy the inference files of a checkpoint (or a run folder's best one) to `out`, its
    config.yaml and decoding.json as they are, with the weights cast to `dtype` (e.g.
    torch.bfloat16 halves the size; None keeps fp32).

    Loading casts them back to the model's fp32 parameters, so `gmlm translate` and `gmlm
    bench` take an exported folder like any checkpoint. `out` is written atomically; it must
    be new or empty, or with `force` an earlier export of the same checkpoint
    (:mod:`gmlm.checkpoint.source`), and never `source`, inside it or inside a checkpoint or
    training run folder (`gmlm.io.check_output_folder`)."""
    target = Path(out)
    with output_folder(
        target,
        "--out",
        "a gmlm export",
        is_export,
        inputs={"--checkpoint": Path(source)},
        replace=force,
    ) as earlier:
        if earlier:
            check_replaceable(target, recorded_source(target), resolve_checkpoint(source))
        loaded = load_for_inference(source)
        exported_from = ExportSource.of(loaded.path)
        meta = Meta.of(loaded.path).updated(
            **language_meta(checkpoint_languages(loaded.path).pair),
            **{EXPORTED_FROM: exported_from.path, EXPORTED_FINGERPRINT: exported_from.fingerprint},
            tokenizer_sha256=loaded.tokenizer.fingerprint,
            weights_dtype=str(dtype or "fp32"),
        )

        def fill(tmp: Path) -> None:
            save_weights(tmp, loaded.model, dtype)
            shutil.copyfile(loaded.path / CONFIG_FILE, tmp / CONFIG_FILE)
            loaded.tokenizer.save(tmp / TOKENIZER_DIR)
            meta.updated(weights_sha256=weights_digest(tmp)).write(tmp)
            if (loaded.path / DECODING_FILE).is_file():
                shutil.copyfile(loaded.path / DECODING_FILE, tmp / DECODING_FILE)

        write_checkpoint_dir(target, fill)
    return target
