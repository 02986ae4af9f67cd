"""`gmlm reproduce`: the paper end to end, stage by stage, into one run folder with REPORT.md.

from gmlm.reproduce import load_reproduce_config, run_reproduce

run_reproduce(load_reproduce_config("smoke"), "runs/smoke")
"""

from gmlm.reproduce.config import STAGES, ReproduceConfig, load_reproduce_config
from gmlm.reproduce.pipeline import run_reproduce

__all__ = ["STAGES", "ReproduceConfig", "load_reproduce_config", "run_reproduce"]
