"""Learn a multi-head one-layer Transformer from a float oracle (float64).

>>> import numpy as np
>>> import verified_attn as va
>>> from verified_attn.ffn_heads import MultiHeadTransformer
>>> T = MultiHeadTransformer([([[2, 0], [0, 1]], [[1, 0], [0, 1]], [1, 0]),
...                           ([[0, -1], [1, 0]], [[1, 1], [-1, 0]], [0, 1])],
...                          [[1, -1], [0, 1]], [1, 2], a=[1, -1], b=-1)
>>> rec = learn_multi_head_transformer_float(va.Oracle(T, "float"), max_heads=2)
>>> rec.exact, rec.verified, rec.method, rec.model.H
(False, True, 'multi-head-cells-float', 2)
>>> X = np.array([[1.0, 0.0], [0.5, -3.0], [2.0, 1.0]])                 # never asked
>>> bool(abs(rec.model.evaluate_batch(X[None])[0] - T.evaluate_batch(X[None])[0]) < 1e-9)
True

The method of :mod:`verified_attn.transformer.multi_head_learner` in float64:

1. g(x) = T([x]) by the float FFN learner
   (:func:`~verified_attn.transformer.relu_biased_learner.learn_biased_relu_ffn`, length-1
   queries). A box rounding coarser than that learner resolves (float32) is refused first,
   as in :mod:`~verified_attn.transformer.biased_float` (:data:`RESOLUTION`).
2. m' + 1 cells of g with independent patterns and wide margins
   (:func:`~verified_attn.transformer.multi_head_float_cells.ranked_cells`); a center
   closer than :data:`~verified_attn.transformer.biased_float.MARGIN` ``(1 + |c|)`` to a
   learned hyperplane is refused (:class:`~verified_attn.errors.PrecisionExhausted`).
   On each, ``g_S(c) = T([c])`` is asked of the box (phase ``cell<i>-center``) and checked
   against the learned g to :data:`~verified_attn.transformer.biased_float.CELL_RTOL`; a
   refutation (a hyperplane beyond the FFN's line window) has g learned again on new lines
   and the cells anew, once (``FFN_ATTEMPTS``), the refuted attempt's queries counted.
   The heads' scores are learned once: on the widest cell that shows heads (once a cell
   has failed, the widest unused far cell of
   :func:`~verified_attn.transformer.multi_head_float_cells.far_cells` comes next), the float
   ``learn_multi_head`` (affine, ``max_heads``) runs on the cell's oracle
   ``Y -> (T(c + t Y) - T([c])) / t`` with t the largest power of two at most
   ``margin / (2 d)`` and 1/2, halved when the fit fails (at most ``attempts`` times) or a
   lifted probe would come within ``margin / 4`` of a hyperplane (that run is cut short
   before the probe is asked; down to ``margin / (64 d)``). Its answers carry the box's rounding over t: the inner
   oracle's unit roundoff is ``u max(1, |T([c])|) / t``. The inner heads
   ``(t^2 W_h, v_h, t (W_h c + c_h))`` are unscaled. Before a cell whose every run failed
   is passed over, the swap test of :mod:`~verified_attn.transformer.swap_witness` (phase
   ``cell<i>/swap``, 4 queries at ``s = t SWAP_SCALE``) refuses a box whose odd part under
   swapping two tokens is first order (a residual connection into the FFN; every model of
   the class has it O(s^3)) with ModelClassMismatch and that witness.
3. Every other cell needs only the known heads' values ``v_h^S``: T is linear in them
   there, and :mod:`~verified_attn.transformer.multi_head_float_values` fits them by least
   squares from ``2 H d`` probes (phase ``cell<i>/values``) at a scale-aware radius (in the
   cell, every head's score spread at most 2). This is why four heads are learned: the
   probes of a thin cell all have nearly one score per head, which a pole decoding cannot
   order (its error grows like the inverse (2H - 1)-th power of the score gaps) but a linear
   fit, whose conditioning falls only like the gaps, still solves. A fit that misses an
   answer (a head the known ones lack) sends the cell to the full learner instead, and
   the heads of the cell with the most become the known ones. Heads are matched across
   cells by the nearest ``(W_h, c_h)``: a match must be within
   :data:`MATCH_RTOL` of ``max(1, largest entry)`` and its runner-up beyond; a head absent
   from a cell has value 0 there.
4. The shares ``[L_h; M_hj]`` from ``v_h^S = L_h + sum_{j in S} gamma_j M_hj`` by least
   squares over the cells; their sums over the heads must reproduce g's l and n_j to
   :data:`SHARE_RTOL` (the residual is in ``notes``), else ModelClassMismatch.
5. The assembled :class:`~verified_attn.ffn_heads.MultiHeadTransformer` is verified on
   fresh sequences of every length with the float rule of
   :mod:`verified_attn.verification` (its refutation is ModelClassMismatch with the query).

Errors: the heads' first-order parameter estimate (each cell's ``learn_multi_head`` figures
per parameter group unscaled by :func:`~.multi_head_float_values.head_errors`) must
be at most the box's ``parameter_rtol`` relative to ``max(1, largest entry)``, else
PrecisionExhausted; it is stated in ``notes`` and ``parameters["error_estimate"]``.
Count: the FFN's queries, m' + 1 centers, learn_multi_head's float count at ``max_heads``
(its head count included) per cell it ran on, and ``2 H d`` per cell of values, against
:func:`~verified_attn.transformer.multi_head_learner.canonical_parameter_count`.
Certificate: ``transformer-heads-float``
(:mod:`~verified_attn.transformer.multi_head_float_certificate`).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterator
from typing import Any, Unpack

import numpy as np

from verified_attn.arithmetic import FloatArithmetic
from verified_attn.certificates.writer import RunRecord
from verified_attn.errors import (
    InvalidArgument,
    ModelClassMismatch,
    NotIdentifiable,
    PrecisionExhausted,
)
from verified_attn.ffn_heads import MultiHeadTransformer
from verified_attn.learner_options import CheckOptions, learner_options
from verified_attn.multi_head.canonical_learner import learn_multi_head
from verified_attn.multi_head.head_count_float import head_count_queries
from verified_attn.oracle import Oracle
from verified_attn.precision import bits_text
from verified_attn.progress import reporting
from verified_attn.recovery import TransformerRecovery
from verified_attn.transformer.biased_float import CELL_RTOL, FFN_ATTEMPTS, MARGIN, RESOLUTION
from verified_attn.transformer.multi_head_float_cells import (
    CellLeft,
    FloatCell,
    FloatCellOracle,
    far_cells,
    float_pattern_matrix,
    independent,
    ranked_cells,
)
from verified_attn.transformer.multi_head_float_certificate import float_heads_certificate
from verified_attn.transformer.multi_head_float_values import (
    fit_values,
    probe_radius,
    unscale,
    value_queries,
)
from verified_attn.transformer.multi_head_learner import (
    ASSUMPTION,
    _verified,
    canonical_parameter_count,
)
from verified_attn.transformer.relu_biased import FLOAT_TOL, BiasedReluNetwork
from verified_attn.transformer.relu_biased_learner import learn_biased_relu_ffn
from verified_attn.transformer.swap_witness import swap_probe
from verified_attn.validation import check_int, check_oracle

__all__ = ["MATCH_RTOL", "SHARE_RTOL", "learn_multi_head_transformer_float"]

METHOD = "multi-head-cells-float"
#: Heads of two cells are one head when their (W_h, c_h) agree to this, relative to
#: max(1, largest entry).
MATCH_RTOL = 1e-4
#: Cells passed over (their heads not told apart at the box's precision) before refusing.
SKIPS = 8
#: The heads' shares must sum to g's directions to this, relative to max(1, largest).
SHARE_RTOL = 1e-6
#: The swap test's scale (:mod:`~verified_attn.transformer.swap_witness`) relative to the
#: cell's first probe scale t: small enough that a class model's odd part O(s^3) is in
#: the rounding, a residual's (first order) far above it.
SWAP_SCALE = 2.0**-16
Head = tuple[np.ndarray, np.ndarray, np.ndarray, float, float]  # W_h, c_h, v_h, e_Wc, e_v
Fit = tuple[list[Head], float, int, dict[str, Any] | None]  # heads, e_Wc, term, inner record


def _precision_gate(oracle: Oracle) -> tuple[float, float]:
    """(unit roundoff, parameter_rtol) of the box; a box too coarse for the FFN learner
    is refused before any query."""
    arith = oracle.arithmetic
    unit = float(getattr(arith, "unit_roundoff", 2.0**-53))
    prtol = float(getattr(arith, "parameter_rtol", None) or arith.rtol or 0.0)
    if unit * RESOLUTION > FLOAT_TOL:
        raise PrecisionExhausted(
            f"the box's own precision is unit roundoff {unit:.3g} ({math.log2(unit):.0f} "
            f"bits; float32 is 2^-24), parameter_rtol {prtol:g}: the float biased FFN "
            f"learner decides equal pieces to {FLOAT_TOL:g} relative, which needs a unit "
            f"roundoff at most {FLOAT_TOL / RESOLUTION:.3g}, so its multi-head Transformer is "
            "not learned (with this check off, float32 blocks were refused at the FFN stage: "
            "not piecewise linear, or no ReLU network fits). It would take an FFN stage that "
            "locates kinks from answers rounded at the box's precision, or the module in "
            "float64 (dtype='float64')"
        )
    return unit, prtol


def _center(oracle: Oracle, net: BiasedReluNetwork, cell: FloatCell, i: int) -> float:
    """T([c]) asked of the box, checked against the learned g on the cell."""
    with oracle.phase(f"cell{i + 1}-center"):
        y0 = float(oracle.query_many(cell.center[None, None, :])[0])
    want = float(net.model().evaluate_batch(cell.center[None, None, :])[0])
    if abs(y0 - want) > CELL_RTOL * max(1.0, abs(y0), abs(want)):
        raise _CenterMismatch(
            f"the box disagrees with the learned g at the center {cell.center.tolist()} of "
            f"cell {i + 1}: {y0} asked, {want} learned (the float FFN learner missed a "
            "hyperplane, or the box is no one-layer Transformer); try another seed",
            query=cell.center[None, :],
            observed=y0,
            expected=want,
        )
    return y0


def _start_t(cell: FloatCell, d: int) -> float:
    """The largest power of two at most margin / (2 d) and 1/2 (the float design's tokens
    reach a few units: most lifted probes stay in the cell; a run whose probe would not is
    cut short and redone at half the scale)."""
    return 2.0 ** math.floor(math.log2(min(0.5, cell.margin / (2 * d))))


def _fit_cell(
    oracle: Oracle, net: BiasedReluNetwork, cell: FloatCell, i: int, H0: int, opts: Any
) -> Fit:
    """The heads of cell ``i`` as (W_h, c_h, v_h), their absolute error estimate, the
    cell's query bound (its center, and the inner learner's bound per attempt made) and
    the inner record of :func:`~.multi_head_float_values.unscale`."""
    verify, seed, attempts, unit, prtol = opts
    d = oracle.d
    offset = _center(oracle, net, cell, i)
    t = _start_t(cell, d)
    failure: Exception | None = None
    smallest = cell.margin / (64 * d)  # the probes' scale is not halved below this
    runs = failed = 0
    while failed < attempts and t >= smallest:
        label = f"cell{i + 1}" + (f".{runs}" if runs else "")
        runs += 1
        adapter = FloatCellOracle(oracle, net, cell, t, offset, label, cell.margin / 4, strict=True)
        rtol = float(oracle.arithmetic.rtol or 1e-6)  # a float oracle always has one
        inner_unit = min(rtol, unit * max(1.0, abs(offset)) / t)
        arith = FloatArithmetic(rtol, inner_unit, prtol)
        try:
            rec = learn_multi_head(
                adapter.attach(arith), max_heads=H0, affine=True, verify=verify, seed=seed + i
            )
        except NotIdentifiable:
            scale = max([1.0] + [float(np.abs(n).max()) for (n, _), _ in net.neurons])
            if np.abs(cell.G).max() <= FLOAT_TOL * scale:  # g's gradient 0: no head shows
                return [], 0.0, 1 + head_count_queries(H0), None  # refused at the head count
            raise
        except CellLeft:  # a probe would reach too far at this scale (not asked): half it
            failure = PrecisionExhausted(
                f"the float design's probes leave the cell at every scale down to t = {t:g}"
            )
        except (ModelClassMismatch, PrecisionExhausted) as exc:
            failure, failed = exc, failed + 1
        else:
            heads, err, inner = unscale(rec, cell, t)
            return heads, err, 1 + rec.bound * runs, inner
        t /= 2
    assert failure is not None
    if isinstance(failure, PrecisionExhausted):
        # Before passing the cell over: a box outside the class (a residual connection)
        # also ends here, and the swap test tells it apart (4 queries, counted with the cell)
        s = _start_t(cell, d) * SWAP_SCALE
        witness = swap_probe(oracle, cell.center, s, at_center=offset, seed=seed + i,
                             phase=f"cell{i + 1}/swap")
        if witness is not None:
            raise witness from failure
        raise PrecisionExhausted(f"cell {i + 1} of g: {failure}") from failure
    Y = getattr(failure, "query", None)  # the cell oracle's sequence: the box's is c + t Y
    X = None if Y is None else cell.center + t * 2 * np.asarray(Y, dtype=np.float64)
    raise ModelClassMismatch(
        f"not a multi-head Transformer (or one whose FFN is not linear on these queries, "
        f"sent within t = {t * 2:g} of the point {cell.center.tolist()} of cell {i + 1} of "
        f"g; the query is the box's sequence c + t Y, the observed value the cell oracle's "
        f"(T(c + t Y) - T([c])) / t): {failure}",
        query=X if isinstance(failure, ModelClassMismatch) else None,
        observed=getattr(failure, "observed", None),
    ) from failure


def _value_cell(
    oracle: Oracle, net: BiasedReluNetwork, cell: FloatCell, i: int, known: list[Head], opts: Any
) -> Fit | None:
    """The known heads' values on cell ``i`` by least squares
    (:mod:`~verified_attn.transformer.multi_head_float_values`, phase ``cell<i>/values``),
    with its query bound (the center and the probes); None if the fit missed an answer or a
    probe came within ``margin / 4`` of a learned hyperplane (the caller then runs the full
    learner on the cell)."""
    seed, unit, prtol = opts[1], opts[3], opts[4]
    offset = _center(oracle, net, cell, i)
    scores = [(h[0], h[1]) for h in known]
    r = probe_radius(cell, scores)
    adapter = FloatCellOracle(
        oracle, net, cell, r, offset, f"cell{i + 1}", cell.margin / 4, phase="values"
    )
    rtol = float(oracle.arithmetic.rtol or 1e-6)
    arith = FloatArithmetic(rtol, min(rtol, unit * max(1.0, abs(offset)) / r), prtol)
    fit = fit_values(adapter.evaluate_batch, cell, scores, r, arith, seed + i)
    if fit is None or adapter.left is not None:
        return None
    values, err = fit
    heads = [(W, c, v, e_wc, err) for (W, c, _, e_wc, _), v in zip(known, values, strict=True)]
    return heads, max(h[3] for h in known), 1 + value_queries(oracle.d, len(known)), None


def _key(head: Head) -> np.ndarray:
    return np.concatenate([head[0].ravel(), head[1]])


def _match(fits: list[list[Head]]) -> tuple[list[list[Head | None]], float]:
    """Per head (first seen in the cell with the smallest (W_h, c_h) error: cells are taken
    in that order), its match in every cell (None: absent), and the largest distance of a
    match. Heads match when their (W_h, c_h) agree within MATCH_RTOL of max(1, largest
    entry) plus both cells' error estimates, and no other head does."""
    order = sorted(range(len(fits)), key=lambda i: max([h[3] for h in fits[i]], default=0.0))
    refs: list[Head] = []
    table: list[list[Head | None]] = []
    spread = 0.0
    for i in order:
        for head in fits[i]:
            key = _key(head)
            scale = max(1.0, float(np.abs(key).max()))
            tol = [MATCH_RTOL * scale + r[3] + head[3] for r in refs]
            dist = [float(np.abs(key - _key(r)).max()) for r in refs]
            near = [k for k in range(len(refs)) if dist[k] <= tol[k]]
            if len(near) > 1 or (near and table[near[0]][i] is not None):
                raise PrecisionExhausted(
                    f"a head of cell {i + 1} is within the matching tolerance (MATCH_RTOL = "
                    f"{MATCH_RTOL:g} plus the cells' estimates) of two heads: the heads are "
                    "not told apart at this precision"
                )
            if near:
                table[near[0]][i] = head
                spread = max(spread, dist[near[0]])
            else:
                refs.append(head)
                table.append([None] * len(fits))
                table[-1][i] = head
    return table, spread


def _shares(
    net: BiasedReluNetwork, cells: list[FloatCell], table: list[list[Head | None]]
) -> tuple[list[tuple[np.ndarray, np.ndarray, np.ndarray]], float, float]:
    """Per head (W_h, c_h of its most accurate cell, shares rows [L_h; M_h1..] by least
    squares), the heads' absolute error estimate, and the relative residual of the shares'
    sums against g's l and n_j."""
    Pi = np.linalg.pinv(float_pattern_matrix(cells))
    gammas = np.array([1.0] + [g for _, g in net.neurons], dtype=np.float64)
    d = net.d
    out = []
    err = 0.0
    for row in table:
        V = np.array([np.zeros(d) if h is None else h[2] for h in row])
        e_v = max(h[4] for h in row if h is not None)
        shares = Pi @ V / gammas[:, None]  # rows: L_h, then gamma_j M_hj / gamma_j
        best = min((h for h in row if h is not None), key=lambda h: h[3])
        out.append((best[0], best[1], shares))
        err = max(err, best[3], float(np.abs(Pi).sum(axis=1).max()) * e_v)
    # Checked as gamma_j n_j (the products the predictions use; see float_pattern_matrix).
    target = np.array([net.linear] + [n for (n, _), _ in net.neurons], dtype=np.float64)
    target = target * gammas[:, None]
    total = sum((s * gammas[:, None] for _, _, s in out), np.zeros_like(target))
    scale = max(1.0, float(np.abs(target).max()))
    residual = float(np.abs(total - target).max()) / scale
    if residual > SHARE_RTOL + err / scale:
        raise ModelClassMismatch(
            f"not a multi-head Transformer with these neurons: the heads' shares of g's "
            f"directions sum to them only within {residual:.3g} (relative), above "
            f"SHARE_RTOL = {SHARE_RTOL:g} plus their estimate (two neurons sharing one "
            "length-1 hyperplane?)",
            observed=total,
            expected=target,
        )
    # The shares' sums are g's directions, which the length-1 FFN learner knows better than
    # any cell's values: the least-norm change that makes them so exactly (split over the
    # heads) keeps the model's length-1 answers at g's accuracy.
    fix = (target - total) / (len(out) * gammas[:, None])
    return [(W, c, s + fix) for W, c, s in out], err, residual


def _assemble(net: BiasedReluNetwork, heads: list[Any]) -> MultiHeadTransformer:
    """Heads (W_h, V_h, c_h), V_h's columns g's FFN columns (neurons, then l, -l); A = I."""
    g = net.model()
    linear = any(x != 0 for x in net.linear)
    parts = []
    for W, c, shares in heads:
        cols = [shares[j + 1] for j in range(net.width)]
        if linear:
            cols += [shares[0], -shares[0]]
        V = np.stack(cols, axis=1) if cols else np.zeros((net.d, 1))
        parts.append((W, V, c))
    if not parts:
        parts = [(np.zeros((net.d, net.d)), np.zeros((net.d, g.m)), np.zeros(net.d))]
    return MultiHeadTransformer(parts, np.eye(g.m), g.w_o, a=g.a, b=g.b)


def learn_multi_head_transformer_float(
    oracle: Oracle,
    *,
    max_heads: int,
    attempts: int = 3,
    **options: Unpack[CheckOptions],
) -> TransformerRecovery:
    """Learn ``T(X) = w_o^T ReLU(A^T sum_h V_h^T X^T alpha_h(X) + a) + b`` from a float box.

    Phases: ``ffn``, ``ffn-verify``, ``cell<i>-center``, ``cell<i>/<inner phase>``,
    ``verify``. Parameters: ``heads`` (float (W_h, V_h, c_h)), g's ``A``, ``w_o``, ``a``,
    ``b``, and ``error_estimate``. Raises PrecisionExhausted (float32 boxes, thin cells,
    heads not told apart, an estimate above ``parameter_rtol``), ModelClassMismatch with
    the refuting query (or the swap test's four sequences and answers) for a box outside
    the class, NotIdentifiable if g is constant.
    """
    check_oracle(oracle)
    verify, seed, lengths, _, progress = learner_options(
        "learn_multi_head_transformer_float", options, CheckOptions
    )
    if oracle.arithmetic.name != "float":
        raise InvalidArgument("learn_multi_head_transformer_float needs a float oracle")
    H0 = check_int(max_heads, "max_heads", low=1)
    attempts = check_int(attempts, "attempts", low=1)
    unit, prtol = _precision_gate(oracle)
    spent, reasons = 0, []  # learning queries and reasons of the attempts refuted
    with reporting(oracle, progress, "learn_transformer"), oracle.run() as outer:
        for attempt in range(FFN_ATTEMPTS):
            with oracle.run() as run:
                try:  # the FFN on new lines per attempt (seed + 7919 k, as biased_float)
                    stages = _attempt(oracle, H0, (verify, seed, attempts, unit, prtol), attempt)
                except _CenterMismatch as exc:
                    reasons.append(str(exc))
                    if attempt + 1 == FFN_ATTEMPTS:
                        raise ModelClassMismatch(
                            f"{FFN_ATTEMPTS} learned FFNs were each refuted at a cell's "
                            "center: " + "; ".join(reasons),
                            query=exc.query,
                            observed=exc.observed,
                            expected=exc.expected,
                        ) from exc
                    spent += run.counts.learning
                    continue
                ffn, net, cells, fits, skipped, (table, spread, residual), heads, estimate = stages
                model = _assemble(net, heads)
                checked = _verified(oracle, model, verify, seed, lengths)
            break
    bound = spent + ffn.bound + sum(f[2] for f in fits) + skipped
    errors = (estimate, spread, residual)
    stages = (ffn, net, cells, bound, seed)
    rec = _result(oracle, (outer, run), stages, model, H0, errors, checked)
    rec.notes.extend(
        f"FFN {i + 1} refuted at a cell's center, learned again on new lines "
        f"({spent} learning queries counted with the attention's): {r}"
        for i, r in enumerate(reasons)
    )
    # The certificate is the last attempt's run (its transcript, counts and bound).
    record = RunRecord(oracle.arithmetic, seed, run.counts, bound - spent, checked, rec.assumptions)
    names = ("match_rtol", "share_rtol", "cell_rtol", "margin", "ffn_tol")
    values = (MATCH_RTOL, SHARE_RTOL, CELL_RTOL, MARGIN, FLOAT_TOL)
    tolerances = dict(zip(names, values, strict=True))
    rec.certificate_data = functools.partial(
        float_heads_certificate,
        record,
        (ffn, net, cells, fits),
        (table, spread, residual),
        (model, heads, estimate),
        (H0, prtol, tolerances),
        _cell_entries(oracle, run.counts),
    )
    return rec


class _CenterMismatch(ModelClassMismatch):
    """The box disagrees with the learned g at a cell's center (an FFN learned on new lines
    may see the hyperplane this one missed)."""


def _attempt(oracle: Oracle, H0: int, opts: Any, attempt: int) -> tuple[Any, ...]:
    """One attempt: the FFN (on the lines of seed + 7919 ``attempt``), the cells and their
    fits, the heads' match and shares, and their relative error estimate (checked)."""
    verify, seed, _, _, prtol = opts
    ffn_seed = seed + 7919 * attempt
    ffn = learn_biased_relu_ffn(oracle, verify=verify, seed=ffn_seed, lengths=(1,))
    net: BiasedReluNetwork = ffn.network
    with oracle.arithmetic.context():
        cells, fits, skipped = _fitted_cells(oracle, net, H0, opts)
    table, spread = _match([f[0] for f in fits])
    heads, err, residual = _shares(net, cells, table)
    estimate = err / max(
        [1.0]
        + [float(np.abs(np.concatenate([W.ravel(), c, s.ravel()])).max()) for W, c, s in heads]
    )
    if not estimate <= prtol:
        raise PrecisionExhausted(
            f"the heads' first-order error estimate {estimate:.3g} (relative to max(1, "
            f"largest entry)) exceeds the box's parameter_rtol {prtol:g}"
        )
    return ffn, net, cells, fits, skipped, (table, spread, residual), heads, estimate


def _cell_entries(oracle: Oracle, counts: Any) -> list[Any]:
    """This run's transcript entries of the cell phases (the run's queries are the last)."""
    total = counts.learning + counts.verification
    return [e for e in oracle.transcript[-total:] if e.phase.startswith("cell")]


def _cell_order(net: BiasedReluNetwork, seed: int, far_wanted: Any) -> Iterator[FloatCell]:
    """The cells of g widest first (:func:`ranked_cells`), except that while no cell has
    given the heads' scores and one has failed (``far_wanted()``), the next is the widest
    unused far cell (:func:`far_cells`)."""
    far = far_cells(net, seed)
    for cell in ranked_cells(net, seed):
        while far and far_wanted():
            yield far.pop(0)
        yield cell


def _fitted_cells(
    oracle: Oracle, net: BiasedReluNetwork, H0: int, opts: Any
) -> tuple[list[FloatCell], list[Fit], int]:
    """m' + 1 cells with independent patterns, each fitted, tried widest first
    (:func:`_cell_order`); a cell whose fit is PrecisionExhausted or NotIdentifiable (too
    thin for its heads to be told apart) is passed over for the next, at most
    :data:`SKIPS` times. Each center keeps MARGIN (1 + |c|) x 2 from every hyperplane.
    Returns the cells, their fits and the queries of the cells passed over."""
    chosen: list[FloatCell] = []
    fits: list[Fit] = []
    failures: list[Exception] = []
    skipped = 0  # every query of the cells passed over (their fits give no bound)
    known: list[Head] = []  # the heads of the cell fitted with the most, once one has
    # far cells are wanted while a cell has failed and none has given the heads' scores
    wanted = lambda: bool(failures) and not any(f[0] for f in fits)  # noqa: E731
    for cell in _cell_order(net, opts[1], wanted):
        if len(chosen) == net.width + 1 or len(failures) > SKIPS:
            break
        if not independent(chosen, cell):
            continue
        floor = MARGIN * (1.0 + float(np.abs(cell.center).max()))
        if cell.margin <= 2 * floor:
            failures.append(
                PrecisionExhausted(
                    f"the widest remaining cell of g (pattern {cell.pattern}) is {cell.margin:.3g} "
                    f"wide at {cell.center.tolist()}: not above 2 x {floor:.3g} (MARGIN x (1 + |c|)),"
                    " so float rounding could carry a query across a kink"
                )
            )
            break
        i, before = len(chosen) + len(failures), oracle.queries
        try:
            fit = _value_cell(oracle, net, cell, i, known, opts) if known else None
            if fit is None:  # no heads known yet, or not all of this cell's: the full learner
                spent = oracle.queries - before
                fit = _fit_cell(oracle, net, cell, i, H0, opts)
                fit = (fit[0], fit[1], fit[2] + spent, fit[3])
                if len(fit[0]) > len(known):
                    known = fit[0]
        except (PrecisionExhausted, NotIdentifiable) as exc:
            failures.append(exc)
            skipped += oracle.queries - before
            continue
        fits.append(fit)
        chosen.append(cell)
    if len(chosen) < net.width + 1:
        if failures:
            raise PrecisionExhausted(
                f"{len(chosen)} of the {net.width + 1} cells of g needed were learned; "
                f"{len(failures)} passed over: " + "; ".join(str(f) for f in failures)
            ) from failures[-1]
        raise NotIdentifiable(
            f"found {len(chosen)} cells of g with independent patterns, {net.width + 1} needed"
        )
    return chosen, fits, skipped


def _result(
    oracle: Oracle,
    runs: tuple[Any, Any],
    stages: tuple[Any, BiasedReluNetwork, list[FloatCell], int, int],
    model: MultiHeadTransformer,
    H0: int,
    errors: tuple[float, float, float],
    checked: Any,
) -> TransformerRecovery:
    ffn, net, cells, bound, seed = stages
    estimate, spread, residual = errors
    arith = oracle.arithmetic
    d = oracle.d
    counts = runs[0].counts  # every attempt's; the cells are the last attempt's
    g = net.model()
    H = model.H
    count = canonical_parameter_count(d, H, net.width)
    valued = sum(1 for k in runs[1].counts.by_phase if k.endswith("/values"))
    return TransformerRecovery.from_run(
        counts,
        theorem="transformer/multi-head-cells",
        parameters={
            "heads": list(zip(model._W_float, model._V_float, model._c_float, strict=True)),
            "A": g.A,
            "w_o": g.w_o,
            "a": g.a,
            "b": g.b,
            "error_estimate": estimate,
        },
        learned_model=model,
        arithmetic=arith.name,
        precision=arith.precision,
        exact=False,
        bound=bound,
        parameter_count=count,
        seed=seed,
        verification=checked,
        assumptions=[*ffn.assumptions, ASSUMPTION],
        notes=[
            *ffn.notes,
            f"multi-head cells (float): {len(cells)} cells of g (width {net.width}): "
            f"{len(cells) - valued} learned by the float learn_multi_head (affine, "
            f"max_heads={H0}), {valued} by least squares on the known heads' values; "
            f"{H} heads found; "
            f"{counts.learning} learning queries against {count} free parameters",
            f"heads' parameter error estimate {bits_text(estimate)} (relative to max(1, "
            f"largest entry); matched across cells within MATCH_RTOL = {MATCH_RTOL:g}, "
            f"spread {spread:.3g}); shares' residual {residual:.3g} <= {SHARE_RTOL:g}",
        ],
        certificate_data=None,
        method=METHOD,
        attention_queries=counts.learning - ffn.queries,
        ffn_queries=ffn.queries,
        attention_bound=bound - ffn.bound,
        network=net,
    )
