"""The settings of `gmlm serve`, each declared once: its flag, help and default come from the
field (as the decoding options' do, :mod:`gmlm.cli.options`), and :meth:`ServeSettings.validate`
bounds every one before the service starts.

Torch-free, so that `gmlm serve --help` stays light. The defaults and why they are what they are
are in docs/DESIGN.md ("The translation service").
"""

from __future__ import annotations

import dataclasses
from dataclasses import field
from typing import Literal

from gmlm.config import Range, check_settings
from gmlm.errors import GmlmError
from gmlm.settings import doc

GPU_BATCHING = {"max_batch_sentences": 256, "max_batch_tokens": 8192, "max_queue_sentences": 4096}
"""The batching defaults with ``--device cuda``, where a batch's time grows far slower than
its sentences (an H100, eager fp32 PaDIR T=4 B=5: 40 ms at batch 1, 150 ms at batch 32,
../shared/tools/gpu_diag.py), so larger batches and a deeper queue than the CPU's defaults
keep the chip busy. Not tuned yet: `make gpu-check` measures the service with them. Flags
given win."""


def _on_gpu(name: str) -> str:
    return f"; with --device cuda {GPU_BATCHING[name]}"


@dataclasses.dataclass(frozen=True)
class ServeSettings:
    """How the service batches, queues and bounds requests (each field's help says what)."""

    host: str = field(
        default="127.0.0.1",
        metadata=doc("address to listen on (127.0.0.1: this machine only; 0.0.0.0: every one)"),
    )
    port: int = field(
        default=8080,
        metadata=doc(
            "TCP port to listen on; 0 picks a free one",
            range=Range(ge=0, le=65535, note="0 picks a free port"),
        ),
    )
    max_batch_sentences: int = field(
        default=32,
        metadata=doc(
            "most sentences the batcher decodes together (several requests' lines)"
            + _on_gpu("max_batch_sentences"),
            range=Range(ge=1, le=4096),
        ),
    )
    max_batch_tokens: int = field(
        default=1024,
        metadata=doc(
            "most source tokens the batcher decodes together (a long request alone "
            "may exceed it: it is never split)" + _on_gpu("max_batch_tokens"),
            range=Range(ge=1, le=1_048_576),
        ),
    )
    max_wait_ms: float = field(
        default=0.0,
        metadata=doc(
            "how long the batcher waits for more requests after the first one of a batch "
            "arrives, in milliseconds; 0 decodes at once whatever is queued: under load, "
            "requests queue while a batch decodes, so batches form anyway, and at light load "
            "a wait only adds latency",
            range=Range(ge=0, le=1000),
        ),
    )
    max_queue_sentences: int = field(
        default=256,
        metadata=doc(
            "sentences that may wait per model; a request that would pass it is "
            "answered 503 with Retry-After at once" + _on_gpu("max_queue_sentences"),
            range=Range(ge=1, le=1_000_000),
        ),
    )
    max_lines: int = field(
        default=64, metadata=doc("most lines in one request", range=Range(ge=1, le=4096))
    )
    max_chars: int = field(
        default=2000, metadata=doc("most characters in one line", range=Range(ge=1, le=100_000))
    )
    max_body_bytes: int = field(
        default=1_048_576,
        metadata=doc(
            "largest request body in bytes (413 above it)", range=Range(ge=64, le=1 << 30)
        ),
    )
    max_rows: int = field(
        default=1024,
        metadata=doc(
            "most decoder rows one request may ask for: lines x beam (AR), lines x "
            "candidates per sentence (PaDIR: length beam x (1 + offsets) x random "
            "starts); bounds the memory a request can take",
            range=Range(ge=1, le=1_000_000),
        ),
    )
    timeout_s: float = field(
        default=10.0,
        metadata=doc(
            "deadline of a request in seconds, queueing included (504 past it); a "
            "request may ask for a shorter one",
            range=Range(gt=0, le=3600),
        ),
    )
    threads: int = field(
        default=0,
        metadata=doc(
            "torch CPU threads of each replica (0: the machine's cores / --workers)",
            range=Range(ge=0, le=4096, note="0: the cores / --workers"),
        ),
    )
    workers: int = field(
        default=1,
        metadata=doc(
            "replicas: processes of their own, each with every model, sharing the "
            "port (the kernel spreads connections over them); see docs/DESIGN.md",
            range=Range(ge=1, le=256),
        ),
    )

    log_format: Literal["text", "json"] = field(
        default="text",
        metadata=doc(
            "how the service logs to stderr (start-up, warm-up, shutdown, and a line per "
            "request with its X-Request-ID, model, lines, queue and decode ms and HTTP "
            "status): text, readable lines; json, one JSON object per line for a log collector"
        ),
    )

    @classmethod
    def for_device(cls, device: str, **given: object) -> ServeSettings:
        """The settings for a service on `device` ("cpu", "cuda", "cuda:N"): the defaults,
        :data:`GPU_BATCHING`'s on a CUDA device, then the `given` ones."""
        defaults = GPU_BATCHING if device.startswith("cuda") else {}
        return cls(**{**defaults, **given})  # type: ignore[arg-type]

    def validate(self) -> None:
        check_settings(self)
        if self.max_batch_sentences > self.max_queue_sentences:
            raise GmlmError(
                f"--max-batch-sentences {self.max_batch_sentences} is more than "
                f"--max-queue-sentences {self.max_queue_sentences}: a batch comes from the queue"
            )
