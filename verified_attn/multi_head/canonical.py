"""Canonical forms of multi-head models, and an exact decision of map equality.

>>> from verified_attn.models import MultiHeadAttention
>>> m = MultiHeadAttention([([[2]], [1]), ([[0]], [0]), ([[2]], [3])])
>>> canonical_form(m).H                      # the dead head goes, the equal-W heads merge
1
>>> canonical_form(m).heads[0][1]
Matrix([[4]])
>>> bool(equivalent(m, MultiHeadAttention([([[2]], [4])])))
True

Canonical form (docs/theory.md, Proposition 7.1): merge heads with equal ``W_h`` (exactly equal), sum their
``v_h``, drop heads whose summed v is 0, and order the heads by ``(W, v)`` read row-major
as exact rationals. Affine heads (score bias ``c_h``) merge only when ``W_h`` and ``c_h``
are both equal, and the output biases add up to one ``beta``. By Prop 7.1 equal canonical forms give equal maps (proved for the
pair by :func:`~verified_attn.multi_head.symbolic.prove_same_map`); by the follow-up
(arXiv 2608.03294) distinct canonical forms give distinct maps, and :func:`equivalent`
then exhibits a sequence where the outputs differ, decided exactly.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np
import sympy

from verified_attn.errors import InvalidArgument, VerifiedAttnError
from verified_attn.models import MultiHeadAttention
from verified_attn.multi_head.symbolic import (
    EquivalenceProof,
    exact_same_value,
    head_key,
    prove_same_map,
    random_rational_sequence,
)
from verified_attn.validation import check_seed

__all__ = ["CanonicalForm", "Verdict", "canonical_form", "equivalent"]

Key = tuple[Fraction, ...]


@dataclass(frozen=True)
class CanonicalForm:
    """The canonical heads as exact keys ``(W row-major, v)``, sorted; compare with ``==``.

    For an affine model (docs/theory.md, The models) ``biases`` holds each head's score bias ``c_h`` (in the
    order of ``keys``) and ``beta`` the total output bias; both are empty/zero otherwise,
    so an affine model with zero biases has the canonical form of the plain one.
    """

    d: int
    keys: tuple[tuple[Key, Key], ...]
    biases: tuple[Key, ...] = ()
    beta: Fraction = Fraction(0)

    @property
    def H(self) -> int:
        """Number of canonical heads (0 for a constant map)."""
        return len(self.keys)

    @property
    def affine(self) -> bool:
        """Whether some score bias or the output bias is nonzero."""
        return bool(self.biases) or self.beta != 0

    @property
    def heads(self) -> list[tuple[sympy.Matrix, ...]]:
        """The canonical heads as SymPy matrices: ``(W_h, v_h)``, or ``(W_h, v_h, c_h)`` if
        affine (the format of ``MultiHeadAttention.heads``)."""
        d = self.d

        def q(x: Fraction) -> sympy.Rational:
            return sympy.Rational(x.numerator, x.denominator)

        out: list[tuple[sympy.Matrix, ...]] = []
        for h, (w, v) in enumerate(self.keys):
            head: tuple[sympy.Matrix, ...] = (
                sympy.Matrix(d, d, [q(x) for x in w]),
                sympy.Matrix([q(x) for x in v]),
            )
            if self.affine:
                c = self.biases[h] if self.biases else (Fraction(0),) * d
                head = (*head, sympy.Matrix([q(x) for x in c]))
            out.append(head)
        return out

    def model(self) -> MultiHeadAttention | None:
        """The canonical model; None for the zero map (no heads, beta = 0)."""
        beta = self.beta if self.affine else None
        if not self.keys:
            if self.beta == 0:
                return None
            zero = [[0] * self.d for _ in range(self.d)]
            return MultiHeadAttention([(zero, [0] * self.d)], beta=beta)
        return MultiHeadAttention(self.heads, beta=beta)


def canonical_form(model: MultiHeadAttention) -> CanonicalForm:
    """Merge heads with equal ``(W, c)`` (summing v), drop zero sums, sort the heads.

    >>> m = MultiHeadAttention([([[1]], [1]), ([[1]], [-1])])
    >>> canonical_form(m).H, canonical_form(m).model() is None
    (0, True)
    >>> a = MultiHeadAttention([([[1]], [1], [2]), ([[1]], [3], [2]), ([[1]], [1])], beta=1)
    >>> f = canonical_form(a)
    >>> f.H, f.biases, f.beta, f.heads[1]
    (2, ((Fraction(0, 1),), (Fraction(2, 1),)), Fraction(1, 1), (Matrix([[1]]), Matrix([[4]]), Matrix([[2]])))
    """
    if not isinstance(model, MultiHeadAttention):
        raise InvalidArgument(f"model must be a MultiHeadAttention, got {type(model).__name__}")
    # Heads merge only when the whole score map agrees: W and c (a different c changes
    # the scores x_i^T c, so it is a different head).
    sums: dict[tuple[Key, Key], list[Fraction]] = {}
    for m in model.head_models:
        key = (head_key(m.W), head_key(m.c))
        acc = sums.setdefault(key, [Fraction(0)] * model.d)
        for j, x in enumerate(m.v):
            acc[j] += Fraction(int(x.p), int(x.q))
    live = sorted((w, c, tuple(v)) for (w, c), v in sums.items() if any(x != 0 for x in v))
    keys = tuple((w, v) for w, _, v in live)
    biases = tuple(c for _, c, _ in live)
    if all(x == 0 for c in biases for x in c):
        biases = ()
    beta = Fraction(int(model.beta.p), int(model.beta.q))
    return CanonicalForm(model.d, keys, biases, beta)


@dataclass(frozen=True)
class Verdict:
    """Whether two models define the same map; truthy iff they do.

    ``reason`` says why; ``proof`` is the structural proof when equivalent; ``witness``
    is a rational sequence with ``values`` (exact SymPy outputs of both models) that
    differ when not, the inequality decided exactly.
    """

    equivalent: bool
    reason: str
    witness: list[list[Fraction]] | None = None
    values: tuple[Any, Any] | None = None
    proof: EquivalenceProof | None = field(default=None, repr=False)

    def __bool__(self) -> bool:
        return self.equivalent


def _candidates(d: int, max_len: int, rng: np.random.Generator) -> list[list[list[Fraction]]]:
    out: list[list[list[Fraction]]] = []
    # Length 1 sees sum_h v_h; the rest are generic sequences of every length up to max_len.
    out.extend([[Fraction(int(i == j)) for j in range(d)]] for i in range(d))
    for n in range(2, max_len + 1):
        out.extend(random_rational_sequence(d, n, rng) for _ in range(4))
    return out


def equivalent(
    m1: MultiHeadAttention, m2: MultiHeadAttention, *, seed: int = 0, tries: int = 4
) -> Verdict:
    """Decide exactly whether ``m1`` and ``m2`` are the same map.

    >>> a = MultiHeadAttention([([[1]], [1])])
    >>> v = equivalent(a, MultiHeadAttention([([[2]], [1])]))
    >>> v.equivalent, v.witness is not None
    (False, True)
    """
    for name, m in (("m1", m1), ("m2", m2)):
        if not isinstance(m, MultiHeadAttention):
            raise InvalidArgument(f"{name} must be a MultiHeadAttention, got {type(m).__name__}")
    if m1.d != m2.d:
        raise InvalidArgument(f"the models have different d: m1.d = {m1.d}, m2.d = {m2.d}")
    if isinstance(tries, bool) or not isinstance(tries, int) or tries < 1:
        raise InvalidArgument(f"tries must be an int >= 1, got {tries!r}")
    seed = check_seed(seed)
    c1, c2 = canonical_form(m1), canonical_form(m2)
    if c1 == c2:
        proof = prove_same_map(m1, m2, seed=seed)
        if not proof.holds:  # would contradict Prop 7.1: report, never paper over
            raise VerifiedAttnError(f"equal canonical forms but the proof failed:\n{proof.text()}")
        return Verdict(
            True, f"equal canonical forms ({c1.H} canonical heads); proof holds", proof=proof
        )
    rng = np.random.default_rng(seed)
    max_len = 2 * max(c1.H, c2.H) + 1
    for _ in range(tries):
        for X in _candidates(m1.d, max_len, rng):
            if not exact_same_value(m1, m2, X):
                values = (m1.evaluate(X, "exact"), m2.evaluate(X, "exact"))
                return Verdict(
                    False,
                    f"canonical forms differ ({c1.H} vs {c2.H} canonical heads); the outputs "
                    f"differ on a sequence of length {len(X)} (decided exactly)",
                    witness=X,
                    values=values,
                )
    raise VerifiedAttnError(
        f"canonical forms differ but no witness was found in {tries} rounds of random "
        "sequences; rerun with more tries or another seed"
    )
