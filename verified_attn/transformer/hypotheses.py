"""The one-layer Transformer reduction's hypotheses, each with a counterexample.

>>> from verified_attn.transformer.hypotheses import v_eff_zero
>>> cx = v_eff_zero(d=2, seed=0)
>>> cx.first.v_eff.T, cx.first.W != cx.second.W, cx.check()
(Matrix([[0, 0]]), True, True)

``v_eff_zero``: the reduction only sees ``T(X) - T(-X) = alpha(X)^T X v_eff``; with
``v_eff = V A w_o = 0`` that is 0 whatever W is. The pair here has cancelling neurons
(two neurons on one ray of V A with opposite scaled weights), so g = 0 and the two
Transformers with different W are equal on every sequence: W is not identifiable from
any query. (With v_eff = 0 but g != 0, an even g such as |z_1|, T itself may still
depend on W: the reduction is blind to it, other queries need not be; the "direct"
method of :func:`verified_attn.learn_transformer` handles that case.)

``ffn_bias``: with an FFN bias, ``g(z) = w_o^T ReLU(A^T z + c)`` is no longer positively
homogeneous, and ``D(x) = T([x]) - T([-x]) = g(x) - g(-x)`` (V = I) is not linear in x,
while every single-head regressor has ``D(x) = 2 x^T v``. An exact witness (D(2x) !=
2 D(x)) plus the learner's failure on the biased Transformer (a certified oracle).
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import flint
import numpy as np
import sympy

from verified_attn.arithmetic import Arithmetic
from verified_attn.counterexample import Counterexample, Proof, model_dict
from verified_attn.errors import InvalidArgument, PrecisionExhausted, VerifiedAttnError
from verified_attn.models import OneLayerTransformer, SequenceModel
from verified_attn.serialize import dump_rational

__all__ = ["BiasedTransformer", "ffn_bias", "v_eff_zero"]


def _q(rng: np.random.Generator) -> Fraction:
    return Fraction(int(rng.integers(-4, 5)), int(rng.integers(1, 3)))


def v_eff_zero(*, d: int = 3, seed: int = 0) -> Counterexample:
    """Two Transformers with different W, v_eff = 0 and cancelling neurons: T = 0."""
    rng = np.random.default_rng(seed)
    W1 = [[_q(rng) for _ in range(d)] for _ in range(d)]
    W2 = [[_q(rng) for _ in range(d)] for _ in range(d)]
    while W2 == W1:
        W2 = [[_q(rng) for _ in range(d)] for _ in range(d)]
    V = [
        [
            Fraction(int(i == j)) + Fraction(int(rng.integers(0, 2)), 2) * int(j > i)
            for j in range(d)
        ]
        for i in range(d)
    ]
    a = [Fraction(int(rng.integers(-3, 4))) for _ in range(d)]
    if not any(a):
        a[0] = Fraction(1)
    s = Fraction(int(rng.integers(2, 4)))
    w = Fraction(int(rng.choice([-2, -1, 1, 2])))
    A = [[a[i], s * a[i]] for i in range(d)]  # two neurons on one ray, scale 1 and s
    w_o = [w, -w / s]  # w ReLU(r.z) - (w/s) ReLU(s r.z) = 0
    first = OneLayerTransformer(W1, V, A, w_o)
    second = OneLayerTransformer(W2, V, A, w_o)
    proof = Proof(
        "cancelling-neurons",
        f"both FFNs have two neurons on one ray r = V a (scales 1 and {s}) with weights "
        f"{w} and {-w / s}: g(z) = {w} ReLU(r^T z) - {w / s} ReLU({s} r^T z) = 0, so T = 0 "
        "on every sequence whatever W is, and v_eff = V A w_o = 0",
        True,
    )
    return Counterexample(
        "transformer",
        "v-eff-zero",
        d,
        seed,
        "Without v_eff = V A w_o != 0 the antisymmetrised oracle is 0 whatever W is; here "
        "(cancelling neurons) two Transformers with different W are equal on every sequence.",
        first,
        second,
        "equal",
        None,
        proof,
        figures={"v_eff": "0", "note": "an even g != 0 with v_eff = 0 may still reveal W"},
        payload={"first": model_dict(first), "second": model_dict(second)},
    )


class BiasedTransformer(SequenceModel):
    """``T(X) = w_o^T ReLU(A^T V^T X^T softmax(X W x_N) + c)``: an FFN with a bias c.

    Outside the reduction's model class (it is here to show why). Length-1 sequences are
    exact in every arithmetic (g is rational there); longer ones in float or certified
    arithmetic (each ReLU decided on a ball; PrecisionExhausted if one straddles 0).
    """

    model_class = "biased-transformer"

    def __init__(self, W: Any, V: Any, A: Any, c: Any, w_o: Any) -> None:
        self._inner = OneLayerTransformer(W, V, A, w_o)
        self.d = self._inner.d
        self._c = [Fraction(x) for x in c]
        if len(self._c) != self._inner.m:
            raise InvalidArgument(f"c must have length m = {self._inner.m}, got {len(self._c)}")
        self._VA = np.array(self._inner.V * self._inner.A, dtype=object)
        self._w = [Fraction(int(x.p), int(x.q)) for x in self._inner.w_o]
        self._Wm = [
            [Fraction(int(x.p), int(x.q)) for x in self._inner.W.row(i)] for i in range(self.d)
        ]

    #: Read by the counterexample's text: the FFN's parameters include the bias (as ``a``).
    biased = True

    @property
    def W(self) -> Any:
        return self._inner.W

    V = property(lambda self: self._inner.V)
    A = property(lambda self: self._inner.A)
    w_o = property(lambda self: self._inner.w_o)

    @property
    def a(self) -> Any:
        """The FFN's hidden bias c, as the biased models name it."""
        return sympy.Matrix([sympy.Rational(x.numerator, x.denominator) for x in self._c])

    @property
    def b(self) -> int:
        """No output bias."""
        return 0

    def __repr__(self) -> str:
        inner = self._inner
        return f"BiasedTransformer(d={inner.d}, e={inner.e}, m={inner.m})"

    def ffn_value(self, x: list[Fraction]) -> Fraction:
        """g(x) = T([x]) exactly."""
        out = Fraction(0)
        for k, wk in enumerate(self._w):
            z = (
                sum(
                    (
                        Fraction(int(self._VA[i, k].p), int(self._VA[i, k].q)) * x[i]
                        for i in range(self.d)
                    ),
                    Fraction(0),
                )
                + self._c[k]
            )
            if z > 0:
                out += wk * z
        return out

    def _evaluate_rational(self, Xq: flint.fmpq_mat, arith: Arithmetic) -> Any:
        n = Xq.nrows()
        X = [[Fraction(int(Xq[t, i].p), int(Xq[t, i].q)) for i in range(self.d)] for t in range(n)]
        if n == 1:
            y = self.ffn_value(X[0])
            return arith.rational(y)
        if arith.name != "certified":
            raise InvalidArgument(
                "BiasedTransformer evaluates longer sequences in certified arithmetic only"
            )
        q = X[-1]
        s = [
            sum(
                (X[t][i] * self._Wm[i][j] * q[j] for i in range(self.d) for j in range(self.d)),
                Fraction(0),
            )
            for t in range(n)
        ]
        top = max(s)
        wts = [
            flint.arb(flint.fmpq((si - top).numerator, (si - top).denominator)).exp() for si in s
        ]
        total = sum(wts, flint.arb(0))
        pooled = [
            sum((wts[t] * _arb(X[t][i]) for t in range(n)), flint.arb(0)) / total
            for i in range(self.d)
        ]
        out = flint.arb(0)
        for k, wk in enumerate(self._w):
            z = sum(
                (
                    pooled[i] * _arb(Fraction(int(self._VA[i, k].p), int(self._VA[i, k].q)))
                    for i in range(self.d)
                ),
                flint.arb(0),
            ) + _arb(self._c[k])
            if z > 0:
                out += _arb(wk) * z
            elif not z < 0 and not z == 0:
                raise PrecisionExhausted("a ReLU pre-activation straddles 0 at this precision")
        return out

    def evaluate_batch(self, Xs: np.ndarray) -> np.ndarray:
        """T on a float64 batch (B, N, d) -> (B,)."""
        Xs = np.asarray(Xs, dtype=np.float64)
        if Xs.ndim != 3 or Xs.shape[2] != self.d or Xs.shape[1] < 1:
            raise InvalidArgument(f"Xs must have shape (B, N>=1, d={self.d}); got {Xs.shape}")
        W = np.array([[float(x) for x in row] for row in self._Wm])
        VA = np.array([[float(Fraction(int(x.p), int(x.q))) for x in row] for row in self._VA])
        c = np.array([float(x) for x in self._c])
        w = np.array([float(x) for x in self._w])
        scores = np.einsum("bnd,bd->bn", Xs, Xs[:, -1, :] @ W.T)
        alpha = np.exp(scores - scores.max(axis=1, keepdims=True))
        alpha /= alpha.sum(axis=1, keepdims=True)
        pooled = np.einsum("bn,bnd->bd", alpha, Xs)
        return np.maximum(pooled @ VA + c, 0.0) @ w


def _arb(q: Fraction) -> flint.arb:
    return flint.arb(flint.fmpq(q.numerator, q.denominator))


def ffn_bias(*, d: int = 3, seed: int = 0) -> Counterexample:
    """A biased FFN: the antisymmetrised map is not a single head; the learner fails."""
    from verified_attn.oracle import Oracle
    from verified_attn.transformer.learner import learn_transformer

    rng = np.random.default_rng(seed)
    W = [[_q(rng) for _ in range(d)] for _ in range(d)]
    V = [[Fraction(int(i == j)) for j in range(d)] for i in range(d)]
    A = [
        [Fraction(int(rng.integers(1, 3))) if i == 0 else _q(rng) for _ in range(2)]
        for i in range(d)
    ]
    c = [Fraction(1), Fraction(-1, 2)]
    w_o = [Fraction(1), Fraction(int(rng.choice([1, 2])))]
    model = BiasedTransformer(W, V, A, c, w_o)
    # A witness x: the e_0 direction, scaled so that the neurons switch between x and 2x.
    x = [Fraction(0)] * d
    for scale in (Fraction(1, 4), Fraction(1, 2), Fraction(1), Fraction(2)):
        x[0] = scale
        D1 = model.ffn_value(x) - model.ffn_value([-t for t in x])
        D2 = model.ffn_value([2 * t for t in x]) - model.ffn_value([-2 * t for t in x])
        if D2 != 2 * D1:
            break
    else:  # pragma: no cover - the bias 1 makes D(x) = ... non-linear at small x
        raise AssertionError("no linearity witness found")
    seqs = [[x], [[-t for t in x]], [[2 * t for t in x]], [[-2 * t for t in x]]]
    try:
        learn_transformer(Oracle(model, "certified"), verify=4, seed=seed)
        outcome = "the learner returned a result (it should have refused)"
    except VerifiedAttnError as exc:
        outcome = f"learn_transformer raised {type(exc).__name__}: {str(exc)[:300]}"
    ffn = {
        "class": "relu-ffn-biased",
        "A": [
            [
                dump_rational(Fraction(int(model._VA[i, k].p), int(model._VA[i, k].q)))
                for k in range(2)
            ]
            for i in range(d)
        ],
        "c": [dump_rational(q) for q in c],
        "w_o": [dump_rational(q) for q in w_o],
    }
    proof = Proof(
        "not-odd-linear",
        f"D(x) = g(x) - g(-x) = {D1} at x = {[str(t) for t in x]} and D(2x) = {D2} != "
        f"2 D(x): not the linear 2 x^T v of any single head",
        True,
    )
    return Counterexample(
        "transformer",
        "ffn-bias",
        d,
        seed,
        "The antisymmetry reduction needs a bias-free FFN: with a bias, T(X) - T(-X) is not "
        "a single-head regressor (exact witness at length 1), and the learner fails.",
        model,
        None,
        "equal",
        seqs,
        proof,
        failure=outcome,
        figures={"D(x)": str(D1), "D(2x)": str(D2), "learner": outcome},
        payload={"first": ffn, "second": None},
    )
