"""§6 of the theory page (docs/theory.md) derived in SymPy from the model definition:
antisymmetry and composition.

>>> from verified_attn.transformer.symbolic import antisymmetry, composition
>>> [c.holds for c in antisymmetry()], [c.holds for c in composition()]
([True, True, True], [True, True])

The attention part is :func:`verified_attn.models.attention_output` (the project's single
definition of a head): ``h_c(X) = attention_output(X, W, V[:, c])`` is coordinate c of
``h(X) = V^T X^T alpha(X)``. ReLU is an undefined function except for the one fact used,
``ReLU(z) - ReLU(-z) = z``, itself shown for real z by cases from ``ReLU = Max(., 0)``.

Every ``wrong_*`` function derives a plausible but false variant and returns a check that
does *not* hold, with the rational point where the two sides differ: the checks can fail.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import sympy

from verified_attn.checks import SymbolicCheck
from verified_attn.models import attention_output

__all__ = [
    "antisymmetry",
    "composition",
    "matches_model",
    "relu_odd_part",
    "transformer_output",
    "wrong_antisymmetry_sum",
    "wrong_antisymmetry_with_score_bias",
    "wrong_composition_last_token",
    "wrong_v_eff_transposed",
]

ReLU = sympy.Function("ReLU")


def _exp(s: Any) -> Any:
    # Expanded exponents make exp(score(X)) and exp(score(-X)) the same SymPy object.
    return sympy.exp(sympy.expand(s))


def _symbols(d: int, n: int, m: int) -> dict[str, Any]:
    X = [[sympy.Symbol(f"x{t}{i}", real=True) for i in range(d)] for t in range(n)]
    W = sympy.Matrix(d, d, lambda i, j: sympy.Symbol(f"W{i}{j}", real=True))
    V = sympy.Matrix(d, d, lambda i, j: sympy.Symbol(f"V{i}{j}", real=True))
    A = sympy.Matrix(d, m, lambda i, j: sympy.Symbol(f"A{i}{j}", real=True))
    w = sympy.Matrix(m, 1, lambda i, _: sympy.Symbol(f"w{i}", real=True))
    return {"X": X, "W": W, "V": V, "A": A, "w": w}


def _rows(W: sympy.Matrix) -> list[list[Any]]:
    return W.tolist()


def pre_activations(
    X: Sequence[Sequence[Any]],
    W: sympy.Matrix,
    V: sympy.Matrix,
    A: sympy.Matrix,
    c: Sequence[Any] | None = None,
) -> list[Any]:
    """z = A^T h(X) with h_c = attention_output(X, W, V[:, c]) (optionally a score bias c)."""
    h = [attention_output(X, _rows(W), list(V[:, j]), c, exp=_exp) for j in range(V.shape[1])]
    return [sum(A[j, k] * h[j] for j in range(A.shape[0])) for k in range(A.shape[1])]


def transformer_output(
    X: Sequence[Sequence[Any]],
    W: sympy.Matrix,
    V: sympy.Matrix,
    A: sympy.Matrix,
    w: sympy.Matrix,
    relu: Callable[[Any], Any] = ReLU,
    c: Sequence[Any] | None = None,
) -> Any:
    """T(X) = w_o^T ReLU(A^T h(X)), built from :func:`attention_output`."""
    z = pre_activations(X, W, V, A, c)
    return sum(w[k] * relu(z[k]) for k in range(len(z)))


def _is_zero(expr: Any) -> bool:
    return sympy.cancel(sympy.together(sympy.expand(expr))) == 0


def _max0(z: Any) -> Any:
    return sympy.Max(z, 0)


def relu_odd_part(relu: Callable[[Any], Any] = _max0) -> SymbolicCheck:
    """ReLU(z) - ReLU(-z) = z for every real z (cases z > 0, z < 0, z = 0 cover R).

    ``relu`` defaults to Max(z, 0); pass another function to see the check fail.
    """
    pos, neg = sympy.Symbol("z", positive=True), sympy.Symbol("z", negative=True)
    cases = [relu(z) - relu(-z) - z for z in (pos, neg, sympy.Integer(0))]
    return SymbolicCheck(
        "relu-odd-part",
        "ReLU(z) - ReLU(-z) = z for real z",
        holds=all(c == 0 for c in cases),
        detail=f"residuals for z > 0, z < 0, z = 0: {cases}",
    )


def _v_eff(V: sympy.Matrix, A: sympy.Matrix, w: sympy.Matrix) -> sympy.Matrix:
    return V * A * w


def _pooled(X: Sequence[Sequence[Any]], W: sympy.Matrix) -> list[Any]:
    """X^T alpha(X), coordinate by coordinate, from :func:`attention_output`."""
    d = W.shape[0]
    return [
        attention_output(X, _rows(W), [int(i == j) for i in range(d)], exp=_exp) for j in range(d)
    ]


def antisymmetry(
    d: int = 2,
    n: int = 2,
    m: int = 2,
    *,
    v_eff: Callable[[sympy.Matrix, sympy.Matrix, sympy.Matrix], sympy.Matrix] = _v_eff,
    score_bias: bool = False,
) -> list[SymbolicCheck]:
    """Scores even, h odd, and T(X) - T(-X) = alpha(X)^T X v_eff with v_eff = V A w_o.

    ``v_eff(V, A, w)`` is the claimed value vector and ``score_bias`` adds a symbolic
    score bias c to the model: pass a wrong formula (``V^T A w``) or the biased model to see
    the same derivation fail.

    >>> all(c.holds for c in antisymmetry(1, 2, 1))
    True
    >>> antisymmetry(1, 2, 1, v_eff=lambda V, A, w: 2 * V * A * w)[-1].holds
    False
    """
    s = _symbols(d, n, m)
    X, W, V, A, w = s["X"], s["W"], s["V"], s["A"], s["w"]
    c = [sympy.Symbol(f"c{i}", real=True) for i in range(d)] if score_bias else None
    negX = [[-x for x in row] for row in X]
    z, z_neg = pre_activations(X, W, V, A, c), pre_activations(negX, W, V, A, c)
    odd = all(_is_zero(a + b) for a, b in zip(z, z_neg, strict=True))
    lemma = relu_odd_part()
    # With z(-X) = -z(X): T(X) - T(-X) = sum_k w_k (ReLU(z_k) - ReLU(-z_k)) = sum_k w_k z_k.
    diff = sum(w[k] * z[k] for k in range(m))
    veff = v_eff(V, A, w)
    head = attention_output(X, _rows(W), list(veff), c, exp=_exp)
    identity = odd and lemma.holds and _is_zero(diff - head)
    return [
        SymbolicCheck(
            "pre-activations-odd",
            "z(-X) = -z(X): scores x_i^T W x_N are even in X, so alpha(-X) = alpha(X), h odd",
            holds=odd,
            detail=f"d = {d}, N = {n}, m = {m}, symbolic W, V, A"
            + (", score bias c" if score_bias else ""),
        ),
        lemma,
        SymbolicCheck(
            "antisymmetry",
            "T(X) - T(-X) = alpha(X)^T X v_eff with v_eff = V A w_o",
            holds=identity,
            detail=f"d = {d}, N = {n}, m = {m}; right side is attention_output(X, W, V A w_o)",
            data={"v_eff": veff},
        ),
    ]


def composition(
    d: int = 2,
    n: int = 2,
    m: int = 2,
    *,
    pool: Callable[[Sequence[Sequence[Any]], sympy.Matrix], list[Any]] = _pooled,
) -> list[SymbolicCheck]:
    """T(X) = g(X^T alpha(X)) with g(x) = T([x]) = w_o^T ReLU(A^T V^T x).

    ``pool(X, W)`` is the claimed argument of g; pass a wrong one (the last token x_N)
    to see the same derivation fail.

    >>> all(c.holds for c in composition(1, 2, 1))
    True
    >>> composition(1, 2, 1, pool=lambda X, W: list(X[-1]))[-1].holds
    False
    """
    s = _symbols(d, n, m)
    X, W, V, A = s["X"], s["W"], s["V"], s["A"]
    y = sympy.symbols(f"y0:{d}", real=True)
    g_args = pre_activations([list(y)], W, V, A)  # length 1: T([y]) = w^T ReLU(A^T V^T y)
    plain = list(A.T * V.T * sympy.Matrix(y))
    length_one = all(_is_zero(a - b) for a, b in zip(g_args, plain, strict=True))
    pooled = pool(X, W)
    g_of_pooled = [a.subs(dict(zip(y, pooled, strict=True)), simultaneous=True) for a in g_args]
    z = pre_activations(X, W, V, A)
    same = all(_is_zero(a - b) for a, b in zip(z, g_of_pooled, strict=True))
    return [
        SymbolicCheck(
            "length-one",
            "T([x]) = g(x) = w_o^T ReLU(A^T V^T x): softmax over one token is 1",
            holds=length_one,
        ),
        SymbolicCheck(
            "composition",
            "T(X) = g(X^T alpha(X)): the pre-activations agree as rational functions",
            holds=same,
            detail=f"d = {d}, N = {n}, m = {m}",
        ),
    ]


# ---------------------------------------------------------------------------------------
# Wrong variants: each must fail, shown at an explicit rational point.
# ---------------------------------------------------------------------------------------

_POINT = {
    "X": [[1, -2], [sympy.Rational(1, 2), 1]],
    "W": sympy.Matrix([[1, 2], [-1, sympy.Rational(1, 3)]]),
    "V": sympy.Matrix([[1, 1], [0, 2]]),
    "A": sympy.Matrix([[1, -1], [2, 1]]),
    "w": sympy.Matrix([3, -2]),
}


def _relu(z: Any) -> Any:
    return sympy.Max(z, 0)


def _failing(name: str, statement: str, residual: Any) -> SymbolicCheck:
    value = sympy.N(residual, 30)
    holds = bool(value == 0)
    return SymbolicCheck(
        name, statement, holds=holds, detail=f"residual at the test point: {value}"
    )


def _T(X: Any, c: Any = None) -> Any:
    p = _POINT
    return transformer_output(X, p["W"], p["V"], p["A"], p["w"], _relu, c)


def wrong_antisymmetry_sum() -> SymbolicCheck:
    """False: T(X) + T(-X) = alpha^T X v_eff."""
    p = _POINT
    neg = [[-x for x in r] for r in p["X"]]
    head = attention_output(p["X"], _rows(p["W"]), list(p["V"] * p["A"] * p["w"]), exp=_exp)
    return _failing(
        "wrong-antisymmetry-sum", "T(X) + T(-X) = alpha^T X v_eff", _T(p["X"]) + _T(neg) - head
    )


def wrong_v_eff_transposed() -> SymbolicCheck:
    """False: v_eff = V^T A w_o."""
    p = _POINT
    neg = [[-x for x in r] for r in p["X"]]
    head = attention_output(p["X"], _rows(p["W"]), list(p["V"].T * p["A"] * p["w"]), exp=_exp)
    return _failing(
        "wrong-v-eff", "T(X) - T(-X) = alpha^T X (V^T A w_o)", _T(p["X"]) - _T(neg) - head
    )


def wrong_antisymmetry_with_score_bias() -> SymbolicCheck:
    """False once scores have a bias c: x_i^T (W x_N + c) is not even in X."""
    p = _POINT
    c = [1, -1]
    neg = [[-x for x in r] for r in p["X"]]
    head = attention_output(p["X"], _rows(p["W"]), list(p["V"] * p["A"] * p["w"]), c, exp=_exp)
    residual = _T(p["X"], c) - _T(neg, c) - head
    return _failing(
        "wrong-score-bias", "with a score bias c, T(X) - T(-X) = alpha^T X v_eff", residual
    )


def wrong_composition_last_token() -> SymbolicCheck:
    """False: T(X) = g(x_N) (the last token instead of the attention-pooled one)."""
    p = _POINT
    g_last = _T([p["X"][-1]])
    return _failing("wrong-composition", "T(X) = g(x_N)", _T(p["X"]) - g_last)


def matches_model(
    d: int = 2, n: int = 3, m: int = 2, seeds: Sequence[int] = (0, 1, 2)
) -> SymbolicCheck:
    """The formula the derivations start from is :class:`OneLayerTransformer`'s own.

    :func:`transformer_output` (ReLU = Max(., 0)) at seeded rational points, W, V, A, w_o
    and X, equals ``OneLayerTransformer(W, V, A, w_o).evaluate(X, "exact")`` exactly
    (``==`` after cancellation): a change to either definition makes this check fail.
    """
    import numpy as np

    from verified_attn.arithmetic import exact_equal
    from verified_attn.models import OneLayerTransformer

    failures = []
    for seed in seeds:
        rng = np.random.default_rng(seed)

        def q(rows: int, cols: int, rng: Any = rng) -> sympy.Matrix:
            vals = rng.integers(-4, 5, (rows, cols)).tolist()
            return sympy.Matrix(rows, cols, lambda i, j: sympy.Rational(vals[i][j], 2))

        W, V, A, w = q(d, d), q(d, d), q(d, m), q(m, 1)
        X = q(n, d).tolist()
        formula = transformer_output(X, W, V, A, w, relu=_max0)
        model = OneLayerTransformer(W, V, A, list(w)).evaluate(X, "exact")
        if not exact_equal(formula, model):
            failures.append(seed)
    return SymbolicCheck(
        "matches-model",
        "transformer_output equals OneLayerTransformer.evaluate (exact) at rational points",
        holds=not failures,
        detail=f"d={d}, n={n}, m={m}, seeds {list(seeds)}: "
        + ("all equal" if not failures else f"differ at seeds {failures}"),
    )
