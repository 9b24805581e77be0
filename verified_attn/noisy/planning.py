"""Planning a noisy run before any query: counts, probe scales, repeats and tolerances.

>>> from verified_attn.noisy.planning import query_bound, probe_scale, repeats_for
>>> query_bound(4), probe_scale(3), repeats_for(0.1, 0.01, 30, 1e-3)
(20, Fraction(1, 4), 2201)

Nothing here asks an oracle: these are the formulas the learners of
:mod:`verified_attn.noisy.learner` are held to (the query count), the rule that fixes their
probes (the scale b), and the arithmetic of stochastic noise (how many repeats make every
average fall within a tolerance, and which tolerance reaches a target error). The derived
error bounds themselves are in :mod:`verified_attn.noisy.symbolic`.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

from verified_attn.arithmetic import to_fraction
from verified_attn.design import largest_dyadic_scale
from verified_attn.noisy import symbolic
from verified_attn.validation import check_choice, check_int, check_real

__all__ = [
    "DESIGNS",
    "A",
    "a_priori_bounds",
    "probe_scale",
    "query_bound",
    "repeats_for",
    "tolerance_for_error",
]

#: The probe designs: the paper's (u_k = e_k) and ours (u_k = e_k or e_k + e_p).
DESIGNS = ("paper", "norm")
#: The probes' fixed token weight a in [b u_k + a e_j; a e_j].
A = Fraction(1, 2)


def query_bound(d: int) -> int:
    """d^2 + d learning queries (per repetition).

    >>> query_bound(4)
    20
    """
    d = check_int(d, "d", low=1)
    return d * d + d


def probe_scale(w_bound: Any, u_norm_sq: Any = 1) -> Fraction:
    """The largest power of two b with b^2 ||u||_2^2 w_bound^2 <= 1 (exact).

    Then |a b u_k^T W e_j| <= a b ||u_k||_2 ||W||_F <= 1/2: every probe's score gap stays
    in the region where logit is Lipschitz with the constant of Lemma A.1.

    >>> probe_scale(3), probe_scale(1), probe_scale(Fraction(1, 4)), probe_scale(1, 2)
    (Fraction(1, 4), Fraction(1, 1), Fraction(4, 1), Fraction(1, 2))
    """
    w = to_fraction(check_real(w_bound, "w_bound", low=0, low_open=True), name="w_bound")
    n = to_fraction(check_real(u_norm_sq, "u_norm_sq", low=0, low_open=True), name="u_norm_sq")
    return largest_dyadic_scale(n * w * w)


def a_priori_bounds(
    tolerance: float, margin: float, w_bound: float, d: int, *, design: str = "paper"
) -> dict[str, float]:
    """The derived a-priori bounds at the learner's probe scale (see the symbolic module).

    >>> round(a_priori_bounds(1e-3, 1, 1, 2)["W_entry"], 5)
    0.01808
    """
    design = check_choice(design, "design", DESIGNS)
    b = float(probe_scale(w_bound, 1 if design == "paper" else 2))
    return symbolic.a_priori_bounds(
        float(tolerance), float(margin), float(w_bound), d, probe_scale=b, design=design
    )


def repeats_for(
    noise_scale: float, tolerance: float, answers: int, failure_probability: float
) -> int:
    """Repeats n so that all ``answers`` averages are within ``tolerance`` w.p. >= 1 - delta.

    Gaussian tail of the mean of n answers: P(|mean - f| > t) <= 2 exp(-n t^2 / (2 sigma^2));
    a union bound over the answers gives n = ceil(2 sigma^2 ln(2 answers / delta) / t^2).

    >>> repeats_for(0.1, 0.01, 30, 1e-3)
    2201
    """
    check_real(noise_scale, "noise_scale", low=0, low_open=True)
    check_real(tolerance, "tolerance", low=0, low_open=True)
    answers = check_int(answers, "answers", low=1)
    check_real(
        failure_probability, "failure_probability", low=0, high=1, low_open=True, high_open=True
    )
    n = (
        2
        * float(noise_scale) ** 2
        * math.log(2 * answers / float(failure_probability))
        / float(tolerance) ** 2
    )
    return max(1, math.ceil(n))


def tolerance_for_error(
    target_error: float, w_bound: float, margin: float, d: int, *, design: str = "paper"
) -> float:
    """The largest tau whose a-priori per-entry bounds (W and v) are <= ``target_error``.

    >>> t = tolerance_for_error(0.05, 1, 1, 3)
    >>> a_priori_bounds(t, 1, 1, 3)["W_entry"] <= 0.05 + 1e-12
    True
    """
    check_real(target_error, "target_error", low=0, low_open=True)
    check_real(w_bound, "w_bound", low=0, low_open=True)
    check_real(margin, "margin", low=0, low_open=True)
    d = check_int(d, "d", low=1)
    design = check_choice(design, "design", DESIGNS)
    lo = 0.0
    hi = float(margin) if design == "paper" else float(margin) / math.sqrt(d)
    for _ in range(60):  # the bound is increasing in tau: bisection
        mid = (lo + hi) / 2
        ok = a_priori_bounds(mid, float(margin), float(w_bound), d, design=design)
        if ok["W_entry"] <= target_error and mid <= target_error:
            lo = mid
        else:
            hi = mid
    return lo
