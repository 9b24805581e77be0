"""Learn a multi-head one-layer Transformer: the FFN first, then the heads cell by cell.

>>> from fractions import Fraction
>>> import verified_attn as va
>>> from verified_attn.ffn_heads import MultiHeadTransformer
>>> T = MultiHeadTransformer([([[1, 0], [0, -1]], [[1, 0], [0, 1]]),
...                           ([[0, 1], [1, 0]], [[1, 1], [-1, 0]])],
...                          [[1, 0], [0, 1]], [1, -1], a=[1, 1], b=2)
>>> rec = learn_multi_head_transformer(va.Oracle(T, "exact"), max_heads=2)
>>> rec.exact, rec.verified, rec.method, rec.model.H
(True, True, 'multi-head-cells', 2)
>>> X = [[1, 0], [Fraction(1, 2), -3], [2, 1]]                          # never asked
>>> rec.model.evaluate(X, "exact") == T.evaluate(X, "exact")
True

``T(X) = w_o^T ReLU(A^T h(X) + a) + b`` with ``h(X) = sum_h V_h^T X^T alpha_h(X)``
(:class:`~verified_attn.ffn_heads.MultiHeadTransformer`). For length 1 every alpha_h is 1,
so ``g(x) = T([x])`` is a ReLU network in x: step 1 learns it in canonical form
(:func:`~verified_attn.transformer.relu_biased_learner.learn_biased_relu_ffn`),

    g(x) = beta + l^T x + sum_j gamma_j ReLU(n_j^T x + c_j).

On each open cell S of g (activation pattern fixed) T is, near a point c of the cell, an
affine multi-head attention function plus a constant
(:mod:`~verified_attn.transformer.multi_head_cells`): head h has value
``v_h^S = L_h + sum_{j in S} gamma_j M_hj``, where ``M_hj`` is head h's share of neuron j's
direction (``sum_h M_hj = n_j``) and ``L_h`` its share of l. Step 2 runs the public
:func:`~verified_attn.multi_head.canonical_learner.learn_multi_head` (affine, ``max_heads``)
on the cell's oracle ``Y -> (T(c + t Y) - g_S(c)) / t`` for m' + 1 cells whose patterns are
independent; heads are matched across cells by their exact (W_h, c_h). Step 3 solves the
pattern system for every L_h and M_hj exactly, and the learned Transformer

    heads (W_h, V_h, c_h) with V_h = [M_h1 .. M_hm', L_h, -L_h] (the columns of g's FFN),
    A = I, and g's canonical w_o, a, b

is verified on fresh sequences of every length in ``lengths``. ``t`` starts from the cell's
margin and is quartered when a cell's fit is refuted (the queries left the cell).

Assumptions, stated on every result: distinct neurons of the box have distinct length-1
hyperplanes (two neurons fed by different heads but with one hyperplane at length 1 merge
in g; the model learned from g is then returned only if the fresh sequences agree).
Count: the FFN's queries plus, per cell, learn_multi_head's affine count at d and
``max_heads``, against the canonical form's free numbers
``H'(d^2 + d) + (H' - 1) d (m' + 1) + (m' + 1)(d + 1)``.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from fractions import Fraction
from typing import Any, Unpack

import sympy

from verified_attn.arithmetic import CertifiedArithmetic
from verified_attn.certificates.writer import RunRecord
from verified_attn.errors import ModelClassMismatch, NotIdentifiable, PrecisionExhausted
from verified_attn.ffn_heads import MultiHeadTransformer
from verified_attn.learner_options import ExactOptions
from verified_attn.multi_head.canonical_bounds import canonical_query_limit
from verified_attn.multi_head.canonical_learner import learn_multi_head
from verified_attn.oracle import Oracle
from verified_attn.progress import reporting
from verified_attn.recovery import TransformerRecovery
from verified_attn.transformer.common import learner_arguments, length_one_ffn, verify_learned
from verified_attn.transformer.multi_head_cells import (
    Cell,
    CellOracle,
    pattern_matrix,
    spanning_cells,
)
from verified_attn.transformer.multi_head_certificate import THEOREM, heads_certificate
from verified_attn.transformer.relu_biased import BiasedReluNetwork
from verified_attn.transformer.relu_biased_learner import learn_biased_relu_ffn
from verified_attn.validation import check_int

__all__ = ["canonical_parameter_count", "learn_multi_head_transformer"]

METHOD = "multi-head-cells"
ASSUMPTION = (
    "distinct neurons have distinct length-1 hyperplanes (the FFN learned from length-1 "
    "queries has every neuron of the box)"
)
#: Bits of the cell learners' balls when the box is exact (its answers are exact, so any
#: precision encloses them; the reconstruction's denominator bound is 2^(bits / 4)).
INNER_PRECISION = 1024
#: The canonical learner's NotIdentifiable when no pair has a pole (the function is 0).
DEGREE_ZERO = "no pair gives a certified rational function of degree >= 1"
Key = tuple[tuple[sympy.Rational, ...], tuple[sympy.Rational, ...]]  # (W_h, c_h) entries


def canonical_parameter_count(d: int, heads: int, width: int) -> int:
    """Free numbers of the learned form: per head W_h, c_h; the heads' shares of g's m' + 1
    directions less one head's (their sum is g's); g's canonical ``(m' + 1)(d + 1)``.

    >>> canonical_parameter_count(2, 2, 2)
    27
    """
    return heads * (d * d + d) + max(heads - 1, 0) * d * (width + 1) + (width + 1) * (d + 1)


def learn_multi_head_transformer(
    oracle: Oracle,
    *,
    max_heads: int,
    attempts: int = 3,
    **options: Unpack[ExactOptions],
) -> TransformerRecovery:
    """Learn ``T(X) = w_o^T ReLU(A^T sum_h V_h^T X^T alpha_h(X) + a) + b`` exactly.

    ``max_heads``: an upper bound on the number of heads. Phases: ``ffn`` and
    ``ffn-verify`` (the length-1 function), ``cell<i>/<inner phase>`` (learn_multi_head on
    cell i), ``verify`` (fresh sequences of each length in ``lengths`` against the learned
    model). Exact or certified oracles only. The result's ``parameters``: ``heads`` (the
    learned (W_h, V_h, c_h), canonical order) and g's canonical ``A``, ``w_o``, ``a``,
    ``b``; ``method`` "multi-head-cells"; ``network`` the canonical g.

    Raises :class:`ModelClassMismatch` with the refuting query if the box is not such a
    Transformer (a residual connection, LayerNorm, ...), :class:`NotIdentifiable` if g is
    constant on every sampled point, :class:`InvalidArgument` for bad arguments.
    """
    opts = learner_arguments(oracle, "learn_transformer", options)
    verify, seed, lengths, denominator_bound, progress = opts
    H0 = check_int(max_heads, "max_heads", low=1)
    attempts = check_int(attempts, "attempts", low=1)
    arith = oracle.arithmetic
    d = oracle.d
    with reporting(oracle, progress, "learn_transformer"), oracle.run() as run:
        ffn = length_one_ffn(learn_biased_relu_ffn, oracle, opts)
        net: BiasedReluNetwork = ffn.network
        cells = spanning_cells(net, seed)
        adapters: list[CellOracle] = []  # every cell oracle asked, for the certificate
        fits = [
            _fit_cell(oracle, cell, i, H0, verify, seed, denominator_bound, attempts, adapters)
            for i, cell in enumerate(cells)
        ]
        heads = _solve_shares(net, cells, fits)
        model = _assemble(net, heads)
        checked = _verified(oracle, model, verify, seed, lengths)
    counts = run.counts
    per_cell = canonical_query_limit(d, H0, affine=True)
    bound = ffn.bound + len(cells) * per_cell
    g = net.model()
    params = {"A": g.A, "w_o": g.w_o, "a": g.a, "b": g.b}
    H = len(heads)
    assumptions = [*ffn.assumptions, ASSUMPTION]
    record = RunRecord(arith, seed, counts, bound, checked, assumptions)
    return TransformerRecovery.from_run(
        counts,
        theorem=THEOREM,
        parameters={"heads": model.heads, **params},
        learned_model=model,
        arithmetic=arith.name,
        precision=arith.precision,
        exact=True,
        bound=bound,
        parameter_count=canonical_parameter_count(d, H, net.width),
        seed=seed,
        verification=checked,
        assumptions=assumptions,
        certificate_data=functools.partial(
            heads_certificate, record, ffn, cells, adapters, model, H0, _cell_precision(oracle)
        ),
        notes=[
            *ffn.notes,
            f"multi-head cells: {len(cells)} cells of g (width {net.width}), each learned by "
            f"learn_multi_head (affine, max_heads={H0}, at most {per_cell} queries); "
            f"{H} heads found; {counts.learning} learning queries against "
            f"{canonical_parameter_count(d, H, net.width)} free parameters",
        ],
        method=METHOD,
        attention_queries=counts.learning - ffn.queries,
        ffn_queries=ffn.queries,
        attention_bound=len(cells) * per_cell,
        network=net,
    )


def _verified(oracle: Oracle, model: Any, verify: int, seed: int, lengths: Sequence[int]) -> Any:
    """The fresh sequences against the learned model; a refutation names the assumption."""
    try:
        return verify_learned(
            oracle,
            model,
            count=verify,
            seed=seed,
            lengths=lengths,
            what="the learned multi-head Transformer",
        )
    except ModelClassMismatch as exc:
        raise ModelClassMismatch(
            f"{exc} (not a multi-head Transformer, or one outside the learner's assumption: "
            f"{ASSUMPTION})",
            query=exc.query,
            observed=exc.observed,
            expected=exc.expected,
        ) from exc


def _cell_precision(oracle: Oracle) -> int | None:
    """The bits a certified box is asked at in the cells (None: its own precision).

    The cell's scores are t^2 u^T W_h b: its poles crowd near -1, and the scores' rationals
    carry t^-2 in their denominators. An exact box's answers are enclosed at 1024 bits. A
    certified box over one of our models is asked at those bits too (as the fresh
    verification asks at a raised precision); a black box at its own.
    """
    arith = oracle.arithmetic
    raise_to = arith.name == "certified" and oracle.can_raise_precision
    raise_to = raise_to and (arith.precision or 0) < INNER_PRECISION
    return INNER_PRECISION if raise_to else None


def _fit_cell(
    oracle: Oracle,
    cell: Cell,
    i: int,
    H0: int,
    verify: int,
    seed: int,
    denominator_bound: int | None,
    attempts: int,
    adapters: list[CellOracle],
) -> dict[Key, sympy.Matrix]:
    """The heads of cell ``i``: {(W_h, c_h): v_h^S} from learn_multi_head on its oracle;
    dead heads are absent. A failed fit (the queries may have left the cell) is retried
    with t quartered; after ``attempts`` the box is refused with the failing query. Every
    cell oracle made is appended to ``adapters``."""
    arith = oracle.arithmetic
    raise_to = _cell_precision(oracle) is not None
    if arith.name == "exact" or raise_to:
        inner_arith: Any = CertifiedArithmetic(INNER_PRECISION)
    else:
        inner_arith = arith
    t = _start_t(cell)
    for attempt in range(attempts):
        label = f"cell{i + 1}" + (f".{attempt}" if attempt else "")
        adapter = CellOracle(oracle, cell, t, label, INNER_PRECISION if raise_to else None)
        adapters.append(adapter)
        inner = adapter.attach(inner_arith)
        try:
            rec = learn_multi_head(
                inner,
                max_heads=H0,
                verify=verify,
                seed=seed + i,
                affine=True,
                denominator_bound=denominator_bound,
            )
        except NotIdentifiable as exc:
            if not str(exc).startswith(DEGREE_ZERO):
                raise
            if not any(cell.G) and adapter.all_zero():
                return {}  # every head's value is 0 on this cell: none shows there
            failure: Exception = exc
            why = "no design pair shows a softmax mix (no head), yet the answers less g are not 0"
            witness = adapter.witness()
        except (ModelClassMismatch, PrecisionExhausted) as exc:
            failure, why = exc, str(exc)
            witness = adapter.lifted(getattr(exc, "query", None))
        else:
            if rec.parameters["beta"] == 0:
                return _unscale(rec.parameters["heads"], cell, t)
            failure, witness = ModelClassMismatch(""), adapter.witness()
            why = f"the answers less g have the output bias {rec.parameters['beta']} (a "
            why += "multi-head function has none)"
        t /= 4
    if isinstance(failure, PrecisionExhausted):
        raise PrecisionExhausted(f"cell {i + 1} of g: {failure}") from failure
    X, y = witness
    raise ModelClassMismatch(
        f"not a multi-head Transformer (or one whose FFN is not linear on these queries, "
        f"sent within t = {t * 4} of a point of cell {i + 1} of g): {why}; query "
        f"{None if X is None else [[str(q) for q in r] for r in X]} -> {y}",
        query=X,
        observed=y,
    ) from failure


def _start_t(cell: Cell) -> Fraction:
    """A power of two below the cell's margin over 4 d (inner tokens stay below 2)."""
    bound = cell.margin / (8 * len(cell.center))
    t = Fraction(1, 2)
    while t > bound:
        t /= 2
    return t


def _unscale(heads: Any, cell: Cell, t: Fraction) -> dict[Key, sympy.Matrix]:
    """Inner heads (t^2 W_h, v_h, t (W_h c + c_h)) back to {(W_h, c_h): v_h}."""
    tq = sympy.Rational(t.numerator, t.denominator)
    center = sympy.Matrix([sympy.Rational(x.numerator, x.denominator) for x in cell.center])
    out: dict[Key, sympy.Matrix] = {}
    for W_in, v, c_in in heads:
        W = W_in / tq**2
        c = c_in / tq - W * center
        out[(tuple(W), tuple(c))] = sympy.Matrix(v)
    return out


def _solve_shares(
    net: BiasedReluNetwork, cells: list[Cell], fits: list[dict[Key, sympy.Matrix]]
) -> dict[Key, list[sympy.Matrix]]:
    """Per head, [L_h, M_h1, .., M_hm'] from ``v_h^S = L_h + sum_{j in S} gamma_j M_hj``
    over the cells (one exact solve); checked to sum to g's l and n_j over the heads."""
    P_inv = pattern_matrix(cells, net).inv()
    P_sym = sympy.Matrix(
        P_inv.nrows(), P_inv.ncols(), [sympy.Rational(int(q.p), int(q.q)) for q in P_inv.entries()]
    )
    d = net.d
    keys = sorted({k for fit in fits for k in fit})
    out: dict[Key, list[sympy.Matrix]] = {}
    for key in keys:
        rows = sympy.Matrix([list(fit.get(key, sympy.zeros(d, 1))) for fit in fits])
        shares = P_sym * rows  # row 0: L_h; row j: M_hj
        out[key] = [shares.row(r).T for r in range(shares.rows)]
    wanted = [list(net.linear)] + [list(n) for (n, _), _ in net.neurons]
    for r, target in enumerate(wanted):
        total = sum((out[k][r] for k in keys), sympy.zeros(d, 1))
        if list(total) != [sympy.Rational(q.numerator, q.denominator) for q in target]:
            raise ModelClassMismatch(
                "not a multi-head Transformer with these neurons: the heads' shares of "
                f"{'the linear part' if r == 0 else f'neuron {r}'} of g sum to "
                f"{list(total)}, not {target} (two neurons sharing one length-1 hyperplane?)"
            )
    return out


def _assemble(net: BiasedReluNetwork, heads: dict[Key, list[sympy.Matrix]]) -> Any:
    """The learned Transformer: V_h's columns follow g's FFN columns (neurons, then l, -l)."""
    g = net.model()
    d = net.d
    linear = any(x != 0 for x in net.linear)
    parts = []
    for (W, c), shares in heads.items():
        cols = [shares[j + 1] for j in range(net.width)]
        if linear:
            cols += [shares[0], -shares[0]]
        if not cols:
            cols = [sympy.zeros(d, 1)]
        V = sympy.Matrix.hstack(*cols)
        parts.append((sympy.Matrix(d, d, list(W)), V, list(c)))
    if not parts:  # every head dead: T = g's constant
        parts = [(sympy.zeros(d, d), sympy.zeros(d, g.m), [0] * d)]
    if all(not any(c) for _, _, c in parts):  # no score bias: the bias-free heads
        return MultiHeadTransformer(
            [(W, V) for W, V, _ in parts], sympy.eye(g.m), g.w_o, a=g.a, b=g.b
        )
    return MultiHeadTransformer(parts, sympy.eye(g.m), g.w_o, a=g.a, b=g.b)
