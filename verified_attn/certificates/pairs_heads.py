"""The structural rules of multi-head Transformer pairs: why two parameter sets are one map.

>>> import verified_attn as va
>>> from verified_attn.certificates.pairs import verify_pair
>>> data = va.counterexample("transformer", kind="killed-head", d=2).certificate()
>>> print(verify_pair(data).summary[1])  # doctest: +ELLIPSIS
structure: 1 head(s) of first and 1 of second have V_h A = 0 ...
>>> data["proof"]["rule"] = "colliding-heads"
>>> verify_pair(data)
Traceback (most recent call last):
...
verified_attn.errors.CertificateError: colliding-heads: no two heads of either model share (W, c)

``T(X) = w_o^T ReLU(A^T sum_h V_h^T X^T alpha_h(X) + a) + b`` with ``alpha_h =
softmax(X (W_h x_N + c_h))`` (:class:`~verified_attn.ffn_heads.MultiHeadTransformer`).
Each rule checks, from the stored exact parameters only, that the two models differ in
the stated way and nothing else, which makes them one map on every sequence:

- ``never-active-neuron``: the heads are equal; a neuron k whose column of every ``V_h A``
  is 0 has the constant pre-activation ``a_k``; with ``a_k <= 0`` it is never active and
  its weight is free. With those neurons removed the FFNs are equal (order kept).
- ``always-on-neuron``: as above with at least one such neuron with ``a_k > 0``: it adds
  the constant ``w_k a_k``, which is moved into b before the FFNs are compared.
- ``killed-head``: the FFNs are equal; a head with ``V_h A = 0`` adds nothing to any
  pre-activation, whatever its W_h and c_h. With those heads removed the heads are equal.
- ``colliding-heads``: the FFNs are equal; heads with one (W, c) have one softmax on every
  sequence, so only the sum of their V enters: the summed V per distinct (W, c) are equal.

Each rule then evaluates both models exactly (``==``) at the sequences in
``proof.checked``: a spot check of the map identity, not its proof.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from verified_attn.arithmetic import get_arithmetic
from verified_attn.certificates import kernel
from verified_attn.certificates.pairs_models import (
    MAX_SEQUENCES,
    Matrix,
    exact_value,
    need,
    read_sequence,
)
from verified_attn.errors import CertificateError

__all__ = ["RULES"]

Params = dict[str, Any]


def _product(V: Matrix, A: Matrix) -> Matrix:
    return [
        [sum((V[i][t] * A[t][k] for t in range(len(A))), Fraction(0)) for k in range(len(A[0]))]
        for i in range(len(V))
    ]


def _is_zero(M: Matrix) -> bool:
    return not any(x for row in M for x in row)


def _score(head: tuple[Matrix, Matrix, list[Fraction] | None]) -> tuple[Fraction, ...]:
    """(W, c) row-major, c = 0 when absent: heads with one key have one softmax."""
    W, _, c = head
    return (*(x for row in W for x in row), *(c or [Fraction(0)] * len(W)))


def _ffn(p: Params) -> tuple[Any, ...]:
    return (p["A"], p["w_o"], p["a"], p["b"])


def _heads(p: Params) -> list[tuple[tuple[Fraction, ...], Matrix]]:
    return [(_score(h), h[1]) for h in p["heads"]]


def _reduced_ffn(p: Params) -> tuple[list[tuple[Any, ...]], Fraction, int, int]:
    """The neurons not constant (A's column, w_k, a_k), b with the always-on constants
    added, and the numbers of never-active and always-on constant neurons."""
    VA = [_product(V, p["A"]) for _, V, _ in p["heads"]]
    kept, b, never, on = [], p["b"], 0, 0
    for k, (wk, ak) in enumerate(zip(p["w_o"], p["a"], strict=True)):
        if any(M[i][k] for M in VA for i in range(len(M))):
            kept.append((tuple(row[k] for row in p["A"]), wk, ak))
        elif ak > 0:
            b, on = b + wk * ak, on + 1
        else:
            never += 1
    return kept, b, never, on


def _neurons(rule: str, p1: Params, p2: Params) -> str:
    if _heads(p1) != _heads(p2):
        raise CertificateError(f"{rule}: the heads differ, not only the FFN's constant neurons")
    (k1, b1, n1, o1), (k2, b2, n2, o2) = _reduced_ffn(p1), _reduced_ffn(p2)
    if (k1, b1) != (k2, b2):
        raise CertificateError(
            f"{rule}: with the constant neurons removed (always-on ones moved into b) the "
            f"FFNs differ (b = {b1} vs {b2})"
        )
    if rule == "never-active-neuron" and (o1 + o2 or not n1 + n2):
        raise CertificateError(f"{rule}: needs a never-active neuron and no always-on one")
    if rule == "always-on-neuron" and not o1 + o2:
        raise CertificateError(f"{rule}: no neuron is always on (constant with a_k > 0)")
    return (
        f"structure: equal heads; {n1 + n2} never-active and {o1 + o2} always-on neuron(s) "
        f"(every V_h A column 0, constant pre-activation a_k) removed, always-on ones moved "
        f"into b (= {b1}): the remaining FFNs are equal, so T is one map on every sequence"
    )


def _killed(rule: str, p1: Params, p2: Params) -> str:
    if _ffn(p1) != _ffn(p2):
        raise CertificateError(f"{rule}: the FFNs differ")
    live, dead = [], []
    for p in (p1, p2):
        alive = [h for h in p["heads"] if not _is_zero(_product(h[1], p["A"]))]
        live.append(_heads({"heads": alive}))
        dead.append(len(p["heads"]) - len(alive))
    if not sum(dead):
        raise CertificateError(f"{rule}: no head has V_h A = 0")
    if live[0] != live[1]:
        raise CertificateError(f"{rule}: with the heads of V_h A = 0 removed the heads differ")
    return (
        f"structure: {dead[0]} head(s) of first and {dead[1]} of second have V_h A = 0 and "
        "add nothing to any pre-activation whatever their W_h; the other heads and the FFNs "
        "are equal, so T is one map on every sequence"
    )


def _summed(p: Params) -> tuple[dict[tuple[Fraction, ...], Matrix], int]:
    sums: dict[tuple[Fraction, ...], Matrix] = {}
    for key, V in _heads(p):
        old = sums.get(key)
        sums[key] = (
            V
            if old is None
            else [[x + y for x, y in zip(r, s, strict=True)] for r, s in zip(old, V, strict=True)]
        )
    return sums, len(p["heads"]) - len(sums)


def _colliding(rule: str, p1: Params, p2: Params) -> str:
    if _ffn(p1) != _ffn(p2):
        raise CertificateError(f"{rule}: the FFNs differ")
    (s1, c1), (s2, c2) = _summed(p1), _summed(p2)
    if not c1 + c2:
        raise CertificateError(f"{rule}: no two heads of either model share (W, c)")
    if s1 != s2:
        raise CertificateError(f"{rule}: the summed V per distinct (W, c) differ")
    return (
        f"structure: heads sharing (W, c) share one softmax, so only their summed V enters; "
        f"for each of the {len(s1)} distinct (W, c) the summed V are equal (first: "
        f"{len(p1['heads'])} heads, second: {len(p2['heads'])}), and the FFNs are equal"
    )


def _spot_check(proof: Any, d: int, m1: Any, m2: Any) -> str:
    raw = kernel.as_list(kernel.get(proof, "checked"), "proof.checked")
    if not 1 <= len(raw) <= MAX_SEQUENCES:
        raise CertificateError(f"proof.checked must have 1..{MAX_SEQUENCES} sequences")
    for i, entry in enumerate(raw):
        X = read_sequence(entry, f"proof.checked[{i}]", d)
        a, b = exact_value(m1, X), exact_value(m2, X)
        if not get_arithmetic("exact").agree(a, b):
            raise CertificateError(f"proof.checked[{i}]: the pair differs there ({a} vs {b})")
    return f"; and the pair is equal (==, exact) at the {len(raw)} sequences of proof.checked"


def _rule(check: Any, rule: str) -> Any:
    def run(proof: Any, d: int, p1: Any, p2: Any, m1: Any, m2: Any, seqs: Any, tol: Any) -> str:
        need(p2 is not None and "heads" in p1 and "V" not in p1, rule)
        if seqs is not None:
            raise CertificateError(f"{rule} holds on every sequence: sequences must be null")
        return check(rule, p1, p2) + _spot_check(proof, d, m1, m2)

    return run


#: rule name -> checker, for :mod:`verified_attn.certificates.pairs` (models of class
#: ``one-layer-transformer-multi-head``, read by ``pairs_models.read_model``).
RULES = {
    "never-active-neuron": _rule(_neurons, "never-active-neuron"),
    "always-on-neuron": _rule(_neurons, "always-on-neuron"),
    "killed-head": _rule(_killed, "killed-head"),
    "colliding-heads": _rule(_colliding, "colliding-heads"),
}
