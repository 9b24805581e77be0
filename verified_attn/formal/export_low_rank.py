"""The Coq file of an exact skeleton (low-rank) run: ``run_identified`` from ``CertLowRank.v``.

>>> import verified_attn as va
>>> W = [[2, 4, 0], [1, 2, 0], [-1, -2, 0]]                      # rank 1
>>> model = va.SingleHeadAttention(W, [1, 0, 1])
>>> data = va.learn_low_rank(va.Oracle(model, "exact")).certificate()
>>> text = va.export_coq(data)
>>> "apply (lowrank_identified run)" in text and "Admitted" not in text
True

The file states the run's basis columns B, pivot rows U_S, every probe (u, b) with its
measurement m = u^T W b, the answers to [e_i] and the certified (W, v), and proves by
``CertLowRank.lowrank_identified`` (which instantiates ``Skeleton.skeleton_determines``,
proved for every d and r): the certified head has every recorded measurement (the rank
checks included) and answer, W is spanned by its measured columns W B, and every head
(W', v') over the reals with those properties is the certified one. The pivot block
U_S^T W B is shown invertible by computing an inverse over Q.

The measurements are the checker's exact decoding of the stored answers
(:mod:`verified_attn.certificates.low_rank_cross`: m = logit((f - b^T v) / (t u^T v)) / t);
Coq takes them as the run's data. The exporter also supplies each probe's role (basis
column or pivot row), a left inverse of the probes' linear equations, X with W = (W B) X
and an inverse of the pivot block: a wrong one makes the proof fail, never succeed.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import Any

from verified_attn.certificates.kernel import as_list, as_matrix, get, parse_header
from verified_attn.certificates.low_rank_cross import Cross
from verified_attn.errors import CertificateError
from verified_attn.formal.coq_tables import coq_q, exact_entry, inverse, mat_table, vec_table

__all__ = ["MAX_D", "MAX_UNKNOWNS", "low_rank_file", "skeleton_tables"]

#: Largest d exported.
MAX_D = 8
#: Most unknowns 2dr exported: Coq checks the left inverse of the 2dr equations in about
#: (2dr)^3 rational operations (2dr = 64: about 10 s; 2dr = 128: over ten minutes).
MAX_UNKNOWNS = 64

Role = tuple[str, int]  # ("inl", j): on basis column j; ("inr", k): on pivot row k


def _frac(x: Any) -> Fraction:
    """An exact rational of the checker's arithmetic (sympy or Fraction) as a Fraction."""
    if isinstance(x, Fraction):
        return x
    try:
        return Fraction(int(x.p), int(x.q))
    except (AttributeError, TypeError) as exc:
        raise CertificateError(f"a measurement is not an exact rational: {x!r:.60}") from exc


def _roles(cross: Cross) -> list[tuple[int, Role]]:
    """(probe index, role) of every learning probe, as the checker classifies it."""
    basis = {tuple(b): j for j, b in enumerate(cross.B)}
    pivot = {s: k for k, s in enumerate(cross.S)}
    column = {tuple(cross.U[i][k] for i in range(cross.d)): k for k in range(cross.d)}
    out: list[tuple[int, Role]] = []
    for i, p in enumerate(cross.probes):
        if i in cross.checks:
            continue
        j = basis.get(tuple(p.b))
        if j is not None:
            out.append((i, ("inl", j)))
            continue
        k = column.get(tuple(p.u))
        if k is None or k not in pivot:
            raise CertificateError(
                f"answers.probes[{i}] is neither on a basis column nor a pivot row"
            )
        out.append((i, ("inr", pivot[k])))
    return out


def _system(
    cross: Cross, roles: list[tuple[int, Role]], US: list[list[Fraction]]
) -> list[list[Fraction]]:
    """The equations' coefficients over the unknowns C[a][j] (a r + j), R[k][c] (d r + k d + c)."""
    d, r = cross.d, cross.rank
    rows = []
    for i, (kind, x) in roles:
        row = [Fraction(0)] * (2 * d * r)
        p = cross.probes[i]
        for a in range(d):
            if kind == "inl":
                row[a * r + x] = p.u[a]
            else:
                row[d * r + x * d + a] = p.b[a]
        rows.append(row)
    for k in range(r):
        for j in range(r):
            row = [Fraction(0)] * (2 * d * r)
            for a in range(d):
                row[a * r + j] = US[a][k]
                row[d * r + k * d + a] = -cross.B[j][a]
            rows.append(row)
    return rows


def _mul(A: list[list[Fraction]], B: list[list[Fraction]]) -> list[list[Fraction]]:
    return [
        [sum((A[i][k] * B[k][j] for k in range(len(B))), Fraction(0)) for j in range(len(B[0]))]
        for i in range(len(A))
    ]


def _aux(cross: Cross, x: dict[str, Any]) -> dict[str, Any]:
    """The left inverse L of the equations, an inverse of the pivot block and X."""
    d, r = cross.d, cross.rank
    A = _system(cross, x["roles"], x["US"])
    L = (
        inverse(A)
        if A and len(A) == len(A[0])
        else [[Fraction(0)] * len(A) for _ in range(2 * d * r)]
    )
    W, B = x["W"], [[cross.B[j][c] for j in range(r)] for c in range(d)]
    UST = [[x["US"][a][k] for a in range(d)] for k in range(r)]
    P = _mul(UST, _mul(W, B)) if r else []
    Ninv = inverse(P) if r else []
    X = _mul(Ninv, _mul(UST, W)) if r else []
    return {"LC": L[: d * r], "LR": L[d * r :], "Ninv": Ninv, "X": X, "B": B}


def _read(data: Mapping[str, Any], arith: str = "exact") -> tuple[Cross, dict[str, Any]]:
    """The skeleton's data; ``arith`` is the arithmetic the certificate must have (a
    certified run's measurements are those of its certified W, computed exactly)."""
    head = parse_header(data, "low-rank")
    if get(data, "method") != "skeleton":
        raise CertificateError(
            "export to Coq covers skeleton low-rank runs, not the nuclear method"
        )
    if head.arith.name != arith:
        raise CertificateError(
            f"export to Coq covers {arith} skeleton runs here, not {head.arith.name}"
        )
    d = head.d
    if not 1 <= d <= MAX_D:
        raise CertificateError(f"d = {d}: export to Coq covers 1 <= d <= {MAX_D}")
    cross = Cross(dict(data), head)
    if 2 * d * cross.rank > MAX_UNKNOWNS:
        raise CertificateError(
            f"d = {d}, rank {cross.rank}: export to Coq covers 2dr <= {MAX_UNKNOWNS} unknowns"
        )
    params = "result.parameters"
    x: dict[str, Any] = {
        "W": [
            [exact_entry(q, f"{params}.W[{i}][{j}]") for j, q in enumerate(row)]
            for i, row in enumerate(as_matrix(get(data, f"{params}.W"), f"{params}.W", d, d))
        ],
        "v": [
            exact_entry(q, f"{params}.v[{i}]")
            for i, q in enumerate(as_list(get(data, f"{params}.v"), "v", d))
        ],
        "US": [[cross.U[a][s] for s in cross.S] for a in range(d)],
        "roles": _roles(cross),
    }
    if arith == "exact":
        x["vans"] = [
            exact_entry(q, f"answers.v[{i}]")
            for i, q in enumerate(as_list(get(data, "answers.v"), "answers.v", d))
        ]
        x["m"] = [_frac(m) for m in cross.measured]
    else:
        x["vans"] = x["v"]
        x["m"] = [
            sum((p.u[a] * x["W"][a][c] * p.b[c] for a in range(d) for c in range(d)), Fraction(0))
            for p in cross.probes
        ]
    x["sha256"] = hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()
    x["describe"] = (
        f"kind low-rank (skeleton), d = {d}, rank {cross.rank}, arithmetic {arith}, "
        f"seed {get(data, 'seed')}"
    )
    return cross, x


def _rows(name: str, rows: list[list[Fraction]], doc: str) -> str:
    body = ";\n  ".join("[" + "; ".join(coq_q(q) for q in row) + "]" for row in rows)
    return f"(** {doc} *)\nDefinition {name} : list (list Q) := [\n  {body}].\n"


def _probes(cross: Cross, x: dict[str, Any]) -> list[str]:
    """The probe vectors used, then each probe, the learning list and the rank checks."""
    ids: dict[int, str] = {}
    parts = []
    for p in cross.probes:
        for k, vec in ((p.iu, p.u), (p.ib, p.b)):
            if k not in ids:
                ids[k] = f"x{k}"
                parts.append(vec_table(ids[k], list(vec), "0", f"Probe vector {k}."))
    for i, p in enumerate(cross.probes):
        parts.append(
            f"Definition probe_{i} : probe := {{| pu := {ids[p.iu]}; pb := {ids[p.ib]}; "
            f"pm := {coq_q(x['m'][i])} |}}.\n"
        )
    learn = "; ".join(f"(probe_{i}, {kind} {n}%nat)" for i, (kind, n) in x["roles"])
    checks = "; ".join(f"probe_{i}" for i in cross.checks)
    parts.append(
        "(** The learning probes, each with its role: [inl j], b is basis column j;\n"
        f"    [inr k], u is the design column of pivot k. *)\n"
        f"Definition learning : list (probe * role) := [{learn}].\n"
    )
    parts.append(
        f"(** The rank checks (probes on next_b). *)\nDefinition rank_checks : list probe := [{checks}].\n"
    )
    return parts


def low_rank_file(data: Mapping[str, Any]) -> str:
    """The Coq text for an exact ``low-rank`` skeleton certificate."""
    cross, x = _read(data)
    a = _aux(cross, x)
    d, r = cross.d, cross.rank
    parts = [
        _header(x, d, r, len(x["roles"]), len(cross.checks)),
        "From Coq Require Import Reals QArith List.\n"
        "From VerifiedAttn Require Import Defs CertHead CertLowRank.\n"
        "Import ListNotations.\nOpen Scope R_scope.\n",
        *skeleton_tables(
            cross, x, a, [vec_table("v_ans", x["vans"], "0", "The recorded answer to [e_i].")]
        ),
        "Theorem run_identified :\n"
        f"  answers_v {d} (rmat W_c) (rvec v_c) v_ans /\\\n"
        f"  measures {d} (rmat W_c) (map fst learning ++ rank_checks) /\\\n"
        f"  spanned {d} {r} (rmat B) (rmat W_c) /\\\n"
        f"  forall (W' : mat) (v' : vec), spanned {d} {r} (rmat B) W' ->\n"
        f"    answers_v {d} W' v' v_ans -> measures {d} W' (map fst learning) ->\n"
        f"    same_head {d} (rmat W_c) (rvec v_c) W' v'.\n"
        "Proof.\n  apply (lowrank_identified run). vm_compute. reflexivity.\nQed.\n",
        "Print Assumptions run_identified.\n",
    ]
    return "\n".join(parts)


def skeleton_tables(
    cross: Cross,
    x: dict[str, Any],
    a: dict[str, Any],
    answers: list[str],
    more: Sequence[str] = (),
) -> list[str]:
    """The run's tables: (W_c, v_c), ``answers`` (the answers to [e_i]), B, U_S, the probes,
    ``more``, the auxiliary numbers, and ``run`` (its lvans: v_ans if ``answers`` defines
    it, else v_c)."""
    d, r = cross.d, cross.rank
    vans = "v_ans" if any("Definition v_ans " in t for t in answers) else "v_c"
    return [
        mat_table("W_c", x["W"], "0", "The certified W (row i, column j)."),
        vec_table("v_c", x["v"], "0", "The certified v."),
        *answers,
        mat_table("B", a["B"], "0", "The basis columns: b_j is column j (d x r)."),
        mat_table("U_S", x["US"], "0", "The pivot rows: column k is the design column u_{s_k}."),
        *_probes(cross, x),
        *more,
        "(** Auxiliary numbers for the proof (any wrong one makes it fail). *)",
        mat_table("X_c", a["X"], "0", "W_c = (W_c B) X_c."),
        mat_table("N_inv", a["Ninv"], "0", "An inverse of the pivot block U_S^T W_c B."),
        _rows("L_C", a["LC"], "Row a r + j: the combination of the equations giving (W B)_aj."),
        _rows("L_R", a["LR"], "Row k d + c: the combination giving (U_S^T W)_kc."),
        f"Definition run : lowrank_cert := {{|\n  ld := {d}; lr := {r}; lB := B; lUS := U_S; "
        "llearn := learning; lchecks := rank_checks;\n  lW := W_c; lv := v_c; "
        f"lvans := {vans}; lX := X_c; lNinv := N_inv; lLC := L_C; lLR := L_R |}}.\n",
    ]


def _header(x: dict[str, Any], d: int, r: int, n: int, checks: int) -> str:
    return (
        "(** * An exact low-rank (skeleton) run, checked by Coq's kernel.\n\n"
        f"    Certificate: {x['describe']}; sha256 {x['sha256']}.\n\n"
        "    Theorem [run_identified] (at the end of this file) states, with the recorded data\n"
        "    below (B: the r basis columns; U_S: the r pivot rows of the design; each probe\n"
        "    [b + t u; b] as (u, b) and its measurement m = u^T W b):\n"
        f"    1. the certified head (W_c, v_c) answers [e_i] with the recorded v_ans, and has\n"
        f"       the {n} learning measurements and the {checks} rank checks recorded;\n"
        f"    2. W_c = (W_c B) X for some X: its columns are spanned by its r = {r} measured ones;\n"
        "    3. every head (W', v') over the reals whose columns are spanned by W' B and that\n"
        f"       has the recorded answers to [e_i] and the {n} learning measurements\n"
        f"       ({d} + {n} = d + 2dr - r^2 numbers) is (W_c, v_c).\n"
        "    It instantiates [CertLowRank.lowrank_identified] (formal/CertLowRank.v, from\n"
        "    [Skeleton.skeleton_determines], proved for every d and r); the pivot block U_S^T W B\n"
        "    is shown invertible by an inverse computed over Q. The measurements are the exact\n"
        "    decoding of the stored answers, m = logit((f - b^T v) / (t u^T v)) / t, done by\n"
        "    verified_attn's checker, not by Coq. *)\n"
    )
