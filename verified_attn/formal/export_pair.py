"""The Coq file of a Prop 7.1 counterexample pair: the two models are one map.

>>> import verified_attn as va
>>> pair = va.counterexample("multi-head", d=1, heads=2, kind="permutation", seed=0)
>>> text = va.export_coq(pair.certificate())
>>> "Theorem pair_same_function" in text and "apply (pair_permutation" in text
True

The file transcribes the two multi-head models' rationals (W_h, v_h) and proves
``pair_same_function``: their parameter lists differ, and for every sequence length N and
every sequence X the two compute the same output. The proof applies the family's theorem
from ``formal/CertPair.v`` (which instantiates ``formal/Prop71.v``) to the heads as
written; its side conditions (heads that agree entry by entry, v1 + v2 = v1' + v2', v = 0)
are finite checks over Q run by ``vm_compute``. The exporter picks which family's theorem to
apply from the certificate's ``counterexample_kind``; it decides nothing else: a pair that
is not of that family leaves a check that computes to false, and ``coqc`` fails.
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

__all__ = ["KINDS", "MAX_D", "MAX_HEADS", "pair_file"]

#: The Prop 7.1 families a pair's file can be proved by.
KINDS = ("permutation", "shared-score-split", "dead-head", "cancelling-values")
MAX_D = 8
MAX_HEADS = 8
THEOREM = "pair_same_function"

Head = tuple[list[list[Fraction]], list[Fraction]]


def _heads(data: Mapping[str, Any], side: str, d: int) -> list[Head]:
    heads = as_list(get(data, side), side)
    if not 1 <= len(heads) <= MAX_HEADS:
        raise CertificateError(f"{side}: export to Coq covers 1 to {MAX_HEADS} heads")
    out = []
    for h, head in enumerate(heads):
        path = f"{side}[{h}]"
        if not isinstance(head, dict) or set(head) != {"W", "v"}:
            raise CertificateError(f"{path}: export to Coq covers bias-free heads {{W, v}}")
        W = [
            [rational(q, f"{path}.W[{i}][{j}]") for j, q in enumerate(row)]
            for i, row in enumerate(as_matrix(head["W"], f"{path}.W", d, d))
        ]
        v = [rational(q, f"{path}.v[{i}]") for i, q in enumerate(as_list(head["v"], path, d))]
        out.append((W, v))
    return out


def _names(prefix: str, n: int) -> list[str]:
    return [f"({prefix}{h}_W, {prefix}{h}_v)" for h in range(n)]


def _apply(kind: str, d: int, first: list[str], second: list[str]) -> str:
    """The family theorem applied to the heads as written (names of the file's tables)."""
    rest2 = "[" + "; ".join(first[2:]) + "]"
    if kind == "permutation":
        return f"pair_permutation {d} {first[0]} [{'; '.join(first[1:])}]"
    if kind == "shared-score-split":
        return f"pair_shared_split {d} F0_W F0_v F1_v S0_v S1_v {rest2}"
    if kind == "dead-head":
        return f"pair_dead_head {d} F0_W S0_W F0_v [{'; '.join(first[1:])}]"
    return f"pair_cancelling {d} F0_W S0_W F0_v S0_v {rest2}"


def pair_file(data: Mapping[str, Any]) -> str:
    """The Coq text for a ``counterexample`` certificate of a multi-head pair."""
    if get(data, "model_class") != "multi-head":
        raise CertificateError("export to Coq covers multi-head counterexample pairs only")
    kind = get(data, "counterexample_kind")
    if kind not in KINDS:
        raise CertificateError(
            f"export to Coq covers the kinds {', '.join(KINDS)}, not {kind!r:.40}"
        )
    d = get(data, "d")
    if not isinstance(d, int) or not 1 <= d <= MAX_D:
        raise CertificateError(f"d = {d!r:.20}: export to Coq covers 1 <= d <= {MAX_D}")
    sides = {"F": _heads(data, "first", d), "S": _heads(data, "second", d)}
    if kind != "dead-head" and min(len(h) for h in sides.values()) < 2:
        raise CertificateError(f"a {kind} pair has at least two heads on each side")
    tables = []
    for prefix, heads in sides.items():
        for h, (W, v) in enumerate(heads):
            model = "first" if prefix == "F" else "second"
            tables.append(
                mat_table(f"{prefix}{h}_W", W, "0", f"W of head {h} of the {model} model.")
            )
            tables.append(
                vec_table(f"{prefix}{h}_v", v, "0", f"v of head {h} of the {model} model.")
            )
    first, second = _names("F", len(sides["F"])), _names("S", len(sides["S"]))
    sha = hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()
    parts = [
        _header(kind, d, len(first), len(second), sha, get(data, "seed")),
        "From Coq Require Import Reals QArith List.\n"
        "From VerifiedAttn Require Import Defs CertHead CertPair.\n"
        "Import ListNotations.\nOpen Scope R_scope.\n",
        *tables,
        f"Definition first_model : list qhead := [{'; '.join(first)}].\n",
        f"Definition second_model : list qhead := [{'; '.join(second)}].\n",
        f"Theorem {THEOREM} :\n"
        f"  qheads_agree {d} first_model second_model = false /\\\n"
        "  forall (N : nat) (X : tokens),\n"
        f"    multi_head {d} N X (map rhead first_model) = multi_head {d} N X (map rhead second_model).\n"
        "Proof.\n"
        "  split; [vm_compute; reflexivity|].\n"
        f"  apply ({_apply(kind, d, first, second)} first_model second_model);\n"
        "    vm_compute; reflexivity.\n"
        "Qed.\n",
        f"Print Assumptions {THEOREM}.\n",
    ]
    return "\n".join(parts)


def _header(kind: str, d: int, h1: int, h2: int, sha: str, seed: Any) -> str:
    return (
        "(** * A Prop 7.1 counterexample pair, checked by Coq's kernel.\n\n"
        f"    Certificate: kind counterexample ({kind}), d = {d}, seed {seed}; sha256 {sha}.\n\n"
        f"    Theorem [{THEOREM}] (at the end of this file) states, for the {h1}-head model\n"
        f"    [first] and the {h2}-head model [second] whose rationals are listed below:\n"
        "    1. their parameter lists differ ([qheads_agree] compares every entry below d);\n"
        "    2. for every sequence length N and every sequence X of N tokens in R^d, the two\n"
        "       models' outputs (sums of softmax attention heads) are equal.\n"
        f"    It applies the {kind} family of formal/CertPair.v (from formal/Prop71.v, proved\n"
        "    for every d); its side conditions are checks over Q run by computation. *)\n"
    )
