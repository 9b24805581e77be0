"""Export a single-head certificate to a Coq file whose theorem is about that very run.

>>> import verified_attn as va
>>> model = va.SingleHeadAttention([[1, -2], [3, 0]], [0, 5])
>>> data = va.learn_single_head(va.Oracle(model, "certified"), seed=0).certificate()
>>> text = va.export_coq(data)
>>> "Theorem run_identified" in text and "Admitted" not in text
True

The file transcribes the certificate (design U, probe scales t, the certified W and v,
the recorded answer intervals, the stated denominator bound D) into rationals of Coq's
``Q`` and proves ``run_identified`` by instantiating ``CertHead.plain_identified`` from
``formal/CertHead.v`` (or, for an affine head, ``CertAffine.affine_identified`` from
``formal/CertAffine.v``): the finite checks run by computation
over Q, and each probe's two inequalities about exp are proved by Coq Interval. Nothing
here decides whether the certificate is right: a wrong rational, interval, D or a missing
query leaves a goal that ``coqc`` cannot close. Only the auxiliary numbers that make the
proof short are computed here (an inverse of U, logit brackets around each u_k^T W e_j,
the precision the interval tactic needs); a wrong one can only make the proof fail.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from fractions import Fraction
from pathlib import Path
from typing import Any

from verified_attn.certificates import load_certificate
from verified_attn.certificates.kernel import as_list, as_matrix, get, rational
from verified_attn.errors import CertificateError
from verified_attn.formal.coq_tables import (
    Probe,
    ball,
    bracket_delta,
    bracket_tactic,
    certified_header,
    enum_tactics,
    exact_entry,
    inverse,
    mat_table,
    probe_precision,
    probe_tables,
    vec_table,
)
from verified_attn.formal.export_affine import affine_data, affine_file
from verified_attn.formal.export_exact import exact_file
from verified_attn.formal.export_hypothesis import hypothesis_file
from verified_attn.formal.export_low_rank import low_rank_file
from verified_attn.formal.export_low_rank_cert import low_rank_cert_file
from verified_attn.formal.export_multi_head import multi_head_file
from verified_attn.formal.export_multi_head_affine import affine_multi_head_file
from verified_attn.formal.export_multi_head_exact import exact_multi_head_file
from verified_attn.formal.export_pair import pair_file

__all__ = ["EXPORTABLE", "export_coq", "single_head_data"]

#: The certificate kinds (and arithmetics) a Coq file can be written for.
EXPORTABLE = {
    "single-head": ("exact", "certified"),
    "counterexample": ("exact",),
    "low-rank": ("exact", "certified"),
    "multi-head": ("exact", "certified"),
}
#: Largest d exported: the file holds d^2 probes, each closed by two interval calls.
MAX_D = 16
_DEN = re.compile(r"denominator <= (\d+)")


def export_coq(certificate: str | Path | Mapping[str, Any], path: str | Path | None = None) -> str:
    """The Coq file (text) proving the run's theorem; also written to ``path`` if given.

    Raises :class:`CertificateError` for a kind, arithmetic or shape this cannot export.
    """
    data = load_certificate(certificate)
    kind = data.get("kind")
    if kind not in EXPORTABLE:
        raise CertificateError(
            f"export to Coq covers {sorted(EXPORTABLE)} certificates, not {kind!r:.40}"
        )
    if kind == "counterexample" and data.get("model_class") is None:
        text = hypothesis_file(data)
    elif kind == "counterexample":
        text = pair_file(data)
    elif kind == "low-rank" and data.get("arithmetic") == "certified":
        text = low_rank_cert_file(data, _denominator(data))
    elif kind == "low-rank":
        text = low_rank_file(data)
    elif kind == "multi-head" and data.get("arithmetic") == "exact":
        text = exact_multi_head_file(data)
    elif kind == "multi-head" and data.get("affine"):
        text = affine_multi_head_file(data, _denominator(data))
    elif kind == "multi-head":
        text = multi_head_file(data, _denominator(data))
    elif data.get("arithmetic") == "exact":
        text = exact_file(data, _dimension(data), bool(get(data, "affine")))
    else:
        x = single_head_data(data)
        text = affine_file(x) if x["affine"] else _single_head_file(x)
    if path is not None:
        Path(path).write_text(text)
    return text


def _dimension(data: Mapping[str, Any]) -> int:
    d = get(data, "d")
    if not isinstance(d, int) or not 1 <= d <= MAX_D:
        raise CertificateError(f"d = {d!r:.20}: export to Coq covers 1 <= d <= {MAX_D}")
    return d


def single_head_data(data: Mapping[str, Any]) -> dict[str, Any]:
    """The rationals the Coq file states, read from a certified single-head certificate."""
    d = _dimension(data)
    arith = get(data, "arithmetic")
    if arith != "certified":
        raise CertificateError(
            f"export to Coq covers exact and certified single heads, not {arith!r:.20}"
        )
    out: dict[str, Any] = {"d": d, "D": _denominator(data), "affine": bool(get(data, "affine"))}
    out["U"] = [
        [rational(q, f"design.U[{i}][{k}]") for k, q in enumerate(row)]
        for i, row in enumerate(as_matrix(get(data, "design.U"), "design.U", d, d))
    ]
    out["t"] = [
        [rational(q, f"design.scales[{k}][{j}]") for j, q in enumerate(row)]
        for k, row in enumerate(as_matrix(get(data, "design.scales"), "design.scales", d, d))
    ]
    params = "result.parameters"
    out["W"] = [
        [exact_entry(x, f"{params}.W[{i}][{j}]") for j, x in enumerate(row)]
        for i, row in enumerate(as_matrix(get(data, f"{params}.W"), f"{params}.W", d, d))
    ]
    out["v"] = [
        exact_entry(x, f"{params}.v[{i}]")
        for i, x in enumerate(as_list(get(data, f"{params}.v"), "v", d))
    ]
    out["vb"] = [
        ball(x, f"answers.v[{i}]")
        for i, x in enumerate(as_list(get(data, "answers.v"), "answers.v", d))
    ]
    out["wb"] = [
        [ball(x, f"answers.W[{k}][{j}]") for j, x in enumerate(row)]
        for k, row in enumerate(as_matrix(get(data, "answers.W"), "answers.W", d, d))
    ]
    if out["affine"]:
        out.update(affine_data(data, d))
    out["sha256"] = hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()
    out["describe"] = (
        f"kind single-head, d = {d}, arithmetic {arith} ({get(data, 'precision')} bits), "
        f"seed {get(data, 'seed')}"
    )
    return out


def _denominator(data: Mapping[str, Any]) -> int:
    """The denominator bound D the certificate's assumptions state (exactly one)."""
    found = [int(m.group(1)) for a in get(data, "assumptions") or [] for m in _DEN.finditer(a)]
    if len(found) != 1:
        raise CertificateError("the certificate states no single denominator bound D")
    return found[0]


def _aux(x: dict[str, Any]) -> dict[str, Any]:
    """Brackets mlo < u_k^T W e_j < mhi, t u_k^T v, u_k^T W e_j, and interval's precision."""
    d, U, W, v, t = x["d"], x["U"], x["W"], x["v"], x["t"]
    Uinv = inverse(U)
    uv = [sum((U[i][k] * v[i] for i in range(d)), Fraction(0)) for k in range(d)]
    s = [[t[k][j] * uv[k] for j in range(d)] for k in range(d)]
    m = [
        [sum((U[r][k] * W[r][j] for r in range(d)), Fraction(0)) for j in range(d)]
        for k in range(d)
    ]
    delta = bracket_delta(Uinv, x["D"], max(q.denominator for row in W for q in row))
    mlo = [[m[k][j] - delta for j in range(d)] for k in range(d)]
    mhi = [[m[k][j] + delta for j in range(d)] for k in range(d)]
    probes = [
        Probe(v[j], s[k][j], t[k][j], m[k][j], mlo[k][j], mhi[k][j], *x["wb"][k][j])
        for k in range(d)
        for j in range(d)
    ]
    bits, br_bits = probe_precision(probes, delta)
    return {"Uinv": Uinv, "s": s, "m": m, "mlo": mlo, "mhi": mhi, "prec": bits, "br_prec": br_bits}


_TABLES = "W_c v_c U t_probe v_lo v_hi w_lo w_hi U_inv m_lo m_hi s_probe m_c run"


def _single_head_file(x: dict[str, Any]) -> str:
    a = _aux(x)
    d, D = x["d"], x["D"]
    lo_v = [b[0] for b in x["vb"]]
    hi_v = [b[1] for b in x["vb"]]
    proj = "cd cD cU cUinv ct cW cv cvlo cvhi cblo cbhi cmlo cmhi cs cm"
    unfold = f"{_TABLES} {proj} probe_value brackets inside sigmoid Q2R Qnum Qden"
    prec = a["prec"]
    parts = [
        certified_header(
            x,
            "single head",
            "(W_c, v_c)",
            f"{d * d + d} recorded queries ([e_i] and [e_j + t_kj u_k; e_j], i, j, k < {d})",
            "CertHead.plain_identified",
        ),
        "From Coq Require Import Reals QArith Lia.\nFrom Interval Require Import Tactic.\n"
        "From VerifiedAttn Require Import Defs CertHead IntervalZ.\nOpen Scope R_scope.\n",
        f"(** The stated denominator bound. *)\nDefinition D : positive := {D}%positive.\n",
        mat_table("W_c", x["W"], "0", "The certified W (row i, column j)."),
        vec_table("v_c", x["v"], "0", "The certified v."),
        mat_table("U", x["U"], "0", "The design: u_k is column k."),
        mat_table("t_probe", x["t"], "0", "t_kj: the query [e_j + t_kj u_k; e_j]."),
        vec_table("v_lo", lo_v, "1", "The recorded answer to [e_i] lies in [v_lo i, v_hi i]."),
        vec_table("v_hi", hi_v, "0", "(upper ends)"),
        *probe_tables(x["wb"], a["Uinv"]),
        mat_table("m_lo", a["mlo"], "0", "Brackets m_lo k j < u_k^T W e_j < m_hi k j."),
        mat_table("m_hi", a["mhi"], "0", "(upper ends)"),
        mat_table("s_probe", a["s"], "0", "t_kj u_k^T v."),
        mat_table("m_c", a["m"], "0", "u_k^T W e_j of the certified W."),
        "Definition run : head_cert := {|\n  cd := " + str(d) + "; cD := D; cU := U; "
        "cUinv := U_inv; ct := t_probe;\n  cW := W_c; cv := v_c; cvlo := v_lo; cvhi := v_hi; "
        "cblo := w_lo; cbhi := w_hi;\n  cmlo := m_lo; cmhi := m_hi; cs := s_probe; cm := m_c |}.\n",
        *enum_tactics(unfold),
        _theorem(d, prec, a["br_prec"]),
        "Print Assumptions run_identified.\n",
    ]
    return "\n".join(parts)


def _theorem(d: int, prec: int, br_prec: int) -> str:
    leaf_br = bracket_tactic(br_prec)
    return (
        "Theorem run_identified :\n"
        "  answers_in run (rmat W_c) (rvec v_c) /\\\n"
        f"  denominators_at_most D {d} (rmat W_c) (rvec v_c) /\\\n"
        "  forall (W' : mat) (v' : vec),\n"
        f"    denominators_at_most D {d} W' v' -> answers_in run W' v' ->\n"
        f"    same_head {d} (rmat W_c) (rvec v_c) W' v'.\n"
        "Proof.\n"
        "  apply (plain_identified run).\n"
        "  - vm_compute. reflexivity.\n"
        "  - intros k j Hk Hj. cbn in Hk, Hj. enum k Hk; enum j Hj; data;\n"
        f"    {leaf_br}.\n"
        "  - intros k j Hk Hj. cbn in Hk, Hj. enum k Hk; enum j Hj; data;\n"
        f"    split; interval with (i_prec {prec}).\n"
        "Qed.\n"
    )
