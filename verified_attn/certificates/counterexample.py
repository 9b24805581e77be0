"""Re-check a counterexample certificate: two distinct models, one map, without the room.

>>> import verified_attn as va
>>> from verified_attn.certificates.counterexample import verify
>>> data = va.counterexample("multi-head", d=2, heads=2, kind="shared-score-split").certificate()
>>> print(verify(data).summary[1])
structure: for each of the 1 distinct W the two models' summed v agree (first: 2 heads, second: 2)
>>> data["second"][0]["v"][0] = "7/1"
>>> verify(data)
Traceback (most recent call last):
...
verified_attn.errors.CertificateError: ...

What is re-checked, with the core models and exact arithmetic only:

1. the two models (exact rationals) differ as parameter lists: it is a counterexample to
   identifiability, not the same model twice;
2. the structural proof, re-run: by the definition (:func:`verified_attn.models.attention_output`)
   ``f(X) = sum_h g(X, W_h)^T v_h`` with ``g(X, W) = X^T softmax(X W x_N)``, so two models
   whose summed v agree for every distinct W are the same map on every sequence of every
   length. The per-W sums are recomputed from the models and must equal the stored ones
   (the proof's data), and agree between the models;
3. the pair evaluated exactly (:class:`~verified_attn.arithmetic.ExactArithmetic`, SymPy
   closed forms, equality decided by ``==``) at every recorded rational sequence: equal.

Certificates of the other theorems' hypotheses (``model_class`` absent: single heads,
Transformers, a learner's failure) are checked by
:func:`verified_attn.certificates.pairs.verify_pair`, which re-runs their structural rules.

Sizes are bounded before any work (:data:`MAX_D`, :data:`MAX_HEADS`, :data:`MAX_SEQUENCES`,
:data:`MAX_LENGTH`): exact evaluation grows with them.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from verified_attn.arithmetic import get_arithmetic
from verified_attn.certificates import CertificateCheck, kernel
from verified_attn.certificates.pairs_models import check_counterexample_header
from verified_attn.errors import CertificateError, VerifiedAttnError
from verified_attn.models import MultiHeadAttention, as_rational_sequence

__all__ = ["MAX_D", "MAX_HEADS", "MAX_LENGTH", "MAX_SEQUENCES", "verify"]

MAX_D = 8
MAX_HEADS = 8
MAX_SEQUENCES = 16
MAX_LENGTH = 16

Heads = list[tuple[list[list[Fraction]], list[Fraction]]]


def verify(data: dict[str, Any]) -> CertificateCheck:
    """Re-check a ``counterexample`` certificate dict; CertificateError naming what fails."""
    if isinstance(data, dict):
        # The seed the pair was drawn from: an int like every other header's (not Infinity).
        kernel.as_int(kernel.get(data, "seed"), "seed")
    if isinstance(data, dict) and data.get("model_class") != "multi-head":
        from verified_attn.certificates.pairs import verify_pair

        return verify_pair(data)
    check_counterexample_header(data)
    theorem = kernel.get(data, "theorem")
    if not isinstance(theorem, str) or len(theorem) > 64:
        raise CertificateError("theorem must be a short string")
    if kernel.get(data, "model_class") != "multi-head":
        raise CertificateError("model_class must be 'multi-head'")
    d = kernel.as_int(kernel.get(data, "d"), "d", low=1, high=MAX_D)
    first = _heads(kernel.get(data, "first"), "first", d)
    second = _heads(kernel.get(data, "second"), "second", d)
    if first == second:
        raise CertificateError("first and second are the same parameters: not a counterexample")
    groups = _groups(first, second)
    stored = kernel.as_list(kernel.get(data, "proof.groups"), "proof.groups", len(groups))
    for i, (entry, (W, a, b)) in enumerate(zip(stored, groups, strict=True)):
        path = f"proof.groups[{i}]"
        got = (
            [
                _rationals(row, f"{path}.W[{r}]", d)
                for r, row in enumerate(kernel.as_list(kernel.get(entry, "W"), f"{path}.W", d))
            ],
            _rationals(kernel.get(entry, "first_v"), f"{path}.first_v", d),
            _rationals(kernel.get(entry, "second_v"), f"{path}.second_v", d),
        )
        if got != (W, a, b):
            raise CertificateError(f"{path} is not what the models give for W = {W}")
        if a != b:
            raise CertificateError(
                f"{path}: the summed v differ for W = {W} ({a} vs {b}): the structural proof fails"
            )
    if not kernel.as_bool(kernel.get(data, "proof.holds"), "proof.holds"):
        raise CertificateError("proof.holds is false")
    seqs = kernel.as_list(kernel.get(data, "sequences"), "sequences")
    if not 1 <= len(seqs) <= MAX_SEQUENCES:
        raise CertificateError(f"sequences must have 1..{MAX_SEQUENCES} entries, got {len(seqs)}")
    equal = kernel.as_list(kernel.get(data, "equal"), "equal", len(seqs))
    try:
        m1, m2 = MultiHeadAttention(first), MultiHeadAttention(second)
    except VerifiedAttnError as exc:
        raise CertificateError(f"the stored heads are not models: {exc}") from exc
    arith = get_arithmetic("exact")
    lengths = []
    for i, raw in enumerate(seqs):
        path = f"sequences[{i}]"
        rows = kernel.as_list(raw, path)
        if not 1 <= len(rows) <= MAX_LENGTH:
            raise CertificateError(f"{path} must have 1..{MAX_LENGTH} tokens, got {len(rows)}")
        X = [
            _rationals(row, f"{path}[{t}]", d)
            for t, row in enumerate(kernel.as_matrix(rows, path, len(rows), d))
        ]
        Xq = as_rational_sequence(X, d)
        with arith.context():
            a, b = m1.evaluate_rational(Xq, arith), m2.evaluate_rational(Xq, arith)
            same = arith.agree(a, b)
        if not same:
            raise CertificateError(f"{path}: the two models differ there ({a} vs {b})")
        if equal[i] is not True:
            raise CertificateError(f"equal[{i}] must be true: the pair is equal at {path}")
        lengths.append(len(rows))
    lines = [
        f"{theorem} counterexample ({data.get('counterexample_kind')!s:.40}), d = {d}: "
        "two distinct exact multi-head models",
        f"structure: for each of the {len(groups)} distinct W the two models' summed v agree "
        f"(first: {len(first)} heads, second: {len(second)})",
        f"exact: the pair is equal (==) at the {len(seqs)} recorded rational sequences "
        f"(lengths {', '.join(map(str, lengths))})",
    ]
    return CertificateCheck(ok=True, kind="counterexample", theorem=theorem, summary=lines)


def _rationals(raw: Any, path: str, n: int) -> list[Fraction]:
    return [kernel.rational(q, f"{path}[{i}]") for i, q in enumerate(kernel.as_list(raw, path, n))]


def _heads(raw: Any, path: str, d: int) -> Heads:
    entries = kernel.as_list(raw, path)
    if not 1 <= len(entries) <= MAX_HEADS:
        raise CertificateError(f"{path} must have 1..{MAX_HEADS} heads, got {len(entries)}")
    out = []
    for h, e in enumerate(entries):
        W = [
            _rationals(row, f"{path}[{h}].W[{i}]", d)
            for i, row in enumerate(kernel.as_matrix(kernel.get(e, "W"), f"{path}[{h}].W", d, d))
        ]
        out.append((W, _rationals(kernel.get(e, "v"), f"{path}[{h}].v", d)))
    return out


def _groups(
    first: Heads, second: Heads
) -> list[tuple[list[list[Fraction]], list[Fraction], list[Fraction]]]:
    """Per distinct W (sorted row-major), the summed v of each model."""
    sums: dict[tuple[Fraction, ...], list[list[Fraction]]] = {}
    for which, heads in enumerate((first, second)):
        for W, v in heads:
            key = tuple(x for row in W for x in row)
            d = len(v)
            acc = sums.setdefault(key, [[Fraction(0)] * d, [Fraction(0)] * d])
            for i, x in enumerate(v):
                acc[which][i] += x
    out = []
    for key, (a, b) in sorted(sums.items()):
        d = len(a)
        out.append(([list(key[i * d : (i + 1) * d]) for i in range(d)], a, b))
    return out
