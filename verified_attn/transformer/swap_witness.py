"""A witness that a float box is no multi-head one-layer Transformer: the swap test.

>>> import numpy as np
>>> import verified_attn as va
>>> skip = lambda X: float(np.asarray(X)[-1] @ [1.0, -2.0])   # a residual stream alone
>>> box = va.Oracle.from_callable(skip, d=2, model_class="one-layer-transformer-multi-head")
>>> c = np.array([0.5, 1.0])
>>> exc = swap_probe(box, c, 2.0**-4, at_center=skip(c[None]), seed=0, phase="swap")
>>> exc.query.shape, box.queries_by_phase["swap"]
((4, 2, 2), 4)
>>> check_swap_witness(skip, exc.query, exc.observed, 2.0**-53)[:55]
'the odd part of the swap is 0.267 at s and 0.134 at s/2'
>>> from verified_attn.ffn_heads import MultiHeadTransformer
>>> T = MultiHeadTransformer([([[2, 0], [0, 1]], [[1, 0], [0, 1]], [1, 0])], [[1], [1]], [1])
>>> swap_probe(va.Oracle(T, "float"), c, 2.0**-4, at_center=T.evaluate(c[None]), seed=0) is None
True

Every model of the class, T(X) = w_o^T ReLU(A^T sum_h V_h^T X^T alpha_h(X) + a) + b,
answers the two-token sequences ``X(s) = [c - s e, c + s e]`` and their swaps
``X(-s) = [c + s e, c - s e]`` alike to first order in s: at s = 0 both tokens are c, every
head gives them equal scores, and head h's output ``V_h^T (c + s e (1 - 2 alpha_h))`` has
derivative ``V_h^T e (1 - 2 * 1/2) = 0``. So the odd part ``O(s) = T(X(s)) - T(X(-s))`` is
O(s^3) wherever T is smooth at the single token c (inside a cell of g): halving s divides
it by about 8. A residual connection into the FFN adds ``R x_N`` to the FFN's input, which
moves with the last token: its odd part is ``2 s G^T R e + O(s^3)`` (G the FFN's gradient),
and halving s halves it.

:func:`swap_probe` asks the four sequences at s and s/2 (one random unit direction e from
the seed) and returns a :class:`~verified_attn.errors.ModelClassMismatch` when both odd
parts stand above :data:`FLOOR` times the box's rounding and their ratio is that of a
linear term (within :data:`RATIO` of 2; a model of the class gives about 8, or parts in
the rounding). Its ``query`` holds the four sequences, ``observed`` the box's answers,
``expected`` the answer every one of them has to first order in the class (the box's
T([c])). :func:`check_swap_witness` re-checks such a witness against a box on its own.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from verified_attn.errors import CertificateError, ModelClassMismatch
from verified_attn.oracle import Oracle

__all__ = ["FLOOR", "RATIO", "check_swap_witness", "swap_probe"]

#: An odd part counts only above this many unit roundoffs times max(1, |answer|) (four
#: rounded answers, and a box's own evaluation adds more than one rounding).
FLOOR = 2.0**12
#: The witness's ratio O(s) / O(s/2) must be within this of 2 (a class model's is near 8).
RATIO = 0.5


def _sequences(center: np.ndarray, e: np.ndarray, s: float) -> np.ndarray:
    """X(s), X(-s), X(s/2), X(-s/2), each ``[c - r e, c + r e]`` for r = s, -s, s/2, -s/2."""
    return np.stack([np.stack([center - r * e, center + r * e]) for r in (s, -s, s / 2, -s / 2)])


def _verdict(answers: np.ndarray, unit: float) -> str | None:
    """Why the four answers witness a first-order odd part (None if they do not)."""
    big, small = float(answers[0] - answers[1]), float(answers[2] - answers[3])
    floor = FLOOR * unit * max(1.0, float(np.abs(answers).max()))
    if min(abs(big), abs(small)) <= floor or abs(big / small - 2.0) > RATIO:
        return None
    return (
        f"the odd part of the swap is {big:.3g} at s and {small:.3g} at s/2 (ratio "
        f"{big / small:.3g}, a linear term's 2; every multi-head one-layer Transformer has "
        f"an odd part O(s^3), ratio about 8), both above {FLOOR:g} x the rounding ({floor:.3g})"
    )


def swap_probe(
    oracle: Oracle,
    center: np.ndarray,
    s: float,
    *,
    at_center: float,
    seed: int,
    phase: str = "swap",
) -> ModelClassMismatch | None:
    """Ask the four swap sequences around ``center`` at scales s, s/2 (4 queries, phase
    ``phase``); a ModelClassMismatch witness if their odd parts are first order, else None.
    ``at_center`` is the box's answer T([c]) (already asked), the witness's ``expected``."""
    rng = np.random.default_rng(seed)
    e = rng.normal(size=oracle.d)
    e /= float(np.linalg.norm(e))
    X = _sequences(np.asarray(center, dtype=np.float64), e, s)
    with oracle.phase(phase):
        answers = np.asarray(oracle.query_many(X), dtype=np.float64)
    unit = float(getattr(oracle.arithmetic, "unit_roundoff", 2.0**-53))
    why = _verdict(answers, unit)
    if why is None:
        return None
    return ModelClassMismatch(
        f"not a multi-head one-layer Transformer (a residual connection?): "
        f"{why}; the sequences [c - s e, c + s e] and their swaps around c = "
        f"{np.asarray(center).tolist()}, s = {s:g}",
        query=X,
        observed=answers,
        expected=np.full(4, float(at_center)),
    )


def check_swap_witness(
    box: Callable[[np.ndarray], Any], query: Any, observed: Any, unit: float
) -> str:
    """Re-check a :func:`swap_probe` witness against ``box`` (a function of one sequence):
    the four sequences are X(s), X(-s), X(s/2), X(-s/2) of one centre and direction, the
    box answers them ``observed`` exactly, and the odd parts are first order. Returns the
    verdict; raises CertificateError naming the first check that fails."""
    X = np.asarray(query, dtype=np.float64)
    answers = np.asarray(observed, dtype=np.float64)
    if X.ndim != 3 or X.shape[:2] != (4, 2) or answers.shape != (4,):
        raise CertificateError("a swap witness is four two-token sequences and four answers")
    center, step = (X[0, 0] + X[0, 1]) / 2, (X[0, 1] - X[0, 0]) / 2
    want = _sequences(center, step, 1.0)
    if not np.allclose(X, want, rtol=0.0, atol=1e-12 * (1 + float(np.abs(X).max()))):
        raise CertificateError("the sequences are not X(s), X(-s), X(s/2), X(-s/2) of one centre")
    asked = np.array([float(box(x)) for x in X])
    if not np.array_equal(asked, answers):
        raise CertificateError(f"the box answers {asked.tolist()}, not {answers.tolist()}")
    why = _verdict(answers, unit)
    if why is None:
        raise CertificateError("the odd parts are not first order above the rounding")
    return why
