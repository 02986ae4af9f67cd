"""tools/gpu_check.py (`make gpu-check`) where no GPU is: its table from known rows, a failed
section reported as a row, and a clear refusal to run without CUDA."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.tools import load_tool

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "tools" / "gpu_check.py"


def _module():  # type: ignore[no-untyped-def]
    return load_tool("gpu_check")


SERVED_FP32 = {
    "precision": "fp32", "model": "padir", "offered_rps": 1000, "achieved_rps": 998.0,
    "p50_ms": 5.0, "p99_ms": 40.0, "errors": {}, "capacity_rps": 1000,
}  # fmt: skip
SERVED_BF16 = {
    **SERVED_FP32, "precision": "bf16", "achieved_rps": 700.0, "p50_ms": 50.0, "p99_ms": None,
    "errors": {"504": 3}, "capacity_rps": None, "graph_captures": 12, "graph_capture_ms": 840.4,
    "client_late_ms_p99": 2.6,
}  # fmt: skip


def test_the_table_has_a_row_per_measurement_and_says_what_failed() -> None:
    gpu_check = _module()
    found = {
        "device": "NVIDIA H100 80GB HBM3",
        "torch": "2.11.0",
        "when": "2026-11-28 01:00 UTC",
        "seconds": 300.0,
        "sections": {
            "default": [
                {"system": "padir T=4 B=5", "precision": p, "batch": 8, "median_ms": ms}
                for p, ms in (("fp32", 4.25), ("bf16", 3.5))
            ],
            "graphs": "RuntimeError: capture failed",
            "service": [SERVED_FP32, SERVED_BF16],
            "ceiling": [
                {
                    "offered_rps": 2000,
                    "achieved_rps": 1990.4,
                    "p50_ms": 1.25,
                    "p99_ms": 30.4,
                    "errors": {},
                    "client_late_ms_p99": 4.4,
                },
                {
                    "offered_rps": 4000,
                    "achieved_rps": 2500.0,
                    "p50_ms": 800.0,
                    "p99_ms": None,
                    "errors": {"503": 7},
                    "client_late_ms_p99": None,
                },
            ],
            "training": [
                {
                    "config": "base-padir",
                    "rates": {"fp32": 52400.0, "bf16": 251000.0},
                    "mfu": {"fp32": 0.25, "bf16": None},
                },
            ],
            "compile": [
                {
                    "config": "base-padir compile=true",
                    "rates": {"fp32": 60000.0},
                    "mfu": {"fp32": 0.125},
                },
            ],
        },
    }
    lines = gpu_check.table(found).splitlines()
    assert lines[0].startswith("`make gpu-check` on NVIDIA H100 80GB HBM3, torch 2.11.0")
    assert "| default | padir T=4 B=5, batch 8: median ms | 4.2 | 3.5 |" in lines
    assert "| graphs | failed: RuntimeError: capture failed | | |" in lines
    served = (
        "| service | padir at 1000/s: achieved/s, p50 / p99 ms; graph captures; client late p99 |"
    )
    bf16 = "700, 50 / - (3 errors); 12 captures, 840 ms; client late 3 ms"
    assert f"{served} 998, 5 / 40 | {bf16} |" in lines
    assert "| service | padir: capacity (p99 < 100 ms, no errors) | 1000/s | none |" in lines
    echo = (
        "| ceiling | no model (echo), CPU only, at {}/s: achieved/s, p50 / p99 ms; "
        "client late p99 |"
    )
    assert f"{echo.format(2000)} 1990.4, 1.2 / 30; client late 4 ms |  |" in lines
    assert f"{echo.format(4000)} 2500, 800.0 / - (7 errors) |  |" in lines
    assert "| training | base-padir: target tokens/s | 52,400 (MFU 25.0%) | 251,000 |" in lines
    assert "| compile | base-padir compile=true: target tokens/s | 60,000 (MFU 12.5%) |  |" in lines


@pytest.mark.skipif(
    __import__("torch").cuda.is_available(), reason="a CUDA device is here: the script would run"
)
def test_without_cuda_it_refuses_with_a_message(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--data", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert "no CUDA device here" in done.stderr and "Traceback" not in done.stderr
