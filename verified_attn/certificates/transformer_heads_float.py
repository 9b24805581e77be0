"""Re-check ``transformer-heads-float`` certificates (a float multi-head one-layer
Transformer) from what they state alone.

>>> import verified_attn as va
>>> from verified_attn.ffn_heads import MultiHeadTransformer
>>> heads = [([[2, 0], [0, 1]], [[1, 0], [0, 1]], [1, 0]), ([[0, -1], [1, 0]], [[1, 1], [-1, 0]], [0, 1])]
>>> box = va.Oracle(MultiHeadTransformer(heads, [[1, -1], [0, 1]], [1, 2], a=[1, -1], b=-1), "float")
>>> data = va.learn_transformer(box, max_heads=2).certificate()
>>> verify(data).ok
True
>>> data["parameter_rtol"] = {"float": (1e-12).hex()}
>>> verify(data)
Traceback (most recent call last):
...
verified_attn.errors.CertificateError: parameter_rtol 1e-12 is tighter than the heads' estimate ...

What is re-checked, with the core arithmetic and models only (never the learner's code):

1. the header: float arithmetic (rtol, unit roundoff), ``result.exact`` false, the theorem;
2. the FFN g from its stated canonical form (n_j's first nonzero entry 1, gamma_j != 0,
   distinct neurons); its stored length-1 verification answers agree with g (the float
   rule); the claimed model's ``A`` is the identity and ``w_o``, ``a``, ``b`` are exactly
   g's columns, weights, biases and constant;
3. the cells: m' + 1, each centre strictly inside its pattern's cell, its stated margin
   its least distance to a hyperplane of g (recomputed) and above ``2 margin (1 + |c|)``,
   the patterns' rows ``[1, [j in S]]`` independent, the box's stated answer at the
   centre within ``cell_rtol`` of g there; a cell with no head has g's gradient 0;
4. the matching (:func:`~.transformer_heads_float_parts.match_rows`): every cell head in one
   row, within the stated ``match_rtol`` plus both estimates of its row's reference; the
   spread recomputed;
5. the shares by least squares on the patterns, their sums corrected to g's directions
   (least-norm, split over the heads, as the learner does); the claimed V_h's columns are them (to
   1e-9 of max(1, largest)), W_h and c_h its most accurate cell's; the residual against
   g's ``l`` and ``gamma_j n_j`` recomputed and within ``share_rtol`` plus the estimate;
   the estimate recomputed (1e-9) and at most ``parameter_rtol``;
6. the counts: ``ffn`` the FFN's, each cell's centre 1 (2 when a values fit was sent on
   to the full learner), the head count of the run that learned the scores ``pairs
   (2 max_heads + 4 + noise)`` (a run cut short asks fewer), each cell's learning queries
   within its term: ``1 + 2 H d`` for a values fit (its count exactly that), ``1 + head
   count`` for a cell with no head, else ``1 + runs x (head count + float multi-head
   limit)`` at the inner unit roundoff ``min(rtol, u max(1, |T([c])|) / t)`` of the last
   run, t recomputed from the margin (largest power of two at most margin / (2 d) and 1/2,
   halved per run), plus the values probes and their centre when tried first, the cells passed over counted whole, the bound
   their sum with the FFN's, the learning count within it;
7. every stored cell-stage answer (centres, fits, cell verifications, cells passed over)
   is the claimed model's within rtol of ``max(1, |answer|)`` (the float rule with floor
   1: see :func:`~.transformer_heads_float_parts.cell_answers`), each cell phase's count its stored
   answers', each cell's centre and centre answer its stored centre query's;
8. the final verification answers agree with the claimed model (the float rule), and
   ``result.error_figures`` (numbers and bits) are recomputed
   (:mod:`~verified_attn.certificates.float_figures`).

Not re-run: the cells' float decoding (the per-cell heads are as stated) and the FFN's
line search (its bound is held only to be at least its learning count).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from verified_attn.certificates import CertificateCheck, kernel
from verified_attn.certificates.common_checks import check_phases, check_seed, passed
from verified_attn.certificates.float_figures import check_error_figures, max_gap
from verified_attn.certificates.transformer_heads import stored_per_phase
from verified_attn.certificates.transformer_heads_float_parts import (
    FloatNetwork,
    StatedCell,
    cell_answers,
    floats,
    independent_rows,
    match_rows,
    pattern_rows,
    read_cells,
    read_network,
    scalar,
    shares_of,
)
from verified_attn.errors import CertificateError, VerifiedAttnError
from verified_attn.ffn_heads import MultiHeadTransformer
from verified_attn.multi_head.head_count_float import head_count_queries
from verified_attn.multi_head.pipeline.budget import float_query_limit

__all__ = ["verify"]

KIND = "transformer-heads-float"
THEOREM = "transformer/multi-head-cells"
MAX_HEADS = 64
#: How closely recomputed least-squares figures must match the stated ones (relative).
SAME = 1e-9
TOLERANCES = ("match_rtol", "share_rtol", "cell_rtol", "margin", "ffn_tol")


def verify(data: dict[str, Any]) -> CertificateCheck:
    """Re-check a ``transformer-heads-float`` certificate; CertificateError naming what fails."""
    head = kernel.parse_header(data, KIND)
    d, arith = head.d, head.arith
    if arith.name != "float":
        raise CertificateError(f"arithmetic must be float for a {KIND} certificate")
    if head.theorem != THEOREM:
        raise CertificateError(f"theorem is {head.theorem!r:.80}, expected {THEOREM!r}")
    if kernel.get(data, "result.exact") is not False:
        raise CertificateError("result.exact must be false (a float result)")
    H0 = kernel.as_int(kernel.get(data, "max_heads"), "max_heads", low=1, high=MAX_HEADS)
    prtol = scalar(kernel.get(data, "parameter_rtol"), "parameter_rtol", arith)
    tol = {
        k: scalar(kernel.get(data, f"tolerances.{k}"), f"tolerances.{k}", arith) for k in TOLERANCES
    }
    if not 0 < prtol < 1 or not all(0 <= t < 1 for t in tol.values()):
        raise CertificateError("parameter_rtol and the tolerances must be in [0, 1)")
    g = read_network(kernel.get(data, "ffn"), d, arith)
    ffn_line = _ffn_verification(data, head, g)
    model, claimed = _claimed(data, g, d, H0)
    cells = read_cells(data, g, d, arith)
    cell_line = _cells(cells, g, tol)
    table = kernel.as_list(kernel.get(data, "matching.table"), "matching.table", len(claimed))
    for r, row in enumerate(table):
        kernel.as_list(row, f"matching.table[{r}]", len(cells))
        if not all(k is None or (isinstance(k, int) and not isinstance(k, bool)) for k in row):
            raise CertificateError(f"matching.table[{r}] must hold head indices or null")
    rows, spread = match_rows(cells, table, tol["match_rtol"])
    _same(
        scalar(kernel.get(data, "matching.spread"), "matching.spread", arith),
        spread,
        "matching.spread",
    )
    shares_line, shared = _shares(data, g, cells, rows, claimed, (prtol, tol["share_rtol"]))

    def predict(X: np.ndarray) -> float:
        return float(model.evaluate_batch(np.asarray(X, dtype=np.float64)[None])[0])

    stored, centres, worst = cell_answers(data, arith, d, predict)
    _stored_match(data, cells, stored, centres)
    count_line = _counts(data, head, g, cells, H0)

    check_seed(
        data, head.seed, "the learner draws its fresh sequences with its seed", when_verified=True
    )
    verified = kernel.check_verification(
        data, head, predict, expected_queries=kernel.get(data, "queries.by_phase").get("verify", 0)
    )
    gap = max_gap(data, arith, d, predict, 0.0) if kernel.get(data, "verification.count") else None
    figures = check_error_figures(data, arith, shared, 0.0, gap)
    lines = [
        head.describe() + f", method multi-head-cells-float, max_heads {H0}",
        ffn_line,
        f"result: {len(claimed)} heads, A = I, w_o, a, b g's",
        cell_line,
        f"matching: every cell head in one of {len(claimed)} rows within match_rtol "
        f"{tol['match_rtol']:g} plus the estimates (spread {spread:.3g}, recomputed)",
        shares_line,
        f"answers: all {sum(stored.values())} stored cell-stage answers are the claimed "
        f"model's within rtol {arith.rtol:g} of max(1, |answer|) (max gap {worst:.2e}); each "
        "cell phase's count is its stored answers'",
        count_line,
        verified,
        figures,
    ]
    return passed(head, lines)


def _same(stated: float, again: float, path: str) -> None:
    if not abs(stated - again) <= SAME * max(abs(again), 1e-300) + 1e-300:
        raise CertificateError(f"{path} is {stated:.6g}, recomputed {again:.6g}")


def _stored_match(
    data: dict[str, Any],
    cells: list[StatedCell],
    stored: dict[str, int],
    centres: dict[str, tuple[np.ndarray, float]],
) -> None:
    """Every cell phase's stated count is its stored answers'; each cell's centre and
    centre answer are its stored centre query's."""
    stored_per_phase(data, stored)
    for i, cell in enumerate(cells):
        X, y = centres.get(cell.label + "-center", (None, None))
        if X is None or X.shape[0] != 1 or not np.array_equal(X[0], cell.center):
            raise CertificateError(f"cells[{i}].center is not its stored centre query's")
        if y != cell.center_answer:
            raise CertificateError(f"cells[{i}].center_answer is not its stored answer")


def _ffn_verification(data: dict[str, Any], head: kernel.Header, g: FloatNetwork) -> str:
    """g's stored length-1 verification answers agree with g under the float rule."""
    ffn = kernel.get(data, "ffn")
    count = kernel.as_int(kernel.get(ffn, "verification.count"), "ffn.verification.count")
    if count and kernel.get(ffn, "verification.lengths") != [1]:
        raise CertificateError("ffn.verification.lengths must be [1]: g is T on length 1")
    sub = {
        "verification": {**kernel.get(ffn, "verification"), "precision": None, "bias": None},
        "queries": {"verification": count},
        "verified": count > 0,
    }
    try:
        line = kernel.check_verification(sub, head, lambda X: g.value(np.asarray(X, float)[-1]))
    except CertificateError as exc:
        raise CertificateError(f"ffn: {exc}") from exc
    return "ffn " + line


def _claimed(
    data: dict[str, Any], g: FloatNetwork, d: int, H0: int
) -> tuple[MultiHeadTransformer, list[tuple[np.ndarray, np.ndarray, np.ndarray]]]:
    """The claimed model; A = I and w_o, a, b exactly g's (item 2)."""
    arith = kernel.parse_header(data, KIND).arith
    _, w0, a0 = g.columns()
    m = len(w0)
    res = kernel.get(data, "result")
    if not np.array_equal(floats(kernel.get(res, "A"), "result.A", arith, (m, m)), np.eye(m)):
        raise CertificateError(f"result.A must be the {m} x {m} identity (the canonical form)")
    for key, want in (("w_o", w0), ("a", a0)):
        if not np.array_equal(floats(kernel.get(res, key), f"result.{key}", arith, (m,)), want):
            raise CertificateError(f"result.{key} is not the FFN's (ffn)")
    if scalar(kernel.get(res, "b"), "result.b", arith) != g.constant:
        raise CertificateError("result.b is not the FFN's constant (ffn.constant)")
    raw = kernel.as_list(kernel.get(res, "heads"), "result.heads")
    if not 1 <= len(raw) <= H0:
        raise CertificateError(f"result.heads: {len(raw)} heads, expected 1 to max_heads = {H0}")
    parts = [
        (
            floats(kernel.get(h, "W"), f"{p}.W", arith, (d, d)),
            floats(kernel.get(h, "V"), f"{p}.V", arith, (d, m)),
            floats(kernel.get(h, "c"), f"{p}.c", arith, (d,)),
        )
        for p, h in kernel.as_objects(raw, "result.heads")
    ]
    try:
        model = MultiHeadTransformer(parts, np.eye(m), w0, a=a0, b=g.constant)
    except VerifiedAttnError as exc:
        raise CertificateError(f"the claimed parameters are not a model: {exc}") from exc
    return model, parts


def _cells(cells: list[StatedCell], g: FloatNetwork, tol: dict[str, float]) -> str:
    """Item 3 beyond what reading checked: margins, independence, centre answers."""
    if not independent_rows(pattern_rows([c.pattern for c in cells])):
        raise CertificateError("cells: the patterns' rows [1, [j in S]] are dependent")
    scale = max([1.0, *np.abs(g.N).max(axis=1, initial=0.0)]) if g.width else 1.0
    for i, cell in enumerate(cells):
        floor = tol["margin"] * (1.0 + float(np.abs(cell.center).max()))
        if not cell.margin > 2 * floor:
            raise CertificateError(
                f"cells[{i}].margin {cell.margin:.3g} is not above 2 x {floor:.3g} (margin x "
                "(1 + |c|)): a float query could cross a kink"
            )
        want = g.value(cell.center)
        y0 = cell.center_answer
        if abs(y0 - want) > tol["cell_rtol"] * max(1.0, abs(y0), abs(want)):
            raise CertificateError(
                f"cells[{i}].center_answer {y0} is not g's value {want} there to cell_rtol"
            )
        if not cell.heads and np.abs(g.gradient(cell.pattern)).max() > tol["ffn_tol"] * scale:
            raise CertificateError(f"cells[{i}] has no head, but g's gradient there is not 0")
    return (
        f"cells: {len(cells)} (canonical width {g.width} + 1), centres inside their patterns' "
        "cells at their stated margins (recomputed), patterns independent, centre answers g's"
    )


def _shares(
    data: dict[str, Any],
    g: FloatNetwork,
    cells: list[StatedCell],
    rows: list[Any],
    claimed: list[tuple[np.ndarray, np.ndarray, np.ndarray]],
    rtols: tuple[float, float],
) -> tuple[str, list[tuple[np.ndarray, np.ndarray, np.ndarray]]]:
    """Item 5: the claimed heads from the shares, residual and estimate recomputed."""
    arith = kernel.parse_header(data, KIND).arith
    prtol, share_rtol = rtols
    heads, err, residual = shares_of(g, cells, rows)
    linear = bool(np.any(g.linear != 0))
    for h, ((W, c, s), (cW, cV, cc)) in enumerate(zip(heads, claimed, strict=True)):
        if not (np.array_equal(W, cW) and np.array_equal(c, cc)):
            raise CertificateError(
                f"result.heads[{h}]: W and c are not its most accurate cell's (matching row {h})"
            )
        cols = [s[j + 1] for j in range(g.width)] + ([s[0], -s[0]] if linear else [])
        want = np.stack(cols, axis=1) if cols else np.zeros_like(cV)
        scale = max(1.0, float(np.abs(want).max()))
        if not float(np.abs(cV - want).max()) <= SAME * scale:
            raise CertificateError(
                f"result.heads[{h}].V is not the heads' shares of g's directions by least "
                f"squares on the cells' patterns (off by {float(np.abs(cV - want).max()):.3g})"
            )
    scale = max(
        [1.0]
        + [float(np.abs(np.concatenate([W.ravel(), c, s.ravel()])).max()) for W, c, s in heads]
    )
    _same(
        scalar(kernel.get(data, "shares_residual"), "shares_residual", arith),
        residual,
        "shares_residual",
    )
    target = max(
        1.0,
        float(
            np.abs(
                np.vstack([g.linear[None, :], g.N]) * np.concatenate([[1.0], g.gamma])[:, None]
            ).max()
        ),
    )
    if not residual <= share_rtol + err / target:
        raise CertificateError(
            f"shares_residual {residual:.3g} is above share_rtol {share_rtol:g} plus the "
            f"estimate {err / target:.3g}"
        )
    estimate = err / scale
    told = scalar(
        kernel.get(data, "result.parameter_error_estimate"),
        "result.parameter_error_estimate",
        arith,
    )
    _same(told, estimate, "result.parameter_error_estimate")
    if not estimate <= prtol:
        raise CertificateError(
            f"parameter_rtol {prtol:g} is tighter than the heads' estimate {estimate:.3g} "
            "(recomputed from the cells' heads)"
        )
    line = (
        f"shares: V_h the least-squares shares (recomputed), residual {residual:.3g} <= "
        f"share_rtol {share_rtol:g} + estimate; parameters within parameter_rtol {prtol:g} "
        f"(estimate {estimate:.3g}, recomputed)"
    )
    return line, [(W, c, s) for W, c, s in heads]


def _cell_term(cell: StatedCell, d: int, H0: int, arith: Any, values: int) -> int:
    """A cell's queries in the bound: its centre and ``2 H d`` values probes (``values``),
    or the head count alone (``none``), or, for ``scores``, the values probes and their
    centre if they were tried (``values`` > 0) and the inner learner's bound per run at the
    inner unit roundoff of its last run (t from the margin, halved per run)."""
    if cell.fit == "none":
        return 1 + head_count_queries(H0)
    if cell.fit == "values":
        return 1 + 2 * len(cell.heads) * d
    t = 2.0 ** math.floor(math.log2(min(0.5, cell.margin / (2 * d)))) / 2 ** (cell.runs - 1)
    unit = min(
        float(arith.rtol), float(arith.unit_roundoff) * max(1.0, abs(cell.center_answer)) / t
    )
    inner = head_count_queries(H0) + float_query_limit(d, H0, affine=True, unit=unit)
    return (1 + values if values else 0) + 1 + cell.runs * inner


def _counts(
    data: dict[str, Any], head: kernel.Header, g: FloatNetwork, cells: list[StatedCell], H0: int
) -> str:
    """Item 6."""
    by_phase = kernel.get(data, "queries.by_phase")
    if not isinstance(by_phase, dict):
        raise CertificateError("queries.by_phase must be a JSON object")
    ffn_q = kernel.as_int(kernel.get(data, "ffn.queries.learning"), "ffn.queries.learning")
    ffn_bound = kernel.as_int(kernel.get(data, "ffn.queries.bound"), "ffn.queries.bound")
    if ffn_bound < ffn_q:
        raise CertificateError(f"ffn.queries.bound {ffn_bound} is below its learning count {ffn_q}")
    ffn_v = kernel.as_int(kernel.get(data, "ffn.verification.count"), "ffn.verification.count")
    if by_phase.get("ffn-verify", 0) < ffn_v:
        raise CertificateError("queries.by_phase.ffn-verify is below ffn.verification.count")
    labels = {c.label for c in cells}
    skipped = kernel.as_list(kernel.get(data, "skipped"), "skipped")
    if not all(isinstance(s, str) for s in skipped) or labels & set(skipped):
        raise CertificateError("skipped must list cell labels not among the cells used")
    known = {"ffn", "ffn-verify"}
    per_label: dict[str, int] = {}
    cell_verify = []
    for phase, n in by_phase.items():
        label = phase.split("/")[0].split(".")[0].removesuffix("-center")
        if phase in known or label not in labels | set(skipped):
            continue
        kernel.as_int(n, f"queries.by_phase.{phase}", low=1)
        if phase.endswith("/head-count") and n > head_count_queries(H0):
            raise CertificateError(
                f"queries.by_phase.{phase} is {n}; the head count at max_heads = {H0} asks "
                f"{head_count_queries(H0)}"
            )
        known.add(phase)
        if phase.endswith("/verify"):
            cell_verify.append(phase)
        if phase.endswith("/verify") and label in labels:
            continue
        per_label[label] = per_label.get(label, 0) + n
    check_phases(by_phase, known)
    skipped_q = sum(per_label.get(s, 0) for s in skipped)  # every query, verify included
    terms = {}
    for cell in cells:
        values = by_phase.get(cell.label + "/values", 0)
        tried = 1 + (cell.fit == "scores" and values > 0)  # a values fit sent on asks twice
        if by_phase.get(cell.label + "-center") != tried:
            raise CertificateError(f"queries.by_phase.{cell.label}-center must be {tried}")
        if cell.fit == "values" and values != 2 * len(cell.heads) * head.d:
            raise CertificateError(
                f"queries.by_phase.{cell.label}/values is {values}, the values fit asks "
                f"2 H d = {2 * len(cell.heads) * head.d}"
            )
        terms[cell.label] = _cell_term(cell, head.d, H0, head.arith, values)
        last = cell.label + (f".{cell.runs - 1}" if cell.runs > 1 else "")
        if cell.fit == "scores" and by_phase.get(last + "/head-count") != head_count_queries(H0):
            raise CertificateError(
                f"queries.by_phase.{last}/head-count is {by_phase.get(last + '/head-count')}; "
                f"the head count of the run that learned the scores asks "
                f"{head_count_queries(H0)} (max_heads = {H0})"
            )
        if per_label.get(cell.label, 0) > terms[cell.label]:
            raise CertificateError(
                f"queries: {cell.label} has {per_label[cell.label]} learning queries, above its "
                f"term {terms[cell.label]}"
            )
    bound = ffn_bound + sum(terms.values()) + skipped_q
    q = kernel.check_counts(
        data,
        bound=bound,
        phases={"ffn": ffn_q},
        verification_phases=("ffn-verify", *cell_verify, "verify"),
    )
    if q["learning"] > q["bound"]:
        raise CertificateError(f"queries.learning {q['learning']} is above the bound {q['bound']}")
    return (
        f"queries: {q['learning']} learning = {ffn_q} FFN + cells; bound {bound} = {ffn_bound} "
        f"(FFN) + {' + '.join(str(t) for t in terms.values())} (cells: centre + 2Hd values, "
        f"or + runs x (head count + float multi-head limit at d = {head.d}, max_heads = {H0}))"
        + (f" + {skipped_q} (cells passed over)" if skipped else "")
        + f"; {q['verification']} verification"
    )
