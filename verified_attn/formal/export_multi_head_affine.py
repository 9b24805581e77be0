"""The Coq file of a certified affine canonical multi-head run: its answers and numbers.

>>> import verified_attn as va
>>> from fractions import Fraction as F
>>> m = va.MultiHeadAttention([([[1, 0], [0, -1]], [1, 2], [F(1, 2), 0])], beta=F(1, 3))
>>> data = va.learn_multi_head(va.Oracle(m, "certified"), heads=1, affine=True).certificate()
>>> text = va.export_coq(data)
>>> "apply (amh_answers_in run)" in text and "Admitted" not in text
True

An affine run (``va.learn_multi_head(oracle, heads=H, affine=True)`` on a certified
oracle: heads (W_h, c_h, v_h) and one output bias beta) has d + 1 probes: B and a generic
b_0. Its file lists the design, the certified heads and beta, and one record per learning
query with its recorded answer interval and the heads' (bᵀv_h, uᵀv_h, uᵀ(W_h b + c_h)).
Coq generates the queries from the design (``CertMultiHeadAffine.amh_queries``) and
``run_consistent`` proves, by ``amh_answers_in`` and ``amh_masses_determined``: (1) the
certified heads with beta answer every learning query inside its recorded interval, one
interval per query; (2) their scores uᵀ(W_h b + c_h) and residues uᵀv_h at every pair are
rationals with denominator at most the stated D; (3) every affine model of at most H0
heads giving exactly their answers has their score masses at every pair. The labelling
across pairs and the steps from intervals are not formalised for affine runs, and the
header says so.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from verified_attn.certificates.kernel import get
from verified_attn.errors import CertificateError
from verified_attn.formal.coq_tables import ball, coq_q, mat_table, vec_table
from verified_attn.formal.export_multi_head import (
    design_queries,
    hold_proof,
    interval_precision,
    query_terms,
    read_run,
    record_definition,
)

__all__ = ["affine_multi_head_file"]

#: The affine run's hold statement, its spine, its [b_j] lemma and beta's name.
_HOLD = (
    "amh_hold",
    "run queries_of ad aH0 aU aB aties arecs abeta recs amh_queries amh_pairs",
    "inside_k0_beta",
    "beta_c ",
)


def _tables(x: dict[str, Any]) -> list[str]:
    """U, B (d + 1 probes), each certified head's W, c and v, ``heads_c``, beta and ties."""
    out = [
        mat_table("U", x["U"], "0", "The design: u_k is row k."),
        mat_table("B", x["B"], "0", "The probes: b_j is row j (d + 1 rows, b_d generic)."),
    ]
    for h, (W, v, c) in enumerate(x["heads"]):
        out.append(mat_table(f"W_{h}", W, "0", f"The certified W of head {h}."))
        out.append(vec_table(f"c_{h}", c, "0", f"The certified score bias c of head {h}."))
        out.append(vec_table(f"v_{h}", v, "0", f"The certified v of head {h}."))
    names = "; ".join(f"(W_{h}, c_{h}, v_{h})" for h in range(len(x["heads"])))
    ties = "; ".join(f"({k}, {j})%nat" for k, j, _ in x["ties"])
    return [
        *out,
        f"(** The certified canonical heads (W_h, c_h, v_h). *)\n"
        f"Definition heads_c : list qahead := [{names}].\n",
        f"(** The certified output bias. *)\nDefinition beta_c : Q := {coq_q(x['beta'])}.\n",
        f"(** The tie links (k, j): F(1) at (u_k, (b_0 + b_j)/2). *)\n"
        f"Definition ties : list (nat * nat) := [{ties}].\n",
    ]


def affine_multi_head_file(data: Mapping[str, Any], D: int) -> str:
    """The Coq text for a certified affine canonical ``multi-head`` certificate with bound D."""
    if data.get("arithmetic") != "certified" or data.get("method") != "canonical":
        raise CertificateError("export to Coq covers certified canonical affine runs")
    if data.get("denominator_bound") != D:
        raise CertificateError("the stated denominator bound is not the run's denominator_bound")
    x = read_run(data, ball, "balls", affine=True)
    qs = design_queries(x)
    terms = [query_terms(q, x["heads"]) for q in qs]
    beta = x["beta"]
    # interval shows lo - beta <= sum <= hi - beta, the margins of the answers with beta
    shifted = [(lo - beta, hi - beta) for lo, hi in x["balls"]]
    prec = interval_precision(qs, terms, shifted)
    names = [f"rec_{i}" for i in range(len(qs))]
    recs = [
        record_definition(i, lo, hi, ts)
        for i, (ts, (lo, hi)) in enumerate(zip(terms, x["balls"], strict=True))
    ]
    sha = hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()
    d, H0 = x["d"], x["H0"]
    parts = [
        _HEADER.format(
            d=d,
            H0=H0,
            H=len(x["heads"]),
            n=len(qs),
            K=2 * H0,
            bits=get(data, "precision"),
            seed=get(data, "seed"),
            sha=sha,
        ),
        "From Coq Require Import Reals QArith List.\n"
        "From Interval Require Import Tactic.\n"
        "From VerifiedAttn Require Import Defs CertHead CertMultiHead CertMultiHeadId\n"
        "  CertMultiHeadAffine IntervalZ.\n"
        "Import ListNotations.\nOpen Scope R_scope.\n",
        f"(** The stated denominator bound. *)\nDefinition D : positive := {D}%positive.\n",
        *_tables(x),
        "(** The recorded answer intervals, one per query of [amh_queries], in order, each with\n"
        "    the certified heads' (b^T v_h, u^T v_h, u^T (W_h b + c_h)) (checked over Q). *)",
        *recs,
        f"Definition recs : list mh_rec := [{'; '.join(names)}].\n",
        f"Definition run : amh_run := {{| ad := {d}; aH0 := {H0}; aD := D; aU := U; aB := B;\n"
        "  aties := ties; aheads := heads_c; abeta := beta_c; arecs := recs |}.\n",
        "Theorem run_consistent :\n"
        "  (answers_amh run (raheads heads_c) (Q2R beta_c) /\\ apairs_den_le run) /\\\n"
        f"  (forall (hs' : list affine_head) (beta' : R), (length hs' <= {H0})%nat ->\n"
        "     asame_answers run hs' beta' (raheads heads_c) (Q2R beta_c) ->\n"
        "     asame_masses run hs' (raheads heads_c)).\n"
        "Proof.\n"
        "  split.\n"
        "  - apply (amh_answers_in run).\n"
        "    + vm_compute. reflexivity.\n"
        f"    + {hold_proof(names, prec, '      ', _HOLD)[6:]}"
        "  - intros hs' beta' L E.\n"
        "    apply (amh_masses_determined run hs' (raheads heads_c) beta' (Q2R beta_c) L); [|exact E].\n"
        "    unfold raheads. rewrite map_length. apply Nat.leb_le. vm_compute. reflexivity.\n"
        "Qed.\n",
        "Print Assumptions run_consistent.\n",
    ]
    return "\n".join(parts)


_HEADER = """(** * A certified affine canonical multi-head run, checked by Coq's kernel.

    Certificate: kind multi-head (canonical, affine), d = {d}, H0 = {H0}, arithmetic
    certified ({bits} bits), seed {seed}; sha256 {sha}.

    [run_consistent] (at the end of this file) states, with the recorded data below
    (U: the design; B: the d + 1 probes; the pairs (u_k, b_j), j <= d, then
    (u_0 + u_k, b_0); the tie links):
    1. the {H} certified canonical heads (W_h, c_h, v_h) with the certified output bias
       beta together answer each of the {n} learning queries the design generates ([b_j];
       [b + u; ...; b + u; b] with k copies, k = 1 .. {K}, at each pair; one per tie link)
       inside its recorded interval, with exactly one recorded interval per query;
    2. every score u^T (W_h b + c_h) and residue u^T v_h of the certified heads at every
       pair of the design is a rational with denominator at most D (below), the
       denominator part of the certificate's stated assumption, for the certified heads;
    3. every affine model of at most {H0} heads, with any output bias, that gives exactly
       the certified heads' answers to every query the design generates has, at every
       pair (u, b) and for every real s, the certified heads' sum of residues u^T v_h
       over the heads with score u^T (W_h b + c_h) = s ([asame_masses]; the
       interpolation step: F(0 .. {K}) fix the poles and residues whatever the constant).
    It does NOT state that the certified heads are the only model answering inside the
    intervals, nor that exact answers determine the model beyond 3.: the labelling across
    pairs and the steps from intervals (formal/CertMultiHeadLabel.v, CertMultiHeadBound.v)
    are not formalised for the affine design (d + 1 probes, beta).
    It instantiates [CertMultiHeadAffine.amh_answers_in] and [amh_masses_determined]
    (formal/, proved for every d and H0); the checks over Q run by computation, each
    answer's two inequalities about exp are proved by Coq Interval. *)
"""
