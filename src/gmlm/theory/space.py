"""The finite state space Omega^N, enumerated, and the block views every exact computation uses.

States are numbered 0..S-1 with S = q^N in C order: variable 0 is the most significant digit,
so a vector over states reshapes to an array of shape (q,)*N with variable i on axis i.
A *block* of a mask K is the set of q^|K| states that agree outside K; most exact computations
(conditionals p(x_K | x_-K), their moments, block-dynamics transitions) are reductions over
blocks, done here by moving the axes of K to the end and reshaping to (S / q^|K|, q^|K|).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from gmlm.errors import GmlmError
from gmlm.theory.settings import MAX_VARS

#: Exact enumeration holds vectors (and for some quantities matrices) over all q^N states.
#: 2^24 states keep a float64 vector at 128 MiB; the matrix-free 1-Gibbs operator reaches this far.
MAX_STATES = 1 << MAX_VARS
#: Dense S x S matrices (transition matrices, the independent parallel sampler) stop here:
#: 2^13 states is a 512 MiB float64 matrix.
MAX_DENSE_STATES = 1 << 13


@dataclass(frozen=True)
class StateSpace:
    """Omega^N with |Omega| = q. For Ising models q = 2 and index 0/1 means spin -1/+1."""

    n_vars: int
    q: int = 2

    def __post_init__(self) -> None:
        if self.n_vars < 1:
            raise GmlmError(f"n_vars must be >= 1, got {self.n_vars}")
        if self.q < 2:
            raise GmlmError(f"q (alphabet size) must be >= 2, got {self.q}")
        if self.q**self.n_vars > MAX_STATES:
            raise GmlmError(
                f"N={self.n_vars} with q={self.q} has {self.q**self.n_vars:,} states; exact "
                f"enumeration is limited to {MAX_STATES:,} states (N <= "
                f"{max_vars(self.q)} for q={self.q}) because every exact quantity holds at least "
                "one float64 vector over all states"
            )

    @property
    def size(self) -> int:
        return int(self.q**self.n_vars)

    @property
    def shape(self) -> tuple[int, ...]:
        return (self.q,) * self.n_vars

    @cached_property
    def strides(self) -> np.ndarray:
        """(N,) multiplier of each variable's digit in the flat state index."""
        return np.array([self.q ** (self.n_vars - 1 - i) for i in range(self.n_vars)], np.int64)

    @cached_property
    def states(self) -> np.ndarray:
        """(S, N) int8 digits 0..q-1 of every state, in index order."""
        idx = np.arange(self.size, dtype=np.int64)
        return ((idx[:, None] // self.strides[None, :]) % self.q).astype(np.int8)

    @cached_property
    def spins(self) -> np.ndarray:
        """(S, N) float64 states as Ising spins -1/+1 (q = 2 only)."""
        if self.q != 2:
            raise GmlmError("spins are defined for q = 2 only")
        return 2.0 * self.states - 1.0

    def index(self, digits: np.ndarray) -> np.ndarray:
        """(..., N) digits -> (...,) flat state indices."""
        return np.asarray(digits, dtype=np.int64) @ self.strides

    def _perm(self, mask: tuple[int, ...]) -> list[int]:
        rest = [i for i in range(self.n_vars) if i not in mask]
        return rest + list(mask)

    def to_blocks(self, values: np.ndarray, mask: tuple[int, ...]) -> np.ndarray:
        """(S, *extra) -> (S / q^|K|, q^|K|, *extra): rows are the blocks of `mask`."""
        extra = values.shape[1:]
        arr = values.reshape(self.shape + extra)
        perm = self._perm(mask) + list(range(self.n_vars, self.n_vars + len(extra)))
        block = self.q ** len(mask)
        return arr.transpose(perm).reshape((self.size // block, block, *extra))

    def from_blocks(self, blocks: np.ndarray, mask: tuple[int, ...]) -> np.ndarray:
        """Inverse of :meth:`to_blocks`: (S / q^|K|, q^|K|, *extra) -> (S, *extra)."""
        extra = blocks.shape[2:]
        perm = self._perm(mask)
        arr = blocks.reshape(tuple(self.q for _ in perm) + extra)
        inverse = list(np.argsort(perm)) + list(range(self.n_vars, self.n_vars + len(extra)))
        return np.ascontiguousarray(arr.transpose(inverse)).reshape((self.size, *extra))


def check_mask(n_vars: int, mask: Sequence[int]) -> tuple[int, ...]:
    """Validate a mask (a non-empty set of distinct variables) and return it sorted."""
    k = tuple(sorted(int(i) for i in mask))
    if not k or len(set(k)) != len(k) or k[0] < 0 or k[-1] >= n_vars:
        raise GmlmError(
            f"mask {tuple(mask)} must be a non-empty set of distinct variables in 0..{n_vars - 1}"
        )
    return k


def max_vars(q: int) -> int:
    n = 0
    while q ** (n + 1) <= MAX_STATES:
        n += 1
    return n


def block_log_softmax(log_w: np.ndarray) -> np.ndarray:
    """Row-wise log-normalisation of (B, b) log-weights; rows of all -inf stay -inf (no NaN)."""
    top = np.max(log_w, axis=1, keepdims=True)
    safe_top = np.where(np.isfinite(top), top, 0.0)
    with np.errstate(divide="ignore"):
        log_z = np.log(np.sum(np.exp(log_w - safe_top), axis=1, keepdims=True)) + safe_top
    out = log_w - np.where(np.isfinite(log_z), log_z, 0.0)
    return np.where(np.isfinite(log_z), out, -np.inf)
