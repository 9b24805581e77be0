"""The Coq file of an affine single-head run: ``run_identified`` from ``CertAffine.v``.

>>> import verified_attn as va
>>> model = va.SingleHeadAttention([[1]], [2], c=[1], beta=3)
>>> data = va.learn_single_head(va.Oracle(model, "certified"), seed=0).certificate()
>>> text = va.export_coq(data)
>>> "apply (affine_identified run)" in text and "Admitted" not in text
True

The affine head adds a score bias c and an output bias beta; its learner asks
d^2 + 2d + 1 queries: [0], [e_i], [tc_k u_k; 0] and [e_j + t_kj u_k; e_j]. The file states
the certified (W, c, v, beta), the design and every recorded answer interval, and proves
by ``CertAffine.affine_identified`` that this head answers inside them and is the only head
with denominators at most D that does. The auxiliary numbers (an inverse of U, logit
brackets, the precision of Coq Interval) only shorten the proof: a wrong one makes it fail.
"""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from verified_attn.certificates.kernel import as_list, get, rational
from verified_attn.formal.coq_tables import (
    Probe,
    ball,
    bracket_delta,
    bracket_tactic,
    certified_header,
    coq_q,
    enum_tactics,
    exact_entry,
    head_tables,
    inverse,
    mat_table,
    probe_precision,
    probe_tables,
    vec_table,
)

__all__ = ["affine_data", "affine_file"]


def affine_data(data: Mapping[str, Any], d: int) -> dict[str, Any]:
    """c, beta, the scales of [tc_k u_k; 0] and the answers to [0] and to those probes."""
    params = "result.parameters"
    return {
        "c": [
            exact_entry(q, f"{params}.c[{i}]")
            for i, q in enumerate(as_list(get(data, f"{params}.c"), f"{params}.c", d))
        ],
        "beta": exact_entry(get(data, f"{params}.beta"), f"{params}.beta"),
        "tc": [
            rational(q, f"design.c_scales[{k}]")
            for k, q in enumerate(as_list(get(data, "design.c_scales"), "design.c_scales", d))
        ],
        "bb": ball(get(data, "answers.beta"), "answers.beta"),
        "cb": [
            ball(q, f"answers.c[{k}]")
            for k, q in enumerate(as_list(get(data, "answers.c"), "answers.c", d))
        ],
    }


def _dot_col(U: list[list[Fraction]], k: int, x: list[Fraction]) -> Fraction:
    return sum((U[i][k] * x[i] for i in range(len(x))), Fraction(0))


def _aux(x: dict[str, Any]) -> dict[str, Any]:
    d, U, W, c, v, beta = x["d"], x["U"], x["W"], x["c"], x["v"], x["beta"]
    t, tc = x["t"], x["tc"]
    rd = range(d)
    uv = [_dot_col(U, k, v) for k in rd]
    uc = [_dot_col(U, k, c) for k in rd]
    m = [[_dot_col(U, k, [W[r][j] for r in rd]) + uc[k] for j in rd] for k in rd]
    a: dict[str, Any] = {"Uinv": inverse(U), "uc": uc, "m": m}
    a["sc"] = [tc[k] * uv[k] for k in rd]
    a["s"] = [[t[k][j] * uv[k] for j in rd] for k in rd]
    den = max(q.denominator for q in [*c, *(q for row in W for q in row)])
    delta = bracket_delta(a["Uinv"], x["D"], den)
    a["nclo"], a["nchi"] = [q - delta for q in uc], [q + delta for q in uc]
    a["nlo"] = [[q - delta for q in row] for row in m]
    a["nhi"] = [[q + delta for q in row] for row in m]
    probes = [
        Probe(beta, a["sc"][k], tc[k], uc[k], a["nclo"][k], a["nchi"][k], *x["cb"][k]) for k in rd
    ]
    probes += [
        Probe(
            v[j] + beta,
            a["s"][k][j],
            t[k][j],
            m[k][j],
            a["nlo"][k][j],
            a["nhi"][k][j],
            *x["wb"][k][j],
        )
        for k in rd
        for j in rd
    ]
    a["prec"], a["br_prec"] = probe_precision(probes, delta)
    return a


_TABLES = (
    "W_c c_c v_c beta_c U t_probe tc_probe b_lo b_hi v_lo v_hi c_lo c_hi w_lo w_hi "
    "U_inv nc_lo nc_hi n_lo n_hi sc_probe s_probe uc_c m_c run"
)
_PROJ = (
    "ad aD aU aUinv ats atc aW ac av abeta ablo abhi avlo avhi aclo achi awlo awhi "
    "anclo anchi anlo anhi asc as_ auc am"
)


def _tables(x: dict[str, Any], a: dict[str, Any]) -> list[str]:
    vlo, vhi = [b[0] for b in x["vb"]], [b[1] for b in x["vb"]]
    clo, chi = [b[0] for b in x["cb"]], [b[1] for b in x["cb"]]
    return [
        f"(** The stated denominator bound. *)\nDefinition D : positive := {x['D']}%positive.\n",
        *head_tables(x),
        "(** The recorded answer to [0] lies in [b_lo, b_hi]. *)\n"
        f"Definition b_lo : Q := {coq_q(x['bb'][0])}.\nDefinition b_hi : Q := {coq_q(x['bb'][1])}.\n",
        vec_table("v_lo", vlo, "1", "The recorded answer to [e_i] lies in [v_lo i, v_hi i]."),
        vec_table("v_hi", vhi, "0", "(upper ends)"),
        vec_table(
            "c_lo", clo, "1", "The recorded answer to [tc_k u_k; 0] lies in [c_lo k, c_hi k]."
        ),
        vec_table("c_hi", chi, "0", "(upper ends)"),
        *probe_tables(x["wb"], a["Uinv"]),
        vec_table("nc_lo", a["nclo"], "0", "Brackets nc_lo k < u_k^T c < nc_hi k."),
        vec_table("nc_hi", a["nchi"], "0", "(upper ends)"),
        mat_table("n_lo", a["nlo"], "0", "Brackets n_lo k j < u_k^T W e_j + u_k^T c < n_hi k j."),
        mat_table("n_hi", a["nhi"], "0", "(upper ends)"),
        vec_table("sc_probe", a["sc"], "0", "tc_k u_k^T v."),
        mat_table("s_probe", a["s"], "0", "t_kj u_k^T v."),
        vec_table("uc_c", a["uc"], "0", "u_k^T c of the certified c."),
        mat_table("m_c", a["m"], "0", "u_k^T W e_j + u_k^T c of the certified W and c."),
    ]


def affine_file(x: dict[str, Any]) -> str:
    """The Coq text for the affine run read into ``x`` (see ``single_head_data``)."""
    a = _aux(x)
    d = x["d"]
    unfold = f"{_TABLES} {_PROJ} probe_value brackets inside sigmoid Q2R Qnum Qden"
    parts = [
        certified_header(
            {**x, "describe": f"{x['describe']}, affine"},
            "affine single head",
            "(W_c, c_c, v_c, beta_c)",
            f"{d * d + 2 * d + 1} recorded queries ([0], [e_i], [tc_k u_k; 0] and\n"
            f"       [e_j + t_kj u_k; e_j], i, j, k < {d})",
            "CertAffine.affine_identified",
        ),
        "From Coq Require Import Reals QArith Lia.\nFrom Interval Require Import Tactic.\n"
        "From VerifiedAttn Require Import Defs CertHead CertAffine IntervalZ.\n"
        "Open Scope R_scope.\n",
        *_tables(x, a),
        f"Definition run : affine_cert := {{|\n  ad := {d}; aD := D; aU := U; aUinv := U_inv; "
        "ats := t_probe; atc := tc_probe;\n  aW := W_c; ac := c_c; av := v_c; abeta := beta_c; "
        "ablo := b_lo; abhi := b_hi;\n  avlo := v_lo; avhi := v_hi; aclo := c_lo; achi := c_hi; "
        "awlo := w_lo; awhi := w_hi;\n  anclo := nc_lo; anchi := nc_hi; anlo := n_lo; "
        "anhi := n_hi;\n  asc := sc_probe; as_ := s_probe; auc := uc_c; am := m_c |}.\n",
        *enum_tactics(unfold),
        _theorem(d, a["prec"], a["br_prec"]),
        "Print Assumptions run_identified.\n",
    ]
    return "\n".join(parts)


def _theorem(d: int, prec: int, br_prec: int) -> str:
    br = bracket_tactic(br_prec)
    hold = f"split; interval with (i_prec {prec})"
    head = "(rmat W_c) (rvec c_c) (rvec v_c) (Q2R beta_c)"
    return (
        "Theorem run_identified :\n"
        f"  affine_answers_in run {head} /\\\n"
        f"  affine_dens D {d} {head} /\\\n"
        "  forall (W' : mat) (c' v' : vec) (beta' : R),\n"
        f"    affine_dens D {d} W' c' v' beta' -> affine_answers_in run W' c' v' beta' ->\n"
        f"    same_affine {d} {head} W' c' v' beta'.\n"
        "Proof.\n"
        "  apply (affine_identified run).\n"
        "  - vm_compute. reflexivity.\n"
        "  - split.\n"
        f"    + intros k Hk. cbn in Hk. enum k Hk; data; {br}.\n"
        f"    + intros k j Hk Hj. cbn in Hk, Hj. enum k Hk; enum j Hj; data; {br}.\n"
        "  - split.\n"
        f"    + intros k Hk. cbn in Hk. enum k Hk; data; {hold}.\n"
        f"    + intros k j Hk Hj. cbn in Hk, Hj. enum k Hk; enum j Hj; data; {hold}.\n"
        "Qed.\n"
    )
