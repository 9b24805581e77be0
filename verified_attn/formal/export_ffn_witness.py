"""The Coq file of the ffn-bias witness: a biased FFN's odd part is no single head's.

>>> import verified_attn as va
>>> cx = va.counterexample("transformer", kind="ffn-bias", d=2, seed=1)
>>> text = va.export_coq(cx.certificate())
>>> "apply (hyp_ffn_bias 2 2 A_ffn a_ffn w_ffn x_w)" in text and "Admitted" not in text
True

The ``transformer`` ffn-bias counterexample records a biased FFN
g(y) = w_oᵀ ReLU(Aᵀ y + a) (A is d x m: the Transformer's V A with V = I) and the four
length-1 queries [x], [−x], [2x], [−2x]. Its file proves ``ffn_bias_witness``: over Q,
D(y) = g(y) − g(−y) is D1 at x and D2 at 2x with D2 ≠ 2 D1, and no single head (W, v)
has f([y]) − f([−y]) = D(y) at both y = x and y = 2x (a head's is 2 yᵀv, linear in y);
it applies ``hyp_ffn_bias`` of ``formal/CertHyp.v``. The exporter computes D1 and D2
itself; Coq checks them.
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

__all__ = ["MAX_SIZE", "ffn_witness_file"]

MAX_SIZE = 8
THEOREM = "ffn_bias_witness"


def _odd(
    A: list[list[Fraction]], a: list[Fraction], w: list[Fraction], x: list[Fraction]
) -> Fraction:
    """D(x) = g(x) − g(−x), g(y) = Σ_k w_k max(0, Σ_j A_jk y_j + a_k)."""

    def g(y: list[Fraction]) -> Fraction:
        pre = [sum((A[j][k] * y[j] for j in range(len(y))), a[k]) for k in range(len(a))]
        return sum((w[k] * max(Fraction(0), z) for k, z in enumerate(pre)), Fraction(0))

    return g(x) - g([-t for t in x])


def _witness(data: Mapping[str, Any], d: int) -> list[Fraction]:
    """x, with the recorded sequences exactly [x], [−x], [2x], [−2x]."""
    seqs = as_list(get(data, "sequences"), "sequences", 4)
    rows = []
    for n, seq in enumerate(seqs):
        one = as_list(seq, f"sequences[{n}]", 1)
        rows.append(rational_vector(one[0], f"sequences[{n}][0]", d))
    x = rows[0]
    want = [x, [-t for t in x], [2 * t for t in x], [-2 * t for t in x]]
    if rows != want:
        raise CertificateError("sequences: the ffn-bias witness records [x], [-x], [2x], [-2x]")
    return x


def ffn_witness_file(data: Mapping[str, Any]) -> str:
    """The Coq text for a ``transformer`` ``ffn-bias`` counterexample certificate."""
    d = get(data, "d")
    if not isinstance(d, int) or not 1 <= d <= MAX_SIZE:
        raise CertificateError(f"d = {d!r:.20}: export to Coq covers 1 <= d <= {MAX_SIZE}")
    ffn = get(data, "first")
    if not isinstance(ffn, dict) or ffn.get("class") != "relu-ffn-biased":
        raise CertificateError("first: export to Coq expects a relu-ffn-biased model here")
    w = rational_vector(get(ffn, "w_o"), "first.w_o", None)
    m = len(w)
    if not 1 <= m <= MAX_SIZE:
        raise CertificateError(f"first: export to Coq covers 1 <= m <= {MAX_SIZE}")
    A = rational_matrix(get(ffn, "A"), "first.A", d, m)
    a = rational_vector(get(ffn, "c"), "first.c", m)
    x = _witness(data, d)
    D1, D2 = _odd(A, a, w, x), _odd(A, a, w, [2 * t for t in x])
    sha = hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()
    g = f"ffn_biased {d} {m} (rmat A_ffn) (rvec a_ffn) (rvec w_ffn) 0"
    f = f"attention {d} 1"
    odd = f"qodd {d} {m} A_ffn a_ffn w_ffn"
    parts = [
        _HEADER.format(d=d, seed=get(data, "seed"), sha=sha, D1=D1, D2=D2),
        "From Coq Require Import Reals QArith.\n"
        "From VerifiedAttn Require Import Defs CertHead Thm41 TransformerHeads CertHyp.\n"
        "Open Scope R_scope.\n",
        mat_table("A_ffn", A, "0", "A (d x m): the Transformer's V A, V = I."),
        vec_table("a_ffn", a, "0", "The hidden biases a."),
        vec_table("w_ffn", w, "0", "The output weights w_o."),
        vec_table("x_w", x, "0", "The witness x (the queries [x], [-x], [2x], [-2x])."),
        f"Theorem {THEOREM} :\n"
        f"  Qeq_bool ({odd} x_w) {coq_q(D1)} = true /\\\n"
        f"  Qeq_bool ({odd} (qtwice x_w)) {coq_q(D2)} = true /\\\n"
        "  forall (W : mat) (v : vec), ~ (\n"
        f"    {g} (rvec x_w) - {g} (rvec (qneg x_w)) =\n"
        f"      {f} (seq1 (rvec x_w)) W v - {f} (seq1 (rvec (qneg x_w))) W v /\\\n"
        f"    {g} (rvec (qtwice x_w)) - {g} (rvec (qneg (qtwice x_w))) =\n"
        f"      {f} (seq1 (rvec (qtwice x_w))) W v - {f} (seq1 (rvec (qneg (qtwice x_w)))) W v).\n"
        "Proof.\n"
        "  split; [vm_compute; reflexivity|]. split; [vm_compute; reflexivity|].\n"
        f"  apply (hyp_ffn_bias {d} {m} A_ffn a_ffn w_ffn x_w). vm_compute. reflexivity.\n"
        "Qed.\n",
        f"Print Assumptions {THEOREM}.\n",
    ]
    return "\n".join(parts)


_HEADER = """(** * The ffn-bias witness of the one-layer Transformer, checked by Coq's kernel.

    Certificate: kind counterexample (transformer, ffn-bias), d = {d}, seed {seed};
    sha256 {sha}.

    For the biased FFN g(y) = w_o^T ReLU(A^T y + a) listed below and the witness x,
    Theorem [ffn_bias_witness] (at the end of this file) states:
    1. D(y) = g(y) - g(-y) is {D1} at y = x and {D2} at y = 2x (over Q), and D(2x) <> 2 D(x);
    2. no single softmax head (W, v) has f([y]) - f([-y]) = D(y) at both y = x and
       y = 2x: a head's length-1 answer is y^T v, so its odd part 2 y^T v is linear.
    A Transformer with V = I answers g(y) to [y] (TransformerHeads.v,
    transformer_heads_length1), so T(X) - T(-X) is no single head's. It applies
    [hyp_ffn_bias] of formal/CertHyp.v (proved for every d and m). *)
"""
