"""Evaluation: SacreBLEU / chrF with signatures, the stutter metric, latency and attention."""
