"""The one agreement rule every learner and certificate checker uses: does a box's answer
agree with a model's prediction?

>>> from verified_attn.arithmetic import get_arithmetic
>>> agree(get_arithmetic("exact"), 1, 1), agree(get_arithmetic("float"), 1.0, 1.0 + 1e-5)[0]
((True, 0.0), False)

The rule, per arithmetic (:func:`agree`):

- ``exact``: the answer equals the prediction (``==``);
- ``certified``: the answer's ball and the prediction's ball overlap (each contains its
  true value, so disjoint balls prove a difference);
- ``float``: ``|answer - prediction| <= rtol * max(|answer - beta|, floor)
  + BIAS_ULPS * eps * |beta|``: the gap relative to the answer itself, beta being the
  result's output bias (0 if none; it is common to both sides and would otherwise swallow
  the head's part of the answer) and ``floor = FLOOR * median |answer - beta|`` over the
  verification set (so answers near 0 are compared at the scale of the others); the last
  term is the rounding a float answer carries on a large bias, in ulps of the box's own
  arithmetic. ``rtol`` is the oracle's declared answer precision and ``unit_roundoff``
  its arithmetic's (``Oracle.from_callable(..., rtol=, unit_roundoff=)``; 1e-6 and
  2^-53 by default; the PyTorch and HuggingFace adapters declare 1e-4 and 2^-24 for
  float32 modules).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from verified_attn.arithmetic import Arithmetic
from verified_attn.errors import ModelClassMismatch, PrecisionExhausted

__all__ = [
    "BIAS_ULPS",
    "FLOOR",
    "RESOLUTION_UNITS",
    "agree",
    "agree_or_refuse",
    "bias_allowance",
    "float_floor",
    "require_bias_resolution",
    "tolerance",
]

#: The float rule's floor, as a fraction of the median answer size of the verification set.
FLOOR = 1e-3
#: Rounding allowed on the bias part of a float64 answer, in ulps of |beta|.
BIAS_ULPS = 1024
#: A float box resolves a head's part to rtol only if this many unit roundoffs of |beta|
#: (the rounding its answers carry near the bias) stay below rtol * max |v|.
RESOLUTION_UNITS = 8


def float_floor(answers: Sequence[float], bias: float = 0.0) -> float:
    """The float rule's floor for a verification set: FLOOR * median |answer - bias|."""
    if not len(answers):
        return 0.0
    sizes = np.abs(np.asarray(answers, dtype=np.float64) - float(bias))
    return float(FLOOR * np.median(sizes))


def agree(
    arith: Arithmetic,
    observed: Any,
    expected: Any,
    *,
    bias: float = 0.0,
    floor: float = 0.0,
) -> tuple[bool, float]:
    """Whether an answer agrees with a prediction under the rule, and the relative gap.

    The gap is 0 in exact and certified mode (agreement there is yes or no).

    >>> from verified_attn.arithmetic import get_arithmetic
    >>> agree(get_arithmetic("float"), 1.0, 1.0 + 1e-7)
    (True, 1.0000...e-07)
    >>> agree(get_arithmetic("float"), 1.0, 1.0 + 1e-5)[0]
    False
    """
    if arith.name != "float":
        return bool(arith.agree(observed, expected)), 0.0
    a, b = float(observed), float(expected)
    size = max(abs(a - float(bias)), floor, 1e-300)
    gap = abs(a - b)
    return gap <= tolerance(arith, a, bias=bias, floor=floor), gap / size


def tolerance(
    arith: Arithmetic, observed: float, *, bias: float = 0.0, floor: float = 0.0
) -> float:
    """The float rule's allowed |answer - prediction| for one answer (see the module doc).

    >>> from verified_attn.arithmetic import FloatArithmetic
    >>> tolerance(FloatArithmetic(1e-6), 2.0)
    2e-06
    """
    beta = float(bias)
    rtol = float(getattr(arith, "rtol", 1e-6))
    size = max(abs(float(observed) - beta), floor, 1e-300)
    return rtol * size + bias_allowance(arith, beta)


def bias_allowance(arith: Arithmetic, bias: float) -> float:
    """The float rule's allowance for rounding on the bias: BIAS_ULPS ulps of |beta|.

    An ulp is 2 unit roundoffs of the box's arithmetic (2^-24 for a float32 module).

    >>> from verified_attn.arithmetic import FloatArithmetic
    >>> bias_allowance(FloatArithmetic(1e-6), 1.0) == 2 * BIAS_ULPS * 2.0**-53
    True
    """
    unit = float(getattr(arith, "unit_roundoff", 2.0**-53))
    return BIAS_ULPS * 2 * unit * abs(float(bias))


def require_bias_resolution(arith: Arithmetic, beta: float, v_scale: float, what: str) -> None:
    """Refuse a float box whose output bias swamps the head's part of its answers.

    A float answer beta + h is rounded near |beta| (about ``unit_roundoff * |beta|``), and
    the head's part h is at most about ``max |v|``: where :data:`RESOLUTION_UNITS` unit
    roundoffs of |beta| exceed ``rtol * max |v|``, the answers cannot give h to rtol, so
    neither a decoding nor a verification at rtol is possible (the bias term of the rule
    would accept a model off by more than rtol). Raises
    :class:`~verified_attn.errors.PrecisionExhausted`; exact and certified: nothing.

    >>> from verified_attn.arithmetic import FloatArithmetic
    >>> require_bias_resolution(FloatArithmetic(), 1e7, 1.0, "learn_single_head")
    >>> require_bias_resolution(FloatArithmetic(), 1e8, 0.02, "learn_single_head")
    Traceback (most recent call last):
    ...
    verified_attn.errors.PrecisionExhausted: learn_single_head: the output bias |beta| = 1e+08 ...
    """
    if arith.name != "float":
        return
    unit = float(getattr(arith, "unit_roundoff", 2.0**-53))
    rounding = RESOLUTION_UNITS * unit * abs(float(beta))
    head = float(arith.rtol or 0.0) * abs(float(v_scale))
    if rounding > head:
        raise PrecisionExhausted(
            f"{what}: the output bias |beta| = {abs(float(beta)):.3g} swamps the head's part "
            f"of the answers (at most about max |v| = {abs(float(v_scale)):.3g}): their "
            f"rounding near beta, {RESOLUTION_UNITS} x unit roundoff {unit:.3g} x |beta| = "
            f"{rounding:.3g}, exceeds rtol {arith.rtol:g} x max |v| = {head:.3g}, so no "
            "result can be verified to rtol; declare the box's actual precision "
            "(Oracle.from_callable(..., rtol=)), or subtract the bias before asking"
        )


def agree_or_refuse(
    arith: Arithmetic, asked: tuple[Any, Any, Any], *, bias: float, floor: float, reason: str
) -> float:
    """The relative gap of ``asked`` = (query, observed, expected) if the two agree by the
    rule (:func:`agree`), else :class:`ModelClassMismatch`: ``reason`` and the gap."""
    X, observed, expected = asked
    ok, gap = agree(arith, observed, expected, bias=bias, floor=floor)
    if not ok:
        raise ModelClassMismatch(
            reason + (f" (relative gap {gap:.3e} > rtol {arith.rtol:g})" if gap else ""),
            query=X,
            observed=observed,
            expected=expected,
        )
    return gap
