"""SIGTERM ends a served process with status 0 after uvicorn's graceful shutdown, through
uvicorn's public behaviour only (no private attribute): uvicorn restores the SIGTERM handler it
found and raises the signal again, and the handler it finds is gmlm's, which does nothing. If
a uvicorn release stops restoring handlers or re-raising, this test says so."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import threading

from gmlm.serve.server import sigterm_ends_cleanly

SCRIPT = textwrap.dedent(
    """
    import os, signal, sys, threading, time
    import uvicorn
    from gmlm.serve.server import sigterm_ends_cleanly

    async def app(scope, receive, send):
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                await send({"type": message["type"] + ".complete"})
                if message["type"] == "lifespan.shutdown":
                    return

    server = uvicorn.Server(uvicorn.Config(app, port=0, log_level="error", lifespan="on"))

    def stop():
        while not server.started:
            time.sleep(0.01)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=stop, daemon=True).start()
    with sigterm_ends_cleanly():
        server.run()
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    print("returned after a graceful shutdown", flush=True)
    """
)


def test_sigterm_ends_the_served_process_with_status_0():
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert "returned after a graceful shutdown" in done.stdout


def test_without_it_uvicorn_ends_the_process_by_the_signal():
    """The behaviour the context manager is there for: uvicorn raises SIGTERM again."""
    script = SCRIPT.replace("with sigterm_ends_cleanly():", "if True:")
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == -signal.SIGTERM, done.stderr


def test_off_the_main_thread_it_changes_nothing():
    before = signal.getsignal(signal.SIGTERM)
    seen: list[object] = []

    def inside() -> None:
        with sigterm_ends_cleanly():
            seen.append(signal.getsignal(signal.SIGTERM))

    thread = threading.Thread(target=inside)
    thread.start()
    thread.join()
    assert seen == [before] and signal.getsignal(signal.SIGTERM) is before
