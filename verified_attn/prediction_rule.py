"""The rule a float learner's first-order prediction bound must meet, shared by the
single-head and multi-head learners.

>>> import numpy as np
>>> from verified_attn.arithmetic import FloatArithmetic
>>> preds, bounds = np.array([1.0, 2.0]), np.array([[4e-7, 1e-7], [2e-7, 5e-8]])
>>> allowed, ratios, worst_case, worst = rule_ratios(FloatArithmetic(1e-6), preds, 0.0, bounds)
>>> [round(float(r), 3) for r in ratios], round(worst_case, 3), worst
([0.2, 0.05], 0.4, 0)

A bound is ``(worst case, standard deviation)`` of the prediction error at each of
:data:`PREDICTION_SEQUENCES` sequences the learner did not ask. A result is returned only if
:data:`PREDICTION_SIGMAS` standard deviations fit within what the agreement rule
(:func:`~verified_attn.agreement.tolerance`, the floor of the predictions themselves)
allows at every one of them.
"""

from __future__ import annotations

import numpy as np

from verified_attn.arithmetic import Arithmetic
from verified_attn.verification import float_floor, tolerance

__all__ = ["PREDICTION_SEQUENCES", "PREDICTION_SIGMAS", "rule_ratios"]

#: Sequences the first-order prediction bound is evaluated on (the verification's fresh
#: sequences first, then more from the same generator; none is asked).
PREDICTION_SEQUENCES = 64
#: A result is returned only if this many standard deviations of its prediction error fit
#: within what the agreement rule allows, at every one of those sequences.
PREDICTION_SIGMAS = 2.0


def rule_ratios(
    arith: Arithmetic, preds: np.ndarray, beta: float, bounds: np.ndarray
) -> tuple[np.ndarray, np.ndarray, float, int]:
    """``(allowed, ratios, worst case, worst)``: the rule's allowance at each prediction,
    :data:`PREDICTION_SIGMAS` standard deviations over it, the largest worst case over it,
    and the sequence with the largest ratio (a NaN ratio counts as the largest)."""
    floor = float_floor(list(preds), beta)
    allowed = np.array([tolerance(arith, y, bias=beta, floor=floor) for y in preds])
    with np.errstate(invalid="ignore", divide="ignore"):
        ratios = PREDICTION_SIGMAS * bounds[:, 1] / allowed
        worst_case = float(np.max(bounds[:, 0] / allowed))
    worst = int(np.argmax(np.where(np.isnan(ratios), np.inf, ratios)))
    return allowed, ratios, worst_case, worst
