"""Inexact oracles: bounded-tolerance adversaries, stochastic noise, label-only answers.

>>> import verified_attn as va
>>> from verified_attn.oracle_wrappers import NoisyOracle
>>> inner = va.Oracle(va.SingleHeadAttention([[1]], [2]), "certified")
>>> noisy = NoisyOracle(inner, tolerance=0.01, adversary="uniform", seed=0)
>>> abs(noisy.query([[1]]) - 2) <= 0.01, noisy.queries, isinstance(noisy, va.Oracle)
(True, 1, True)

Every wrapper *is* a float-mode :class:`~verified_attn.oracle.Oracle`: learners accept it,
and the exact query counts (by phase, budget, transcript) live on the wrapper object. The
wrapped oracle supplies the truth and keeps counts of its own.

What a tolerance guarantee means here: the answer ``y`` returned by :class:`NoisyOracle`
satisfies ``|y - f(X)| <= tolerance`` *exactly* (checked in rational arithmetic) when the
wrapped oracle is ``exact`` or ``certified`` (the truth is known to within a ball, and the
ball's radius is spent from the tolerance). Around a float-mode oracle (a black box) the
guarantee is relative to the black box's own float answer.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import flint
import numpy as np
import sympy

from verified_attn.arithmetic import arb_bounds, get_arithmetic, to_fraction
from verified_attn.errors import InvalidArgument, PrecisionExhausted
from verified_attn.oracle import Oracle
from verified_attn.validation import check_choice, check_seed

__all__ = [
    "ADVERSARIES",
    "Adversary",
    "LabelOracle",
    "NoisyOracle",
    "StochasticOracle",
    "float32_multi_head_oracle",
    "truth_interval",
    "worst_case_direction",
    "worst_case_oracle",
]

#: An adversary maps (query X as a float array, truth midpoint, tolerance left, rng) to a
#: proposed answer; the wrapper then enforces the tolerance exactly.
Adversary = Callable[[np.ndarray, Fraction, Fraction, np.random.Generator], Fraction]

ADVERSARIES = ("uniform", "rounding", "worst-case", "none")


def _positive_fraction(x: Any, name: str) -> Fraction:
    q = to_fraction(x, name=name)
    if q <= 0:
        raise InvalidArgument(f"{name} must be > 0, got {x!r}")
    return q


def _seed(seed: Any) -> int:
    return check_seed(seed)


def truth_interval(inner: Oracle, X: np.ndarray) -> tuple[Fraction, Fraction]:
    """[lo, hi] with lo <= f(X) <= hi as far as the wrapped oracle can tell, exactly.

    Certified answers give their ball; exact answers are evaluated in ball arithmetic at
    256 bits; float answers give a point (the black box's own value).

    >>> import verified_attn as va
    >>> o = va.Oracle(va.SingleHeadAttention([[0]], [3]), "exact")
    >>> truth_interval(o, np.array([[1.0]]))
    (Fraction(3, 1), Fraction(3, 1))
    """
    y = inner.query(X)
    return _interval_of(y)


def _interval_of(y: Any) -> tuple[Fraction, Fraction]:
    if isinstance(y, flint.arb):
        return arb_bounds(y)
    if isinstance(y, sympy.Basic):
        if y.is_Rational:
            q = to_fraction(y)
            return q, q
        with get_arithmetic("certified").context():
            ball = flint.arb(str(sympy.N(y, 90)))
            # sympy.N at 90 digits is correct to ~1e-88; widen by that much to stay sound.
            lo, hi = arb_bounds(ball)
            slack = Fraction(1, 10**80)
            return lo - slack, hi + slack
    q = to_fraction(y, name="oracle answer")
    return q, q


def _float_within(target: Fraction, lo: Fraction, hi: Fraction) -> float:
    """The float nearest ``target`` that lies in [lo, hi] (lo <= target <= hi, lo < hi)."""
    y = float(target)
    # Rounding to a float may step just outside; walk back inside one ulp at a time.
    for _ in range(64):
        q = Fraction(y)
        if q < lo:
            y = math.nextafter(y, math.inf)
        elif q > hi:
            y = math.nextafter(y, -math.inf)
        else:
            return y
    raise PrecisionExhausted(f"no float64 lies in [{float(lo)}, {float(hi)}]")


# ---------------------------------------------------------------------------------------
# Adversaries.
# ---------------------------------------------------------------------------------------


def uniform_adversary(
    X: np.ndarray, mid: Fraction, room: Fraction, rng: np.random.Generator
) -> Fraction:
    """Uniformly random in [mid - room, mid + room]."""
    return mid + room * Fraction(float(rng.uniform(-1.0, 1.0)))


def rounding_adversary(step: Fraction) -> Adversary:
    """Round to the grid ``step * Z`` (an API printing few decimals: step = 10^-k).

    >>> rounding_adversary(Fraction(1, 100))(None, Fraction(1234, 1000), Fraction(1), None)
    Fraction(123, 100)
    """

    def adversary(
        X: np.ndarray, mid: Fraction, room: Fraction, rng: np.random.Generator
    ) -> Fraction:
        return step * round(mid / step)

    return adversary


def no_adversary(
    X: np.ndarray, mid: Fraction, room: Fraction, rng: np.random.Generator
) -> Fraction:
    """The truth itself (a zero-error adversary, for comparisons)."""
    return mid


# ---------------------------------------------------------------------------------------
# The wrappers.
# ---------------------------------------------------------------------------------------


class _Wrapper(Oracle):
    """A float-mode Oracle whose answers come from another oracle, altered."""

    def _setup(
        self, inner: Oracle, budget: int | None, record: bool | None, model_class: str | None
    ) -> None:
        if not isinstance(inner, Oracle):
            raise InvalidArgument(
                f"oracle must be a verified_attn.Oracle, got {type(inner).__name__}"
            )
        self.inner = inner
        self.model = None
        self.arithmetic = get_arithmetic("float")
        self.d = inner.d
        self._fn = None
        self._batch_fn = None
        self.model_class = model_class if model_class is not None else inner.model_class
        self._init_counts(budget, record)

    def _answer(self, converted: list[Any], precision: int | None = None) -> list[Any]:
        return [self._answer_one(np.asarray(X, dtype=np.float64)) for X in converted]

    def _answer_one(self, X: np.ndarray) -> float:
        raise NotImplementedError


class NoisyOracle(_Wrapper):
    """Answers within an additive ``tolerance`` of f(X), chosen by a seeded adversary.

    ``adversary``: ``"uniform"`` (uniform in [-tau, tau]), ``"rounding"`` (round to the grid
    of step 2 tau, i.e. the nearest multiple of 2 tau), ``"worst-case"`` (needs
    ``direction(X, lo, hi) -> +1 | -1``, a rule that knows the truth and the learner and
    pushes the answer to the end of the tolerance that hurts most), ``"none"``, or any
    :data:`Adversary` callable.

    >>> import verified_attn as va
    >>> inner = va.Oracle(va.SingleHeadAttention([[0]], [1]), "exact")
    >>> NoisyOracle.rounded(inner, decimals=1).query([[0.33]])
    0.3
    >>> NoisyOracle(inner, tolerance=0)
    Traceback (most recent call last):
    ...
    verified_attn.errors.InvalidArgument: tolerance must be > 0, got 0
    """

    def __init__(
        self,
        oracle: Oracle,
        tolerance: Any,
        adversary: str | Adversary = "uniform",
        *,
        seed: int = 0,
        direction: Callable[[np.ndarray, Fraction, Fraction], int] | None = None,
        budget: int | None = None,
        record: bool | None = None,
    ) -> None:
        self._setup(oracle, budget, record, None)
        self.tolerance = _positive_fraction(tolerance, "tolerance")
        self.seed = _seed(seed)
        self._rng = np.random.default_rng(self.seed)
        self.adversary_name = adversary if isinstance(adversary, str) else "custom"
        if adversary == "uniform":
            self._adversary: Adversary = uniform_adversary
        elif adversary == "rounding":
            self._adversary = rounding_adversary(2 * self.tolerance)
        elif adversary == "none":
            self._adversary = no_adversary
        elif adversary == "worst-case":
            if direction is None or not callable(direction):
                raise InvalidArgument(
                    "adversary='worst-case' needs direction=callable(X, lo, hi) -> +1 or -1 "
                    "(see verified_attn.oracle_wrappers.worst_case_direction)"
                )
            self._adversary = _pushing(direction)
        elif callable(adversary) and not isinstance(adversary, str):
            self._adversary = adversary
        else:
            raise InvalidArgument(
                f"adversary must be one of {ADVERSARIES} or a callable; got {adversary!r}"
            )

    @classmethod
    def rounded(cls, oracle: Oracle, *, decimals: int, budget: int | None = None) -> NoisyOracle:
        """An API that prints ``decimals`` decimals: tolerance 10^-decimals / 2."""
        if isinstance(decimals, bool) or not isinstance(decimals, int) or decimals < 0:
            raise InvalidArgument(f"decimals must be an int >= 0, got {decimals!r}")
        return cls(oracle, Fraction(1, 2 * 10**decimals), "rounding", budget=budget)

    def _answer_one(self, X: np.ndarray) -> float:
        lo, hi = truth_interval(self.inner, X)
        # The answer y must satisfy |y - f| <= tau for every f in [lo, hi]:
        # y in [hi - tau, lo + tau]; the adversary's room around the midpoint is what is left.
        room = self.tolerance - (hi - lo) / 2
        if room <= 0:
            raise PrecisionExhausted(
                f"the wrapped oracle's answer is uncertain by {float(hi - lo)}, more than twice "
                f"the tolerance {float(self.tolerance)}; raise its precision"
            )
        mid = (lo + hi) / 2
        proposal = self._adversary(X, mid, room, self._rng)
        proposal = min(max(to_fraction(proposal, name="adversary answer"), mid - room), mid + room)
        return _float_within(proposal, hi - self.tolerance, lo + self.tolerance)

    def __repr__(self) -> str:
        return (
            f"NoisyOracle(d={self.d}, tolerance={float(self.tolerance)}, "
            f"adversary={self.adversary_name!r}, queries={self.queries})"
        )


def _pushing(direction: Callable[[np.ndarray, Fraction, Fraction], int]) -> Adversary:
    def adversary(
        X: np.ndarray, mid: Fraction, room: Fraction, rng: np.random.Generator
    ) -> Fraction:
        s = direction(X, mid - room, mid + room)
        if s not in (-1, 1):
            raise InvalidArgument(f"direction must return +1 or -1, got {s!r}")
        return mid + s * room

    return adversary


class StochasticOracle(_Wrapper):
    """Zero-mean Gaussian noise of standard deviation ``noise_scale`` on every answer.

    Unbounded, so no tolerance holds surely; averaging n answers gives a Gaussian of scale
    sigma / sqrt(n) (see :func:`verified_attn.noisy.planning.repeats_for`).

    >>> import verified_attn as va
    >>> inner = va.Oracle(va.SingleHeadAttention([[0]], [1]), "certified")
    >>> o = StochasticOracle(inner, noise_scale=0.1, seed=1)
    >>> abs(o.query([[1]]) - 1) < 1, o.queries
    (True, 1)
    """

    def __init__(
        self,
        oracle: Oracle,
        noise_scale: Any,
        *,
        seed: int = 0,
        budget: int | None = None,
        record: bool | None = False,
    ) -> None:
        self._setup(oracle, budget, record, None)
        self.noise_scale = float(_positive_fraction(noise_scale, "noise_scale"))
        self.seed = _seed(seed)
        self._rng = np.random.default_rng(self.seed)

    def _answer(self, converted: list[Any], precision: int | None = None) -> list[Any]:
        truths = self.inner.query_many([np.asarray(X, dtype=np.float64) for X in converted])
        mids = [float((lo + hi) / 2) for lo, hi in map(_interval_of, truths)]
        noise = self._rng.normal(0.0, self.noise_scale, size=len(mids))
        return [m + float(e) for m, e in zip(mids, noise, strict=True)]

    def __repr__(self) -> str:
        return (
            f"StochasticOracle(d={self.d}, noise_scale={self.noise_scale}, queries={self.queries})"
        )


class LabelOracle(_Wrapper):
    """Only the label of f(X): ``+1.0 if f(X) >= threshold else -1.0`` (App. B).

    The comparison is decided exactly for exact / certified inner oracles (an undecidable
    tie raises :class:`PrecisionExhausted`), in float64 for black boxes.

    >>> import verified_attn as va
    >>> o = LabelOracle(va.Oracle(va.SingleHeadAttention([[0]], [2]), "exact"))
    >>> o.query([[1]]), o.query([[-1]]), o.query([[0]])
    (1.0, -1.0, 1.0)
    """

    def __init__(
        self,
        oracle: Oracle,
        *,
        threshold: Any = 0,
        budget: int | None = None,
        record: bool | None = None,
    ) -> None:
        self._setup(oracle, budget, record, None)
        self.threshold = to_fraction(threshold, name="threshold")

    def _answer_one(self, X: np.ndarray) -> float:
        lo, hi = truth_interval(self.inner, X)
        if lo >= self.threshold:
            return 1.0
        if hi < self.threshold:
            return -1.0
        raise PrecisionExhausted(
            f"cannot decide whether f(X) >= {self.threshold}: the wrapped oracle gives "
            f"[{float(lo)}, {float(hi)}]; raise its precision"
        )

    def __repr__(self) -> str:
        return f"LabelOracle(d={self.d}, threshold={self.threshold}, queries={self.queries})"


# ---------------------------------------------------------------------------------------
# The worst-case adversary against Theorem 6.1's learner (verified_attn.noisy.learner).
# ---------------------------------------------------------------------------------------


def worst_case_direction(model: Any, tolerance: Any, *, v_push: str = "shrink") -> Any:
    """A rule that knows the truth and the learner and pushes each answer to hurt most.

    Length-1 answers are pushed towards 0 (``v_push="shrink"``: |v_hat_i| smaller, which
    the estimate divides by) or away from it (``"grow"``: then e_i, e_j align with e_f in
    the numerator tau (1 + a + alpha b), which is what hurts most for scores near +1/2).
    For a probe [b u + a e_j; a e_j] it evaluates the learner's estimate of u^T W e_j at
    both ends of the allowed range (with the v_hat it forced) and picks the worse. Run both
    settings to get the worst case of this family.

    >>> import verified_attn as va
    >>> rule = worst_case_direction(va.SingleHeadAttention([[0]], [2]), 0.1)
    >>> rule(np.array([[1.0]]), Fraction(19, 10), Fraction(21, 10))
    -1
    """
    if not hasattr(model, "float_parameters"):
        raise InvalidArgument(
            f"model must be a verified_attn.SingleHeadAttention, got {type(model).__name__}"
        )
    tau = float(_positive_fraction(tolerance, "tolerance"))
    v_push = check_choice(v_push, "v_push", ("shrink", "grow"))
    W = model.float_parameters()["W"]
    v = model.float_parameters()["v"]
    push = -1 if v_push == "shrink" else 1
    v_hat = v + push * np.where(v >= 0, 1.0, -1.0) * tau

    def rule(X: np.ndarray, lo: Fraction, hi: Fraction) -> int:
        if X.shape[0] == 1:
            return push * (1 if float(X[0] @ v) >= 0 else -1)
        if X.shape[0] != 2:
            return 1
        j = int(np.argmax(np.abs(X[1])))
        a = float(X[1, j])
        u_b = X[0] - X[1]
        target = float(u_b @ W @ X[1]) / a  # b u^T W e_j
        best, pick = -1.0, 1
        for s, y in ((-1, float(lo)), (1, float(hi))):
            den = float(u_b @ v_hat)
            alpha = (y - a * v_hat[j]) / den if den != 0 else 0.5
            alpha = min(max(alpha, 1e-300), 1 - 1e-16)
            est = min(max(math.log(alpha) - math.log1p(-alpha), -0.5), 0.5) / a
            if abs(est - target) > best:
                best, pick = abs(est - target), s
        return pick

    return rule


def worst_case_oracle(
    model: Any, tolerance: Any, *, v_push: str = "shrink", **kwargs: Any
) -> NoisyOracle:
    """A certified oracle for ``model`` behind the worst-case adversary.

    >>> import verified_attn as va
    >>> o = worst_case_oracle(va.SingleHeadAttention([[0]], [2]), 0.1)
    >>> o.query([[1]])   # the float next to 1.9 that is within 0.1 of 2 (1.9 is not)
    1.9000000000000001
    """
    return NoisyOracle(
        Oracle(model, "certified"),
        tolerance,
        "worst-case",
        direction=worst_case_direction(model, tolerance, v_push=v_push),
        **kwargs,
    )


def float32_multi_head_oracle(heads: Any, *, rtol: float = 1e-4) -> Oracle:
    """A float-mode black box computing ``sum_h softmax(X W_h x_N)^T X v_h`` in float32.

    Scores, softmax and values are all float32 (as a float32 module computes them), and the
    box declares it (unit roundoff 2^-24, ``rtol``). ``heads``: (W, v) array pairs.

    >>> import numpy as np
    >>> box = float32_multi_head_oracle([(np.eye(2), np.array([1.0, 2.0]))])
    >>> box.query([[1.0, 0.0]]), box.arithmetic.unit_roundoff == 2.0**-24, box.d
    (1.0, True, 2)
    """
    hs = [(np.asarray(W, np.float32), np.asarray(v, np.float32)) for W, v in heads]
    if not hs or any(W.ndim != 2 or W.shape != (len(v), len(v)) for W, v in hs):
        raise InvalidArgument("heads must be a non-empty list of (d x d W, length-d v) pairs")

    def batch(Xs: Any) -> np.ndarray:
        X = np.asarray(Xs, dtype=np.float32)
        out = np.zeros(X.shape[0], dtype=np.float32)
        for W, v in hs:
            z = np.einsum("bni,ij,bj->bn", X, W, X[:, -1, :])
            e = np.exp(z - z.max(axis=1, keepdims=True))
            out += np.einsum("bn,bn->b", e / e.sum(axis=1, keepdims=True), X @ v)
        return out.astype(np.float64)

    return Oracle.from_callable(
        lambda X: float(batch(np.asarray(X)[None])[0]),
        len(hs[0][1]),
        batch_fn=batch,
        rtol=rtol,
        unit_roundoff=2.0**-24,
    )
