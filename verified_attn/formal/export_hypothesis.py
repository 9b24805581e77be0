"""The Coq file of a hypothesis counterexample whose statement holds on every sequence.

>>> import verified_attn as va
>>> cx = va.counterexample("thm-4.1", kind="v-zero", d=2, seed=1)
>>> text = va.export_coq(cx.certificate())
>>> "apply (hyp_zero_value 2 " in text and "Admitted" not in text
True

Three counterexamples of :func:`verified_attn.hypotheses` are statements about every
sequence X of every length N, and export as a theorem of ``formal/CertHyp.v`` applied to
the pair's rationals (its side conditions are checks over Q run by ``vm_compute``):

- ``thm-4.1`` ``v-zero``: two heads with v = 0 and different W; ``pair_same_function``;
- ``app-b`` ``positive-scale``: (W, v) and (W, c v), c > 0; ``pair_same_sign`` states
  f2 = c f1 and that the two signs agree;
- ``transformer`` ``v-eff-zero``: two Transformers whose FFN neurons cancel on one ray;
  ``pair_same_function`` (both are 0 on every sequence).

The exporter supplies only the scale c and each FFN's ray a and scales s; a wrong one
makes the proof fail. The pairs that agree exactly on a learner's recorded queries only
are exported by :mod:`~verified_attn.formal.export_queries`, the multi-head Transformer's
canonical-form pairs by :mod:`~verified_attn.formal.export_transformer_pair` and the
ffn-bias witness by :mod:`~verified_attn.formal.export_ffn_witness`; those that agree within a
tolerance, or show a learner's failure, are not exported.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from verified_attn.certificates.kernel import as_list, get
from verified_attn.errors import CertificateError
from verified_attn.formal.coq_tables import (
    coq_q,
    mat_table,
    rational_matrix,
    rational_vector,
    vec_table,
)
from verified_attn.formal.export_ffn_witness import ffn_witness_file
from verified_attn.formal.export_queries import KINDS as QUERY_KINDS
from verified_attn.formal.export_queries import queries_file
from verified_attn.formal.export_transformer_pair import KINDS as TRANSFORMER_KINDS
from verified_attn.formal.export_transformer_pair import transformer_pair_file

__all__ = ["KINDS", "MAX_D", "hypothesis_file"]

#: (theorem, counterexample kind) -> the model class of both sides.
KINDS = {
    ("thm-4.1", "v-zero"): "single-head",
    ("app-b", "positive-scale"): "single-head",
    ("transformer", "v-eff-zero"): "one-layer-transformer",
}
MAX_D = 8

Matrix = list[list[Fraction]]


def _side(data: Mapping[str, Any], side: str, d: int, cls: str) -> dict[str, Any]:
    model = get(data, side)
    if not isinstance(model, dict) or model.get("class") != cls:
        raise CertificateError(f"{side}: export to Coq expects a {cls} model here")
    if cls == "single-head":
        if set(model) != {"class", "W", "v"}:
            raise CertificateError(f"{side}: export to Coq covers bias-free heads {{W, v}}")
        return {
            "W": rational_matrix(model["W"], f"{side}.W", d, d),
            "v": rational_vector(model["v"], f"{side}.v", d),
        }
    V, A = as_list(model.get("V"), f"{side}.V", d), as_list(model.get("A"), f"{side}.A")
    e = len(V[0]) if V and isinstance(V[0], list) else 0
    m = len(A[0]) if A and isinstance(A[0], list) else 0
    if not (1 <= e <= MAX_D and 1 <= m <= MAX_D and len(A) == e):
        raise CertificateError(f"{side}: V must be d x e and A e x m with 1 <= e, m <= {MAX_D}")
    return {
        "W": rational_matrix(model["W"], f"{side}.W", d, d),
        "V": rational_matrix(V, f"{side}.V", d, e),
        "A": rational_matrix(A, f"{side}.A", e, m),
        "w": rational_vector(model.get("w_o"), f"{side}.w_o", m),
    }


def _ray(A: Matrix) -> tuple[list[Fraction], list[Fraction]]:
    """a and s with column k of A = s_k a, if A's columns lie on one ray (zeros otherwise)."""
    e, m = len(A), len(A[0])
    cols = [[A[j][k] for j in range(e)] for k in range(m)]
    a = next((c for c in cols if any(c)), [Fraction(0)] * e)
    p = next((j for j in range(e) if a[j]), 0)
    s = [c[p] / a[p] if a[p] else Fraction(0) for c in cols]
    return a, s


def _tables(prefix: str, model: dict[str, Any], which: str) -> list[str]:
    out = [mat_table(f"{prefix}_W", model["W"], "0", f"W of the {which} model.")]
    if "v" in model:
        return [*out, vec_table(f"{prefix}_v", model["v"], "0", f"v of the {which} model.")]
    a, s = _ray(model["A"])
    return [
        *out,
        mat_table(f"{prefix}_V", model["V"], "0", f"V of the {which} model (d x e)."),
        mat_table(f"{prefix}_A", model["A"], "0", f"A of the {which} model (e x m)."),
        vec_table(f"{prefix}_w", model["w"], "0", f"w_o of the {which} model."),
        vec_table(f"{prefix}_a", a, "0", "Auxiliary: the ray a of the FFN's neurons."),
        vec_table(f"{prefix}_s", s, "0", "Auxiliary: column k of A is s_k a."),
    ]


def _scale(first: dict[str, Any], second: dict[str, Any]) -> Fraction:
    i = next((i for i, x in enumerate(first["v"]) if x), None)
    return Fraction(0) if i is None else second["v"][i] / first["v"][i]


def hypothesis_file(data: Mapping[str, Any]) -> str:
    """The Coq text for a hypothesis ``counterexample`` certificate of :data:`KINDS`."""
    key = (get(data, "theorem"), get(data, "counterexample_kind"))
    if key in QUERY_KINDS:
        return queries_file(data)
    if key[0] == "transformer" and key[1] in TRANSFORMER_KINDS:
        return transformer_pair_file(data)
    if key == ("transformer", "ffn-bias"):
        return ffn_witness_file(data)
    if key not in KINDS:
        transformer = tuple(("transformer", k) for k in (*TRANSFORMER_KINDS, "ffn-bias"))
        covered = ", ".join(f"{t} {k}" for t, k in (*KINDS, *QUERY_KINDS, *transformer))
        raise CertificateError(
            f"export to Coq covers the hypothesis pairs {covered} (and the prop-7.1 pairs), "
            f"not {key[0]!r:.30} {key[1]!r:.40}: the others are a learner's failure or agree "
            "only within a tolerance"
        )
    d = get(data, "d")
    if not isinstance(d, int) or not 1 <= d <= MAX_D:
        raise CertificateError(f"d = {d!r:.20}: export to Coq covers 1 <= d <= {MAX_D}")
    cls = KINDS[key]
    first, second = _side(data, "first", d, cls), _side(data, "second", d, cls)
    sha = hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()
    header = (
        f"(** * A counterexample to a hypothesis of {key[0]} ({key[1]}), checked by Coq's"
        f" kernel.\n\n    Certificate: kind counterexample, d = {d}, seed {get(data, 'seed')};"
        f" sha256 {sha}.\n\n"
    )
    parts = [
        "From Coq Require Import Reals QArith List.\n"
        "From VerifiedAttn Require Import Defs CertHead CertPair CertHyp.\n"
        "Import ListNotations.\nOpen Scope R_scope.\n",
        *_tables("F", first, "first"),
        *_tables("S", second, "second"),
    ]
    if key[1] == "v-zero":
        body = _zero_value(d)
    elif key[1] == "positive-scale":
        body = _positive_scale(d, _scale(first, second))
    else:
        body = _cancelling(d, len(first["V"][0]), len(first["w"]))
    return header + body[0] + "\n".join(parts) + "\n" + body[1]


_HEADS = "[(F_W, F_v)] [(S_W, S_v)]"


def _zero_value(d: int) -> tuple[str, str]:
    doc = (
        "    Theorem [pair_same_function] states, for the heads (F_W, F_v) and (S_W, S_v)\n"
        "    listed below: their parameters differ, and for every length N and every sequence\n"
        "    X of N tokens in R^d the two heads' outputs are equal (both v are 0). It applies\n"
        "    [CertHyp.hyp_zero_value] (formal/CertHyp.v, proved for every d). *)\n\n"
    )
    thm = (
        "Theorem pair_same_function :\n"
        f"  qheads_agree {d} {_HEADS} = false /\\\n"
        "  forall (N : nat) (X : tokens),\n"
        f"    attention {d} N X (rmat F_W) (rvec F_v) = attention {d} N X (rmat S_W) (rvec S_v).\n"
        "Proof.\n  split; [vm_compute; reflexivity|].\n"
        f"  apply (hyp_zero_value {d} F_W S_W F_v S_v); vm_compute; reflexivity.\nQed.\n\n"
        "Print Assumptions pair_same_function.\n"
    )
    return doc, thm


def _positive_scale(d: int, c: Fraction) -> tuple[str, str]:
    doc = (
        "    Theorem [pair_same_sign] states, for the heads (F_W, F_v) and (S_W, S_v) listed\n"
        f"    below and c = {c}: their parameters differ, and for every length N and every\n"
        "    sequence X of N tokens in R^d the outputs satisfy f2 = c f1, so f2 > 0, f2 < 0,\n"
        "    f2 = 0 exactly when f1 is (the labels sign f agree). It applies\n"
        "    [CertHyp.hyp_positive_scale] (formal/CertHyp.v, proved for every d). *)\n\n"
    )
    thm = (
        f"(** The positive scale. *)\nDefinition c_scale : Q := {coq_q(c)}.\n\n"
        "Theorem pair_same_sign :\n"
        f"  qheads_agree {d} {_HEADS} = false /\\\n"
        "  forall (N : nat) (X : tokens),\n"
        f"    let f1 := attention {d} N X (rmat F_W) (rvec F_v) in\n"
        f"    let f2 := attention {d} N X (rmat S_W) (rvec S_v) in\n"
        "    f2 = Q2R c_scale * f1 /\\ (0 < f2 <-> 0 < f1) /\\ (f2 < 0 <-> f1 < 0) /\\ "
        "(f2 = 0 <-> f1 = 0).\n"
        "Proof.\n  split; [vm_compute; reflexivity|].\n"
        f"  apply (hyp_positive_scale {d} F_W S_W F_v S_v c_scale); vm_compute; reflexivity.\n"
        "Qed.\n\nPrint Assumptions pair_same_sign.\n"
    )
    return doc, thm


def _cancelling(d: int, e: int, m: int) -> tuple[str, str]:
    doc = (
        "    Theorem [pair_same_function] states, for the one-layer Transformers (F_W, F_V,\n"
        "    F_A, F_w) and (S_W, S_V, S_A, S_w) listed below: their parameters differ, and for\n"
        "    every length N and every sequence X of N tokens in R^d their outputs are equal\n"
        "    (each FFN's neurons lie on one ray and cancel: both are 0). It applies\n"
        "    [CertHyp.hyp_cancelling_neurons] (formal/CertHyp.v, proved for every d, e, m). *)\n\n"
    )
    differ = (
        f"(qmat_agree {d} {d} F_W S_W && qmat_agree {d} {e} F_V S_V && "
        f"qmat_agree {e} {m} F_A S_A && qvec_agree {m} F_w S_w)%bool"
    )
    thm = (
        "Theorem pair_same_function :\n"
        f"  {differ} = false /\\\n"
        "  forall (N : nat) (X : tokens),\n"
        f"    transformer {d} {e} {m} N X (rmat F_W) (rmat F_V) (rmat F_A) (rvec F_w) =\n"
        f"    transformer {d} {e} {m} N X (rmat S_W) (rmat S_V) (rmat S_A) (rvec S_w).\n"
        "Proof.\n  split; [vm_compute; reflexivity|].\n"
        f"  apply (hyp_cancelling_neurons {d} {e} {m} F_W F_V F_A S_W S_V S_A F_w S_w F_a F_s "
        "S_a S_s);\n    vm_compute; reflexivity.\nQed.\n\nPrint Assumptions pair_same_function.\n"
    )
    return doc, thm
