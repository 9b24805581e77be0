"""Float query batches as a box sees them, and its answers checked.

A learner's queries go to a float box in vectorised chunks whose size bounds memory; the
copies the oracle makes are built in reused buffers (:class:`Scratch`); every answer is
checked to be one finite real number. A float64 query with dyadic entries (the probe
designs) becomes an exact rational matrix in one pass.

>>> chunk_size((257, 64)), chunk_size((2, 3))
(255, 16384)
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from typing import Any

import flint
import numpy as np

from verified_attn.errors import OracleError

__all__ = [
    "Scratch",
    "batched",
    "check_answer",
    "chunk_size",
    "dyadic_matrix",
    "kept_copy",
    "sequence_length",
]

_FLOAT_CHUNK = 1 << 14  # sequences per vectorised batch: bounds memory at large d
# Query entries (N x d numbers) per vectorised batch: a box's own temporaries scale with
# them (nn.MultiheadAttention's key/value projections are 2x the batch), so a batch of
# 2^14 sequences of 257 tokens at d = 64 (2.1 GB, and 4.3 GB of projections) is split.
# The peak memory this bounds is measured by benchmarks/multi_head_float.py (peak_rss_mib).
_FLOAT_CHUNK_ENTRIES = 1 << 22


def chunk_size(shape: tuple[int, ...]) -> int:
    """Sequences per vectorised batch of (N, d) queries: at most :data:`_FLOAT_CHUNK`, and
    at most :data:`_FLOAT_CHUNK_ENTRIES` entries (at least one sequence).

    >>> chunk_size((257, 64)), chunk_size((2, 3))
    (255, 16384)
    """
    return max(1, min(_FLOAT_CHUNK, _FLOAT_CHUNK_ENTRIES // max(1, shape[0] * shape[1])))



class Scratch:
    """A float64 buffer handed out again and again, but only while nobody else holds it.

    >>> scratch = Scratch()
    >>> a = scratch.take((2, 3)); a[:] = 1.0
    >>> b = scratch.take((2, 3))                   # a is still held: a fresh buffer
    >>> b is a or np.shares_memory(a, b)
    False
    >>> del a, b
    >>> c = scratch.take((3, 2)); d = scratch.take((1, 2))
    >>> np.shares_memory(c, d)                      # c still held: d is fresh
    False

    Query batches at large d are megabytes each, and fresh memory costs far more than
    reused memory (the kernel must zero and map every new page), so the learners' batches
    and the oracle's defensive copies are built in a reused buffer. Reuse is safe only when
    no one kept the previous array: a box or a transcript that keeps a batch (or any view
    of it; NumPy views hold a reference to the buffer that owns the memory) raises the
    buffer's reference count, and then a fresh buffer is made instead.
    """

    def __init__(self) -> None:
        self._buf: np.ndarray | None = None

    def take(self, shape: tuple[int, ...]) -> np.ndarray:
        """A writable float64 array of this shape (contents undefined) no one else holds."""
        n = math.prod(shape)
        buf = self._buf
        # References: self._buf, the local ``buf`` and getrefcount's argument.
        if buf is None or buf.size < n or sys.getrefcount(buf) > 3:
            buf = self._buf = np.empty(max(n, 1))
        return buf[:n].reshape(shape)



#: Power-of-two denominators tried by :func:`dyadic_matrix` (probe scales are 16^-n).
_DYADIC_SHIFTS = (0, 4, 8, 16, 24, 32, 48)


def dyadic_matrix(X: Any, d: int) -> flint.fmpq_mat | None:
    """A valid float64 (N, d) query as an exact flint matrix in one pass, or None.

    Exact: if ``X * 2^k`` is an integer array below 2^53 for one of a few k, the matrix is
    those integers over 2^k. Anything else (other shapes, non-finite entries, other
    denominators) returns None and goes through the general, entry-by-entry conversion,
    which also raises the errors.
    """
    if not (isinstance(X, np.ndarray) and X.dtype == np.float64 and X.ndim == 2):
        return None
    if X.shape[0] < 1 or X.shape[1] != d or not np.all(np.isfinite(X)):
        return None
    for k in _DYADIC_SHIFTS:
        with np.errstate(over="ignore"):
            Y = np.ldexp(X, k)  # exact (or inf, refused next): a power-of-two scaling
        if np.all(np.abs(Y) < 2.0**53) and np.all(Y == np.floor(Y)):
            ints = flint.fmpz_mat(X.shape[0], X.shape[1], Y.astype(np.int64).ravel().tolist())
            out = flint.fmpq_mat(ints)
            return out if k == 0 else out * flint.fmpq(1, 2**k)
    return None


def kept_copy(Xs: np.ndarray) -> np.ndarray:
    """A copy of a float64 batch for the transcript: float32 if that is exact, else float64.

    Probe batches are dyadic with small numerators, so float32 holds them exactly in half
    the memory (fresh memory is what a large recorded batch costs); the comparison promotes
    float32 back to float64, so equality is exactness. The transcript's entries are float64.
    """
    with np.errstate(over="ignore"):
        small = Xs.astype(np.float32)
    return small if np.array_equal(small, Xs) else Xs.copy()


def sequence_length(X: Any) -> int:
    return X.nrows() if isinstance(X, flint.fmpq_mat) else int(X.shape[0])


def batched(converted: list[np.ndarray], fn: Callable[[np.ndarray], np.ndarray]) -> list[float]:
    """Evaluate float queries in vectorised chunks of equal length, keeping order."""
    out: list[Any] = [None] * len(converted)
    bysequence_length: dict[int, list[int]] = {}
    for i, X in enumerate(converted):
        bysequence_length.setdefault(X.shape[0], []).append(i)
    for idx in bysequence_length.values():
        step = chunk_size(converted[idx[0]].shape)
        for start in range(0, len(idx), step):
            chunk = idx[start : start + step]
            values = fn(np.stack([converted[i] for i in chunk]))
            for i, val in zip(chunk, values, strict=True):
                out[i] = val
    return out


def check_answer(raw: Any, X: np.ndarray) -> float:
    """One finite real number, or an OracleError that says what came back instead."""
    if isinstance(raw, bool | np.bool_):
        raise OracleError(f"the black box returned a bool ({raw!r}), not a real number")
    if hasattr(raw, "detach"):  # a torch tensor: take it off the graph first
        raw = raw.detach().cpu().numpy()
    try:
        arr = np.asarray(raw)
    except Exception as exc:
        raise OracleError(f"the black box returned {type(raw).__name__}, not a number") from exc
    if arr.ndim != 0:
        raise OracleError(
            f"the black box must return one real number; got an array of shape {arr.shape}"
        )
    if arr.dtype.kind not in "fiu":
        raise OracleError(
            f"the black box must return a real number; got {type(raw).__name__} {raw!r}"
        )
    val = float(arr)
    if not math.isfinite(val):
        raise OracleError(
            f"the black box returned {val} on a query of length {X.shape[0]}: not finite"
        )
    return val
