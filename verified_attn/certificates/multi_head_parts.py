"""The multi-head checker's shared reading: sizes, claimed heads, the design and its samples.

>>> from verified_attn.certificates.multi_head_parts import heads_model
>>> model = heads_model([([1], [2], None)], None, False)
>>> model.H, model.d
(1, 1)
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from typing import Any

import flint
import numpy as np

from verified_attn.arithmetic import (
    Arithmetic,
)
from verified_attn.certificates import kernel
from verified_attn.errors import (
    CertificateError,
    VerifiedAttnError,
)
from verified_attn.models import MultiHeadAttention, as_rational_sequence

__all__ = [
    "FLOAT_RTOL",
    "MAX_D",
    "MAX_FLOAT_HEADS",
    "MAX_HEADS",
    "MAX_WORKING_PRECISION",
    "Decoded",
    "claimed_heads",
    "design_pairs",
    "heads_model",
    "predictor",
    "read_design",
    "read_entries",
    "read_samples",
    "read_ties",
    "to_fraction",
]


#: Largest d a multi-head certificate may name (the canonical design has ~d^2 pairs).
MAX_D = 32
#: Largest number of heads of an exact or certified certificate (its re-decoding
#: enumerates orders of heads: H! per link).
MAX_HEADS = 6
#: Largest number of heads of a float certificate (its answers are re-checked against the
#: claimed heads; nothing is enumerated), the float learner's range.
MAX_FLOAT_HEADS = 8
#: Largest working precision (bits) of the ball re-decoding.
MAX_WORKING_PRECISION = 8192
#: Relative agreement required between claimed and re-lifted float heads (orthogonal).
FLOAT_RTOL = 1e-12

Decoded = list[tuple[Fraction, Fraction]]


def read_ties(data: dict[str, Any], d: int, ncols: int) -> list[dict[str, Any]]:
    raw = kernel.as_list(kernel.get(data, "answers.ties"), "answers.ties")
    if len(raw) > d * (ncols - 1):
        raise CertificateError(f"answers.ties has {len(raw)} entries, at most {d * (ncols - 1)}")
    out, seen = [], set()
    for i, t in enumerate(raw):
        path = f"answers.ties[{i}]"
        k = kernel.as_int(kernel.get(t, "k"), f"{path}.k", low=0, high=d - 1)
        j = kernel.as_int(kernel.get(t, "j"), f"{path}.j", low=1, high=ncols - 1)
        if (k, j) in seen:
            raise CertificateError(f"{path}: the pair ({k}, {j}) is listed twice")
        seen.add((k, j))
        out.append({"k": k, "j": j, "answer": kernel.get(t, "answer"), "path": f"{path}.answer"})
    return out


def read_entries(raw: Any, path: str, head: kernel.Header, count: int) -> list[Any]:
    """Claimed numbers: exact rationals in exact/certified mode, floats in float mode."""
    values = kernel.as_list(raw, path, count)
    if head.arith.name == "float":
        return kernel.numbers(values, path, head.arith, count)
    out = []
    for i, x in enumerate(values):
        if not (isinstance(x, dict) and set(x) == {"rational"}):
            raise CertificateError(f"{path}[{i}]: an exact result stores rationals")
        out.append(kernel.rational(x["rational"], f"{path}[{i}]"))
    return out


def claimed_heads(
    data: dict[str, Any], head: kernel.Header, affine: bool, H0: int
) -> tuple[list[tuple[list[Any], list[Any], list[Any]]], Any]:
    """Claimed heads as (W row-major, v, c) flat lists (c zero when stored as null)."""
    d = head.d
    raw = kernel.as_list(kernel.get(data, "result.heads"), "result.heads")
    if not 1 <= len(raw) <= H0:
        raise CertificateError(f"result.heads has {len(raw)} heads, expected 1..{H0}")
    zero = 0.0 if head.arith.name == "float" else Fraction(0)
    out = []
    for h, entry in enumerate(raw):
        path = f"result.heads[{h}]"
        W = [
            x
            for i, row in enumerate(kernel.as_matrix(kernel.get(entry, "W"), f"{path}.W", d, d))
            for x in read_entries(row, f"{path}.W[{i}]", head, d)
        ]
        v = read_entries(kernel.get(entry, "v"), f"{path}.v", head, d)
        c_raw = kernel.get(entry, "c")
        if c_raw is not None and not affine:
            raise CertificateError(f"{path}.c must be null for the bias-free model")
        c = [zero] * d if c_raw is None else read_entries(c_raw, f"{path}.c", head, d)
        out.append((W, v, c))
    beta_raw = kernel.get(data, "result.beta")
    if affine == (beta_raw is None):
        raise CertificateError("result.beta must be given exactly for the affine model")
    beta = None
    if beta_raw is not None:
        beta = read_entries([beta_raw], "result.beta", head, 1)[0]
    return out, beta


def heads_model(
    claimed: Sequence[tuple[list[Any], ...]], beta: Any, affine: bool
) -> MultiHeadAttention:
    d = len(claimed[0][1])
    try:
        heads = [
            (
                [W[i * d : (i + 1) * d] for i in range(d)],
                v,
                *([c] if affine else []),
            )
            for W, v, c in claimed
        ]
        return MultiHeadAttention(heads, beta=beta if affine else None)
    except VerifiedAttnError as exc:
        raise CertificateError(f"the claimed heads are not a model: {exc}") from exc


def predictor(head: kernel.Header, model: MultiHeadAttention) -> Any:
    arith = head.arith
    if arith.name == "float":
        return lambda X: float(model.evaluate_batch(np.asarray(X, dtype=np.float64)[None])[0])
    return lambda X: model.evaluate_rational(as_rational_sequence(X, head.d), arith)


def read_design(
    data: dict[str, Any], head: kernel.Header, ncols: int
) -> tuple[list[list[Any]], list[list[Any]]]:
    d = head.d
    if head.arith.name == "float":
        U = [
            kernel.numbers(r, f"design.U[{k}]", head.arith, d)
            for k, r in enumerate(_rows(data, "U", d))
        ]
        B = [
            kernel.numbers(r, f"design.B[{j}]", head.arith, d)
            for j, r in enumerate(_rows(data, "B", ncols))
        ]
        return U, B
    U = [
        [kernel.rational(q, f"design.U[{k}][{i}]") for i, q in enumerate(row)]
        for k, row in enumerate(kernel.as_matrix(kernel.get(data, "design.U"), "design.U", d, d))
    ]
    B = [
        [kernel.rational(q, f"design.B[{j}][{i}]") for i, q in enumerate(row)]
        for j, row in enumerate(
            kernel.as_matrix(kernel.get(data, "design.B"), "design.B", ncols, d)
        )
    ]
    return U, B


def _rows(data: dict[str, Any], name: str, n: int) -> list[Any]:
    return kernel.as_list(kernel.get(data, f"design.{name}"), f"design.{name}", n)


def design_pairs(U: list[list[Any]], ncols: int, half: bool = False) -> list[tuple[list[Any], int]]:
    """(u, index of b): the grid (u_k, b_j), then the links (u_1 + u_k, b_1), halved
    ``((u_1 + u_k) / 2, b_1)`` in the float design."""
    d = len(U)
    pairs = [(U[k], j) for k in range(d) for j in range(ncols)]
    pairs += [
        ([(a + b) / 2 if half else a + b for a, b in zip(U[0], U[k], strict=True)], 0)
        for k in range(1, d)
    ]
    return pairs


def read_samples(data: dict[str, Any], arith: Arithmetic, ncols: int, npairs: int, n: int) -> Any:
    """F(0) per probe and n samples per pair (2 H0 in exact/certified mode)."""
    F0 = kernel.numbers(kernel.get(data, "answers.F0"), "answers.F0", arith, ncols)
    F = [
        kernel.numbers(row, f"answers.F[{p}]", arith, n)
        for p, row in enumerate(kernel.as_list(kernel.get(data, "answers.F"), "answers.F", npairs))
    ]
    return F0, F


def to_fraction(q: flint.fmpq) -> Fraction:
    return Fraction(int(q.p), int(q.q))
