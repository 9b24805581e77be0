"""Learn a one-layer Transformer whose FFN has biases: the FFN first, then W in one cell.

>>> import verified_attn as va
>>> from verified_attn.models import OneLayerTransformer
>>> T = OneLayerTransformer([[1, -1], [0, 2]], [[1, 0], [1, 1]], [[1, 0], [1, -1]], [2, -1],
...                         a=[1, -2], b=3)
>>> rec = learn_biased_transformer(va.Oracle(T, "exact"))
>>> rec.W == T.W, rec.exact, rec.verified, rec.attention_queries      # d^2 = 4
(True, True, True, 4)
>>> rec.queries == rec.ffn_queries + 4, rec.parameter_count            # 4 + (m' + 1)(d + 1)
(True, 13)
>>> X = [[1, 0], [Fraction(1, 2), -3], [2, 1]]                          # never asked
>>> rec.model.evaluate(X, "exact") == T.evaluate(X, "exact")
True

With FFN biases ``T(X) = g(X^T alpha(X))`` still holds, with
``g(x) = T([x]) = w_o^T ReLU(A^T V^T x + a) + b`` a ReLU network with biases. But g is no
longer positively homogeneous, so ``T(X) - T(-X) = g(p) - g(-p)`` (p the pooled token) is
not linear in p, and the paper's antisymmetrisation does not give a single head. So:

1. g is learned exactly in canonical form from length-1 queries
   (:func:`~verified_attn.transformer.relu_biased_learner.learn_biased_relu_ffn`, count
   ``2 S + S_half + 2 C + (d - 1)(K + 1)``).
2. In one open cell of g (gradient G != 0, offset beta: g = G^T x + beta there), the
   two-token query ``[b_j + t u_k; b_j]`` pools to ``b_j + alpha_1 t u_k`` inside the cell
   (cells are convex), so ``alpha_1 = (T - G^T b_j - beta) / (t G^T u_k)`` and
   ``logit(alpha_1) = t u_k^T W b_j``: d^2 queries give ``W = U^{-T} M B^{-1}`` with exact
   U, B. The design is checked exactly to lie in the cell before any query.

The count is ``d^2 + (the FFN's)`` against ``d^2 + (m' + 1)(d + 1)`` parameters (W and the
canonical FFN; V is absorbed into the FFN's first layer, so ``rec.model`` is
``OneLayerTransformer(W, I, A', w_o', a=a', b=b')``, equal to T as a function). The learned
Transformer is verified on fresh sequences of every length in ``lengths``.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

import flint
import numpy as np
import sympy

from verified_attn.arithmetic import Arithmetic, OutsideUnitInterval, arb_bounds
from verified_attn.arithmetic import reconstruct_rational as _reconstruct
from verified_attn.certificates.writer import certificate_base
from verified_attn.errors import (
    InvalidArgument,
    ModelClassMismatch,
    NotIdentifiable,
    PrecisionExhausted,
)
from verified_attn.models import OneLayerTransformer
from verified_attn.oracle import Oracle, QueryCounts
from verified_attn.progress import check_progress, reporting
from verified_attn.recovery import TransformerRecovery
from verified_attn.serialize import dump_number, dump_rational
from verified_attn.transformer.relu_biased import BiasedReluNetwork, Vec
from verified_attn.transformer.relu_biased_learner import learn_biased_relu_ffn
from verified_attn.validation import (
    check_denominator_bound,
    check_lengths,
    check_oracle,
    check_seed,
    check_verify,
)
from verified_attn.verification import (
    DEFAULT_LENGTHS,
    DEFAULT_VERIFY,
    Verification,
    verify_candidate,
)

__all__ = ["cell_of", "learn_biased_transformer"]


def cell_of(net: BiasedReluNetwork, y: Vec) -> tuple[Vec, Fraction] | None:
    """(G, beta) with g = G^T x + beta on the open cell of y; None if y is on a hyperplane.

    >>> one = Fraction(1)
    >>> net = BiasedReluNetwork(one, (one,), ((((one,), -one), 2 * one),))   # 1 + x + 2 ReLU(x - 1)
    >>> cell_of(net, (Fraction(3),)), cell_of(net, (one,))
    (((Fraction(3, 1),), Fraction(-1, 1)), None)
    """
    G, beta = list(net.linear), net.constant
    for (n, c), gamma in net.neurons:
        z = sum((a * b for a, b in zip(n, y, strict=True)), c)
        if z == 0:
            return None
        if z > 0:
            G = [g + gamma * x for g, x in zip(G, n, strict=True)]
            beta += gamma * c
    return tuple(G), beta


def _same_cell(net: BiasedReluNetwork, y: Vec, points: list[Vec]) -> bool:
    """Every point strictly on y's side of every hyperplane (one open cell), exactly."""
    for (n, c), _ in net.neurons:
        side = sum((a * b for a, b in zip(n, y, strict=True)), c) > 0
        for p in points:
            z = sum((a * b for a, b in zip(n, p, strict=True)), c)
            if z == 0 or (z > 0) != side:
                return False
    return True


def _design(
    net: BiasedReluNetwork, d: int, seed: int
) -> tuple[Vec, Fraction, list[Vec], list[Vec], Fraction]:
    """(G, beta, base tokens b_j, directions u_k, t) inside one open cell with G != 0."""
    rng = np.random.default_rng(seed + 15485863)
    for _ in range(256):
        y = tuple(Fraction(int(x), 16) for x in rng.integers(-64, 65, d))
        cell = cell_of(net, y)
        if cell is not None and any(cell[0]):
            break
    else:
        raise NotIdentifiable(
            "g has no sampled cell with a nonzero gradient (g is constant): no answer depends "
            "on the attention weights, so W is not identifiable"
        )
    G, beta = cell
    p = max(range(d), key=lambda i: abs(G[i]))
    U = []
    for k in range(d):  # u_k = e_k, mixed with e_p where G_k is small: G^T u_k != 0
        u = [Fraction(int(i == k)) for i in range(d)]
        if k != p and 4 * abs(G[k]) < abs(G[p]):
            u[p] = Fraction(1)
        U.append(tuple(u))
    rho = Fraction(1, 4)
    for _ in range(200):
        base = [tuple(y[i] + (rho if i == j else 0) for i in range(d)) for j in range(d)]
        probes = [tuple(b[i] + rho * u[i] for i in range(d)) for b in base for u in U]
        B = flint.fmpq_mat(d, d, [_fq(b[i]) for i in range(d) for b in base])
        if B.rank() == d and _same_cell(net, y, base + probes):
            return G, beta, base, U, rho
        rho /= 2
    raise NotIdentifiable("no design fits inside one cell of g (the cell is too thin)")


def _fq(q: Fraction) -> flint.fmpq:
    return flint.fmpq(q.numerator, q.denominator)


def _attention(
    oracle: Oracle, net: BiasedReluNetwork, seed: int, D: int
) -> tuple[sympy.Matrix, dict[str, Any]]:
    """W from d^2 two-token queries inside one cell of the known g; also the design and
    the answers (flat, direction-major: answer k d + j is [b_j + t u_k; b_j])."""
    arith = oracle.arithmetic
    d = oracle.d
    G, beta, base, U, t = _design(net, d, seed)
    queries = [[[b[i] + t * u[i] for i in range(d)], list(b)] for u in U for b in base]
    answers = oracle.query_many([np.array(q, dtype=object) for q in queries])
    M = []
    for idx, y in enumerate(answers):
        u, b = U[idx // d], base[idx % d]
        gb = sum((x * z for x, z in zip(G, b, strict=True)), beta)
        gu = sum((x * z for x, z in zip(G, u, strict=True)), Fraction(0))
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
    left = flint.fmpq_mat(d, d, [_fq(U[k][i]) for k in range(d) for i in range(d)]).inv()
    right = flint.fmpq_mat(d, d, [_fq(base[j][i]) for i in range(d) for j in range(d)]).inv()
    design = {"base": base, "directions": U, "t": t, "answers": answers}
    return _decode(arith, left, M, right, D), design


def _decode(
    arith: Arithmetic, left: flint.fmpq_mat, M: list[Any], right: flint.fmpq_mat, D: int
) -> sympy.Matrix:
    """W = left M right as exact rationals (exact: simplified; certified: reconstructed)."""
    d = left.nrows()
    if arith.name == "exact":
        Wm = _sym(left) * sympy.Matrix(d, d, M) * _sym(right)
        entries = [sympy.sympify(x) for x in Wm]
        if not all(x.is_Rational for x in entries):
            raise ModelClassMismatch(
                "not a one-layer Transformer with rational W: a decoded entry is irrational",
                observed=Wm,
            )
        return sympy.Matrix(d, d, entries)
    Wa = flint.arb_mat(left) * flint.arb_mat(d, d, M) * flint.arb_mat(right)
    out = []
    for i in range(d):
        for j in range(d):
            lo, hi = arb_bounds(Wa[i, j])
            q = _reconstruct(lo, hi, D)
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


def learn_biased_transformer(
    oracle: Oracle,
    *,
    verify: int = DEFAULT_VERIFY,
    seed: int = 0,
    lengths: Sequence[int] = DEFAULT_LENGTHS,
    denominator_bound: int | None = None,
    progress: Any = False,
) -> TransformerRecovery:
    """Learn ``T(X) = w_o^T ReLU(A^T V^T X^T softmax(X W x_N) + a) + b`` exactly.

    The FFN from length-1 queries (phases ``ffn``, ``ffn-verify``), then W from d^2
    two-token queries inside one cell of the learned g (phase ``attention-direct``), then
    ``verify`` fresh sequences of each length in ``lengths`` against the learned
    Transformer (phase ``verify``). The result's parameters are ``W`` and the canonical
    FFN's ``A``, ``w_o``, ``a``, ``b``; ``method`` is "biased-direct"; ``bound`` is d^2
    plus the FFN's derived count.

    Raises :class:`NotIdentifiable` if g is constant (then T is constant and W unseen),
    :class:`ModelClassMismatch` if the oracle is no such Transformer (LayerNorm, a residual
    connection, GELU, a causal mask: the fresh sequences refute the learned model),
    :class:`InvalidArgument` for float oracles or bad arguments.
    """
    check_oracle(oracle)
    check_progress(progress)
    verify = check_verify(verify)
    seed = check_seed(seed)
    lengths = check_lengths(lengths)
    denominator_bound = check_denominator_bound(denominator_bound)
    arith = oracle.arithmetic
    if arith.name not in ("exact", "certified"):
        raise InvalidArgument(
            "learn_biased_transformer needs an oracle with arithmetic 'exact' or 'certified'; "
            f"got arithmetic={arith.name!r}"
        )
    d = oracle.d
    D = denominator_bound or 2 ** ((arith.precision or 256) // 4)
    with reporting(oracle, progress, "learn_biased_transformer"), oracle.run() as run:
        ffn = learn_biased_relu_ffn(
            oracle, verify=verify, seed=seed, lengths=(1,), denominator_bound=denominator_bound
        )
        net: BiasedReluNetwork = ffn.network
        with arith.context(), oracle.phase("attention-direct"):
            W, design = _attention(oracle, net, seed, D)
        g = net.model()
        model = OneLayerTransformer(W, sympy.eye(d), g.A, g.w_o, a=g.a, b=g.b)
        checked, refuted = verify_candidate(
            oracle, model, count=verify, seed=seed, lengths=lengths, what="the learned Transformer"
        )
        if refuted is not None:
            raise PrecisionExhausted(
                f"{refuted}: its parameters are not rationals within the denominator bound; "
                "raise the oracle's precision or give a denominator_bound"
            )
    counts = run.counts
    return TransformerRecovery.from_run(
        counts,
        theorem="transformer/biased-direct",
        parameters={"W": W, "A": g.A, "w_o": g.w_o, "a": g.a, "b": g.b},
        learned_model=model,
        arithmetic=arith.name,
        precision=arith.precision,
        exact=True,
        bound=d * d + ffn.bound,
        parameter_count=d * d + net.parameter_count,
        seed=seed,
        verification=checked,
        assumptions=list(ffn.assumptions),
        notes=list(ffn.notes),
        certificate_data=functools.partial(
            _certificate, arith, ffn, design, W, checked, seed, counts, d * d + ffn.bound, D
        ),
        method="biased-direct",
        attention_queries=counts.by_phase.get("attention-direct", 0),
        ffn_queries=ffn.queries,
        attention_bound=d * d,
        network=net,
    )


def _certificate(
    arith: Arithmetic,
    ffn: Any,
    design: dict[str, Any],
    W: sympy.Matrix,
    checked: Verification | None,
    seed: int,
    counts: QueryCounts,
    bound: int,
    D: int,
) -> dict[str, Any]:
    """The ``transformer-biased`` certificate: the FFN stage's whole ``relu-ffn-biased``
    certificate (``ffn``), the design and answers (``attention``: ``base``,
    ``directions``, ``t``, ``answers`` d x d, row k direction u_k), the denominator bound
    and the result; checker :mod:`verified_attn.certificates.transformer_biased`."""
    d = W.rows
    data = certificate_base(
        kind="transformer-biased",
        theorem="transformer/biased-direct",
        d=d,
        arith=arith,
        seed=seed,
        counts=counts,
        bound=bound,
        verification=checked,
        assumptions=list(ffn.assumptions),
    )
    sub = dict(ffn.certificate())
    sub.pop("versions", None)
    g = ffn.network.model()
    ans = design["answers"]
    data.update(
        {
            "denominator_bound": D,
            "ffn": sub,
            "attention": {
                "base": [[dump_rational(q) for q in b] for b in design["base"]],
                "directions": [[dump_rational(q) for q in u] for u in design["directions"]],
                "t": dump_rational(design["t"]),
                "answers": [[dump_number(y) for y in ans[k * d : (k + 1) * d]] for k in range(d)],
            },
            "result": {
                "exact": True,
                "parameters": {
                    "W": [[dump_rational(x) for x in row] for row in W.tolist()],
                    "A": [[dump_rational(x) for x in row] for row in g.A.tolist()],
                    "w_o": [dump_rational(x) for x in g.w_o],
                    "a": [dump_rational(x) for x in g.a],
                    "b": dump_rational(g.b),
                },
            },
        }
    )
    return data
