"""Where and with what a number was made: versions, CPU, threads, device and git commit.

Every result that reports a measurement (benchmarks, analyses, distillation, REPORT.md) takes
its provenance from here, so that they all say the same thing the same way. Importing this
module loads neither torch nor numpy; the functions that report on them import them when called.
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import subprocess
from pathlib import Path

#: gmlm's own version (pyproject.toml's), also `gmlm.__version__`: declared here, below every
#: package that reports it, rather than in `gmlm/__init__.py`, which imports the translator.
VERSION = "0.1.0"

#: The packages whose versions REPORT.md lists after python and gmlm.
REPORT_PACKAGES = ("torch", "numpy", "sacrebleu", "sentencepiece", "safetensors", "matplotlib")


def python_version() -> str:
    return platform.python_version()


def gmlm_version() -> str:
    return VERSION


def torch_version() -> str:
    import torch

    return str(torch.__version__)


def torch_threads() -> int:
    """The threads torch uses now (`torch.get_num_threads()`)."""
    import torch

    return int(torch.get_num_threads())


def package_version(name: str) -> str:
    """The installed version of the distribution `name`, or "not installed"."""
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def git_commit() -> str | None:
    """The short commit of the checkout gmlm runs from, or None outside a git checkout."""
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
            cwd=Path(__file__).parent,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo (else what `platform` knows)."""
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def logical_cpus() -> int | None:
    return os.cpu_count()


def machine() -> str:
    return platform.machine()


def host() -> str:
    return platform.node()


def software(packages: tuple[str, ...] = REPORT_PACKAGES) -> dict[str, str]:
    """Name -> version of python, gmlm, `packages` ("not installed" where absent) and, in a
    git checkout, "gmlm commit"."""
    versions = {"python": python_version()}
    for name in ("gmlm", *packages):
        versions[name] = package_version(name)
    commit = git_commit()
    if commit is not None:
        versions["gmlm commit"] = commit
    return versions


def hardware() -> str:
    """One line for people: the CPU model, its logical CPUs and the GPU, if torch sees one."""
    import torch

    text = f"{cpu_model()}, {logical_cpus()} logical CPUs"
    if torch.cuda.is_available():
        text += f"; GPU {torch.cuda.get_device_name(0)}"
    return text
