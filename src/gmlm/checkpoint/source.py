"""Which checkpoint an export was made from, and whether `gmlm export --force` may replace it.

An export folder (a gmlm export's meta.json, a CTranslate2 export's gmlm.json) records its
source: the checkpoint folder's absolute path and its fingerprint
(:func:`gmlm.checkpoint.fingerprint.checkpoint_fingerprint`). `--force` replaces an earlier
export only when it was made from the checkpoint being exported now: the same folder (a
model trained further, exported again) or the same files elsewhere (a copy). An export of
another model, such as a released checkpoint, is never replaced: it would be lost silently.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from gmlm.checkpoint.fingerprint import checkpoint_fingerprint
from gmlm.errors import GmlmError


@dataclass(frozen=True)
class ExportSource:
    """The checkpoint an export was made from: `path`, its folder as an absolute path, and
    `fingerprint`, its digest (None in exports written before it was recorded)."""

    path: str
    fingerprint: str | None = None

    @classmethod
    def of(cls, folder: Path) -> ExportSource:
        """The identity of the checkpoint in `folder`."""
        return cls(str(Path(folder).resolve()), checkpoint_fingerprint(folder))

    def same_checkpoint(self, other: ExportSource) -> bool:
        """Whether `other` is this checkpoint: the same folder or the same files."""
        if self.fingerprint is not None and self.fingerprint == other.fingerprint:
            return True
        return Path(self.path).resolve() == Path(other.path).resolve()


def check_replaceable(out: Path, earlier: ExportSource, source: Path) -> None:
    """Refuse to replace the export in `out`, made from `earlier`, with one of the checkpoint
    in `source` unless both are one checkpoint (see the module docstring)."""
    if earlier.same_checkpoint(ExportSource.of(source)):
        return
    raise GmlmError(
        f"--out {out} holds an export of another checkpoint ({earlier.path}), not of "
        f"--checkpoint {source}; --force replaces only an earlier export of the same "
        "checkpoint: choose a new folder, or remove that one yourself if it is no longer needed"
    )
