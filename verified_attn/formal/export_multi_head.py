"""The Coq file of a certified canonical multi-head run: ``run_consistent`` from
``CertMultiHead.v``.

>>> import verified_attn as va
>>> model = va.MultiHeadAttention([([[1, 0], [0, -1]], [1, 2]), ([[0, 1], [1, 0]], [-1, 1])])
>>> data = va.learn_multi_head(va.Oracle(model, "certified"), heads=2).certificate()
>>> text = va.export_coq(data)
>>> ("apply (mh_answers_in run)" in text, "Admitted" in text, text.count("Definition rec_"))
(True, False, 22)

The file states the run's design (U, B, H0, the tie links), the certified canonical heads
(W_h, v_h), the stated bound D and, for each learning query in the learner's order, its
recorded answer interval with the per-head numbers (b^T v_h, u^T v_h, u^T W_h b). Coq
generates the queries from the design itself, so a dropped or added answer breaks the
one-interval-per-query statement; it checks the per-head numbers over Q, and Coq Interval
proves each interval holds the heads' answer. Only interval's precision is computed here;
a wrong one can only make the proof fail.

It also proves, by ``CertMultiHead.grid_determines_model``, that a model whose heads have
the certified heads' scores and residues at the d^2 grid pairs is the certified model (on
every sequence), and, by ``CertMultiHeadId.mh_masses_determined``, that a model of at most
H0 heads giving exactly the certified heads' answers to the design's queries has, at every
pair, the certified heads' residue sum at every score (the interpolation step, from exact
answers). When the intervals are narrow enough for D (``check_close``; a default run's
learner asks at the bits it needs, ``answer_precision``), parts 7 and 8 state the same for
every model meeting the stated assumption and answering inside the intervals
(:mod:`~verified_attn.formal.export_multi_head_close`).
"""

from __future__ import annotations

import hashlib
import json
import textwrap
from collections.abc import Mapping
from fractions import Fraction
from typing import Any

import mpmath

from verified_attn.certificates.kernel import as_list, as_matrix, get, rational
from verified_attn.errors import CertificateError
from verified_attn.formal.coq_tables import (
    ball,
    coq_q,
    exact_entry,
    inverse,
    mat_table,
    mpf,
    vec_table,
)
from verified_attn.formal.export_multi_head_close import (
    close_header,
    close_params,
    close_parts,
)
from verified_attn.formal.export_multi_head_fewer import (
    fewer_note,
    hold_lemmas,
    sub_run,
    sub_run_text,
)
from verified_attn.multi_head.canonical_certified import decoding_assumption, score_magnitude

__all__ = [
    "design_queries",
    "design_tables",
    "hold_proof",
    "interval_precision",
    "labelling_checks",
    "multi_head_file",
    "query_terms",
    "read_run",
    "record_definition",
]

#: Largest d and head count exported (the file holds d + 2 H0 (d^2 + d - 1) queries).
MAX_D, MAX_HEADS = 8, 6

Query = tuple[list[Fraction], list[Fraction], int]


def _dot(x: list[Fraction], y: list[Fraction]) -> Fraction:
    return sum((a * b for a, b in zip(x, y, strict=True)), Fraction(0))


def _read(data: Mapping[str, Any]) -> dict[str, Any]:
    """The rationals and balls of a certified canonical multi-head certificate."""
    if data.get("arithmetic") != "certified" or data.get("method") != "canonical":
        raise CertificateError("export to Coq covers certified canonical multi-head runs")
    return read_run(data, ball, "balls")


def read_run(
    data: Mapping[str, Any], answer: Any, key: str, *, affine: bool = False
) -> dict[str, Any]:
    """d, H0, the design U and B, the certified heads, the tie links and, under ``key``, the
    recorded answers read by ``answer(x, path)``, in the order of ``CertMultiHead.mh_queries``
    (F(0) at each b_j, F(1 .. 2 H0) at each pair, one per tie link). ``affine``: the run
    must be affine; B then has d + 1 rows, each head is (W, v, c) and ``beta`` is read."""
    d, H0 = get(data, "d"), get(data, "H0")
    if not isinstance(d, int) or not 1 <= d <= MAX_D:
        raise CertificateError(f"d = {d!r:.20}: export to Coq covers 1 <= d <= {MAX_D}")
    if not isinstance(H0, int) or not 1 <= H0 <= MAX_HEADS:
        raise CertificateError(f"H0 = {H0!r:.20}: export to Coq covers 1 <= H0 <= {MAX_HEADS}")
    if bool(get(data, "affine")) != affine:
        raise CertificateError(
            "this export covers affine multi-head runs only"
            if affine
            else "export to Coq covers bias-free multi-head runs here, not affine ones"
        )
    nb = d + 1 if affine else d  # the probes: B, and a generic b_0 last if affine

    def rows(name: str, n: int) -> list[list[Fraction]]:
        m = as_matrix(get(data, f"design.{name}"), f"design.{name}", n, d)
        return [
            [rational(q, f"design.{name}[{i}][{j}]") for j, q in enumerate(r)]
            for i, r in enumerate(m)
        ]

    U, B = rows("U", d), rows("B", nb)
    heads: list[tuple[Any, ...]] = []
    for h, e in enumerate(as_list(get(data, "result.heads"), "result.heads")):
        W = as_matrix(get(e, "W"), f"result.heads[{h}].W", d, d)
        vecs = [
            [exact_entry(x, f"result.heads[{h}].{name}[{i}]") for i, x in enumerate(raw)]
            for name in ("v", "c")[: 1 + affine]
            for raw in [as_list(get(e, name), name, d)]
        ]
        heads.append(
            (
                [
                    [exact_entry(x, f"result.heads[{h}].W[{i}][{j}]") for j, x in enumerate(r)]
                    for i, r in enumerate(W)
                ],
                *vecs,
            )
        )
    if not 1 <= len(heads) <= H0:
        raise CertificateError(f"result.heads has {len(heads)} heads, expected 1..{H0}")
    ties = [
        (get(t, "k"), get(t, "j"), answer(get(t, "answer"), f"answers.ties[{i}].answer"))
        for i, t in enumerate(as_list(get(data, "answers.ties"), "answers.ties"))
    ]
    if any(
        not (isinstance(k, int) and isinstance(j, int) and 0 <= k < d and 0 < j < nb)
        for k, j, _ in ties
    ):
        raise CertificateError(f"answers.ties: each tie names 0 <= k < d and 0 < j < {nb}")
    npairs = d * nb + d - 1
    F = as_list(get(data, "answers.F"), "answers.F", npairs)
    got = [
        answer(x, f"answers.F0[{j}]")
        for j, x in enumerate(as_list(get(data, "answers.F0"), "F0", nb))
    ]
    for p, row in enumerate(F):
        got += [
            answer(x, f"answers.F[{p}][{i}]") for i, x in enumerate(as_list(row, f"F[{p}]", 2 * H0))
        ]
    got += [b for _, _, b in ties]
    out = {"d": d, "H0": H0, "U": U, "B": B, "heads": heads, "ties": ties, key: got}
    if affine:
        out["beta"] = exact_entry(get(data, "result.beta"), "result.beta")
    return out


def design_queries(x: dict[str, Any]) -> list[Query]:
    """(u, b, k) of every learning query, in the order of ``CertMultiHead.mh_queries``."""
    d, U, B, H0 = x["d"], x["U"], x["B"], x["H0"]
    pairs = [(U[k], b) for k in range(d) for b in B]
    pairs += [([a + c for a, c in zip(U[0], U[k], strict=True)], B[0]) for k in range(1, d)]
    out: list[Query] = [([Fraction(0)] * d, b, 0) for b in B]
    out += [(u, b, k) for u, b in pairs for k in range(1, 2 * H0 + 1)]
    out += [
        (U[k], [(a + c) / 2 for a, c in zip(B[0], B[j], strict=True)], 1) for k, j, _ in x["ties"]
    ]
    return out


def query_terms(q: Query, heads: list[Any]) -> list[tuple[Fraction, Fraction, Fraction]]:
    """(b^T v, u^T v, u^T W b) per head (u^T (W b + c) for an affine head (W, v, c)): the
    head answers a + r k / (k + exp(-m))."""
    u, b, _ = q
    return [
        (_dot(b, v), _dot(u, v), _dot(u, [_dot(row, b) for row in W]) + sum(_dot(u, c) for c in cs))
        for W, v, *cs in heads
    ]


def labelling_checks(x: dict[str, Any]) -> tuple[bool, bool]:
    """(part 5, part 6): the Coq checks ``check_generic`` (with H = H0) and ``link_check``,
    ``row_check`` (no ties), run here first so that the file states only what they pass."""
    d, U, B, heads = x["d"], x["U"], x["B"], x["heads"]
    if len(heads) != x["H0"]:
        return False, False
    pairs = [(U[k], B[j]) for k in range(d) for j in range(d)]
    pairs += [([a + c for a, c in zip(U[0], U[k], strict=True)], B[0]) for k in range(1, d)]
    generic = all(
        len({m for _, _, m in ts}) == len(ts) and all(r != 0 for _, r, _ in ts)
        for ts in (query_terms((u, b, 1), heads) for u, b in pairs)
    )
    # res[k][h] = u_k^T v_h, sc[k][j][h] = u_k^T W_h b_j
    sc = [
        [[m for _, _, m in query_terms((U[k], B[j], 1), heads)] for j in range(d)] for k in range(d)
    ]
    res = [[r for _, r, _ in query_terms((U[k], B[0], 1), heads)] for k in range(d)]
    H = range(len(heads))
    link = all(
        (res[k][h2], sc[k][0][h2]) == (res[k][h1], sc[k][0][h1])
        for k in range(1, d)
        for h1 in H
        for h2 in H
        for h3 in H
        if res[0][h1] + res[k][h2] == res[0][h3] + res[k][h3]
        and sc[0][0][h1] + sc[k][0][h2] == sc[0][0][h3] + sc[k][0][h3]
    )
    row = all(
        sc[k][j][h4] == sc[k][j][h]
        for k in range(d)
        for h4 in H
        for h in H
        if res[k][h4] == res[k][h]
        for j in range(d)
    )
    return generic, generic and not x["ties"] and link and row


def interval_precision(qs: list[Query], terms: list[Any], balls: list[Any]) -> int:
    """Bits for [interval] to show every answer with k > 0 inside its interval."""
    bits = 53
    with mpmath.workprec(1200):
        for (_, _, k), ts, (lo, hi) in zip(qs, terms, balls, strict=True):
            if k == 0:
                continue
            val = sum(
                (mpf(a) + mpf(r) * k / (k + mpmath.exp(-mpf(m))) for a, r, m in ts),
                mpf(Fraction(0)),
            )
            scale = max(mpf(Fraction(1)), *(abs(mpf(a)) + abs(mpf(r)) for a, r, _ in ts))
            margin = min(val - mpf(lo), mpf(hi) - val)
            if margin > 0:
                bits = max(bits, int(mpmath.log(scale / margin, 2)) + 24)
    return bits


def record_definition(i: int, lo: Fraction, hi: Fraction, ts: list[Any]) -> str:
    """``rec_i``: one recorded answer interval with the certified heads' terms."""
    body = "; ".join(f"({coq_q(a)}, {coq_q(r)}, {coq_q(m)})" for a, r, m in ts)
    return f"Definition rec_{i} : mh_rec := {{| alo := {coq_q(lo)}; ahi := {coq_q(hi)};\n  aterms := [{body}] |}}.\n"


def multi_head_file(data: Mapping[str, Any], D: int) -> str:
    """The Coq text for a certified canonical ``multi-head`` certificate with bound D."""
    x = _read(data)
    d, H0, heads = x["d"], x["H0"], x["heads"]
    qs = design_queries(x)
    terms = [query_terms(q, heads) for q in qs]
    prec = interval_precision(qs, terms, x["balls"])
    names = [f"rec_{i}" for i in range(len(qs))]
    recs = [
        record_definition(i, lo, hi, ts)
        for i, (ts, (lo, hi)) in enumerate(zip(terms, x["balls"], strict=True))
    ]
    sha = hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()
    stated = _stated(data, x, D)
    # fewer heads than H0: parts 5-8 on run_h, the run read with H0 = H (its k <= 2 H)
    sub = sub_run(x) if len(heads) < H0 else None
    checks = labelling_checks(sub[0] if sub else x)
    close = _close(sub[0] if sub else x, D, checks[0])
    if sub:
        holds = [sub_run_text(d, len(heads), sub[1])]
        holds += [*_close_tables(close), *hold_lemmas([k for *_, k in qs], sub[1], prec)]
    else:
        holds = _close_tables(close)
        if close:
            holds.append(
                f"Lemma hold : mh_hold run.\nProof.\n{hold_proof(names, prec, '  ')}Qed.\n"
            )
    parts = [
        _header(data, d, H0, len(heads), len(qs), sha, *checks, close) + stated,
        "From Coq Require Import Reals QArith List Lia Permutation.\n"
        "From Interval Require Import Tactic.\n"
        "From VerifiedAttn Require Import Defs CertHead CertPair CertMultiHead CertMultiHeadId\n"
        "  CertMultiHeadLabel CertMultiHeadBound IntervalZ.\n"
        "Import ListNotations.\nOpen Scope R_scope.\n",
        f"(** The stated denominator bound. *)\nDefinition D : positive := {D}%positive.\n",
        *design_tables(x),
        "(** The recorded answer intervals, one per query of [mh_queries], in order, each with\n"
        "    the certified heads' (b^T v_h, u^T v_h, u^T W_h b) (checked over Q). *)",
        *recs,
        f"Definition recs : list mh_rec := [{'; '.join(names)}].\n",
        f"Definition run : mh_run := {{| md := {d}; mH0 := {H0}; mD := D; mU := U; mB := B;\n"
        "  mties := ties; mheads := heads_c; mrecs := recs |}.\n",
        *holds,
        _theorem(names, prec, d, (H0, len(heads)), *checks, close is not None),
        "Print Assumptions run_consistent.\n",
    ]
    return "\n".join(parts)


def design_tables(x: dict[str, Any]) -> list[str]:
    """The Coq tables every canonical multi-head file states: U, B, their inverses, each
    certified head's W and v, ``heads_c`` and the tie links."""
    heads = x["heads"]
    tables = [
        mat_table("U", x["U"], "0", "The design: u_k is row k."),
        mat_table("B", x["B"], "0", "The probes: b_j is row j."),
        mat_table("U_inv", inverse(x["U"]), "0", "An inverse of U (auxiliary; a wrong one fails)."),
        mat_table("B_inv", inverse(x["B"]), "0", "An inverse of B (auxiliary; a wrong one fails)."),
    ]
    for h, (W, v) in enumerate(heads):
        tables.append(mat_table(f"W_{h}", W, "0", f"The certified W of head {h}."))
        tables.append(vec_table(f"v_{h}", v, "0", f"The certified v of head {h}."))
    heads_list = "; ".join(f"(W_{h}, v_{h})" for h in range(len(heads)))
    ties = "; ".join(f"({k}, {j})%nat" for k, j, _ in x["ties"])
    return [
        *tables,
        f"(** The certified canonical heads. *)\n"
        f"Definition heads_c : list (qmat * qvec) := [{heads_list}].\n",
        f"(** The tie links (k, j): F(1) at (u_k, (b_0 + b_j)/2). *)\n"
        f"Definition ties : list (nat * nat) := [{ties}].\n",
    ]


def _pairs(x: dict[str, Any]) -> list[tuple[list[Fraction], list[Fraction]]]:
    """The design's pairs (u, b): (u_k, b_j), then (u_0 + u_k, b_0)."""
    U, B, d = x["U"], x["B"], x["d"]
    pairs = [(U[k], B[j]) for k in range(d) for j in range(d)]
    return pairs + [([a + c for a, c in zip(U[0], U[k], strict=True)], B[0]) for k in range(1, d)]


def _stated(data: Mapping[str, Any], x: dict[str, Any], D: int) -> str:
    """The certificate's stated assumption, which must be the one the file's theorem makes
    ([meets]: denominators at most D, scores in [-Sm, Sm], Sm from the certified heads);
    quoted in the header."""
    wanted = decoding_assumption(
        get(data, "working_precision"), D, score_magnitude(x["heads"], _pairs(x))
    )
    # D is read from the stated assumption; it must be the bound the run decoded with
    if wanted not in (get(data, "assumptions") or []) or data.get("denominator_bound") != D:
        raise CertificateError(
            "the certificate's stated assumption differs from the one the Coq theorem makes "
            f"([meets]); the theorem assumes: {wanted}"
        )
    text = f"The certificate's stated assumption, the one [meets] states (parts 7, 8): {wanted}."
    return "\n" + textwrap.fill(text, 88, initial_indent="    ", subsequent_indent="    ") + " *)\n"


def _close(x: dict[str, Any], D: int, part5: bool) -> tuple[int, Fraction] | None:
    """(Sm, eps) of parts 7 and 8 when the run states part 5 and its intervals are narrow
    enough for D (``check_close``), else None."""
    if not part5:
        return None
    scores = [m for u, b in _pairs(x) for _, _, m in query_terms((u, b, 1), x["heads"])]
    return close_params(x["H0"], scores, [hi - lo for lo, hi in x["balls"]], D)


def _close_tables(close: tuple[int, Fraction] | None) -> list[str]:
    if close is None:
        return []
    Sm, eps = close
    return [
        "(** The score magnitude Sm of the stated assumption, and the interval width eps. *)\n"
        f"Definition Sm : nat := {Sm}.\nDefinition eps : Q := {coq_q(eps)}.\n"
    ]


#: What the hold proof unfolds: (the run's spine, the [b_j] lemma, extra data names).
BIAS_FREE_HOLD = (
    "mh_hold",
    "run md mH0 mU mB mties mrecs recs mh_queries mh_pairs",
    "inside_k0",
    "",
)


def hold_proof(
    names: list[str], prec: int, indent: str, kind: tuple[str, str, str, str] = BIAS_FREE_HOLD
) -> str:
    """The proof of the run's hold statement (``mh_hold run``, or another ``kind``'s): the
    certified heads' answers lie in the recorded intervals, [b_j] over Q, every other
    answer by [interval] (a lemma ``hold`` when parts 7 and 8 need it too, else inline)."""
    hold, spine, k0, extra = kind
    spine += " flat_map map seq app fst snd Nat.mul Nat.add Nat.sub"
    data = f"{' '.join(names)} {extra}alo ahi aterms tsum kprobe_value INR Q2R Qnum Qden inside"
    return (
        f"{indent}unfold {hold}. cbv beta iota zeta delta [{spine}].\n"
        f"{indent}repeat apply Forall2_cons; try apply Forall2_nil;\n"
        f"{indent}first [apply {k0}; vm_compute; reflexivity\n"
        f"{indent}      | cbv beta iota zeta delta [{data}];\n"
        f"{indent}        interval with (i_prec {prec})].\n"
    )


def _theorem(
    names: list[str],
    prec: int,
    d: int,
    counts: tuple[int, int],
    part5: bool,
    part6: bool,
    part7: bool,
) -> str:
    """``run_consistent``: parts 1-4, and 5, 6 when :func:`labelling_checks` passes them, 7 (and 8
    with 6) when :func:`_close` does; counts = (H0, H), parts 5-8 on ``run_h`` (H0 = H)
    when H < H0."""
    H0, H = counts
    run, Hs = ("run", H0) if H == H0 else ("run_h", H)
    same = f"  (forall hs' : list head, (length hs' <= {Hs})%nat -> same_answers {run} hs' (rheads heads_c) ->\n"
    pairs = (
        f" /\\\n{same}"
        "     Forall (fun p => Permutation\n"
        f"       (score_pairs {d} (rvec (fst p)) (rvec (snd p)) (rheads heads_c))\n"
        f"       (score_pairs {d} (rvec (fst p)) (rvec (snd p)) hs')) (mh_pairs {d} U B))"
    )
    model = (
        f" /\\\n{same}"
        f"     forall N X, multi_head {d} N X hs' = multi_head {d} N X (rheads heads_c))"
    )
    qed = "[vm_compute; reflexivity | vm_compute; reflexivity | exact L | exact E]"
    more = (
        f"  - intros hs' L E. apply (mh_pairs_determined {run} hs');\n      {qed}.\n"
        if part5
        else ""
    ) + (
        f"  - intros hs' L E. apply (mh_identified {run} U_inv B_inv hs');\n"
        "      [vm_compute; reflexivity | vm_compute; reflexivity\n"
        "      | apply Nat.ltb_lt; vm_compute; reflexivity | vm_compute; reflexivity\n"
        "      | vm_compute; reflexivity | vm_compute; reflexivity | vm_compute; reflexivity\n"
        "      | exact L | exact E].\n"
        if part6
        else ""
    )
    close, close_proof = close_parts(d, Hs, part6, run) if part7 else ("", "")
    inner = "split"
    for _ in range(part5 + part6 + part7 + (part7 and part6)):
        inner = f"split; [|{inner}]"
    return (
        "Theorem run_consistent :\n"
        "  (answers_mh run (rheads heads_c) /\\ pairs_den_le run) /\\\n"
        f"  (forall hs' : list head, Forall2 (grid_same {d} U B) hs' (rheads heads_c) ->\n"
        f"     forall N X, multi_head {d} N X hs' = multi_head {d} N X (rheads heads_c)) /\\\n"
        f"  (forall hs' : list head, (length hs' <= {H0})%nat ->\n"
        "     same_answers run hs' (rheads heads_c) -> same_masses run hs' (rheads heads_c))"
        f"{pairs if part5 else ''}{model if part6 else ''}{close}.\n"
        "Proof.\n"
        f"  split; [|{inner}].\n"
        "  - apply (mh_answers_in run).\n"
        "    + vm_compute. reflexivity.\n"
        f"    + {'exact hold.' + chr(10) if part7 or H < H0 else hold_proof(names, prec, '      ')[6:]}"
        "  - intros hs' F N X.\n"
        f"    apply (grid_determines_model {d} U U_inv B B_inv hs');\n"
        "      [vm_compute; reflexivity | vm_compute; reflexivity | exact F].\n"
        "  - intros hs' L E. apply (mh_masses_determined run hs' (rheads heads_c) L); [|exact E].\n"
        "    unfold rheads. rewrite map_length. apply Nat.leb_le. vm_compute. reflexivity.\n"
        f"{more}{close_proof}"
        "Qed.\n"
    )


def _parts(H0: int, H: int, part5: bool, part6: bool, more: bool) -> str:
    """Parts 5 and 6 of the header, when the file states them (about [run_h] when H < H0)."""
    such = (
        f"(the run has H0 = {H0} certified heads) every such model"
        if H == H0
        else f"(read as [run_h]: H0 = H = {H}, the queries with k <= {2 * H}) every model of\n"
        f"       at most {H} heads giving exactly the certified answers to [run_h]'s queries"
    )
    five = (
        f"    5. {such} has,\n"
        "       at every pair of the design, the certified heads' (residue u^T v_h, score\n"
        "       u^T W_h b) pairs up to order ([score_pairs], a Permutation): the certified\n"
        "       heads' scores at each pair are pairwise distinct and their residues nonzero\n"
        "       (checked over Q)"
    )
    six = (
        "    6. (no ties; the links unambiguous: [link_check], [row_check] over Q) every such\n"
        "       model gives the certified model's output on every sequence of every length\n"
        "       (the learner's labelling across pairs: by residue along each row, by the links\n"
        "       across rows; then 3.)"
    )
    return (f"{five}{';' if part6 or more else '.'}\n" if part5 else "") + (
        f"{six}{';' if more else '.'}\n" if part6 else ""
    )


def _header(
    data: Mapping[str, Any],
    d: int,
    H0: int,
    H: int,
    n: int,
    sha: str,
    part5: bool,
    part6: bool,
    close: tuple[int, Fraction] | None,
) -> str:
    describe = (
        f"kind multi-head (canonical), d = {d}, H0 = {H0}, arithmetic certified "
        f"({get(data, 'precision')} bits), seed {get(data, 'seed')}"
    )
    return (
        f"(** * A certified canonical multi-head run, checked by Coq's kernel.\n\n"
        f"    Certificate: {describe}; sha256 {sha}.\n\n"
        "    [run_consistent] (at the end of this file) states, with the recorded data below\n"
        "    (U, B: the design; the pairs (u_k, b_j), then (u_0 + u_k, b_0); the tie links):\n"
        f"    1. the {H} certified canonical heads (W_h, v_h) together answer each of the {n}\n"
        "       learning queries the design generates ([b_j]; [b + u; ...; b + u; b] with k\n"
        f"       copies, k = 1 .. {2 * H0}, at each pair; one per tie link) inside its recorded\n"
        "       interval, with exactly one recorded interval per query;\n"
        "    2. every score u^T W_h b and residue u^T v_h of the certified heads at every pair\n"
        "       of the design is a rational with denominator at most D (below), the\n"
        "       denominator part of the stated assumption (below), for the certified heads;\n"
        "    3. every model whose heads, in order, have the certified heads' scores u_k^T W b_j\n"
        "       and residues u_k^T v at the d^2 grid pairs gives the certified model's output\n"
        "       on every sequence of every length (U and B are invertible: the linear solve);\n"
        f"    4. every model of at most {H0} heads that gives exactly the certified heads'\n"
        "       answers to every query the design generates has, at every pair (u, b) of the\n"
        "       design and for every real s, the certified heads' sum of residues u^T v_h over\n"
        "       the heads with score u^T W_h b = s ([same_masses]; the interpolation step:\n"
        f"       F(0 .. {2 * H0}) fix the poles exp(-score) and residues of a sum of at most\n"
        f"       {2 * H0} terms r / (k + z)){';' if part5 else '.'}\n"
        f"{_parts(H0, H, part5, part6, close is not None)}"
        f"{close_header(min(H, H0), *close, part6) if close else _not_stated(part6)}"
        f"{fewer_note(H0, H) if H < H0 else ''}"
        f"    It instantiates {_instantiated(part5, part6, close is not None)} (formal/, proved for every d\n"
        "    and H0); the checks over Q run by computation, each answer's two inequalities\n"
        "    about exp are proved by Coq Interval.\n"
    )


def _not_stated(part6: bool) -> str:
    """What a file without parts 7 and 8 does not state."""
    return (
        "    It does NOT state that the certified heads are the only model answering inside\n"
        "    the intervals: 4.-6. need exactly the certified answers. Not formalised for this\n"
        "    run: that the intervals, under the denominator bound, determine another model's\n"
        "    scores and residues (its intervals are too wide for [check_close] with this D, or\n"
        "    its scores are not distinct: parts 7 and 8 are stated when they pass)"
        f"{'' if part6 else ', and the labelling of heads across pairs for this run'}.\n"
    )


def _instantiated(part5: bool, part6: bool, part7: bool) -> str:
    """The general theorems the file applies, as the header lists them: only those used."""
    names = ["[CertMultiHead.mh_answers_in]", "[grid_determines_model]"]
    names.append("[CertMultiHeadId.mh_masses_determined]")
    if part5:
        names.append("[mh_pairs_determined]")
    if part6:
        names.append("[CertMultiHeadLabel.mh_identified]")
    if part7:
        names.append("[CertMultiHeadBound.mh_pairs_close]")
    if part7 and part6:
        names.append("[mh_identified_close]")
    return ", ".join(names[:-1]) + " and " + names[-1]
