"""Inference copies of checkpoints in other runtimes' formats.

    from gmlm.export.ctranslate2 import export_ctranslate2  # conversion (torch)
    from gmlm.export.ctranslate2_runtime import Ct2Translator  # decoding (no torch)

Command line: `gmlm export --format ctranslate2` (the default format, a compact gmlm
checkpoint, is :func:`gmlm.checkpoint.export.export_checkpoint`).
"""
