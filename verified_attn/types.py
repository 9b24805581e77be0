"""Named types for the public signatures.

What the learners and oracles exchange depends on the arithmetic mode, so several of these
are unions or, where the union would be the whole of SymPy (which ships no type
information), a named ``Any``: the name says what is meant, the docs say which form each
mode uses (docs/arithmetic.md).

>>> from verified_attn.types import Queries, SequenceLike
>>> import numpy as np
>>> X: SequenceLike = np.zeros((2, 3))
>>> batch: Queries = [X, [[1, 0, 0]]]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeAlias

import numpy as np

__all__ = ["Answer", "Matrix", "Queries", "SequenceLike", "Vector"]

#: One query sequence X (N tokens of dimension d, one row each): a nested list of numbers
#: (ints, Fractions, floats), a numpy array, a python-flint ``fmpq_mat`` or a SymPy Matrix.
SequenceLike: TypeAlias = Any

#: Several query sequences: a list of :data:`SequenceLike` or one (k, N, d) numpy array.
Queries: TypeAlias = Sequence[SequenceLike] | np.ndarray

#: One answer of an oracle or a model: a float (float mode), an ``fmpq``/Fraction (exact
#: mode) or a python-flint ``arb`` ball containing the true value (certified mode).
Answer: TypeAlias = Any

#: A matrix parameter (W, or a head's W_h): a SymPy Matrix in exact and certified results,
#: a numpy array in float results.
Matrix: TypeAlias = Any

#: A vector parameter (v, c, w_o, ...): a SymPy column Matrix or a numpy array, as Matrix.
Vector: TypeAlias = Any
