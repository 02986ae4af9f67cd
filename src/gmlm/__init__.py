"""gmlm: Generative Masked Language Models (PaDIR translation and the exact theory toolkit)."""

__version__ = "0.1.0"
