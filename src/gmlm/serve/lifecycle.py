"""The service's life, as FastAPI's lifespan: models loaded and warmed up after the server
answers (:func:`start`), dead worker processes restarted (:func:`supervise`), the event loop's
lag measured (:func:`watch_loop`), and on shutdown,
once uvicorn has answered every accepted request, running batches stopped early and the models
closed (:func:`stop`)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from gmlm.serve.backends import Backend, Supervised
from gmlm.serve.batcher import Batcher
from gmlm.serve.logs import LOG
from gmlm.serve.metrics import LOOP_PROBE_S
from gmlm.serve.state import AppState

Load = Callable[[], Mapping[str, Backend]]
# Runs the loaded models once; each model's seconds per unit of work where it measured them.
Warmup = Callable[[Mapping[str, Backend]], Mapping[str, float]]
OnFailure = Callable[[BaseException], None]

# How often the service looks for dead worker processes to restart (seconds).
SUPERVISE_S = 0.5


async def start(
    state: AppState, load: Load, warmup: Warmup | None, on_failure: OnFailure | None
) -> None:
    """Load and warm up the models off the event loop, then start their batchers and the
    supervisor and say ready. A failure goes to `on_failure` (raised without one)."""
    loop = asyncio.get_running_loop()
    try:
        backends = await loop.run_in_executor(state.loader, load)
        state.backends = backends
        rates: Mapping[str, float] = {}
        if warmup is not None:
            rates = await loop.run_in_executor(state.loader, warmup, backends)
    except Exception as err:
        if on_failure is None:
            raise
        on_failure(err)
        return
    start_batchers(state, rates)
    state.tasks.append(asyncio.create_task(supervise(state), name="gmlm-supervise"))
    state.tasks.append(asyncio.create_task(watch_loop(state), name="gmlm-loop-lag"))
    state.ready = True


def start_batchers(state: AppState, rates: Mapping[str, float]) -> None:
    """A batcher, a decoding thread and a batching task for each loaded model; `rates` are the
    warm-up's first prices."""
    for name, backend in state.backends.items():
        state.decoders[name] = ThreadPoolExecutor(1, thread_name_prefix=f"gmlm-decode-{name}")
        batcher = Batcher(
            backend, state.settings, state.metrics, state.decoders[name], rates.get(name, 0.0)
        )
        state.batchers[name] = batcher
        state.tasks.append(asyncio.create_task(batcher.run(), name=f"batcher-{name}"))


async def supervise(state: AppState) -> None:
    """Restart a backend's worker process that has died (killed by the OOM killer, say), off
    the event loop; /ready says 503 until it is back."""
    loop = asyncio.get_running_loop()
    while True:
        await asyncio.sleep(SUPERVISE_S)
        for name, backend in state.backends.items():
            if isinstance(backend, Supervised) and not backend.alive():
                state.metrics.restarts.labels(name).inc()
                LOG.warning("model %s: its worker process died; restarting it", name)
                with contextlib.suppress(Exception):  # tried again next round
                    await loop.run_in_executor(state.loader, backend.revive)


async def watch_loop(state: AppState) -> None:
    """Observe how late the event loop wakes a sleeping task (gmlm_event_loop_lag_seconds):
    work on the loop that holds up every request, which the batches' own timings miss."""
    while True:
        asleep = time.monotonic()
        await asyncio.sleep(LOOP_PROBE_S)
        state.metrics.loop_lag.observe(max(0.0, time.monotonic() - asleep - LOOP_PROBE_S))


async def stop(state: AppState, starting: asyncio.Task[None]) -> None:
    """Not ready any more; running batches stop at their next pass or step; the background
    tasks end, the threads are joined and the models closed."""
    state.ready = False
    for batcher in state.batchers.values():
        batcher.stopping = True  # a running batch stops at its next pass or step
    with contextlib.suppress(Exception):
        await starting
    started = bool(state.batchers)  # made once the models loaded and warmed up
    for task in state.tasks:
        task.cancel()
    for task in state.tasks:
        with contextlib.suppress(asyncio.CancelledError):
            await task
    for pool in (*state.decoders.values(), state.loader):
        pool.shutdown(wait=True)  # a running batch ends at its next pass or step
    for backend in state.backends.values():
        backend.close()
    if started:
        LOG.info("stopped: every accepted request answered, the models closed")
    else:
        LOG.info("stopped: the models did not start, so no request was translated")


def lifespan(
    state: AppState, load: Load, warmup: Warmup | None, on_failure: OnFailure | None
) -> Callable[[Any], contextlib.AbstractAsyncContextManager[None]]:
    """FastAPI's lifespan for `state`: :func:`start` in the background as the server starts
    answering, :func:`stop` after uvicorn's graceful shutdown."""

    @contextlib.asynccontextmanager
    async def running(_: Any) -> AsyncIterator[None]:
        starting = asyncio.create_task(start(state, load, warmup, on_failure), name="gmlm-start")
        try:
            yield
        finally:
            await stop(state, starting)

    return running
