"""The settings of `gmlm serve`, each declared once: its flag, help and default come from the
field (as the decoding options' do, :mod:`gmlm.cli.options`), and :meth:`ServeSettings.validate`
bounds every one before the service starts.

Torch-free, so that `gmlm serve --help` stays light. The defaults and why they are what they are
are in docs/DESIGN.md ("The translation service").
"""

from __future__ import annotations

import dataclasses
from dataclasses import field

from gmlm.config import check_finite_fields
from gmlm.decoding.options import doc
from gmlm.errors import GmlmError


@dataclasses.dataclass(frozen=True)
class ServeSettings:
    """How the service batches, queues and bounds requests (each field's help says what)."""

    host: str = field(
        default="127.0.0.1",
        metadata=doc("address to listen on (127.0.0.1: this machine only; 0.0.0.0: every one)"),
    )
    port: int = field(default=8080, metadata=doc("TCP port to listen on; 0 picks a free one"))
    max_batch_sentences: int = field(
        default=32,
        metadata=doc("most sentences the batcher decodes together (several requests' lines)"),
    )
    max_batch_tokens: int = field(
        default=1024,
        metadata=doc(
            "most source tokens the batcher decodes together (a long request alone "
            "may exceed it: it is never split)"
        ),
    )
    max_wait_ms: float = field(
        default=0.0,
        metadata=doc(
            "how long the batcher waits for more requests after the first one of a "
            "batch arrives, in milliseconds (0: decode at once)"
        ),
    )
    max_queue_sentences: int = field(
        default=256,
        metadata=doc(
            "sentences that may wait per model; a request that would pass it is "
            "answered 503 with Retry-After at once"
        ),
    )
    max_lines: int = field(default=64, metadata=doc("most lines in one request"))
    max_chars: int = field(default=2000, metadata=doc("most characters in one line"))
    max_body_bytes: int = field(
        default=1_048_576, metadata=doc("largest request body in bytes (413 above it)")
    )
    max_rows: int = field(
        default=1024,
        metadata=doc(
            "most decoder rows one request may ask for: lines x beam (AR), lines x "
            "candidates per sentence (PaDIR: length beam x (1 + offsets) x random "
            "starts); bounds the memory a request can take"
        ),
    )
    timeout_s: float = field(
        default=10.0,
        metadata=doc(
            "deadline of a request in seconds, queueing included (504 past it); a "
            "request may ask for a shorter one"
        ),
    )
    threads: int = field(
        default=0,
        metadata=doc("torch CPU threads of each replica (0: the machine's cores / --workers)"),
    )
    workers: int = field(
        default=1,
        metadata=doc(
            "replicas: processes of their own, each with every model, sharing the "
            "port (the kernel spreads connections over them); see docs/DESIGN.md"
        ),
    )

    def validate(self) -> None:
        check_finite_fields(self)
        bounds = {
            "port": (0, 65535),
            "max_batch_sentences": (1, 4096),
            "max_batch_tokens": (1, 1_048_576),
            "max_queue_sentences": (1, 1_000_000),
            "max_lines": (1, 4096),
            "max_chars": (1, 100_000),
            "max_body_bytes": (64, 1 << 30),
            "max_rows": (1, 1_000_000),
            "threads": (0, 4096),
            "workers": (1, 256),
        }
        for name, (low, high) in bounds.items():
            value = getattr(self, name)
            if not low <= value <= high:
                raise GmlmError(f"--{name.replace('_', '-')} {value}: must be {low} to {high}")
        if not 0.0 <= self.max_wait_ms <= 1000.0:
            raise GmlmError(f"--max-wait-ms {self.max_wait_ms}: must be 0 to 1000")
        if not 0.0 < self.timeout_s <= 3600.0:
            raise GmlmError(f"--timeout-s {self.timeout_s}: must be more than 0, at most 3600")
        if self.max_batch_sentences > self.max_queue_sentences:
            raise GmlmError(
                f"--max-batch-sentences {self.max_batch_sentences} is more than "
                f"--max-queue-sentences {self.max_queue_sentences}: a batch comes from the queue"
            )
