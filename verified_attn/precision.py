"""Float figures in bits: ``bits = -log2(relative error)``, and the relative errors they are of.

>>> bits(2.0**-40)
40.0
>>> bits(0.0), bits(None)
(inf, None)
>>> round(bits(1e-15), 2)
49.83
>>> relative_parameter_error([([[1.0]], [2.0 + 2.0**-40])], [([[1.0]], [2.0])]) == 2.0**-41
True
>>> print(ErrorFigures(2.0**-48, 2.0**-50).text())  # doctest: +NORMALIZE_WHITESPACE
parameters 3.55e-15 (48.0 bits) relative to the largest entry (first-order estimate),
predictions 8.88e-16 (50.0 bits) (largest relative gap on the fresh sequences)

The one metric for parameters, everywhere a float figure is given (results, float
certificates, benchmarks): the largest entry error over the largest entry magnitude,
``max |got - truth| / max |truth|`` over every entry of the heads compared, after matching
the heads (canonical order, or the best order where a benchmark compares an arbitrary
one). For predictions: the largest relative gap of the agreement rule
(:mod:`verified_attn.verification`), or a benchmark's ``|prediction - answer| /
max(|answer|, 1)``. Its bits are ``-log2`` of the figure; the formats' limits are their
unit roundoffs, 53 bits for float64 (``2^-53``) and 24 for float32.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from verified_attn.errors import InvalidArgument
from verified_attn.serialize import dump_number

__all__ = [
    "ErrorFigures",
    "bits",
    "bits_text",
    "figures_record",
    "relative_parameter_error",
    "stated_relative_error",
]

#: The most heads :func:`relative_parameter_error` tries every order of (8! = 40320).
MAX_ORDERED_HEADS = 8


def bits(relative_error: float | None) -> float | None:
    """``-log2(relative_error)``: inf for 0, None for None (no figure).

    >>> bits(-1.0)
    Traceback (most recent call last):
    ...
    verified_attn.errors.InvalidArgument: relative_error must be a number >= 0, got -1.0
    """
    if relative_error is None:
        return None
    e = float(relative_error)
    if not e >= 0:  # NaN fails too
        raise InvalidArgument(f"relative_error must be a number >= 0, got {relative_error!r}")
    return math.inf if e == 0 else -math.inf if math.isinf(e) else -math.log2(e)


def bits_text(relative_error: float | None) -> str:
    """A figure and its bits for people: ``'3.55e-15 (48.0 bits)'``; ``'not stated'`` for None.

    >>> bits_text(2.0**-10), bits_text(None), bits_text(0.0)
    ('0.000977 (10.0 bits)', 'not stated', '0 (inf bits)')
    """
    b = bits(relative_error)
    if b is None:
        return "not stated"
    return f"{float(relative_error or 0.0):.3g} ({b:.1f} bits)"


def _flat(head: Sequence[Any]) -> np.ndarray:
    return np.concatenate([np.ravel(np.asarray(x, dtype=np.float64)) for x in head])


def relative_parameter_error(
    got: Sequence[Sequence[Any]], truth: Sequence[Sequence[Any]], *, ordered: bool = False
) -> float:
    """The parameter metric: the largest entry error over the largest true entry magnitude.

    ``got`` and ``truth`` are lists of heads, each a tuple of arrays (e.g. ``(W, v)``) of
    the same shapes; ``ordered`` compares head h with head h (canonical order), otherwise
    the best order of the heads (at most :data:`MAX_ORDERED_HEADS`).

    >>> relative_parameter_error([([1.0],), ([2.0],)], [([2.0],), ([1.0],)])
    0.0
    >>> relative_parameter_error([([1.0],), ([2.0],)], [([2.0],), ([1.0],)], ordered=True)
    0.5
    """
    if len(got) != len(truth):
        raise InvalidArgument(f"got has {len(got)} heads, truth {len(truth)}")
    if not truth:
        return 0.0
    g = [_flat(h) for h in got]
    t = [_flat(h) for h in truth]
    if any(a.shape != b.shape for a, b in itertools.product(g, t)):
        raise InvalidArgument("the heads of got and truth must have the same entries")
    ref = max(float(np.abs(x).max(initial=0.0)) for x in t)
    if ref == 0:
        raise InvalidArgument("truth has no nonzero entry: no relative error")
    if ordered:
        orders: Any = [tuple(range(len(t)))]
    elif len(t) > MAX_ORDERED_HEADS:
        raise InvalidArgument(
            f"{len(t)} heads: more than {MAX_ORDERED_HEADS} to try every order of; "
            "compare them in canonical order (ordered=True)"
        )
    else:
        orders = itertools.permutations(range(len(t)))
    cost = np.array([[float(np.abs(a - b).max(initial=0.0)) for b in t] for a in g])
    best = min(max(cost[p[h], h] for h in range(len(t))) for p in orders)
    return float(best) / ref


def stated_relative_error(estimate: float, heads: Sequence[Sequence[Any]], beta: float = 0.0) -> float:
    """A float result's parameter estimate (relative to ``max(1, |beta|, largest entry)``,
    as the learners state it) as the metric's figure: relative to the largest entry.

    >>> stated_relative_error(1e-12, [([[0.5]], [0.25])])
    2e-12
    >>> stated_relative_error(1e-12, [([[4.0]], [0.25])])
    1e-12
    """
    largest = max((float(np.abs(_flat(h)).max(initial=0.0)) for h in heads), default=0.0)
    if largest == 0:
        return math.inf if estimate > 0 else 0.0
    return float(estimate) * max(1.0, abs(float(beta)), largest) / largest


@dataclass(frozen=True)
class ErrorFigures:
    """A float result's stated figures: ``parameter_error`` (the metric above; None where
    the result states none) and ``prediction_error`` (the verification's largest relative
    gap; None where not verified in float), each with its bits."""

    parameter_error: float | None
    prediction_error: float | None

    @property
    def parameter_bits(self) -> float | None:
        return bits(self.parameter_error)

    @property
    def prediction_bits(self) -> float | None:
        return bits(self.prediction_error)

    def text(self) -> str:
        """One line for summaries: what each figure is, and its bits."""
        param = bits_text(self.parameter_error)
        if self.parameter_error is not None:
            param += " relative to the largest entry (first-order estimate)"
        pred = bits_text(self.prediction_error)
        if self.prediction_error is not None:
            pred += " (largest relative gap on the fresh sequences)"
        return f"parameters {param}, predictions {pred}"

    def to_dict(self) -> dict[str, float | None]:
        """``{"parameter_error", "parameter_bits", "prediction_error", "prediction_bits"}``,
        JSON-ready: the bits of an error of 0 (infinite) are stored as None, beside the 0.

        >>> ErrorFigures(0.25, 0.0).to_dict()
        {'parameter_error': 0.25, 'parameter_bits': 2.0, 'prediction_error': 0.0, 'prediction_bits': None}
        """

        def finite(b: float | None) -> float | None:
            return b if b is not None and math.isfinite(b) else None

        return {
            "parameter_error": self.parameter_error,
            "parameter_bits": finite(self.parameter_bits),
            "prediction_error": self.prediction_error,
            "prediction_bits": finite(self.prediction_bits),
        }


def figures_record(figures: ErrorFigures) -> dict[str, Any]:
    """A certificate's ``result.error_figures``: :meth:`ErrorFigures.to_dict` with every
    number stored exactly (``{"float": hex}``).

    >>> figures_record(ErrorFigures(0.25, None))["parameter_bits"]
    {'float': '0x1.0000000000000p+1'}
    """
    return {k: None if v is None else dump_number(float(v)) for k, v in figures.to_dict().items()}
