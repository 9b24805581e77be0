"""The Coq file of a certified skeleton (low-rank) run: ``run_identified`` from
``CertLowRankCert.v``.

>>> import verified_attn as va
>>> oracle = va.Oracle(va.SingleHeadAttention([[1, 0], [2, 0]], [1, 3]), "certified")
>>> rec = va.learn_low_rank(oracle, seed=1, denominator_bound=16)
>>> text = va.export_coq(rec.certificate())
>>> (rec.rank, "lowrank_cert_entries run D" in text, "Admitted" in text)
(1, True, False)

The file states the run's basis columns B, pivot rows U_S, every learning probe (u, b,
scale t) with its recorded answer ball, the balls of the answers to [e_i], the certified
rational (W, v) and the certificate's bound D, and proves by
``CertLowRankCert.lowrank_cert_entries``: the certified head answers inside every
recorded ball and its entries have denominators at most D; and every head (W', v') whose
columns are spanned by W' B, whose entries (of W' and v') are rationals with denominators
at most D, and that answers inside the balls, is the certified one. That is the
certificate's own assumption. Coq derives from it that each measurement u^T W' b has
denominator at most D_m = D^K cu cb (:func:`measurement_bound`), so each logit bracket is
narrower than 1/(D_m b): the balls must be that narrow, and a run whose balls are not is
refused with the precision it would need (with the default D = 2^(precision / 4) no
precision suffices; a smaller ``denominator_bound`` does). The exporter supplies the
brackets and the interval tactic's precision; a wrong one makes the proof fail, never
succeed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import Any

import mpmath

from verified_attn.certificates.kernel import as_list, get
from verified_attn.errors import CertificateError
from verified_attn.formal.coq_tables import (
    Probe,
    ball,
    bracket_delta,
    bracket_tactic,
    coq_q,
    enum_tactics,
    mpf,
    probe_precision,
    vec_table,
)
from verified_attn.formal.export_low_rank import _aux, _read, skeleton_tables

__all__ = ["low_rank_cert_file", "measurement_bound"]


def measurement_bound(D: int, u: Sequence[Fraction], b: Sequence[Fraction]) -> tuple[int, int, int]:
    """(D_m, cu, cb): every W with entries of denominator <= D has u^T W b of denominator
    <= D_m = D^K cu cb, for cu, cb the lcm of u's and b's denominators and K the pairs
    (i, j) with u_i b_j != 0 (``CertLowRankCert.measure_den_le``, the same formula).

    >>> F = Fraction
    >>> measurement_bound(4, [F(1), F(1), F(0)], [F(1, 2), F(0), F(3, 4)])
    (1024, 1, 4)
    """
    cu = math.lcm(*(q.denominator for q in u))
    cb = math.lcm(*(q.denominator for q in b))
    K = sum(1 for x in u if x) * sum(1 for y in b if y)
    return D**K * cu * cb, cu, cb


def _fits(p: Probe) -> Any:
    """How many times the probe's ball fits in the room its logit bracket leaves (an mpf;
    above 1: it lies strictly between the answers at the bracket's ends, as ``brackets``
    needs)."""
    with mpmath.workprec(4 * max(256, p.mlo.denominator.bit_length()) + 64):
        g = [
            mpf(p.a) + mpf(p.s) / (1 + mpmath.exp(-mpf(p.t) * mpf(x))) for x in (p.mlo, p.m, p.mhi)
        ]
        room = min(abs(g[1] - g[0]), abs(g[2] - g[1]))
        return room / mpf(p.hi - p.lo) if p.hi > p.lo else mpmath.inf


def _cprobes(
    data: Mapping[str, Any], cross: Any, x: dict[str, Any], D: int
) -> tuple[list[str], Any]:
    """One cprobe per learning probe: its ball, logit bracket, a = b^T v, s = t u^T v and
    the integers clearing u's and b's denominators."""
    raw = as_list(get(data, "answers.probes"), "answers.probes")
    d, v = cross.d, x["v"]
    parts, probes, names, deltas = [], [], [], []
    for i, (kind, n) in x["roles"]:
        p, m = cross.probes[i], x["m"][i]
        lo, hi = ball(raw[i].get("answer"), f"answers.probes[{i}].answer")
        a = sum((p.b[c] * v[c] for c in range(d)), Fraction(0))
        s = p.t * sum((p.u[c] * v[c] for c in range(d)), Fraction(0))
        Dm, cu, cb = measurement_bound(D, p.u, p.b)
        delta = bracket_delta([[Fraction(1)]], Dm, m.denominator)
        deltas.append(delta)
        probes.append(Probe(a, s, p.t, m, m - delta, m + delta, lo, hi))
        _enough_bits(data, i, probes[-1], D, Dm)
        fields = [p.t, lo, hi, m - delta, m + delta, a, s]
        cpt, cplo, cphi, cpmlo, cpmhi, cpa, cps = (coq_q(q) for q in fields)
        parts.append(
            f"Definition cp_{i} : cprobe := {{| cpr := probe_{i}; crole := {kind} {n}%nat; "
            f"cpt := {cpt};\n  cplo := {cplo}; cphi := {cphi};\n  cpmlo := {cpmlo}; "
            f"cpmhi := {cpmhi};\n  cpa := {cpa}; cps := {cps};\n  "
            f"cpcu := {cu}%positive; cpcb := {cb}%positive |}}.\n"
        )
        names.append(f"cp_{i}")
    parts.append(
        "(** The learning probes with their recorded answer balls. *)\n"
        f"Definition cprobes : list cprobe := [{'; '.join(names)}].\n"
    )
    bits = probe_precision(probes, min(deltas)) if probes else (53, 53)
    return parts, (names, bits)


def _enough_bits(data: Mapping[str, Any], i: int, p: Probe, D: int, Dm: int) -> None:
    """Refuse a run whose probe ball is too wide to pin u^T W b among the rationals of
    denominator <= D_m: the file could not be proved; name the precision that would do."""
    fits = _fits(p)
    if fits > 2:
        return
    prec = get(data, "precision")
    need = (prec if isinstance(prec, int) else 0) + int(mpmath.ceil(mpmath.log(4 / fits, 2))) + 8
    raise CertificateError(
        f"answers.probes[{i}]: its answer ball is too wide to pin u^T W b among the rationals "
        f"of denominator <= D_m = D^K cu cb (about 2^{Dm.bit_length()}, from the entry bound "
        f"D = {D}); the run has {prec} bits, about {need} are needed: learn again with "
        f"precision >= {need} and denominator_bound={D}, or with a smaller denominator_bound"
    )


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
        f"  entries_den_le D {d} (rmat W_c) /\\\n"
        f"  (forall i, (i < {d})%nat -> den_le D (rvec v_c i)) /\\\n"
        f"  forall (W' : mat) (v' : vec), spanned {d} {r} (rmat B) W' ->\n"
        f"    entries_den_le D {d} W' -> (forall i, (i < {d})%nat -> den_le D (v' i)) ->\n"
        f"    answers_in_lr {d} v_lo v_hi cprobes W' v' ->\n"
        f"    same_head {d} (rmat W_c) (rvec v_c) W' v'.\n"
        "Proof.\n"
        "  apply (lowrank_cert_entries run D v_lo v_hi cprobes).\n"
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
        f"       the entries of W_c and v_c are rationals with denominators at most D = {D};\n"
        "    3. every head (W', v') over the reals whose columns are spanned by W' B, whose\n"
        "       entries (of W' and v') are rationals with denominators at most D, and that\n"
        "       answers inside every recorded ball is (W_c, v_c).\n"
        "    The assumption that makes the answer exact is on the entries: denominators at\n"
        "    most D (and W' spanned by W' B). Coq derives that each measurement u^T W' b then\n"
        "    has denominator at most D_m = D^K cu cb ([CertLowRankCert.measure_den_le]; K: the\n"
        "    pairs with u_i b_j <> 0, cu u and cb b integer vectors), and each ball pins it.\n"
        "    It instantiates [CertLowRankCert.lowrank_cert_entries] (formal/CertLowRankCert.v,\n"
        "    proved for every d and r); the checks over Q run by computation, each probe's\n"
        "    inequalities about exp are proved by Coq Interval. *)\n"
    )
