"""Reading and evaluating the two models of a counterexample pair.

>>> from fractions import Fraction
>>> from verified_attn.certificates.pairs_models import read_model, differ
>>> raw = {"class": "single-head", "W": [["0/1"]], "v": ["1/1"]}
>>> _, _, m1 = read_model(raw, "first", 1)
>>> _, _, m2 = read_model({**raw, "v": ["2/1"]}, "second", 1)
>>> differ(m1, m2, [[Fraction(1)]])
True
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import flint

from verified_attn.arithmetic import fmpq_matrix, get_arithmetic
from verified_attn.certificates import kernel
from verified_attn.errors import CertificateError, VerifiedAttnError
from verified_attn.ffn_heads import MultiHeadTransformer
from verified_attn.models import OneLayerTransformer, SingleHeadAttention, as_rational_sequence

__all__ = [
    "MAX_D",
    "MAX_HEADS",
    "MAX_LENGTH",
    "MAX_SEQUENCES",
    "MAX_TERMS",
    "MULTI_HEAD_TRANSFORMER",
    "PRECISION",
    "RELATIONS",
    "Matrix",
    "arb",
    "ball_value",
    "check_counterexample_header",
    "differ",
    "exact_rank",
    "exact_value",
    "mat",
    "need",
    "read_heads_ffn",
    "read_model",
    "read_sequence",
    "sequence_key",
    "vec",
    "with_prec",
]

MAX_D = 8
MAX_SEQUENCES = 128
MAX_LENGTH = 16
#: Ball precision (bits) of the "within" and "same-sign" decisions.
PRECISION = 256
RELATIONS = ("equal", "within", "same-sign")
#: The class of a multi-head one-layer Transformer, its most heads, and the most token
#: choices (length^H) its exact evaluation of one sequence may sum over.
MULTI_HEAD_TRANSFORMER = "one-layer-transformer-multi-head"
MAX_HEADS = 4
MAX_TERMS = 4096

Matrix = list[list[Fraction]]


def vec(raw: Any, path: str, n: int | None = None) -> list[Fraction]:
    return [kernel.rational(q, f"{path}[{i}]") for i, q in enumerate(kernel.as_list(raw, path, n))]


def mat(raw: Any, path: str, rows: int | None = None, cols: int | None = None) -> Matrix:
    out = [vec(r, f"{path}[{i}]", cols) for i, r in enumerate(kernel.as_list(raw, path, rows))]
    if not out or any(len(r) != len(out[0]) for r in out) or not out[0]:
        raise CertificateError(f"{path} must be a non-empty rectangular matrix")
    if max(len(out), len(out[0])) > 4 * MAX_D:
        raise CertificateError(f"{path} is larger than {4 * MAX_D} in a dimension")
    return out


def read_model(raw: Any, path: str, d: int) -> tuple[str, dict[str, Any], Any]:
    cls = kernel.get(raw, "class")
    try:
        p: dict[str, Any]
        if cls == "single-head":
            p = {
                "W": mat(kernel.get(raw, "W"), f"{path}.W", d, d),
                "v": vec(kernel.get(raw, "v"), f"{path}.v", d),
            }
            return cls, p, SingleHeadAttention(p["W"], p["v"])
        if cls == "one-layer-transformer":
            p = {
                "W": mat(kernel.get(raw, "W"), f"{path}.W", d, d),
                "V": mat(kernel.get(raw, "V"), f"{path}.V", d),
            }
            p["A"] = mat(kernel.get(raw, "A"), f"{path}.A", len(p["V"][0]))
            p["w_o"] = vec(kernel.get(raw, "w_o"), f"{path}.w_o", len(p["A"][0]))
            return cls, p, OneLayerTransformer(p["W"], p["V"], p["A"], p["w_o"])
        if cls == MULTI_HEAD_TRANSFORMER:
            p = read_heads_ffn(raw, path, d)
            heads = [(W, V) if c is None else (W, V, c) for W, V, c in p["heads"]]
            return cls, p, MultiHeadTransformer(heads, p["A"], p["w_o"], a=p["a"], b=p["b"])
        if cls == "relu-ffn-biased":
            p = {"A": mat(kernel.get(raw, "A"), f"{path}.A", d)}
            m = len(p["A"][0])
            p["c"] = vec(kernel.get(raw, "c"), f"{path}.c", m)
            p["w_o"] = vec(kernel.get(raw, "w_o"), f"{path}.w_o", m)
            return cls, p, None
    except VerifiedAttnError as exc:
        raise CertificateError(f"{path} is not a model: {exc}") from exc
    raise CertificateError(f"{path}.class {cls!r:.40} is not a class this checker reads")


def read_heads_ffn(raw: Any, path: str, d: int) -> dict[str, Any]:
    """A multi-head Transformer's exact parameters: ``heads`` as (W, V, c or None) with a
    common e, then A (e x m), w_o, a (length m) and b.

    >>> raw = {"heads": [{"W": [["1"]], "V": [["2"]], "c": None}], "A": [["1", "-1"]],
    ...        "w_o": ["1", "1"], "a": ["0", "0"], "b": "3"}
    >>> p = read_heads_ffn(raw, "first", 1)
    >>> p["heads"][0][1], p["b"]
    ([[Fraction(2, 1)]], Fraction(3, 1))
    """
    entries = kernel.as_list(kernel.get(raw, "heads"), f"{path}.heads")
    if not 1 <= len(entries) <= MAX_HEADS:
        raise CertificateError(f"{path}.heads must have 1..{MAX_HEADS} heads, got {len(entries)}")
    heads: list[tuple[Matrix, Matrix, list[Fraction] | None]] = []
    for h, e in enumerate(entries):
        at = f"{path}.heads[{h}]"
        V = mat(kernel.get(e, "V"), f"{at}.V", d, len(heads[0][1][0]) if heads else None)
        c = kernel.get(e, "c")
        heads.append(
            (
                mat(kernel.get(e, "W"), f"{at}.W", d, d),
                V,
                None if c is None else vec(c, f"{at}.c", d),
            )
        )
    A = mat(kernel.get(raw, "A"), f"{path}.A", len(heads[0][1][0]))
    m = len(A[0])
    return {
        "heads": heads,
        "A": A,
        "w_o": vec(kernel.get(raw, "w_o"), f"{path}.w_o", m),
        "a": vec(kernel.get(raw, "a"), f"{path}.a", m),
        "b": kernel.rational(kernel.get(raw, "b"), f"{path}.b"),
    }


def read_sequence(raw: Any, path: str, d: int) -> list[list[Fraction]]:
    rows = kernel.as_list(raw, path)
    if not 1 <= len(rows) <= MAX_LENGTH:
        raise CertificateError(f"{path} must have 1..{MAX_LENGTH} tokens, got {len(rows)}")
    return [vec(r, f"{path}[{t}]", d) for t, r in enumerate(rows)]


def _affordable(model: Any, X: list[list[Fraction]]) -> None:
    """A multi-head Transformer's exact ReLU decision sums over one token per head: at
    most :data:`MAX_TERMS` such choices per sequence, refused before any work."""
    H = getattr(model, "H", 1)
    if len(X) ** H > MAX_TERMS:
        raise CertificateError(
            f"a sequence of {len(X)} tokens through {H} heads is {len(X)}^{H} > {MAX_TERMS} "
            "terms: too large to evaluate"
        )


def exact_value(model: Any, X: list[list[Fraction]]) -> Any:
    _affordable(model, X)
    arith = get_arithmetic("exact")
    with arith.context():
        return model.evaluate_rational(as_rational_sequence(X, model.d), arith)


def ball_value(model: Any, X: list[list[Fraction]]) -> flint.arb:
    _affordable(model, X)
    arith = get_arithmetic("certified", PRECISION)
    with arith.context():
        return model.evaluate_rational(as_rational_sequence(X, model.d), arith)


def differ(m1: Any, m2: Any, X: list[list[Fraction]]) -> bool:
    """f1(X) != f2(X), decided rigorously: disjoint balls first, else exactly."""
    if with_prec(lambda: bool(abs(ball_value(m1, X) - ball_value(m2, X)) > 0)):
        return True
    return not get_arithmetic("exact").agree(exact_value(m1, X), exact_value(m2, X))


def arb(q: Fraction) -> flint.arb:
    return flint.arb(flint.fmpq(q.numerator, q.denominator))


def with_prec(fn: Any) -> Any:
    old = flint.ctx.prec
    flint.ctx.prec = PRECISION
    try:
        return fn()
    finally:
        flint.ctx.prec = old


def check_counterexample_header(data: Any) -> None:
    """A counterexample certificate's format and kind (it has no learner's header).

    >>> check_counterexample_header({"format": "verified-attn-certificate/2", "kind": "noisy"})
    Traceback (most recent call last):
    ...
    verified_attn.errors.CertificateError: kind must be 'counterexample'
    """
    if not isinstance(data, dict):
        raise CertificateError(f"a certificate is a JSON object, got {type(data).__name__}")
    if kernel.get(data, "format") != kernel.FORMAT:
        raise CertificateError(f"unknown certificate format; expected {kernel.FORMAT!r}")
    if kernel.get(data, "kind") != "counterexample":
        raise CertificateError("kind must be 'counterexample'")


def need(applies: bool, rule: str) -> None:
    """CertificateError unless the stated proof rule ``applies`` to the stored models."""
    if not applies:
        raise CertificateError(f"proof.rule {rule!r} does not apply to these models")


def sequence_key(X: list[list[Fraction]]) -> tuple[tuple[Fraction, ...], ...]:
    """A sequence as a hashable, sortable key (to compare sets of sequences)."""
    return tuple(tuple(r) for r in X)


def exact_rank(W: Matrix) -> int:
    """The rank of a rational matrix, exactly.

    >>> exact_rank([[Fraction(1), Fraction(2)], [Fraction(2), Fraction(4)]])
    1
    """
    return int(fmpq_matrix(W).rank())
