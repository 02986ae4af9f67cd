"""Exact, checkable computations behind the theory of generative masked language models.

Everything is computed by enumerating Omega^N (see :mod:`gmlm.theory.space` for the limits):
distributions and Ising models, pseudolikelihood estimators and their exact asymptotic
covariances, block-dynamics Markov chains and their Poincare constants, vectorised samplers,
and the paper's Figures 1-3.
"""
