"""What one app of the service holds (:class:`AppState`, ``app.state.gmlm``): its settings and
metrics, the models once loaded, their batchers and decoding threads, the background tasks,
and whether it is ready. The lifecycle (:mod:`gmlm.serve.lifecycle`) fills it, the routes
(:mod:`gmlm.serve.routes`) read it."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from gmlm.serve.backends import Backend, Supervised, graph_captures
from gmlm.serve.batcher import Batcher
from gmlm.serve.metrics import GraphCaptures, Metrics
from gmlm.serve.settings import ServeSettings


@dataclass(eq=False)
class AppState:
    """The state of one app (each test's app has its own: nothing here is global)."""

    settings: ServeSettings
    metrics: Metrics = field(default_factory=Metrics)
    # loads, warms up and revives the models, off the event loop
    loader: ThreadPoolExecutor = field(
        default_factory=lambda: ThreadPoolExecutor(max_workers=1, thread_name_prefix="gmlm-load")
    )
    backends: Mapping[str, Backend] = field(default_factory=dict)
    batchers: dict[str, Batcher] = field(default_factory=dict)
    decoders: dict[str, ThreadPoolExecutor] = field(default_factory=dict)  # one per model
    tasks: list[asyncio.Task[None]] = field(default_factory=list)  # batchers and supervisor
    ready: bool = False  # loaded and warmed up, and not stopping

    def __post_init__(self) -> None:
        self.metrics.registry.register(
            GraphCaptures(lambda: {n: graph_captures(b) for n, b in self.backends.items()})
        )

    def down(self) -> list[str]:
        """The models whose worker process is dead (being restarted), sorted."""
        return sorted(name for name, b in self.backends.items() if not alive(b))


def alive(backend: Backend) -> bool:
    return not isinstance(backend, Supervised) or backend.alive()
