"""The Coq file of an exact canonical multi-head run: ``run_identified`` from
``CertMultiHeadExact.v``.

>>> import verified_attn as va
>>> heads = [([[1, 0], [0, -1]], [1, 2]), ([[0, 1], [1, 0]], [-1, 1])]
>>> rec = va.learn_multi_head(va.Oracle(va.MultiHeadAttention(heads), "exact"), heads=2)
>>> text = va.export_coq(rec.certificate())
>>> text.count("Lemma hold_"), "apply (mh_exact_identified run" in text, "Admitted" in text
(22, True, False)

An exact run records every answer exactly: a rational (the query [b_j]) or a closed form of
rationals and exp of rationals (the query [b + u; ...; b + u; b]). The file transcribes
each recorded answer into Coq's reals and proves, per query, that the certified heads give
exactly that answer: their per-head numbers (b^T v_h, u^T v_h, u^T W_h b) are checked over
Q against the heads, each exp of the identity is rewritten as exp of a nonnegative
rational or its inverse (each rewrite checked over Q), and ``field`` closes it with every
exp an atom. Coq generates the queries from the design, so a dropped or added answer
breaks the one-answer-per-query statement. The theorem then needs no denominator bound:
the learner's stated assumption is how it found the heads, not what the theorem assumes.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from verified_attn.certificates.kernel import get
from verified_attn.errors import CertificateError
from verified_attn.formal.coq_tables import coq_q
from verified_attn.formal.export_exact import answer_expression, coq_real
from verified_attn.formal.export_multi_head import (
    design_queries,
    design_tables,
    labelling_checks,
    query_terms,
    read_run,
)

__all__ = ["exact_multi_head_file"]

_CHECK = "by (vm_compute; reflexivity)"


def _hold(
    i: int, k: int, terms: list[tuple[Fraction, Fraction, Fraction]], exps: set[Fraction]
) -> str:
    """``hold_i``: the recorded terms' sum at k is the recorded answer (``ans_i``)."""
    lines = []
    for m in sorted({m for _, _, m in terms}):
        lines.append(f"  rewrite (exp_opp_q {coq_q(m)} {coq_q(-m)}) {_CHECK}.")
        exps.add(-m)
    for r in sorted(exps):
        if r < 0:
            lines.append(f"  rewrite (exp_neg_q {coq_q(r)} {coq_q(-r)}) {_CHECK}.")
        elif r == 0:
            lines.append(f"  rewrite (exp_zero_q {coq_q(r)}) {_CHECK}.")
    return (
        f"Lemma hold_{i} : tsum (INR {k}) (fst xrec_{i}) = snd xrec_{i}.\nProof.\n"
        f"  cbv beta iota zeta delta [xrec_{i} ans_{i} fst snd tsum kprobe_value INR].\n"
        + "\n".join(lines)
        + ("\n" if lines else "")
        + "  mh_close.\nQed.\n"
    )


def exact_multi_head_file(data: Mapping[str, Any]) -> str:
    """The Coq text for an exact canonical ``multi-head`` certificate."""
    if data.get("method") != "canonical":
        raise CertificateError("export to Coq covers exact canonical multi-head runs")
    x = read_run(data, answer_expression, "answers")
    d, H0, heads = x["d"], x["H0"], x["heads"]
    qs = design_queries(x)
    defs, holds = [], []
    for i, (q, e) in enumerate(zip(qs, x["answers"], strict=True)):
        exps: set[Fraction] = set()
        terms = query_terms(q, heads)
        body = "; ".join(f"({coq_q(a)}, {coq_q(r)}, {coq_q(m)})" for a, r, m in terms)
        defs.append(
            f"Definition ans_{i} : R := {coq_real(e, exps)}.\n"
            f"Definition xrec_{i} : xrec := ([{body}], ans_{i}).\n"
        )
        holds.append(_hold(i, q[2], terms, exps))
    n = len(qs)
    identified = labelling_checks(x)[1]
    sha = hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()
    parts = [
        _header(data, x, n, sha, identified),
        "From Coq Require Import Reals QArith List Lia.\n"
        "From VerifiedAttn Require Import Defs CertHead CertMultiHead CertMultiHeadId\n"
        "  CertMultiHeadLabel CertMultiHeadExact.\n"
        "Import ListNotations.\nOpen Scope R_scope.\n",
        *design_tables(x),
        "(** The run (its interval fields mD and mrecs belong to certified runs; unused). *)\n"
        f"Definition run : mh_run := {{| md := {d}; mH0 := {H0}; mD := 1%positive; mU := U;\n"
        "  mB := B; mties := ties; mheads := heads_c; mrecs := [] |}.\n",
        "(** The recorded answers, as recorded (transcribed into Coq's reals), one per query\n"
        "    of [mh_queries] in order, each with the certified heads' (b^T v_h, u^T v_h,\n"
        "    u^T W_h b) (checked over Q). *)",
        *defs,
        f"Definition answers : list R := [{'; '.join(f'ans_{i}' for i in range(n))}].\n",
        f"Definition recs : list xrec := [{'; '.join(f'xrec_{i}' for i in range(n))}].\n",
        *holds,
        _xhold(n),
        _theorem(d, H0, identified),
        "Print Assumptions run_identified.\n",
    ]
    return "\n".join(parts)


def _xhold(n: int) -> str:
    spine = (
        "run md mH0 mU mB mties recs mh_queries mh_pairs flat_map map seq app fst snd "
        "Nat.mul Nat.add Nat.sub"
    )
    bullets = "".join(f"  - exact hold_{i}.\n" for i in range(n))
    return (
        "Lemma xhold_run : xhold run recs.\nProof.\n"
        f"  unfold xhold. cbv beta iota zeta delta [{spine}].\n"
        "  repeat apply Forall2_cons; try apply Forall2_nil.\n"
        f"{bullets}Qed.\n"
    )


def _theorem(d: int, H0: int, identified: bool) -> str:
    """``run_identified``: exact answers, the masses and (when the checks pass) the model."""
    model = (
        f" /\\\n  (forall hs' : list head, (length hs' <= {H0})%nat -> gives run hs' answers ->\n"
        f"     forall N X, multi_head {d} N X hs' = multi_head {d} N X (rheads heads_c))"
    )
    model_proof = (
        "  - intros hs' L E. rewrite A in E.\n"
        "    apply (mh_exact_identified run U_inv B_inv recs hs');\n"
        "      [vm_compute; reflexivity | exact xhold_run | vm_compute; reflexivity\n"
        "      | vm_compute; reflexivity | apply Nat.ltb_lt; vm_compute; reflexivity\n"
        "      | vm_compute; reflexivity | vm_compute; reflexivity | vm_compute; reflexivity\n"
        "      | vm_compute; reflexivity | exact L | exact E].\n"
    )
    return (
        "Theorem run_identified :\n"
        "  gives run (rheads heads_c) answers /\\\n"
        f"  (forall hs' : list head, (length hs' <= {H0})%nat -> gives run hs' answers ->\n"
        "     same_masses run hs' (rheads heads_c))"
        f"{model if identified else ''}.\n"
        "Proof.\n"
        "  assert (A : answers = map snd recs) by reflexivity.\n"
        f"  split; [|{'split' if identified else 'idtac'}].\n"
        "  - rewrite A. apply xrecs_gives; [vm_compute; reflexivity | exact xhold_run].\n"
        "  - intros hs' L E. rewrite A in E.\n"
        "    apply (mh_exact_masses run recs hs'); [vm_compute; reflexivity | exact xhold_run\n"
        "      | apply Nat.leb_le; vm_compute; reflexivity | exact L | exact E].\n"
        f"{model_proof if identified else ''}"
        "Qed.\n"
    )


def _header(data: Mapping[str, Any], x: dict[str, Any], n: int, sha: str, ok: bool) -> str:
    d, H0, H = x["d"], x["H0"], len(x["heads"])
    three = (
        "    3. (the run's certified heads number H0, their scores at each pair are distinct\n"
        "       and residues nonzero, no ties, the links unambiguous: checked over Q) every\n"
        "       such model gives the certified model's output on every sequence of every\n"
        "       length ([CertMultiHeadLabel.mh_identified], the learner's labelling).\n"
        if ok
        else "    It does NOT state that such a model is the certified model: the run's labelling\n"
        "    checks (H0 certified heads, distinct scores, nonzero residues, no ties,\n"
        "    unambiguous links) do not all pass, and only 2. is proved for it.\n"
    )
    return (
        "(** * An exact canonical multi-head run, checked by Coq's kernel.\n\n"
        f"    Certificate: kind multi-head (canonical), d = {d}, H0 = {H0}, arithmetic exact, "
        f"seed {get(data, 'seed')};\n    sha256 {sha}.\n\n"
        "    [run_identified] (at the end of this file) states, with the recorded data below\n"
        "    (U, B: the design; the pairs (u_k, b_j), then (u_0 + u_k, b_0); the tie links):\n"
        f"    1. the {H} certified canonical heads (W_h, v_h) together give exactly the\n"
        f"       recorded answer (ans_i: a rational, or a closed form of rationals and exp of\n"
        f"       rationals) to each of the {n} learning queries the design generates ([b_j];\n"
        f"       [b + u; ...; b + u; b] with k copies, k = 1 .. {2 * H0}, at each pair; one per\n"
        "       tie link), one recorded answer per query;\n"
        f"    2. every model of at most {H0} heads over the reals that gives exactly those\n"
        "       answers has, at every pair (u, b) of the design and for every real s, the\n"
        "       certified heads' sum of residues u^T v_h over the heads with score\n"
        "       u^T W_h b = s ([same_masses]; the interpolation step)"
        f"{';' if ok else '.'}\n{three}"
        "    No assumption on the other model's entries (no denominator bound): the answers\n"
        "    are exact. It instantiates [CertMultiHeadExact.mh_exact_masses]"
        f"{' and [mh_exact_identified]' if ok else ''}\n"
        "    (formal/, proved for every d and H0); the checks over Q run by computation, each\n"
        "    answer's identity is proved by [field] with every exp an atom. *)\n"
    )
