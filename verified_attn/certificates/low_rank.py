"""Re-check a low-rank (Theorem 5.1) certificate from its stored probes and answers alone.

>>> import verified_attn as va
>>> from verified_attn.certificates.low_rank import verify
>>> W = [[2, 4, 0], [1, 2, 0], [-1, -2, 0]]                      # rank 1
>>> data = va.learn_low_rank(va.Oracle(va.SingleHeadAttention(W, [1, 0, 1]), "exact")).certificate()
>>> print(verify(data).summary[2])
cross: re-solved 6 unknowns of Z = U^T W B and R = U_S^T W from 5 probes and 1 pivot constraints (substitution alone); W = U^-T Z Z_S^-1 R
>>> data["result"]["parameters"]["W"][0][0] = {"rational": "3/1"}
>>> verify(data)
Traceback (most recent call last):
...
verified_attn.errors.CertificateError: result W[0][0]: claimed 3, the stored answers give 2

One module for both methods, dispatching on the certificate's ``method``. It uses the core
arithmetic, models and kernel only, never the learner's code.

**Every probe** is a two-token query ``[b + t u; b]`` stored as exact rationals (u, b, t)
with the oracle's answer f (u and b as indices into ``answers.vectors``, the table of the
distinct probe vectors, or inline). With v from the length-1 answers, the checker re-decodes
``m = logit((f - b^T v) / (t u^T v)) / t = u^T W b`` (requiring u^T v certainly nonzero
and the ratio certainly in (0, 1)), and counts: ``t = 16^-n`` means n re-asks.

**skeleton** (``method: "skeleton"``): the unknowns are ``Z = U^T W B`` (d x r) and
``R = U_S^T W`` (r x d), with U the stored invertible design, B the stored generic
columns, S the stored pivot rows. Each learning probe is one linear equation with exact
coefficients: on a basis column b_j, ``(U^{-1} u)^T Z[:, j] = m``; on a pivot row u_s,
``R[s, :] b = m``; and the cross closes with ``Z[S, :] = R B``. The system must be square
(2dr equations) and exactly invertible; it is solved block by block (an equation with one
unknown left by substitution, a pivot row's coupled unknowns by one exact inverse: blocks
of at most r + 1 unknowns, so the check stays cheap at large d), then
``W = U^{-T} Z Z[S, :]^{-1} R``. Probes on
the stored next column ``next_b`` are the rank checks: each must agree with the claimed W
(exact ``==``, certified overlap, float ``|m - u^T W b| <= rank_tol * scale``, the scale
``max(|m|, sum |u_i| |W_ij| |b_j|, 1e4 eps (1 + ||U^{-1} u||_1) max |v|)``). With the rank
given, those checks are the declared verification phase ``rank``; probes in the phase
``rank-check`` (the learner's second test of a rank-0 claim, always verification) are
checks too, whatever their column. (U, B and S are only the
coordinates the cross is solved in: any that the stored probes determine give the same W,
so the checker needs no trust in them.)

The claimed W, v are compared with the re-solved ones: exact ``==``; certified: a claimed
rational must lie in its re-solved ball and be the only rational there with a denominator
that small, a claimed ball must contain the re-solved ball; float: agreement to
:data:`FLOAT_RTOL` relative to the largest entry of W (at least 1): the checker's
substitution and solve differ from the learner's column-by-column cross in rounding only.

**nuclear** (``method: "nuclear"``, float only): the rank-one measurements t_k are
re-decoded from the answers; the claimed v must equal the length-1 answers, and the
reported relative residual ``||A(W) - t|| / ||t||`` of the claimed W must be the one
recomputed here (to :data:`RESIDUAL_RTOL` relative, or :data:`RESIDUAL_ATOL`), and so
must the reported verification error (the largest relative gap on the fresh sequences).

Both: the counts add up (learning = d + the learning probes + their re-asks, the bound is
the method's formula), and the verification answers agree with the claimed model under the
learner's one rule (:func:`verified_attn.certificates.kernel.check_verification`).
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np

from verified_attn.certificates import CertificateCheck, kernel
from verified_attn.certificates.common_checks import (
    Claimed,
    check_phases,
    check_theorem,
    claimed_parameters,
    compare_parameters,
    head_predictor,
    passed,
    result_exact,
)
from verified_attn.certificates.elimination import MAX_REDUCED
from verified_attn.certificates.low_rank_cross import (
    RANK_CHECK,
    Cross,
    count_phases,
    measure_all,
    read_probes,
)
from verified_attn.errors import CertificateError

__all__ = [
    "FLOAT_RTOL",
    "MAX_REDUCED",
    "RESIDUAL_ATOL",
    "RESIDUAL_RTOL",
    "Cross",
    "redecode",
    "verify",
]

#: Relative agreement required between claimed and re-solved float parameters (the two
#: solution paths differ in rounding only: measured at most 1.2e-14 up to d = 256, r = 8).
FLOAT_RTOL = 1e-11
#: Nuclear: agreement of the reported and recomputed measurement residuals.
RESIDUAL_RTOL = 1e-6
RESIDUAL_ATOL = 1e-12
_EPS = float(np.finfo(np.float64).eps)
METHODS = ("skeleton", "nuclear")
THEOREM = "thm-5.1"


def verify(data: dict[str, Any]) -> CertificateCheck:
    """Re-check a ``low-rank`` certificate dict; CertificateError naming what fails."""
    head = kernel.parse_header(data, "low-rank")
    method = kernel.get(data, "method")
    if method not in METHODS:
        raise CertificateError(f"method must be 'skeleton' or 'nuclear', got {method!r:.80}")
    check_theorem(head, THEOREM)
    lines = [f"{head.describe()}, method {method}"]
    if method == "skeleton":
        lines.extend(_verify_skeleton(data, head))
    else:
        lines.extend(_verify_nuclear(data, head))
    return passed(head, lines)


def redecode(data: dict[str, Any]) -> dict[str, np.ndarray]:
    """The skeleton's W (d x d) and v re-solved from a certificate's stored probes.

    Call inside the certificate's ``arith.context()``; the writer uses it to store balls
    that contain both its own and this checker's enclosures.
    """
    head = kernel.parse_header(data, "low-rank")
    cross = Cross(data, head)
    return {"W": cross.W, "v": np.array(cross.v, dtype=object)}


def _verify_skeleton(data: dict[str, Any], head: kernel.Header) -> list[str]:
    d, arith = head.d, head.arith
    tol_raw = kernel.get(data, "rank_tol")
    if arith.name == "float":
        if isinstance(tol_raw, bool) or not isinstance(tol_raw, float) or not 0 < tol_raw < 1:
            raise CertificateError(f"rank_tol must be a float in (0, 1), got {tol_raw!r:.80}")
    elif tol_raw is not None:
        raise CertificateError("rank_tol must be null outside float arithmetic")
    cross = Cross(data, head)
    r = cross.rank
    verification = {"rank", RANK_CHECK} if cross.rank_given is not None else {RANK_CHECK}
    learning, phases, in_ver = count_phases(cross.probes, d, verification)
    if cross.rank_given is not None:
        g = cross.rank_given
        bound, formula = d + 2 * d * g - g * g, f"d + 2dr - r^2 at the given r = {g}"
    else:
        bound = d + 2 * d * r - r * r + (1 if r < d else 0)
        formula = f"d + 2dr - r^2 + [r < d] at the found r = {r}"
    q = kernel.check_counts(
        data,
        learning=learning,
        bound=bound,
        phases=phases,
        verification_phases=(
            "verify",
            *sorted(verification),
            "rank-rescale",
            f"{RANK_CHECK}-rescale",
        ),
    )
    check_phases(q["by_phase"], phases)
    rescales = learning - d - sum(1 for p in cross.probes if p.phase not in verification)
    lines = [
        f"queries: {q['learning']} learning (bound {bound} = {formula}"
        + (f", + {rescales} re-asked probes" if rescales else "")
        + f"); {q['verification']} verification",
        f"cross: re-solved {2 * d * r} unknowns of Z = U^T W B and R = U_S^T W from "
        f"{cross.n_probe_equations} probes and {r * r} pivot constraints ("
        + (
            f"substitution and exact inverses of blocks of at most {cross.coupled} unknowns"
            if cross.coupled
            else "substitution alone"
        )
        + "); W = U^-T Z Z_S^-1 R",
    ]
    exact = result_exact(data, arith)
    with arith.context():
        claimed = claimed_parameters(data, arith, {"W": (d, d), "v": (d,)}, exact)
        decoded = {"W": list(np.asarray(cross.W, dtype=object).reshape(-1)), "v": cross.v}
        lines.append(
            compare_parameters(
                arith,
                exact,
                claimed,
                decoded,
                rtol=FLOAT_RTOL,
                prefix="result",
                verb="re-solved",
                what="W, v",
            )
        )
        lines.append(_rank_checks(cross, claimed, exact, tol_raw))
        lines.append(
            kernel.check_verification(
                data,
                head,
                head_predictor(head, claimed, exact),
                expected_queries=q["verification"] - in_ver,
            )
        )
    return lines


def _rank_checks(cross: Cross, claimed: Claimed, exact: bool, rank_tol: Any) -> str:
    """Every probe on next_b agrees with the claimed W (the rank is no larger)."""
    d, arith = cross.d, cross.arith
    Wc = [x for _, x in claimed["W"]]
    vmax = max((arith.magnitude(x) for x in cross.v), default=0.0)
    Wf: np.ndarray | None = None
    for i in cross.checks:
        p, m = cross.probes[i], cross.measured[i]
        path = f"answers.probes[{i}]"
        if arith.name == "float":
            if Wf is None:
                Wf = np.array([float(x) for x in Wc]).reshape(d, d)
            uf = np.array([float(q) for q in p.u])
            bf = np.array([float(q) for q in p.b])
            pred = float(uf @ Wf @ bf)  # sum_a,c u_a W_ac b_c
            size = float(np.abs(uf) @ np.abs(Wf) @ np.abs(bf))  # sum of |terms|
            g1 = sum(abs(float(q)) for q in cross.coordinates(p.u).values())
            scale = max(abs(float(m)), size, 1e4 * _EPS * (1 + g1) * vmax)
            if abs(float(m) - pred) > rank_tol * scale:
                raise CertificateError(
                    f"{path}: u^T W b = {pred!r} for the claimed W, the answer gives {m!r}: "
                    f"more than rank_tol {rank_tol:g} apart, so rank W exceeds the claim"
                )
            continue
        pred = arith.rational(Fraction(0))
        for a in range(d):
            if not p.u[a]:
                continue
            for c in range(d):
                if p.b[c]:
                    w = Wc[a * d + c]
                    w = arith.rational(w) if isinstance(w, Fraction) else w
                    pred = pred + arith.rational(p.u[a] * p.b[c]) * w
        if not arith.agree(m, pred):
            raise CertificateError(
                f"{path}: u^T W b = {pred} for the claimed W, but the answer gives {m}: "
                "the rank exceeds the claim"
            )
    if not cross.checks:
        if cross.rank < d:
            raise CertificateError(
                f"no stored probe on design.next_b: nothing shows that rank W is not above "
                f"{cross.rank}"
            )
        return "rank: full rank, nothing to check"
    return (
        f"rank: {len(cross.checks)} probes on the next column agree with the claimed W "
        f"(rank {cross.rank})"
    )


def _verify_nuclear(data: dict[str, Any], head: kernel.Header) -> list[str]:
    d, arith = head.d, head.arith
    if arith.name != "float":
        raise CertificateError("a nuclear certificate is float arithmetic only")
    given = kernel.get(data, "rank_given")
    if given is not None:
        kernel.as_int(given, "rank_given", low=1, high=d)
    m = kernel.as_int(kernel.get(data, "measurements"), "measurements", low=1, high=d * d)
    v = kernel.numbers(kernel.get(data, "answers.v"), "answers.v", arith, d)
    probes = read_probes(data, head)
    if len(probes) != m or any(p.phase != "rop" for p in probes):
        raise CertificateError(
            f"answers.probes must hold the {m} rank-one probes (phase 'rop'), got {len(probes)}"
        )
    learning, phases, _ = count_phases(probes, d, set())
    q = kernel.check_counts(data, learning=learning, bound=d + m, phases=phases)
    check_phases(q["by_phase"], phases)
    result_exact(data, arith)
    claimed = claimed_parameters(data, arith, {"W": (d, d), "v": (d,)}, False)
    cv = [float(x) for _, x in claimed["v"]]
    for i, (x, y) in enumerate(zip(cv, v, strict=True)):
        if x != float(y):
            raise CertificateError(f"result v[{i}]: claimed {x!r}, the answer to [e_{i}] is {y!r}")
    W = np.array([float(x) for _, x in claimed["W"]]).reshape(d, d)
    t = np.array(measure_all(arith, v, probes))
    a = np.array([[float(x) for x in p.u] for p in probes])
    b = np.array([[float(x) for x in p.b] for p in probes])
    fit = np.einsum("ki,ij,kj->k", a, W, b)
    scale = float(np.linalg.norm(t))
    gap = float(np.linalg.norm(fit - t))
    again = gap / scale if scale else gap
    reported = float(kernel.number(kernel.get(data, "result.residual"), "result.residual", arith))
    if not _close(reported, again):
        raise CertificateError(
            f"result.residual is {reported:.6e}, the stored answers and the claimed W give "
            f"{again:.6e}"
        )
    rescales = learning - d - m
    predict = head_predictor(head, claimed, False)
    verified = kernel.check_verification(data, head, predict)  # parses the section first
    return [
        f"queries: {q['learning']} learning (bound d + m = {d + m}"
        + (f", + {rescales} re-asked probes" if rescales else "")
        + f"); {q['verification']} verification",
        f"measurements: {m} rank-one probes re-decoded; the claimed W fits them with "
        f"relative residual {again:.3e} (reported {reported:.3e})",
        verified,
        _verification_error(data, head, predict),
    ]


def _close(a: float, b: float) -> bool:
    return math.isfinite(b) and abs(a - b) <= RESIDUAL_RTOL * max(abs(a), abs(b)) + RESIDUAL_ATOL


def _verification_error(data: dict[str, Any], head: kernel.Header, predict: Any) -> str:
    """The reported largest relative gap on the fresh sequences, recomputed here."""
    from verified_attn.verification import agree, float_floor, fresh_sequences

    ver = kernel.get(data, "verification")
    count, seed = ver["count"], ver["seed"]  # validated by check_verification
    raw = kernel.get(data, "result.verification_error")
    if count == 0:
        if raw is not None:
            raise CertificateError("result.verification_error must be null when not verified")
        return "verification error: none (not verified)"
    reported = float(kernel.number(raw, "result.verification_error", head.arith))
    answers = [float(a) for a in kernel.numbers(ver["answers"], "verification.answers", head.arith)]
    sequences = fresh_sequences(head.d, count, seed, tuple(ver["lengths"]))
    floor = float_floor(answers, 0.0)
    worst = max(
        agree(head.arith, a, predict(X), floor=floor)[1]
        for X, a in zip(sequences, answers, strict=True)
    )
    if not _close(reported, worst):
        raise CertificateError(
            f"result.verification_error is {reported:.6e}, the stored verification answers "
            f"give {worst:.6e}"
        )
    return f"verification error: the largest relative gap {worst:.3e} is the reported one"
