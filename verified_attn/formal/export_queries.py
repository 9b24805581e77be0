"""The Coq file of a hypothesis pair that agrees exactly on a learner's recorded queries.

>>> import verified_attn as va
>>> cx = va.counterexample("thm-4.1", kind="design-orthogonal", d=2, seed=1)
>>> text = va.export_coq(cx.certificate())
>>> "Theorem pair_same_answers" in text and "Admitted" not in text
True

Three counterexamples of :func:`verified_attn.hypotheses` are two single heads with the
same v that give exactly the same answer to every query a learner asks (Theorem 4.1 with a
query left out or a design column orthogonal to v, Theorem 5.1 without the rank test). The
file lists both heads and the certificate's recorded sequences ([x] or [a; b], rationals)
and proves ``pair_same_answers``: the heads differ, and each recorded query gets the same
answer from both, by ``CertQueries.queries_agree`` (``formal/CertQueries.v``), whose checks
over Q run by ``vm_compute``. It says nothing about other queries.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from verified_attn.certificates.kernel import as_list, as_matrix, get, rational
from verified_attn.errors import CertificateError
from verified_attn.formal.coq_tables import mat_table, vec_table

__all__ = ["KINDS", "MAX_QUERIES", "queries_file"]

#: (theorem, counterexample kind) of the pairs exported here.
KINDS = (
    ("thm-4.1", "one-query-short"),
    ("thm-4.1", "design-orthogonal"),
    ("thm-5.1", "rank-exceeds"),
)
MAX_D = 8
MAX_QUERIES = 128


def _head(
    data: Mapping[str, Any], side: str, d: int
) -> tuple[list[list[Fraction]], list[Fraction]]:
    model = get(data, side)
    if (
        not isinstance(model, dict)
        or model.get("class") != "single-head"
        or set(model)
        != {
            "class",
            "W",
            "v",
        }
    ):
        raise CertificateError(f"{side}: export to Coq expects a bias-free single head {{W, v}}")
    W = [
        [rational(q, f"{side}.W[{i}][{j}]") for j, q in enumerate(row)]
        for i, row in enumerate(as_matrix(model["W"], f"{side}.W", d, d))
    ]
    return W, [rational(q, f"{side}.v[{i}]") for i, q in enumerate(as_list(model["v"], side, d))]


def _sequences(data: Mapping[str, Any], d: int) -> list[list[list[Fraction]]]:
    raw = as_list(get(data, "sequences"), "sequences")
    if not 1 <= len(raw) <= MAX_QUERIES:
        raise CertificateError(f"sequences: export to Coq covers 1 to {MAX_QUERIES} queries")
    out = []
    for n, seq in enumerate(raw):
        tokens = as_list(seq, f"sequences[{n}]")
        if len(tokens) not in (1, 2):
            raise CertificateError(f"sequences[{n}]: export to Coq covers queries of 1 or 2 tokens")
        out.append(
            [
                [
                    rational(q, f"sequences[{n}][{t}][{i}]")
                    for i, q in enumerate(as_list(x, "token", d))
                ]
                for t, x in enumerate(tokens)
            ]
        )
    return out


def queries_file(data: Mapping[str, Any]) -> str:
    """The Coq text for an exact hypothesis pair of :data:`KINDS`."""
    key = (get(data, "theorem"), get(data, "counterexample_kind"))
    if key not in KINDS:
        raise CertificateError(f"not a recorded-queries pair: {key!r:.60}")
    if get(data, "relation") != "equal" or get(data, "exact") is not True:
        raise CertificateError("export to Coq covers pairs whose answers agree exactly")
    d = get(data, "d")
    if not isinstance(d, int) or not 1 <= d <= MAX_D:
        raise CertificateError(f"d = {d!r:.20}: export to Coq covers 1 <= d <= {MAX_D}")
    (W1, v1), (W2, v2) = _head(data, "first", d), _head(data, "second", d)
    seqs = _sequences(data, d)
    tables = [
        mat_table("F_W", W1, "0", "W of the first head."),
        vec_table("F_v", v1, "0", "v of the first head."),
        mat_table("S_W", W2, "0", "W of the second head."),
        vec_table("S_v", v2, "0", "v of the second head."),
    ]
    names = []
    for n, seq in enumerate(seqs):
        for t, x in enumerate(seq):
            tables.append(vec_table(f"q{n}_{t}", x, "0", f"Token {t} of recorded query {n}."))
        names.append(f"one q{n}_0" if len(seq) == 1 else f"two q{n}_0 q{n}_1")
    sha = hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()
    header = (
        f"(** * A counterexample to a hypothesis of {key[0]} ({key[1]}), checked by Coq's kernel.\n\n"
        f"    Certificate: kind counterexample, d = {d}, seed {get(data, 'seed')}; sha256 {sha}.\n\n"
        "    Theorem [pair_same_answers] states, for the heads (F_W, F_v) and (S_W, S_v) and the\n"
        f"    {len(seqs)} recorded queries listed below ([x], or [a; b] with b the query token):\n"
        "    the two heads' parameters differ, and each recorded query gets the same answer\n"
        "    from both. It applies [CertQueries.queries_agree] (formal/CertQueries.v, proved for\n"
        "    every d); the checks over Q run by computation. Other queries are not covered. *)\n"
    )
    listed = ";\n  ".join(f"({n})" for n in names)
    body = (
        f"Definition queries : list qseq := [\n  {listed}].\n\n"
        "Theorem pair_same_answers :\n"
        f"  qheads_agree {d} [(F_W, F_v)] [(S_W, S_v)] = false /\\\n"
        f"  Forall (fun s => answer {d} s (rmat F_W) (rvec F_v) = answer {d} s (rmat S_W) (rvec S_v))\n"
        "    queries.\n"
        "Proof.\n  split; [vm_compute; reflexivity|].\n"
        f"  apply (queries_agree {d} F_W S_W F_v S_v); vm_compute; reflexivity.\nQed.\n\n"
        "Print Assumptions pair_same_answers.\n"
    )
    imports = (
        "From Coq Require Import Reals QArith List.\n"
        "From VerifiedAttn Require Import Defs CertHead CertPair CertQueries.\n"
        "Import ListNotations.\nOpen Scope R_scope.\n"
    )
    return "\n".join([header, imports, *tables, body])
