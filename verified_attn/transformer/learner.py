"""Learn a one-layer Transformer exactly: the paper's reduction plus an exact FFN learner.

>>> import verified_attn as va
>>> from verified_attn.transformer.learner import learn_transformer
>>> from verified_attn.models import OneLayerTransformer
>>> T = OneLayerTransformer([[1, 0], [2, -1]], [[1, 0], [0, 1]], [[1, -1, 0], [1, 2, 1]], [2, 1, -1])
>>> rec = learn_transformer(va.Oracle(T, "certified"))
>>> rec.W == T.W, rec.v_eff == T.v_eff, rec.exact, rec.verified
(True, True, True, True)
>>> rec.queries_by_phase["attention-v"], rec.queries_by_phase["attention-W"]   # 2d, 2d^2
(4, 8)

THEORY §6. Scores are even in X, so ``T(X) - T(-X) = alpha(X)^T X v_eff`` with
``v_eff = V A w_o`` (:mod:`verified_attn.transformer.symbolic`): a single head. ``"paper"``
runs Theorem 4.1 (:func:`verified_attn.learn_single_head`, unchanged) on that
antisymmetrised oracle, each of its queries costing two real ones, 2(d^2 + d) in all; the
length-1 queries give ``g(x) = T([x])``, learned exactly by
:func:`~verified_attn.transformer.relu.learn_relu_ffn`. Since ``T(X) = g(X^T alpha(X))``,
W and g determine T as a function; the learned Transformer is ``(W, V = I, A', w_o')`` with
``g = w_o'^T ReLU(A'^T x)`` in canonical form, and it is verified on fresh sequences of
lengths 1..8.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import flint
import numpy as np
import sympy

from verified_attn._legacy import Recovery, split_counts
from verified_attn.arithmetic import (
    OutsideUnitInterval,
    arb_bounds,
    exact_equal,
    reconstruct_rational,
)
from verified_attn.errors import (
    InvalidArgument,
    ModelClassMismatch,
    NotIdentifiable,
    PrecisionExhausted,
)
from verified_attn.exact_recovery import learn_single_head
from verified_attn.models import OneLayerTransformer
from verified_attn.oracle import Oracle
from verified_attn.transformer.relu import ReluNetwork, Vec, learn_relu_ffn

__all__ = [
    "METHODS",
    "TransformerRecovery",
    "antisymmetrised",
    "learn_transformer",
    "paper_attention_count",
]

METHODS = ("paper", "direct")


def paper_attention_count(d: int) -> int:
    """Real queries Thm 4.1 costs on the antisymmetrised oracle: 2(d^2 + d).

    >>> paper_attention_count(16)
    544
    """
    return 2 * (d * d + d)


@dataclass
class TransformerRecovery:
    """A learned one-layer Transformer with its provenance.

    ``W`` and ``v_eff`` are exact SymPy matrices; ``network`` is the canonical length-1
    function g; ``model`` is a :class:`OneLayerTransformer` equal to the oracle as a
    function. Counts are real queries on the oracle passed in (the antisymmetrised
    oracle's queries count twice).
    """

    method: str
    W: sympy.Matrix
    v_eff: sympy.Matrix
    network: ReluNetwork
    model: OneLayerTransformer
    arithmetic: str
    precision: int | None
    exact: bool
    verified: bool
    queries: int
    verification_queries: int
    queries_by_phase: dict[str, int]
    attention_queries: int
    ffn_queries: int
    attention_bound: int
    seed: int
    tokens_sent: int = 0
    max_length: int = 0
    notes: list[str] = field(default_factory=list)

    def to_recovery(self) -> Recovery:
        """The result as a :class:`~verified_attn.recovery.Recovery`, for the report and CLI.

        ``theorem`` is "transformer/<method>"; parameters W, v_eff and the canonical g as
        (A, w_o); ``bound`` is the attention formula plus the FFN learner's measured count
        (the FFN part has no closed-form bound); ``parameter_count`` is d^2 + m'(d + 1).
        Its ``model()`` does not apply (use :attr:`model`).
        """
        d = self.W.shape[0]
        return Recovery(
            theorem=f"transformer/{self.method}",
            parameters={"W": self.W, "v_eff": self.v_eff, "A": self.model.A, "w_o": self.model.w_o},
            arithmetic=self.arithmetic,
            precision=self.precision,
            exact=self.exact,
            verified=self.verified,
            queries=self.queries,
            verification_queries=self.verification_queries,
            queries_by_phase=dict(self.queries_by_phase),
            bound=self.attention_bound + self.ffn_queries,
            parameter_count=d * d + self.network.width * (d + 1),
            seed=self.seed,
            tokens_sent=self.tokens_sent,
            max_length=self.max_length,
            notes=list(self.notes),
        )

    def summary(self) -> str:
        return (
            f"one-layer transformer ({self.method}): {self.queries} learning queries = "
            f"{self.attention_queries} attention (2(d^2+d) = {self.attention_bound}) + "
            f"{self.ffn_queries} FFN (canonical width {self.network.width}), "
            f"{self.verification_queries} verification; exact: {self.exact}; "
            f"verified: {self.verified}"
        )


class _Antisymmetrised:
    """The model ``X -> T(X) - T(-X)``, answered by two queries to the real oracle.

    Its queries are counted on the real oracle under "attention-<phase>", where <phase>
    is the phase of the wrapping oracle (v, W, verify), so the real count is honest.
    """

    model_class = "single-head"

    def __init__(self, inner: Oracle) -> None:
        self.inner = inner
        self.d = inner.d
        self.outer: Oracle | None = None

    def _phase(self) -> str:
        return "attention-" + (self.outer._phase if self.outer is not None else "other")

    def _evaluate_rational(self, Xq: flint.fmpq_mat, arith: Any) -> Any:
        with self.inner.phase(self._phase()):
            plus, minus = self.inner.query_many([Xq, -Xq])
        return plus - minus

    def evaluate_batch(self, Xs: np.ndarray) -> np.ndarray:
        Xs = np.asarray(Xs, dtype=np.float64)
        with self.inner.phase(self._phase()):
            answers = self.inner.query_many(list(Xs) + list(-Xs))
        n = len(Xs)
        return np.array(answers[:n], dtype=np.float64) - np.array(answers[n:], dtype=np.float64)


def antisymmetrised(oracle: Oracle) -> Oracle:
    """An oracle for ``T(X) - T(-X)`` whose every query costs two queries to ``oracle``.

    >>> import verified_attn as va
    >>> from verified_attn.models import ReluFFN
    >>> inner = va.Oracle(ReluFFN([[1, 1]], [1, 2]), "exact")     # ReLU(x) + 2 ReLU(x)
    >>> outer = antisymmetrised(inner)
    >>> outer.query([[3]]), outer.queries, inner.queries           # 9 - 0
    (9, 1, 2)
    """
    adapter = _Antisymmetrised(oracle)
    outer = Oracle(adapter, oracle.arithmetic, model_class="single-head")
    adapter.outer = outer
    return outer


def _fresh_sequences(d: int, count: int, seed: int) -> list[np.ndarray]:
    """Fresh sequences of lengths 1..8 with entries k/5 (no learning query has them)."""
    rng = np.random.default_rng(seed + 104729)
    return [rng.integers(-10, 11, (1 + i % 8, d)) / 5 for i in range(count)]


def learn_transformer(
    oracle: Oracle,
    method: str = "paper",
    *,
    verify: int = 8,
    seed: int = 0,
    denominator_bound: int | None = None,
) -> TransformerRecovery:
    """Learn ``T(X) = w_o^T ReLU(A^T V^T X^T softmax(X W x_N))`` exactly from queries.

    ``method="paper"``: Thm 4.1 on the antisymmetrised oracle (2(d^2 + d) queries) plus the
    exact FFN learner on length-1 queries. ``verify``: fresh checks per stage (the FFN,
    the head, and the whole Transformer on sequences of lengths 1..8).

    Raises :class:`NotIdentifiable` if ``v_eff = V A w_o = 0`` (then T(X) = T(-X) and the
    reduction sees no attention), :class:`ModelClassMismatch` if the oracle is not such a
    Transformer, :class:`InvalidArgument` for float oracles (exact learning needs rational
    answers) or an unknown method.
    """
    if not isinstance(oracle, Oracle):
        raise InvalidArgument(f"oracle must be a verified_attn.Oracle, got {type(oracle).__name__}")
    if method not in METHODS:
        raise InvalidArgument(f"method must be one of {METHODS}; got {method!r}")
    arith = oracle.arithmetic
    if arith.name not in ("exact", "certified"):
        raise InvalidArgument(
            f"learn_transformer needs an oracle with arithmetic 'exact' or 'certified'; got "
            f"arithmetic={arith.name!r}"
        )
    if isinstance(verify, bool) or not isinstance(verify, int) or verify < 1:
        raise InvalidArgument(f"verify must be an int >= 1, got {verify!r}")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise InvalidArgument(f"seed must be an int, got {seed!r}")
    d = oracle.d
    before = oracle.queries_by_phase
    tokens_before = oracle.tokens_sent

    ffn = learn_relu_ffn(oracle, verify=verify, seed=seed, denominator_bound=denominator_bound)
    if method == "direct":
        v_eff = sympy.Matrix(
            [sympy.Rational(q.numerator, q.denominator) for q in _v_eff(ffn.network)]
        )
        with arith.context(), oracle.phase("attention-direct"):
            W = _direct_attention(oracle, ffn.network, seed, denominator_bound)
        head_notes: list[str] = []
    else:
        W, v_eff, head_notes = _paper_attention(oracle, verify, seed, denominator_bound)
        _check_v_eff(ffn.network, v_eff)
    g = ffn.network.model()
    model = OneLayerTransformer(W, sympy.eye(d), g.A, g.w_o)
    with oracle.phase("verify"):
        _verify(oracle, model, _fresh_sequences(d, verify, seed))

    by_phase = oracle.queries_since(before)
    learning, ver = split_counts(by_phase)
    attention = sum(
        n for k, n in by_phase.items() if k.startswith("attention-") and "verify" not in k
    )
    return TransformerRecovery(
        method=method,
        W=W,
        v_eff=v_eff,
        network=ffn.network,
        model=model,
        arithmetic=arith.name,
        precision=arith.precision,
        exact=True,
        verified=True,
        queries=learning,
        verification_queries=ver,
        queries_by_phase=by_phase,
        attention_queries=attention,
        ffn_queries=ffn.queries,
        attention_bound=paper_attention_count(d) if method == "paper" else d * d,
        seed=seed,
        tokens_sent=oracle.tokens_sent - tokens_before,
        max_length=oracle.max_length,
        notes=list(ffn.notes) + head_notes,
    )


def _paper_attention(
    oracle: Oracle, verify: int, seed: int, denominator_bound: int | None
) -> tuple[sympy.Matrix, sympy.Matrix, list[str]]:
    """Thm 4.1 on the antisymmetrised oracle: (W, v_eff, notes)."""
    arith = oracle.arithmetic
    try:
        head = learn_single_head(
            antisymmetrised(oracle),
            affine=False,
            verify=verify,
            seed=seed,
            denominator_bound=denominator_bound,
        )
    except NotIdentifiable as exc:
        raise NotIdentifiable(
            "v_eff = V A w_o = 0: then T(X) = T(-X) for every X, the antisymmetrised oracle "
            "is identically 0 and the paper's reduction cannot see W "
            f"(Thm 4.1 reported: {exc})"
        ) from exc
    if not head.exact:
        raise PrecisionExhausted(
            f"at {arith.precision} bits the head's W, v_eff did not reconstruct to rationals; "
            "raise the oracle's precision or pass denominator_bound"
        )
    return head.W, head.v, list(head.notes)


def _v_eff(net: ReluNetwork) -> list[Fraction]:
    """g(x) - g(-x) = (2 l + sum_j gamma_j n_j)^T x: the v_eff the network implies."""
    want = [2 * a for a in net.linear]
    for n, gamma in net.neurons:
        want = [w + gamma * b for w, b in zip(want, n, strict=True)]
    return want


def _check_v_eff(net: ReluNetwork, v_eff: sympy.Matrix) -> None:
    """The head's v_eff must be the one g implies (the same oracle, measured twice)."""
    want = _v_eff(net)
    got = [Fraction(int(x.p), int(x.q)) for x in v_eff]
    if got != want:
        raise ModelClassMismatch(
            f"not a one-layer Transformer: the head's v_eff = {got} but the length-1 function "
            f"gives g(x) - g(-x) = {want}^T x",
            observed=got,
            expected=want,
        )


def _verify(oracle: Oracle, model: OneLayerTransformer, sequences: list[np.ndarray]) -> None:
    arith = oracle.arithmetic
    answers = oracle.query_many(sequences)
    for X, observed in zip(sequences, answers, strict=True):
        expected = model.evaluate(X, arith)
        if arith.name == "exact":
            ok = exact_equal(observed, expected)
        else:
            ok = bool(flint.arb(observed).overlaps(flint.arb(expected)))
        if not ok:
            raise ModelClassMismatch(
                f"the oracle is not the learned Transformer: on the fresh sequence "
                f"{X.tolist()} it answered {observed}, the learned model gives {expected}",
                query=X,
                observed=observed,
                expected=expected,
            )


# ---------------------------------------------------------------------------------------
# "direct": W from d^2 plain two-token queries inside one linear piece of the known g.
# ---------------------------------------------------------------------------------------


def _gradient_at(net: ReluNetwork, y: Vec) -> Vec | None:
    """G with g = G^T x on the open cell of y, or None if y lies on a hyperplane."""
    G = list(net.linear)
    for n, gamma in net.neurons:
        z = sum((a * b for a, b in zip(n, y, strict=True)), Fraction(0))
        if z == 0:
            return None
        if z > 0:
            G = [g + gamma * b for g, b in zip(G, n, strict=True)]
    return tuple(G)


def _same_cell(net: ReluNetwork, y: Vec, points: list[Vec]) -> bool:
    """Every point strictly on the same side of every hyperplane as y (one open cell)."""
    for n, _ in net.neurons:
        side = sum((a * b for a, b in zip(n, y, strict=True)), Fraction(0)) > 0
        for x in points:
            z = sum((a * b for a, b in zip(n, x, strict=True)), Fraction(0))
            if z == 0 or (z > 0) != side:
                return False
    return True


def _direct_design(
    net: ReluNetwork, d: int, seed: int
) -> tuple[Vec, list[Vec], list[Vec], Fraction]:
    """(G, base tokens b_j, directions u_k, t): every [b_j + t u_k; b_j] pools inside one
    open cell of g with gradient G, and every G^T u_k != 0. Checked exactly."""
    rng = np.random.default_rng(seed + 15485863)
    for _ in range(256):
        y = tuple(Fraction(int(x), 16) for x in rng.integers(-64, 65, d))
        G = _gradient_at(net, y)
        if G is not None and any(G):
            break
    else:
        raise NotIdentifiable(
            "g has no usable linear piece: every sampled cell of the learned g has gradient 0 "
            "(g = 0), so no query's answer depends on the attention weights"
        )
    # u_k = e_k, mixed with e_p (p = argmax |G_p|) where G_k is small: G^T u_k != 0.
    p = max(range(d), key=lambda i: abs(G[i]))
    U = []
    for k in range(d):
        u = [Fraction(int(i == k)) for i in range(d)]
        if k != p and 4 * abs(G[k]) < abs(G[p]):
            u[p] = Fraction(1)
        U.append(tuple(u))
    rho = Fraction(1, 4)
    for _ in range(200):
        base = [tuple(y[i] + (rho if i == j else 0) for i in range(d)) for j in range(d)]
        t = rho
        probes = [tuple(b[i] + t * u[i] for i in range(d)) for b in base for u in U]
        B = flint.fmpq_mat(d, d, [_fq(b[i]) for i in range(d) for b in base])
        if B.rank() == d and _same_cell(net, y, base + probes):
            return G, base, U, t
        rho /= 2
    raise NotIdentifiable("no design fits inside one linear piece of g (cell too thin)")


def _fq(q: Fraction) -> flint.fmpq:
    return flint.fmpq(q.numerator, q.denominator)


def _direct_attention(
    oracle: Oracle, net: ReluNetwork, seed: int, denominator_bound: int | None
) -> sympy.Matrix:
    """W from d^2 queries [b_j + t u_k; b_j]: alpha_1 = (T - G^T b_j) / (t G^T u_k) and
    logit(alpha_1) = t u_k^T W b_j; then W = U^{-T} M B^{-1} with exact U, B."""
    arith = oracle.arithmetic
    d = oracle.d
    G, base, U, t = _direct_design(net, d, seed)
    queries = [
        [[b[i] + t * u[i] for i in range(d)], list(b)] for u in U for b in base
    ]  # row k of M: direction u_k, column j: base b_j
    answers = oracle.query_many([np.array(q, dtype=object) for q in queries])
    M = []
    for idx, y in enumerate(answers):
        u, b = U[idx // d], base[idx % d]
        gb = sum((a * c for a, c in zip(G, b, strict=True)), Fraction(0))
        gu = sum((a * c for a, c in zip(G, u, strict=True)), Fraction(0))
        alpha = (y - arith.rational(gb)) / arith.rational(t * gu)
        try:
            logit = arith.logit(alpha)
        except OutsideUnitInterval as exc:
            if exc.undecided:
                raise PrecisionExhausted(
                    f"at {arith.precision} bits alpha_1 = {alpha} cannot be shown inside (0, 1)"
                ) from exc
            raise ModelClassMismatch(
                f"not a one-layer Transformer with this g: the query {queries[idx]} gives "
                f"alpha_1 = {alpha}, outside (0, 1)",
                query=queries[idx],
                observed=y,
            ) from exc
        M.append(logit / arith.rational(t))
    Ut = flint.fmpq_mat(d, d, [_fq(U[k][i]) for k in range(d) for i in range(d)])  # U^T
    Bm = flint.fmpq_mat(d, d, [_fq(base[j][i]) for i in range(d) for j in range(d)])  # B
    left = Ut.inv()  # W = U^{-T} M B^{-1}
    right = Bm.inv()
    if arith.name == "exact":
        Ms = sympy.Matrix(d, d, M)
        Wm = _sym(left) * Ms * _sym(right)
        entries = [sympy.sympify(x) for x in Wm]
        if not all(x.is_Rational for x in entries):
            raise ModelClassMismatch(
                "not a one-layer Transformer with rational W: a decoded entry is irrational",
                observed=Wm,
            )
        return sympy.Matrix(d, d, entries)
    Ma = flint.arb_mat(d, d, M)
    Wa = flint.arb_mat(left) * Ma * flint.arb_mat(right)
    D = denominator_bound if denominator_bound is not None else 2 ** ((arith.precision or 256) // 4)
    out = []
    for i in range(d):
        for j in range(d):
            lo, hi = arb_bounds(Wa[i, j])
            q = reconstruct_rational(lo, hi, D)
            if q is None:
                raise PrecisionExhausted(
                    f"at {arith.precision} bits W[{i}, {j}] = {Wa[i, j]} does not pin down a "
                    f"rational with denominator <= {D}; raise the precision"
                )
            out.append(sympy.Rational(q.numerator, q.denominator))
    return sympy.Matrix(d, d, out)


def _sym(m: flint.fmpq_mat) -> sympy.Matrix:
    return sympy.Matrix(
        m.nrows(), m.ncols(), [sympy.Rational(int(q.p), int(q.q)) for q in m.entries()]
    )
