"""The canonical multi-head learner in float arithmetic (float64 decoding, refined, verified).

>>> import verified_attn as va
>>> from verified_attn.multi_head.canonical_learner import learn_multi_head
>>> rec = learn_multi_head(va.Oracle(va.SingleHeadAttention([[1]], [2]), "float"), heads=1)
>>> rec.exact, rec.verified, abs(float(rec.heads[0][1][0]) - 2) < 1e-12
(False, True, True)

The same design as the exact path, scaled to entries of size ~1; each pair decoded in
float64 (linear solve, numpy roots), heads matched by the nearest residues and link sums,
then refined by Gauss-Newton on all learning answers at once. The result is returned only
if it reproduces every learning answer and every fresh verification answer under the one
agreement rule (:func:`verified_attn.verification.agree`) at the oracle's rtol; the
certificate checker re-checks exactly that, since the float fit is not cheaply
reproducible.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from verified_attn.arithmetic import Arithmetic
from verified_attn.certificates.writer import certificate_base
from verified_attn.errors import ModelClassMismatch, NotIdentifiable, PrecisionExhausted
from verified_attn.models import MultiHeadAttention
from verified_attn.multi_head.canonical_certified import dump_heads
from verified_attn.multi_head.canonical_learner import (
    METHOD,
    THEOREM,
    canonical_design,
    canonical_query_bound,
    canonical_query_limit,
    parameter_count,
)
from verified_attn.oracle import Oracle, QueryCounts
from verified_attn.recovery import MultiHeadRecovery
from verified_attn.serialize import dump_number
from verified_attn.verification import Verification, agree, float_floor, verify_model

__all__ = ["float_design", "float_sequence", "learn_float", "learning_sequences"]


# Float design scale: the exact design's entries (|x| < 1/d, chosen for exact rationals)
# times d * _FLOAT_SCALE, so the probes have entries of size ~1 and the scores of typical
# (PyTorch-initialised) heads are spread enough that the poles -1/lam_h stay apart.
_FLOAT_SCALE = 2.0
# Matching in float: the order with the smallest mismatch wins only if every other order
# misses by _MATCH_MARGIN times more (noise vs a real gap between heads); otherwise the
# step is ambiguous (a tie link decides, or NotIdentifiable). Soundness comes from the
# fresh-query verification, not from these thresholds.
_MATCH_MARGIN = 10.0


def float_design(
    d: int, seed: int, affine: bool
) -> tuple[np.ndarray, np.ndarray, list[tuple[np.ndarray, int]]]:
    U, B, _ = canonical_design(d, seed, affine)
    s = d * _FLOAT_SCALE
    Uf = np.array([[float(x) * s for x in row] for row in U])
    Bf = np.array([[float(x) * s for x in row] for row in B])
    pairs = [(Uf[k], j) for k in range(d) for j in range(len(Bf))]
    pairs += [(Uf[0] + Uf[k], 0) for k in range(1, d)]
    return Uf, Bf, pairs


def box_precision(arith: Any) -> str:
    """What the box computes in, from its unit roundoff: "float64", "float32" or the figure.

    >>> from verified_attn.arithmetic import FloatArithmetic
    >>> box_precision(FloatArithmetic()), box_precision(FloatArithmetic(1e-3, 2.0**-24))
    ('float64', 'float32')
    """
    unit = getattr(arith, "unit_roundoff", None)
    names = {2.0**-53: "float64", 2.0**-24: "float32", 2.0**-11: "float16"}
    if unit is None:
        return "float"
    return names.get(float(unit), f"float (unit roundoff {float(unit):.3g})")


def float_sequence(u: np.ndarray, b: np.ndarray, k: int) -> np.ndarray:
    return np.vstack([np.tile(b + u, (k, 1)), b[None, :]])


def _float_poles(F: np.ndarray, m: int) -> list[tuple[float, float]]:
    """(score, residue) per head from the float samples F(0..2m)."""
    k = np.arange(2 * m + 1, dtype=np.float64)
    A = np.hstack([k[:, None] ** np.arange(m + 1), -F[:, None] * k[:, None] ** np.arange(1, m + 1)])
    try:
        sol = np.linalg.solve(A, F)
    except np.linalg.LinAlgError as exc:
        raise PrecisionExhausted(
            "the float interpolation system of a pair is singular: two heads share a score "
            "there or a residue u^T v_h is 0 (H too large)"
        ) from exc
    P = np.polynomial.Polynomial(sol[: m + 1])
    Q = np.polynomial.Polynomial(np.concatenate([[1.0], sol[m + 1 :]]))
    dQ = Q.deriv()
    roots = Q.roots()
    if len(roots) != m:
        raise PrecisionExhausted(
            f"the fitted denominator has degree {len(roots)} < {m}: a head's pole ran to "
            "infinity in float64 (a residue near 0 or H too large)"
        )
    out = []
    for z in roots:
        # In float64 a non-real or positive pole is either noise on nearly merged poles or
        # a map outside the class; the float decoding cannot tell which, so it says both.
        if abs(z.imag) > 1e-8 * abs(z):
            raise PrecisionExhausted(
                f"F(k) has a non-real pole {z} in float64: two poles too close to separate "
                "(or not a sum of softmax heads); rerun with another seed"
            )
        root = float(z.real)
        # One Newton step on the real root polishes what the eigenvalue solver left.
        if dQ(root) != 0:
            root -= Q(root) / dQ(root)
        if not root < 0:
            raise PrecisionExhausted(
                f"F(k) has a pole at {root} >= 0 in float64: a residue u^T v_h too small to "
                "resolve (or not a sum of softmax heads); rerun with another seed"
            )
        lam = -1.0 / root
        out.append((math.log(lam), float(-lam * P(root) / dQ(root))))
    return out


def _ranked(errors: dict[tuple[int, ...], float]) -> list[tuple[int, ...]]:
    """The orders indistinguishable from the best one (within _MATCH_MARGIN of its error)."""
    best = min(errors.values())
    return [p for p, e in sorted(errors.items(), key=lambda x: x[1]) if e <= _MATCH_MARGIN * best]


def _float_match(
    base: list[tuple[float, float]],
    other: list[tuple[float, float]],
    link: list[tuple[float, float]],
    what: str,
) -> tuple[int, ...]:
    """The order p with ``{base[h] + other[p[h]]}`` nearest to ``link`` (scores and
    residues add along the link), if it is clearly nearer than every other order."""
    H = len(base)
    s_scale = max(1.0, *(abs(x[0]) for x in link))
    r_scale = max(abs(x[1]) for x in link) or 1.0  # all residues 0: absolute
    errors = {}
    for perm in itertools.permutations(range(H)):
        got = [(base[h][0] + other[perm[h]][0], base[h][1] + other[perm[h]][1]) for h in range(H)]
        errors[perm] = min(
            max(
                max(
                    abs(got[h][0] - link[o[h]][0]) / s_scale,
                    abs(got[h][1] - link[o[h]][1]) / r_scale,
                )
                for h in range(H)
            )
            for o in itertools.permutations(range(H))
        )
    found = _ranked(errors)
    if len(found) != 1:
        raise NotIdentifiable(
            f"the link {what} is consistent with {len(found)} head orders in float64, not "
            "exactly one; rerun with another seed"
        )
    return found[0]


def _refine(
    heads: list[tuple[np.ndarray, ...]],
    beta: float,
    rows: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
    affine: bool,
) -> tuple[list[tuple[np.ndarray, ...]], float]:
    """Gauss-Newton on all learning answers at once, started from the per-pair decoding.

    Each pair alone is a square (2H + 1)-point fit whose poles are ill-conditioned when two
    scores are close or a residue u^T v_h is small; together the answers overdetermine the
    H (d^2 + 2d) + 1 parameters (``F = beta + sum_h b^T v_h + u^T v_h sigmoid(u^T (W_h b +
    c_h) + log k)``, and ``F(0) = beta + sum_h b^T v_h``), so the joint least-squares fit is
    far better conditioned. Returns the iterate with the smallest residual (never worse
    than the start); the fresh-query verification still decides.
    """
    u, b, logk, y = rows  # (n, d), (n, d), (n,) with -inf for F(0), (n,)
    d, H = u.shape[1], len(heads)
    has_k = np.isfinite(logk)
    lk = np.where(has_k, logk, 0.0)

    def unpack(theta: np.ndarray) -> tuple[list[tuple[np.ndarray, ...]], float]:
        out, pos = [], 0
        for _ in range(H):
            W = theta[pos : pos + d * d].reshape(d, d)
            v = theta[pos + d * d : pos + d * d + d]
            pos += d * d + d
            if affine:
                out.append((W, v, theta[pos : pos + d]))
                pos += d
            else:
                out.append((W, v))
        return out, (float(theta[pos]) if affine else 0.0)

    def pack(hs: list[tuple[np.ndarray, ...]], bt: float) -> np.ndarray:
        parts = [np.concatenate([h[0].ravel(), *h[1:]]) for h in hs]
        return np.concatenate([*parts, [bt] if affine else []])

    def residual_and_jacobian(theta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        hs, bt = unpack(theta)
        F = np.full(len(y), bt)
        cols = []
        for h in hs:
            W, v = h[0], h[1]
            z = np.einsum("ni,ij,nj->n", u, W, b) + lk
            if affine:
                z = z + u @ h[2]
            sig = np.where(has_k, 0.5 * (1.0 + np.tanh(0.5 * z)), 0.0)  # no overflow
            ds = sig * (1.0 - sig)
            uv = u @ v
            F += b @ v + uv * sig
            g = uv * ds  # dF/dz
            cols.append((g[:, None, None] * u[:, :, None] * b[:, None, :]).reshape(len(y), -1))
            cols.append(b + sig[:, None] * u)
            if affine:
                cols.append(g[:, None] * u)
        if affine:
            cols.append(np.ones((len(y), 1)))
        return F - y, np.hstack(cols)

    theta = pack(heads, beta)
    res, J = residual_and_jacobian(theta)
    best, best_norm = theta, float(np.linalg.norm(res))
    for _ in range(20):
        step = np.linalg.lstsq(J, -res, rcond=None)[0]
        theta = theta + step
        res, J = residual_and_jacobian(theta)
        norm = float(np.linalg.norm(res))
        if not np.isfinite(norm):
            break
        if norm < best_norm:
            best, best_norm = theta, norm
        if np.linalg.norm(step) <= 1e-15 * max(1.0, float(np.linalg.norm(theta))):
            break
    return unpack(best)


def learning_sequences(
    U: np.ndarray, B: np.ndarray, affine: bool, H: int
) -> tuple[list[np.ndarray], list[tuple[np.ndarray, int]]]:
    """The F(0) queries [b_j], then per pair (u, b_j) the queries k = 1..2H, in order."""
    d = U.shape[0]
    pairs = [(U[k], j) for k in range(d) for j in range(len(B))]
    pairs += [(U[0] + U[k], 0) for k in range(1, d)]
    seqs = [B[j][None, :] for j in range(len(B))]
    seqs += [float_sequence(u, B[j], k) for u, j in pairs for k in range(1, 2 * H + 1)]
    return seqs, pairs


def learn_float(
    oracle: Oracle,
    H: int,
    *,
    verify: int,
    seed: int,
    lengths: Sequence[int],
    affine: bool,
) -> MultiHeadRecovery:
    """The float path of :func:`~.canonical_learner.learn_multi_head` (arguments already
    validated there)."""
    bound = canonical_query_limit(oracle.d, H, affine=affine)
    tie_answers: list[dict[str, Any]] = []
    with oracle.run() as run:
        d = oracle.d
        U, B, pairs = float_design(d, seed, affine)
        with oracle.phase("F(0)"):
            f0 = np.array(oracle.query_many(B[:, None, :]), dtype=np.float64)
        with oracle.phase("F(k)"):
            seqs = [float_sequence(u, B[j], k) for u, j in pairs for k in range(1, 2 * H + 1)]
            ans = np.array(oracle.query_many(seqs), dtype=np.float64).reshape(len(pairs), 2 * H)
        decoded = [
            _float_poles(np.concatenate([[f0[j]], a]), H)
            for (_, j), a in zip(pairs, ans, strict=True)
        ]
        ncols = len(B)
        grid = {(k, j): decoded[k * ncols + j] for k in range(d) for j in range(ncols)}
        labelled = {(0, 0): grid[(0, 0)]}
        for k in range(1, d):
            perm = _float_match(
                grid[(0, 0)], grid[(k, 0)], decoded[d * ncols + k - 1], f"(u_1 + u_{k + 1}, b_1)"
            )
            labelled[(k, 0)] = [grid[(k, 0)][perm[h]] for h in range(H)]
        ties: list[tuple[int, int, list[tuple[int, ...]]]] = []
        for k in range(d):
            residues = [r for _, r in labelled[(k, 0)]]
            r_scale = max(abs(r) for r in residues) or 1.0
            for j in range(1, ncols):
                here = grid[(k, j)]
                orders = _ranked(
                    {
                        perm: max(abs(here[perm[h]][1] - residues[h]) for h in range(H)) / r_scale
                        for perm in itertools.permutations(range(H))
                    }
                )
                if len(orders) == 1:
                    labelled[(k, j)] = [here[orders[0][h]] for h in range(H)]
                else:
                    ties.append((k, j, orders))
        if ties:
            # One F(1) at (u_k, (b_1 + b_j)/2) per tie, as in exact mode; the order whose
            # prediction is nearest must be clearly nearer than the others.
            seqs = [float_sequence(U[k], (B[0] + B[j]) / 2, 1) for k, j, _ in ties]
            with oracle.phase("tie links"):
                measured = oracle.query_many(seqs)
            tie_answers.extend(
                {"k": k, "j": j, "answer": float(y)}
                for (k, j, _), y in zip(ties, measured, strict=True)
            )
            for (k, j, orders), y in zip(ties, measured, strict=True):
                base, here = labelled[(k, 0)], grid[(k, j)]
                f_mid = (f0[0] + f0[j]) / 2
                misses = {
                    perm: abs(
                        f_mid
                        + sum(
                            base[h][1] / (1 + math.exp(-(base[h][0] + here[perm[h]][0]) / 2))
                            for h in range(H)
                        )
                        - float(y)
                    )
                    for perm in orders
                }
                ok = _ranked(misses)
                if len(ok) != 1:
                    raise NotIdentifiable(
                        f"the tie link (u_{k + 1}, (b_1 + b_{j + 1})/2) is consistent with {len(ok)} "
                        "head orders in float64, not exactly one; rerun with another seed"
                    )
                labelled[(k, j)] = [here[ok[0][h]] for h in range(H)]
        # S_h = U [W_h | c_h] M with M the probes (lifted to [b; 1] if affine).
        M = np.vstack([B.T, np.ones((1, ncols))]) if affine else B.T
        Uinv, Minv = np.linalg.inv(U), np.linalg.inv(M)
        heads: list[tuple[np.ndarray, ...]] = []
        for h in range(H):
            S = np.array([[labelled[(k, j)][h][0] for j in range(ncols)] for k in range(d)])
            r = np.array([labelled[(k, 0)][h][1] for k in range(d)])
            Wc = Uinv @ S @ Minv
            head: tuple[np.ndarray, ...] = (Wc[:, :d], Uinv @ r)
            if affine:
                head = (*head, Wc[:, d])
            heads.append(head)
        beta0 = float(f0[0] - B[0] @ sum(hd[1] for hd in heads)) if affine else 0.0
        # The learning answers as rows (u, b, log k, F): F(0) rows carry log k = -inf.
        us = [np.zeros(d)] * ncols + [u for u, _ in pairs for _ in range(2 * H)]
        bs = [*B] + [B[j] for _, j in pairs for _ in range(2 * H)]
        logk = [-np.inf] * ncols + [math.log(k) for _ in pairs for k in range(1, 2 * H + 1)]
        ys = np.concatenate([f0, ans.ravel()])
        heads, beta_fit = _refine(
            heads, beta0, (np.array(us), np.array(bs), np.array(logk), ys), affine
        )
        heads.sort(key=lambda hd: tuple(hd[0].ravel()))  # the canonical order, by W row-major
        beta = beta_fit if affine else None
        candidate = MultiHeadAttention([tuple(x.tolist() for x in hd) for hd in heads], beta=beta)
        _check_learning_fit(oracle.arithmetic, candidate, f0, ans, tie_answers, U, B, H, affine)
        checked = (
            verify_model(
                oracle,
                candidate,
                count=verify,
                seed=seed,
                lengths=lengths,
                bias=beta if affine else 0.0,
                what="the recovered canonical heads",
            )
            if verify
            else None
        )
    counts = run.counts
    params: dict[str, Any] = {"heads": heads}
    if affine:
        params["beta"] = beta
    ties = counts.by_phase.get("tie links", 0)
    rtol = oracle.arithmetic.rtol
    notes = [
        f"canonical method: {counts.learning} learning queries ({ties} tie links), <= {bound} "
        f"(ours without ties {canonical_query_bound(oracle.d, H, affine=affine)}); float64 "
        f"decoding of a {box_precision(oracle.arithmetic)} box, every learning answer "
        f"reproduced at rtol {rtol:g}",
        f"{H} canonical heads ({box_precision(oracle.arithmetic)} answers; not exact)",
    ]
    certificate = functools.partial(
        _certificate_data,
        oracle.arithmetic,
        U,
        B,
        {"F0": list(f0), "F": ans.tolist(), "ties": tie_answers},
        heads,
        beta,
        H,
        affine,
        checked,
        seed,
        counts,
        bound,
    )
    return MultiHeadRecovery.from_run(
        counts,
        theorem=THEOREM,
        method=METHOD,
        parameters=params,
        learned_model=candidate,
        arithmetic="float",
        precision=None,
        exact=False,
        bound=bound,
        parameter_count=parameter_count(oracle.d, H, affine),
        seed=seed,
        rounds=1 + (1 if ties else 0),
        verification=checked,
        notes=notes,
        certificate_data=certificate,
    )


def too_few_heads_float(oracle: Oracle, H: int, seed: int, affine: bool) -> ModelClassMismatch | None:
    """After a float decoding failure: does the box have more than ``H`` heads?

    Asks the first pair's ``F(0..2H + 1)`` again plus one sample (phase ``"diagnosis"``,
    counted) and fits a degree-``H`` rational function to ``F(0..2H)``: with at most ``H``
    heads its value at ``k = 2H + 1`` misses the answer by a few units of the box's
    roundoff; a miss over 2^20 of them says the box has more heads (a float test: the
    residual is reported, not certified).
    None otherwise (the failure had another cause).
    """
    _, B, pairs = float_design(oracle.d, seed, affine)
    u, j = pairs[0]
    k = np.arange(2 * H + 2, dtype=np.float64)
    with oracle.phase("diagnosis"):
        F = np.array(
            oracle.query_many([B[j][None, :]] + [float_sequence(u, B[j], int(i)) for i in k[1:]]),
            dtype=np.float64,
        )
    m = H
    A = np.hstack([k[: 2 * m + 1, None] ** np.arange(m + 1),
                   -F[: 2 * m + 1, None] * k[: 2 * m + 1, None] ** np.arange(1, m + 1)])
    try:
        sol = np.linalg.solve(A, F[: 2 * m + 1])
    except np.linalg.LinAlgError:
        return None
    P = np.polynomial.Polynomial(sol[: m + 1])
    Q = np.polynomial.Polynomial(np.concatenate([[1.0], sol[m + 1 :]]))
    predicted = float(P(k[-1]) / Q(k[-1]))
    residual = float(F[-1]) - predicted
    scale = float(np.max(np.abs(F))) or 1.0
    unit = getattr(oracle.arithmetic, "unit_roundoff", None) or 2.0**-53
    threshold = 2**20 * unit * scale  # a correct fit misses by a few ulps, not a million
    if not abs(residual) > threshold:
        return None
    return ModelClassMismatch(
        f"the box has more than {H} heads (the fit with {H} heads leaves residual "
        f"{residual:.3g} at k = {2 * H + 1}, over 2^20 units of the box's roundoff "
        f"({threshold:.2g}); try heads={H + 1}, or max_heads= an upper bound in exact or "
        "certified mode)"
    )


def _check_learning_fit(
    arith: Arithmetic,
    candidate: MultiHeadAttention,
    f0: np.ndarray,
    ans: np.ndarray,
    tie_answers: list[dict[str, Any]],
    U: np.ndarray,
    B: np.ndarray,
    H: int,
    affine: bool,
) -> None:
    """Every learning answer must agree with the fitted heads under the one float rule.

    The fit minimises the residual but nothing bounds it; a fit that misses its own data by
    more than rtol is out of class or ill-conditioned, and is refused (the certificate
    checker re-checks exactly this).
    """
    seqs, _ = learning_sequences(U, B, affine, H)
    seqs += [float_sequence(U[t["k"]], (B[0] + B[t["j"]]) / 2, 1) for t in tie_answers]
    observed = [*f0.tolist(), *ans.ravel().tolist(), *(float(t["answer"]) for t in tie_answers)]
    beta = float(candidate.beta) if affine else 0.0
    floor = float_floor(observed, beta)
    for X, y in zip(seqs, observed, strict=True):
        expected = float(candidate.evaluate_batch(X[None])[0])
        ok, gap = agree(arith, y, expected, bias=beta, floor=floor)
        if not ok:
            raise ModelClassMismatch(
                f"the fitted canonical heads miss the learning answer {y} on the query of "
                f"length {X.shape[0]} (they give {expected}, relative gap {gap:.3e} > rtol "
                f"{arith.rtol:g}): not {H} softmax heads, or too ill-conditioned for a "
                f"{box_precision(arith)} box",
                query=X,
                observed=y,
                expected=expected,
            )


def _certificate_data(
    arith: Arithmetic,
    U: np.ndarray,
    B: np.ndarray,
    answers: dict[str, Any],
    heads: list[tuple[np.ndarray, ...]],
    beta: float | None,
    H: int,
    affine: bool,
    checked: Verification | None,
    seed: int,
    counts: QueryCounts,
    bound: int,
) -> dict[str, Any]:
    """The float canonical certificate: the float design, every answer bit-exact, the heads."""
    d = U.shape[0]
    data = certificate_base(
        kind="multi-head",
        theorem=THEOREM,
        d=d,
        arith=arith,
        seed=seed,
        counts=counts,
        bound=bound,
        verification=checked,
        bias=beta if affine else None,
    )
    data.update(
        {
            "method": METHOD,
            "affine": affine,
            "heads_given": True,
            "H0": H,
            "working_precision": None,
            "denominator_bound": None,
            "design": {
                "U": [[dump_number(float(x)) for x in row] for row in U],
                "B": [[dump_number(float(x)) for x in row] for row in B],
            },
            "answers": {
                "F0": [dump_number(float(a)) for a in answers["F0"]],
                "F": [[dump_number(float(a)) for a in row] for row in answers["F"]],
                "ties": [
                    {"k": t["k"], "j": t["j"], "answer": dump_number(float(t["answer"]))}
                    for t in answers["ties"]
                ],
            },
            "result": {
                "exact": False,
                "heads": dump_heads(heads, d),
                "beta": None if beta is None else dump_number(float(beta)),
            },
        }
    )
    return data
