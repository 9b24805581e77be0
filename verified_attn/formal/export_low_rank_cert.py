"""The Coq file of a certified skeleton (low-rank) run: ``run_identified`` from
``CertLowRankCert.v``.

>>> import verified_attn as va
>>> oracle = va.Oracle(va.SingleHeadAttention([[1, 0], [2, 0]], [1, 3]), "certified")
>>> rec = va.learn_low_rank(oracle, seed=1)
>>> text = va.export_coq(rec.certificate())
>>> (rec.rank, "lowrank_cert_identified run D" in text, "Admitted" in text)
(1, True, False)

The file states the run's basis columns B, pivot rows U_S, every learning probe (u, b,
scale t) with its recorded answer ball, the balls of the answers to [e_i], the certified
rational (W, v) and the stated bound D, and proves by
``CertLowRankCert.lowrank_cert_identified``: the certified head answers inside every
recorded ball; and every head (W', v') whose columns are spanned by W' B, whose v' entries
and recorded measurements u^T W' b are rationals with denominators at most D, and that
answers inside the balls, is the certified one. The assumption Coq uses is about the
measurements u^T W' b (and v'), not W's entries, which is what the certificate states:
with entries of denominator at most D, a measurement's denominator can exceed D.
The exporter supplies a logit bracket around each certified measurement and the interval
tactic's precision; a wrong one makes the proof fail, never succeed.
"""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from verified_attn.certificates.kernel import as_list, get
from verified_attn.formal.coq_tables import (
    Probe,
    ball,
    bracket_delta,
    bracket_tactic,
    coq_q,
    enum_tactics,
    probe_precision,
    vec_table,
)
from verified_attn.formal.export_low_rank import _aux, _read, skeleton_tables

__all__ = ["low_rank_cert_file"]


def _cprobes(
    data: Mapping[str, Any], cross: Any, x: dict[str, Any], D: int
) -> tuple[list[str], Any]:
    """One cprobe per learning probe: its ball, logit bracket, a = b^T v, s = t u^T v."""
    raw = as_list(get(data, "answers.probes"), "answers.probes")
    d, v = cross.d, x["v"]
    parts, probes, names, deltas = [], [], [], []
    for i, (kind, n) in x["roles"]:
        p, m = cross.probes[i], x["m"][i]
        lo, hi = ball(raw[i].get("answer"), f"answers.probes[{i}].answer")
        a = sum((p.b[c] * v[c] for c in range(d)), Fraction(0))
        s = p.t * sum((p.u[c] * v[c] for c in range(d)), Fraction(0))
        delta = bracket_delta([[Fraction(1)]], D, m.denominator)
        deltas.append(delta)
        probes.append(Probe(a, s, p.t, m, m - delta, m + delta, lo, hi))
        fields = [p.t, lo, hi, m - delta, m + delta, a, s]
        cpt, cplo, cphi, cpmlo, cpmhi, cpa, cps = (coq_q(q) for q in fields)
        parts.append(
            f"Definition cp_{i} : cprobe := {{| cpr := probe_{i}; crole := {kind} {n}%nat; "
            f"cpt := {cpt};\n  cplo := {cplo}; cphi := {cphi};\n  cpmlo := {cpmlo}; "
            f"cpmhi := {cpmhi};\n  cpa := {cpa}; cps := {cps} |}}.\n"
        )
        names.append(f"cp_{i}")
    parts.append(
        "(** The learning probes with their recorded answer balls. *)\n"
        f"Definition cprobes : list cprobe := [{'; '.join(names)}].\n"
    )
    bits = probe_precision(probes, min(deltas)) if probes else (53, 53)
    return parts, (names, bits)


def low_rank_cert_file(data: Mapping[str, Any], D: int) -> str:
    """The Coq text for a certified ``low-rank`` skeleton certificate with bound D."""
    cross, x = _read(data, "certified")
    a = _aux(cross, x)
    d, r = cross.d, cross.rank
    vb = [ball(q, f"answers.v[{i}]") for i, q in enumerate(as_list(get(data, "answers.v"), "v", d))]
    cps, (names, (prec, br_prec)) = _cprobes(data, cross, x, D)
    probe_names = " ".join(f"probe_{i}" for i, _ in x["roles"])
    unfold = (
        f"{' '.join(names)} {probe_names} cpr crole cpt cplo cphi cpmlo cpmhi cpa cps pm "
        "probe_value brackets inside sigmoid Q2R Qnum Qden"
    )
    parts = [
        _header(x, d, r, len(names), D),
        "From Coq Require Import Reals QArith List Lia.\nFrom Interval Require Import Tactic.\n"
        "From VerifiedAttn Require Import Defs CertHead CertLowRank CertLowRankCert IntervalZ.\n"
        "Import ListNotations.\nOpen Scope R_scope.\n",
        f"(** The stated denominator bound. *)\nDefinition D : positive := {D}%positive.\n",
        *skeleton_tables(
            cross,
            x,
            a,
            [
                vec_table(
                    "v_lo", [b[0] for b in vb], "1", "The answer to [e_i] is in [v_lo i, v_hi i]."
                ),
                vec_table("v_hi", [b[1] for b in vb], "0", "(upper ends)"),
            ],
            tuple(cps),
        ),
        *enum_tactics(unfold),
        _theorem(d, r, prec, br_prec),
        "Print Assumptions run_identified.\n",
    ]
    return "\n".join(parts)


def _theorem(d: int, r: int, prec: int, br_prec: int) -> str:
    return (
        "Theorem run_identified :\n"
        f"  answers_in_lr {d} v_lo v_hi cprobes (rmat W_c) (rvec v_c) /\\\n"
        f"  measures {d} (rmat W_c) (map fst learning ++ rank_checks) /\\\n"
        f"  spanned {d} {r} (rmat B) (rmat W_c) /\\\n"
        f"  (forall i, (i < {d})%nat -> den_le D (rvec v_c i)) /\\\n"
        f"  forall (W' : mat) (v' : vec), spanned {d} {r} (rmat B) W' ->\n"
        f"    (forall i, (i < {d})%nat -> den_le D (v' i)) -> measures_den_le D {d} W' cprobes ->\n"
        f"    answers_in_lr {d} v_lo v_hi cprobes W' v' ->\n"
        f"    same_head {d} (rmat W_c) (rvec v_c) W' v'.\n"
        "Proof.\n"
        "  apply (lowrank_cert_identified run D v_lo v_hi cprobes).\n"
        "  - reflexivity.\n"
        "  - vm_compute. reflexivity.\n"
        "  - vm_compute. reflexivity.\n"
        "  - unfold lr_bracketed, cprobes. repeat apply Forall_cons; try apply Forall_nil;\n"
        f"    data; {bracket_tactic(br_prec)}.\n"
        "  - unfold lr_hold, cprobes. repeat apply Forall_cons; try apply Forall_nil;\n"
        f"    data; split; interval with (i_prec {prec}).\n"
        "Qed.\n"
    )


def _header(x: dict[str, Any], d: int, r: int, n: int, D: int) -> str:
    head = f"{x['describe']}; sha256 {x['sha256']}"
    return (
        f"(** * A certified low-rank (skeleton) run, checked by Coq's kernel.\n\n    {head}.\n\n"
        "    [run_identified] (below) states, with the recorded data (B: the r basis columns;\n"
        "    U_S: the r pivot rows; each learning probe [b + t u; b] with its answer ball):\n"
        f"    1. the certified head (W_c, v_c) answers [e_i] and the {n} learning probes inside\n"
        "       their recorded balls, and has every learning and rank-check measurement;\n"
        f"    2. W_c = (W_c B) X: its columns are spanned by its r = {r} measured ones, and\n"
        f"       v_c's entries are rationals with denominators at most D = {D};\n"
        "    3. every head (W', v') over the reals whose columns are spanned by W' B, whose v'\n"
        "       entries and recorded measurements u^T W' b are rationals with denominators at\n"
        "       most D (an assumption on the measurements, not on W's entries), and that\n"
        "       answers inside every recorded ball is (W_c, v_c).\n"
        "    It instantiates [CertLowRankCert.lowrank_cert_identified] (formal/CertLowRankCert.v,\n"
        "    proved for every d and r); the checks over Q run by computation, each probe's\n"
        "    inequalities about exp are proved by Coq Interval. *)\n"
    )
