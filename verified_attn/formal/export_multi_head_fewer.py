"""Runs that find fewer heads than their bound: parts 5-8 on the run's H heads.

>>> sub = sub_run({"d": 1, "H0": 2, "heads": [0], "ties": [], "balls": list("fabcd")})
>>> sub[0]["H0"], sub[0]["balls"], sub[1]  # F(0), then F(1), F(2) of F(1) .. F(4)
(1, ['f', 'a', 'b'], [0, 1, 2])

A certified canonical run asked with ``max_heads=H0`` that finds H < H0 heads records the
answers F(0) .. F(2 H0) at every pair of its design. Identification among models of at
most H0 heads is false for such a run (``tests/formal/test_coq_export_multi_head_cases.py``
builds, for the run's own design, a model of H + 1 heads meeting the stated assumption
that gives exactly the certified answers to every design query and another output: a
third head takes part w of one certified head's v, with w orthogonal to one design row,
and changes W only where that row's residue u^T w = 0 hides it). What holds is
identification among models of at most H heads: the same run's queries with k <= 2 H,
a run with H0 = H (``run_h`` in the file). The file states parts 5-8 for ``run_h``; each
recorded interval is proved once (a lemma ``in_i`` per record) and used by both runs.
"""

from __future__ import annotations

from typing import Any

__all__ = ["fewer_note", "hold_lemmas", "sub_run", "sub_run_text"]

#: The definitions the hold proofs unfold to generate the queries (the spine of
#: ``mh_queries``); the run's and its records' names are added.
SPINE = (
    "md mH0 mU mB mties mrecs mh_queries mh_pairs flat_map map seq app fst snd "
    "Nat.mul Nat.add Nat.sub"
)


def sub_run(x: dict[str, Any]) -> tuple[dict[str, Any], list[int]]:
    """(the run with H0 = H, its records' indices among the run's): the d answers to [b_j],
    the first 2 H of the 2 H0 k-answers at each pair, the ties' answers."""
    d, H0, H = x["d"], x["H0"], len(x["heads"])
    npairs = d * d + d - 1
    idx = list(range(d))
    idx += [d + p * 2 * H0 + i for p in range(npairs) for i in range(2 * H)]
    idx += list(range(d + npairs * 2 * H0, len(x["balls"])))
    return dict(x, H0=H, balls=[x["balls"][i] for i in idx]), idx


def sub_run_text(d: int, H: int, idx: list[int]) -> str:
    """The Coq definitions of ``run_h``: the same design, heads and D, H0 = H and the
    records with k <= 2 H."""
    names = "; ".join(f"rec_{i}" for i in idx)
    return (
        f"(** The same run read with H0 = {H}, the heads it found: the records with k <= {2 * H}. *)\n"
        f"Definition recs_h : list mh_rec := [{names}].\n"
        f"Definition run_h : mh_run := {{| md := {d}; mH0 := {H}; mD := D; mU := U; mB := B;\n"
        "  mties := ties; mheads := heads_c; mrecs := recs_h |}.\n"
    )


def _in_lemma(i: int, k: int, prec: int) -> str:
    goal = f"inside (alo rec_{i}) (ahi rec_{i}) (tsum (INR {k}) (aterms rec_{i}))"
    if k == 0:
        proof = "apply inside_k0. vm_compute. reflexivity."
    else:
        unfold = f"rec_{i} alo ahi aterms tsum kprobe_value INR Q2R Qnum Qden inside"
        proof = f"cbv beta iota zeta delta [{unfold}].\n  interval with (i_prec {prec})."
    return f"Lemma in_{i} : {goal}.\nProof.\n  {proof}\nQed.\n"


def _hold(name: str, run: str, recs: str, idx: list[int]) -> str:
    # the goals come in the records' order, one per query; each is its lemma
    uses = "\n".join(
        "  " + " ".join(f"exact in_{i}." for i in idx[s : s + 6]) for s in range(0, len(idx), 6)
    )
    return (
        f"Lemma {name} : mh_hold {run}.\nProof.\n"
        f"  unfold mh_hold. cbv beta iota zeta delta [{run} {recs} {SPINE}].\n"
        f"  repeat apply Forall2_cons; try apply Forall2_nil.\n{uses}\nQed.\n"
    )


def hold_lemmas(ks: list[int], idx: list[int], prec: int) -> list[str]:
    """``in_i`` for every record (k its query's copy count; [interval] for k > 0, over Q
    for k = 0), then ``hold : mh_hold run`` and ``hold_h : mh_hold run_h`` from them."""
    lemmas = [_in_lemma(i, k, prec) for i, k in enumerate(ks)]
    return [
        *lemmas,
        _hold("hold", "run", "recs", list(range(len(ks)))),
        _hold("hold_h", "run_h", "recs_h", idx),
    ]


def fewer_note(H0: int, H: int) -> str:
    """The header's note on a run that found H < H0 heads."""
    return (
        f"    The run found H = {H} heads under its bound H0 = {H0}: parts 5-8 (those stated)\n"
        f"    are about [run_h], the same run read with H0 = {H} (its queries with k <= {2 * H};\n"
        f"    7. and 8. then cover models of at most {H} heads answering inside those\n"
        f"    intervals). The file does NOT state them for models of {H0} heads: that is false\n"
        "    for this design (a further head can take a part w of a certified head's v, w\n"
        "    orthogonal to one design row u_k, and change W where its residue u_k^T w = 0\n"
        "    hides it: the design's answers stay exactly the certified ones, the output does\n"
        "    not).\n"
    )
