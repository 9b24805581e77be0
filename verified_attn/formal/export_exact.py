"""The Coq file of an exact single-head run: ``run_identified`` from ``CertExact.v``.

>>> import verified_attn as va
>>> rec = va.learn_single_head(va.Oracle(va.SingleHeadAttention([[2]], [1]), "exact"))
>>> text = va.export_coq(rec.certificate())
>>> ("apply (exact_plain_identified run" in text, "Definition D " in text)
(True, False)

An exact run records every answer exactly: a rational, or a closed form of rationals and
exp of rationals (a SymPy expression). The file transcribes each recorded answer into
Coq's reals (``Q2R`` of rationals, ``exp``, +, *, / and integer powers) and proves, per
query, that the certified rational head gives exactly that answer: a lemma of
``CertExact.v`` writes the head's answer as a + s / (1 + exp nl) with a, s, nl rationals
checked over Q, every exp (Q2R r) of the identity is rewritten as a power of
X = exp (Q2R g) (g the greatest common divisor of the exponents; each rewrite is checked
over Q), and ``field`` closes the identity. ``run_identified`` then applies
``CertExact.exact_plain_identified`` (or ``exact_affine_identified``), Theorem 4.1 for every
invertible design: every head giving the recorded answers is the certified one. No
denominator bound is assumed. The auxiliary numbers (an inverse of U, a, s, nl, g and the
powers) only make the proof short: a wrong one makes it fail.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from fractions import Fraction
from typing import Any

import sympy

from verified_attn.certificates.kernel import as_list, as_matrix, get, rational
from verified_attn.errors import CertificateError
from verified_attn.formal.coq_tables import (
    coq_q,
    enum_tactics,
    exact_entry,
    head_tables,
    inverse,
    mat_table,
)
from verified_attn.serialize import load_number

__all__ = ["answer_expression", "coq_real", "exact_file"]

_SIDE = "first [vm_compute; reflexivity | apply Nat.ltb_lt; vm_compute; reflexivity]"


def coq_real(e: Any, exps: set[Fraction]) -> str:
    """A SymPy closed form of rationals and exp of rationals as a Coq real; the exponents
    met are added to ``exps``.

    >>> s = set()
    >>> coq_real(sympy.Integer(5) / (sympy.exp(-4) + 1), s), s
    ('(Q2R (5)%Q * / ((Q2R (1)%Q + exp (Q2R (-4)%Q))))', {Fraction(-4, 1)})
    """
    if e.is_Rational:
        return f"Q2R {coq_q(Fraction(int(e.p), int(e.q)))}"
    if e == sympy.E:
        exps.add(Fraction(1))
        return f"exp (Q2R {coq_q(Fraction(1))})"
    if isinstance(e, sympy.exp) and e.args[0].is_Rational:
        r = Fraction(int(e.args[0].p), int(e.args[0].q))
        exps.add(r)
        return f"exp (Q2R {coq_q(r)})"
    if e.is_Add or e.is_Mul:
        sep = " + " if e.is_Add else " * "
        return "(" + sep.join(_ordered(e, exps)) + ")"
    if e.is_Pow and e.args[1].is_Integer:
        n = int(e.args[1])
        base = coq_real(e.args[0], exps)
        if n < 0:
            return f"/ ({base}) ^ {-n}" if n != -1 else f"/ ({base})"
        return f"({base}) ^ {n}"
    raise CertificateError(f"recorded answer {str(e)[:60]!r} is not a closed form this exports")


def _ordered(e: Any, exps: set[Fraction]) -> list[str]:
    """The arguments of a sum or product, a reciprocal factor last (so 'a * / b' reads)."""
    args = sorted(e.args, key=lambda a: a.is_Pow and a.args[1].is_negative)
    return [coq_real(a, exps) for a in args]


def answer_expression(x: Any, path: str) -> Any:
    """A recorded exact answer as a SymPy expression (a rational or a closed form)."""
    if not (isinstance(x, dict) and set(x) <= {"rational", "sympy"} and len(x) == 1):
        raise CertificateError(f"{path}: an exact answer is {{'rational'}} or {{'sympy'}}")
    return sympy.sympify(load_number(x))


def _gcd(qs: set[Fraction]) -> Fraction:
    """The largest g > 0 with every q an integer multiple of g (1 when all are 0)."""
    nz = [q for q in qs if q != 0]
    if not nz:
        return Fraction(1)
    num = math.gcd(*(q.numerator for q in nz))
    den = math.lcm(*(q.denominator for q in nz))
    return Fraction(num, den)


def _close(exps: set[Fraction], indent: str = "  ") -> str:
    """Rewrite every exp (Q2R r) as a power of exp (Q2R g), then ``exact_close g``."""
    g = _gcd(exps)
    lines = []
    for r in sorted(exps - {g}):
        n = r / g
        lemma = "exp_q_pow" if n >= 0 else "exp_q_inv_pow"
        lines.append(
            f"{indent}rewrite ({lemma} {coq_q(r)} {coq_q(g)} {abs(int(n))})"
            " by (vm_compute; reflexivity)."
        )
    return "\n".join([*lines, f"{indent}exact_close {coq_q(g)}."])


def _dot_col(U: list[list[Fraction]], k: int, x: list[Fraction]) -> Fraction:
    return sum((U[i][k] * x[i] for i in range(len(x))), Fraction(0))


def _read(data: Mapping[str, Any], d: int, affine: bool) -> dict[str, Any]:
    """The design, the certified head and the recorded answers (SymPy) of an exact run."""

    def mat(path: str, entry: Any) -> list[list[Any]]:
        rows = as_matrix(get(data, path), path, d, d)
        return [
            [entry(q, f"{path}[{i}][{j}]") for j, q in enumerate(r)] for i, r in enumerate(rows)
        ]

    def vec(path: str, entry: Any) -> list[Any]:
        return [entry(q, f"{path}[{i}]") for i, q in enumerate(as_list(get(data, path), path, d))]

    p = "result.parameters"
    x: dict[str, Any] = {"d": d, "affine": affine, "U": mat("design.U", rational)}
    x["t"], x["W"] = mat("design.scales", rational), mat(f"{p}.W", exact_entry)
    x["v"] = vec(f"{p}.v", exact_entry)
    x["av"], x["aw"] = vec("answers.v", answer_expression), mat("answers.W", answer_expression)
    zero = [Fraction(0)] * d
    x["c"], x["beta"], x["tc"] = zero, Fraction(0), [Fraction(1)] * d
    if affine:
        x["c"], x["tc"] = vec(f"{p}.c", exact_entry), vec("design.c_scales", rational)
        x["beta"] = exact_entry(get(data, f"{p}.beta"), f"{p}.beta")
        x["ab"] = answer_expression(get(data, "answers.beta"), "answers.beta")
        x["ac"] = vec("answers.c", answer_expression)
    return x


def _lemma(name: str, lhs: str, rec: str, use: str, exps: set[Fraction]) -> str:
    return (
        f"Lemma {name} :\n  {lhs} = {rec}.\nProof.\n"
        f"  rewrite ({use}) by {_SIDE}.\n  cbv beta iota delta [{rec.split()[0]}].\n"
        f"{_close(exps)}\nQed.\n"
    )


def _queries(x: dict[str, Any]) -> tuple[list[str], list[str]]:
    """The transcribed answers (definitions) and one lemma per query."""
    d, U, W, v, c, beta, t, tc = (x[k] for k in ("d", "U", "W", "v", "c", "beta", "t", "tc"))
    uv = [_dot_col(U, k, v) for k in range(d)]
    uc = [_dot_col(U, k, c) for k in range(d)]
    f = "attention_affine (xd run)" if x["affine"] else "attention (xd run)"
    args = (
        "(rmat (xW run)) (rvec (xc run)) (rvec (xv run)) (Q2R (xbeta run))"
        if x["affine"]
        else "(rmat (xW run)) (rvec (xv run))"
    )
    defs, lemmas = [], []

    def one(name: str, expr: Any, lhs: str, use: str, head_exp: Fraction | None) -> None:
        exps: set[Fraction] = set() if head_exp is None else {head_exp}
        defs.append(f"Definition {name} : R := {coq_real(expr, exps)}.\n")
        lemmas.append(_lemma(f"{name}_ok", lhs, f"{name}", use, exps))

    if x["affine"]:
        one("ans_beta", x["ab"], f"{f} 1 query_beta {args}", f"exact_beta run {coq_q(beta)}", None)
    for i in range(d):
        use = (
            f"exact_length1 run {i} {coq_q(v[i] + beta)}"
            if x["affine"]
            else f"plain_length1 run {i} {coq_q(v[i])}"
        )
        one(f"ans_v_{i}", x["av"][i], f"{f} 1 (query_v {i}) {args}", use, None)
    for k in range(d):
        if x["affine"]:
            nl = -(tc[k] * uc[k])
            use = f"exact_c run {k} {coq_q(beta)} {coq_q(tc[k] * uv[k])} {coq_q(nl)}"
            one(f"ans_c_{k}", x["ac"][k], f"{f} 2 (xquery_c run {k}) {args}", use, nl)
        for j in range(d):
            m = sum((U[r][k] * W[r][j] for r in range(d)), Fraction(0)) + uc[k]
            nl = -(t[k][j] * m)
            lemma = "exact_w" if x["affine"] else "plain_w"
            use = f"{lemma} run {k} {j} {coq_q(v[j] + beta)} {coq_q(t[k][j] * uv[k])} {coq_q(nl)}"
            one(f"ans_w_{k}_{j}", x["aw"][k][j], f"{f} 2 (xquery_w run {k} {j}) {args}", use, nl)
    return defs, lemmas


def _tables(x: dict[str, Any]) -> list[str]:
    d = x["d"]
    v_tab = "\n".join(f"  | {i}%nat => ans_v_{i}" for i in range(d))
    w_tab = "\n".join(f"  | {k}%nat, {j}%nat => ans_w_{k}_{j}" for k in range(d) for j in range(d))
    out = [
        f"Definition rec_v (i : nat) : R := match i with\n{v_tab}\n  | _ => 0\n  end.\n",
        f"Definition rec_w (k j : nat) : R := match k, j with\n{w_tab}\n  | _, _ => 0\n  end.\n",
    ]
    if x["affine"]:
        c_tab = "\n".join(f"  | {k}%nat => ans_c_{k}" for k in range(d))
        out.append(f"Definition rec_c (k : nat) : R := match k with\n{c_tab}\n  | _ => 0\n  end.\n")
    return out


def _theorem(x: dict[str, Any]) -> str:
    d, affine = x["d"], x["affine"]
    recs = "ans_beta rec_v rec_c rec_w" if affine else "rec_v rec_w"
    head = "(rmat W_c) (rvec c_c) (rvec v_c) (Q2R beta_c)" if affine else "(rmat W_c) (rvec v_c)"
    other = "(W' : mat) (c' v' : vec) (beta' : R)" if affine else "(W' : mat) (v' : vec)"
    oargs = "W' c' v' beta'" if affine else "W' v'"
    answers, same = ("affine_answers", "same_affine") if affine else ("plain_answers", "same_head")
    cases = [f"exact ans_v_{i}_ok" for i in range(d)]
    wcases = [f"exact ans_w_{k}_{j}_ok" for k in range(d) for j in range(d)]
    enum_w = "intros k j Hk Hj. cbn in Hk, Hj. enum k Hk; enum j Hj; [" + " | ".join(wcases) + "]"
    parts = [f"intros i Hi. cbn in Hi. enum i Hi; [{' | '.join(cases)}]"]
    if affine:
        ccases = " | ".join(f"exact ans_c_{k}_ok" for k in range(d))
        parts = ["exact ans_beta_ok", *parts, f"intros k Hk. cbn in Hk. enum k Hk; [{ccases}]"]
    parts.append(enum_w)
    split = "split; [|split; [|split]]" if affine else "split"
    bullets = "".join(f"    - {p}.\n" for p in parts)
    identified = "exact_affine_identified" if affine else "exact_plain_identified"
    return (
        "Theorem run_identified :\n"
        f"  {answers} run {recs} {head} /\\\n"
        f"  forall {other}, {answers} run {recs} {oargs} ->\n"
        f"    {same} {d} {head} {oargs}.\n"
        "Proof.\n"
        f"  assert (A : {answers} run {recs} {head}).\n"
        f"  {{ {'cbv zeta. ' if affine else ''}{split}.\n{bullets}  }}\n"
        f"  split; [exact A|]. intros {oargs} B.\n"
        f"  apply ({identified} run {recs}); [vm_compute; reflexivity | exact A | exact B].\n"
        "Qed.\n"
    )


def _header(x: dict[str, Any], n: int) -> str:
    affine = x["affine"]
    head = "(W_c, c_c, v_c, beta_c)" if affine else "(W_c, v_c)"
    queries = (
        "[0], [e_i], [tc_k u_k; 0] and [e_j + t_kj u_k; e_j]"
        if affine
        else "[e_i] and [e_j + t_kj u_k; e_j]"
    )
    thm = "exact_affine_identified" if affine else "exact_plain_identified"
    return (
        f"(** * An exact {'affine ' if affine else ''}single head, checked by Coq's kernel.\n\n"
        f"    Certificate: {x['describe']}; sha256 {x['sha256']}.\n\n"
        "    Theorem [run_identified] (at the end of this file) states, with the recorded data\n"
        "    below:\n"
        f"    1. the certified head {head} gives exactly the recorded answer (ans_...: a\n"
        "       rational, or a closed form of rationals and exp of rationals) to each of the\n"
        f"       {n} recorded queries {queries}, i, j, k < {x['d']};\n"
        "    2. every head over the reals that gives exactly those answers is the certified\n"
        "       head. No assumption on its entries (no denominator bound): the answers are\n"
        "       exact.\n"
        f"    It instantiates [CertExact.{thm}] (formal/CertExact.v: Theorem 4.1 for every d\n"
        "    and every invertible design, [Thm41Affine.thm41_affine_identifiable]); the checks\n"
        "    over Q run by computation, each answer's identity is proved by [field] after\n"
        "    writing its exps as powers of one exp. *)\n"
    )


def exact_file(data: Mapping[str, Any], d: int, affine: bool) -> str:
    """The Coq text for an exact single-head certificate (plain or affine)."""
    x = _read(data, d, affine)
    x["sha256"] = hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()
    x["describe"] = f"kind single-head, d = {d}, arithmetic exact, seed {get(data, 'seed')}"
    defs, lemmas = _queries(x)
    run = (
        f"Definition run : exact_run := {{| xd := {d}; xU := U; xUinv := U_inv; xt := t_probe;\n"
        f"  xtc := tc_probe; xW := W_c; xc := c_c; xv := v_c; xbeta := beta_c |}}.\n"
    )
    parts = [
        _header(x, len(defs)),
        "From Coq Require Import Reals QArith Lia.\n"
        "From VerifiedAttn Require Import Defs CertHead CertAffine Thm41Affine CertExact.\n"
        "Open Scope R_scope.\n",
        *head_tables(x),
        mat_table("U_inv", inverse(x["U"]), "0", "An inverse of U (auxiliary; a wrong one fails)."),
        run,
        "(** The recorded answers, as recorded (transcribed into Coq's reals). *)",
        *defs,
        *_tables(x),
        *enum_tactics("run"),
        *lemmas,
        _theorem(x),
        "Print Assumptions run_identified.\n",
    ]
    return "\n".join(parts)
