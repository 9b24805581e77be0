"""The Coq file of a multi-head Transformer counterexample: two models, one map.

>>> import verified_attn as va
>>> cx = va.counterexample("transformer", kind="killed-head", d=2, seed=1)
>>> text = va.export_coq(cx.certificate())
>>> "apply (tf_killed_head 2 2 2 2 1 F G)" in text and "Admitted" not in text
True

The four canonical-form counterexamples of the multi-head Transformer
T(X) = w_oᵀ ReLU(Aᵀ h(X) + a) + b (:func:`verified_attn.hypotheses`, theorem
"transformer") hold on every sequence of every length. Each exports as one theorem of
``formal/CertTransformerHyp.v`` (proved for every d, e, m and H) applied to the pair's
rationals; its side conditions are checks over Q run by ``vm_compute``:

- ``dead-neuron``: the second model's last neuron has zero input weights and bias <= 0;
- ``always-on-neuron``: the first model's last neuron has zero input weights and bias
  >= 0, and the second model's b is the first's plus w_m a_m;
- ``killed-head``: the models differ only in head p's W (and c), and V_p A = 0;
- ``colliding-heads``: the first model's last head has head p's W and c, and the second
  model has the first's other heads with V_p + V_H at p.

The exporter supplies only the index p (the first head whose W or c differ, or the head
whose W and c the last head repeats); it decides nothing else: a pair that is not of its
family leaves a check that computes to false, and ``coqc`` fails.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from verified_attn.certificates.kernel import as_list, get, rational
from verified_attn.errors import CertificateError
from verified_attn.formal.coq_tables import (
    coq_q,
    mat_table,
    rational_matrix,
    rational_vector,
    vec_table,
)

__all__ = ["KINDS", "MAX_SIZE", "transformer_pair_file"]

#: The counterexample kinds and the theorem of formal/CertTransformerHyp.v each applies.
KINDS = {
    "dead-neuron": "tf_dead_neuron",
    "always-on-neuron": "tf_always_on_neuron",
    "killed-head": "tf_killed_head",
    "colliding-heads": "tf_colliding_heads",
}
#: Largest d, e, m and number of heads exported.
MAX_SIZE = 8
THEOREM = "pair_same_function"
CLASS = "one-layer-transformer-multi-head"

Matrix = list[list[Fraction]]


def _size(n: int, what: str, side: str) -> int:
    if not 1 <= n <= MAX_SIZE:
        raise CertificateError(f"{side}: export to Coq covers 1 <= {what} <= {MAX_SIZE}")
    return n


def _model(data: Mapping[str, Any], side: str, d: int) -> dict[str, Any]:
    """One side's rationals: heads (W, c, V), A, a, w_o and b, with its e, m and H."""
    model = get(data, side)
    if not isinstance(model, dict) or model.get("class") != CLASS:
        raise CertificateError(f"{side}: export to Coq expects a {CLASS} model here")
    A = as_list(get(model, "A"), f"{side}.A")
    e = _size(len(A), "e", side)
    m = _size(len(A[0]) if isinstance(A[0], list) else 0, "m", side)
    heads = as_list(get(model, "heads"), f"{side}.heads")
    _size(len(heads), "H", side)
    out: dict[str, Any] = {"e": e, "m": m, "heads": []}
    for h, head in enumerate(heads):
        path = f"{side}.heads[{h}]"
        c = get(head, "c")
        out["heads"].append(
            (
                rational_matrix(get(head, "W"), f"{path}.W", d, d),
                [Fraction(0)] * d if c is None else rational_vector(c, f"{path}.c", d),
                rational_matrix(get(head, "V"), f"{path}.V", d, e),
            )
        )
    out["A"] = rational_matrix(A, f"{side}.A", e, m)
    out["w"] = rational_vector(get(model, "w_o"), f"{side}.w_o", m)
    a = get(model, "a")
    out["a"] = [Fraction(0)] * m if a is None else rational_vector(a, f"{side}.a", m)
    b = get(model, "b")
    out["b"] = Fraction(0) if b is None else rational(b, f"{side}.b")
    return out


def _tables(prefix: str, model: dict[str, Any], which: str) -> list[str]:
    out = []
    for h, (W, c, V) in enumerate(model["heads"]):
        out += [
            mat_table(f"{prefix}{h}_W", W, "0", f"W of head {h} of the {which} model."),
            vec_table(f"{prefix}{h}_c", c, "0", f"c of head {h} of the {which} model."),
            mat_table(f"{prefix}{h}_V", V, "0", f"V of head {h} of the {which} model (d x e)."),
        ]
    H = len(model["heads"])
    for name, kind in (("W", "qmat"), ("c", "qvec"), ("V", "qmat")):
        rows = "\n".join(f"  | {h}%nat => {prefix}{h}_{name}" for h in range(H))
        zero = "fun _ _ => 0%Q" if kind == "qmat" else "fun _ => 0%Q"
        out.append(
            f"Definition {prefix}_{name} (h : nat) : {kind} := match h with\n{rows}\n"
            f"  | _ => {zero}\n  end.\n"
        )
    return [
        *out,
        mat_table(f"{prefix}_A", model["A"], "0", f"A of the {which} model (e x m)."),
        vec_table(f"{prefix}_a", model["a"], "0", f"The hidden biases a of the {which} model."),
        vec_table(f"{prefix}_w", model["w"], "0", f"w_o of the {which} model."),
        f"Definition {prefix}_b : Q := {coq_q(model['b'])}.\n",
        f"Definition {prefix} : qtf := {{| tW := {prefix}_W; tc := {prefix}_c; tV := {prefix}_V;"
        f" tA := {prefix}_A; ta := {prefix}_a; tw := {prefix}_w; tb := {prefix}_b |}}.\n",
    ]


def _head_index(kind: str, first: dict[str, Any], second: dict[str, Any]) -> int:
    """p: the first head whose W or c differ (killed-head), or the head whose W and c the
    first model's last head repeats (colliding-heads); 0 when there is none."""
    F, G = first["heads"], second["heads"]
    if kind == "killed-head":
        pairs = zip(F, G, strict=False)
        return next((h for h, (f, g) in enumerate(pairs) if f[:2] != g[:2]), 0)
    last = F[-1][:2]
    return next((h for h, f in enumerate(F[:-1]) if f[:2] == last), 0)


def transformer_pair_file(data: Mapping[str, Any]) -> str:
    """The Coq text for a ``transformer`` counterexample certificate of :data:`KINDS`."""
    kind = get(data, "counterexample_kind")
    if kind not in KINDS:
        raise CertificateError(f"export to Coq covers the Transformer pairs {', '.join(KINDS)}")
    d = get(data, "d")
    if not isinstance(d, int) or not 1 <= d <= MAX_SIZE:
        raise CertificateError(f"d = {d!r:.20}: export to Coq covers 1 <= d <= {MAX_SIZE}")
    first, second = _model(data, "first", d), _model(data, "second", d)
    e = first["e"]
    (m1, H1), (m2, H2) = ((x["m"], len(x["heads"])) for x in (first, second))
    sha = hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()
    args = {
        "dead-neuron": f"{d} {e} {m1} {H1}",
        "always-on-neuron": f"{d} {e} {m2} {H1}",
        "killed-head": f"{d} {e} {m1} {H1} {_head_index(kind, first, second)}",
        "colliding-heads": f"{d} {e} {m1} {H2} {_head_index(kind, first, second)}",
    }[kind]
    side_goals = "[lia|..]; " if kind in ("killed-head", "colliding-heads") else ""
    parts = [
        _header(kind, d, sha, get(data, "seed")),
        "From Coq Require Import Reals QArith Bool Lia.\n"
        "From VerifiedAttn Require Import Defs CertHead CertHyp TransformerHeads "
        "CertTransformerHyp.\nOpen Scope R_scope.\n",
        *_tables("F", first, "first"),
        *_tables("G", second, "second"),
        _theorem(f"{d} {e}", (m1, H1), (m2, H2), f"{KINDS[kind]} {args}", side_goals),
        f"Print Assumptions {THEOREM}.\n",
    ]
    return "\n".join(parts)


#: The file's theorem: its statement, then its proof by the family's theorem.
_THEOREM = """Theorem pair_same_function :
  tf_agree {de} {m1} {m2} {H1} {H2} F G = false /\\
  forall (N : nat) (X : tokens),
    tf {de} {m1} {H1} N X F = tf {de} {m2} {H2} N X G.
Proof.
  split; [vm_compute; reflexivity|].
  apply ({apply} F G); {pre}vm_compute; reflexivity.
Qed.
"""


def _theorem(de: str, first: tuple[int, int], second: tuple[int, int], apply: str, pre: str) -> str:
    """The statement (sizes (m, H) of each side) and its proof by the family's theorem."""
    (m1, H1), (m2, H2) = first, second
    return _THEOREM.format(de=de, m1=m1, m2=m2, H1=H1, H2=H2, apply=apply, pre=pre)


#: The file's header: what the theorem at its end states.
_HEADER = """(** * A multi-head Transformer counterexample pair, checked by Coq's kernel.

    Certificate: kind counterexample (transformer, {kind}), d = {d}, seed {seed};
    sha256 {sha}.

    Theorem [pair_same_function] (at the end of this file) states, for the models [F]
    (first) and [G] (second) whose rationals are listed below, each
    T(X) = w_o^T ReLU(A^T sum_h V_h^T X^T softmax(X (W_h x_N + c_h)) + a) + b:
    1. their sizes or tables differ ([tf_agree] compares every entry the model reads);
    2. for every sequence length N and every sequence X of N tokens in R^d, the two
       models' outputs are equal.
    It applies [{theorem}] of formal/CertTransformerHyp.v (proved for every d,
    e, m and H); its side conditions are checks over Q run by computation. *)
"""


def _header(kind: str, d: int, sha: str, seed: Any) -> str:
    return _HEADER.format(kind=kind, d=d, seed=seed, sha=sha, theorem=KINDS[kind])
