"""The canonical form of a one-hidden-layer ReLU network with biases (exact parameters).

>>> from verified_attn.models import ReluFFN
>>> net = canonical_biased_network(ReluFFN([[1, -1]], [2, 2], a=[0, 1]))
>>> net.width, net.parameter_count
(2, 6)

The function ``g(x) = w_o^T ReLU(A^T x + a) + b`` is continuous and piecewise affine; neuron
k switches on the hyperplane ``{x : A_k^T x + a_k = 0}``. Its *canonical form* is

    g(x) = beta + l^T x + sum_j gamma_j ReLU(n_j^T x + c_j)

over the distinct hyperplanes (n_j scaled by a positive number so that its first nonzero
entry is 1, then sorted; every gamma_j != 0). Neuron order, positive rescaling, neurons
that never switch (A_k = 0: a constant w_k ReLU(a_k), including the ones a bias keeps
always on), zero output weights, duplicates and antipodal pairs
(``c ReLU(z) - c ReLU(-z) = c z``) all collapse into it; two networks are the same
function on R^d iff their canonical forms are equal (:func:`canonical_biased_network`).
Its free numbers: d + 1 per neuron (n_j less its unit entry, c_j, gamma_j) plus d + 1
for the affine part: ``(m' + 1)(d + 1)``, the ``parameter_count`` of a result.

The learner: :mod:`verified_attn.transformer.relu_biased`.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import sympy

from verified_attn.errors import InvalidArgument
from verified_attn.models import OneLayerTransformer, ReluFFN
from verified_attn.transformer.relu_network import CanonicalNetwork

__all__ = ["BiasedReluNetwork", "canonical_biased_network"]

Num = Any  # Fraction (exact, certified) or float (float mode)
Vec = tuple[Num, ...]


@dataclass(frozen=True)
class BiasedReluNetwork(CanonicalNetwork):
    """``g(x) = constant + linear^T x + sum_j gamma_j ReLU(n_j^T x + c_j)``, canonical.

    ``neurons`` is a sorted tuple of ``((n_j, c_j), gamma_j)``: n_j's first nonzero entry
    is 1, the pairs are distinct, every gamma_j != 0. Equal objects are equal functions.

    >>> one = Fraction(1)
    >>> net = BiasedReluNetwork(one, (one,), ((((one,), -one), 2 * one),))
    >>> net.value((Fraction(3),)), net.value((Fraction(0),))    # 1 + 3 + 2*2, 1 + 0 + 0
    (Fraction(8, 1), Fraction(1, 1))
    """

    constant: Num
    linear: Vec
    neurons: tuple[tuple[tuple[Vec, Num], Num], ...]

    @property
    def parameter_count(self) -> int:
        """(width + 1)(d + 1): the free numbers of the canonical form."""
        return (self.width + 1) * (self.d + 1)

    def value(self, x: Vec) -> Num:
        out = self.constant + _dot(self.linear, x)
        for (n, c), gamma in self.neurons:
            z = _dot(n, x) + c
            if z > 0:
                out += gamma * z
        return out

    def model(self) -> ReluFFN:
        """The network as a biased :class:`ReluFFN` (l^T x as ReLU(l^T x) - ReLU(-l^T x))."""
        cols = [list(n) for (n, _), _ in self.neurons]
        bias = [c for (_, c), _ in self.neurons]
        out = [g for _, g in self.neurons]
        if any(x != 0 for x in self.linear):
            cols += [list(self.linear), [-x for x in self.linear]]
            bias += [0, 0]
            out += [1, -1]
        if not cols:  # g is constant: one dead neuron keeps the shapes valid
            cols, bias, out = [[0] * self.d], [0], [0]
        A = [[cols[k][i] for k in range(len(cols))] for i in range(self.d)]
        return ReluFFN(A, out, a=bias, b=self.constant)


def _dot(a: Vec, b: Vec) -> Num:
    return sum((x * y for x, y in zip(a, b, strict=True)), 0 * a[0] if a else 0)


def _leading(w: Vec, tol: float) -> int | None:
    """Index of w's first entry that is nonzero (float: above tol times the largest)."""
    top = max((abs(x) for x in w), default=0)
    for i, x in enumerate(w):
        if x != 0 and abs(x) > tol * top:
            return i
    return None


def _fractions(M: sympy.MatrixBase) -> list[list[Fraction]]:
    return [[Fraction(int(x.p), int(x.q)) for x in row] for row in M.tolist()]


def canonical_biased_network(model: ReluFFN | OneLayerTransformer) -> BiasedReluNetwork:
    """The canonical form of a model's length-1 function, from its parameters (exact).

    >>> g = ReluFFN([[2, -1, 0]], [1, 4, 7], a=[2, 3, 1])   # ReLU(2x+2) + 4 ReLU(3-x) + 7
    >>> net = canonical_biased_network(g)                     # = 7 + 12 - 4x + 2 ReLU(x+1) + 4 ReLU(x-3)
    >>> net.constant, net.linear, net.width
    (Fraction(19, 1), (Fraction(-4, 1),), 2)
    """
    if isinstance(model, OneLayerTransformer):
        model = model.ffn()
    if not isinstance(model, ReluFFN):
        raise InvalidArgument(
            f"model must be a ReluFFN or OneLayerTransformer, got {type(model).__name__}"
        )
    d = model.d
    A, w_o, a = _fractions(model.A), _fractions(model.w_o), _fractions(model.a)
    constant = Fraction(int(model.b.p), int(model.b.q))
    linear = [Fraction(0)] * d
    terms: dict[tuple[Vec, Fraction], Fraction] = {}
    for k in range(model.m):
        w, bias, weight = tuple(A[i][k] for i in range(d)), a[k][0], w_o[k][0]
        if weight == 0:
            continue
        if not any(w):  # never switches: a constant (0 if the bias keeps it off)
            constant += weight * max(bias, Fraction(0))
            continue
        sigma = next(x for x in w if x != 0)
        key = (tuple(x / sigma for x in w), bias / sigma)
        scale = weight * abs(sigma)
        terms[key] = terms.get(key, Fraction(0)) + scale
        if sigma < 0:  # ReLU(-z) = ReLU(z) - z
            linear = [x - scale * y for x, y in zip(linear, key[0], strict=True)]
            constant -= scale * key[1]
    neurons = tuple(sorted((key, g) for key, g in terms.items() if g != 0))
    return BiasedReluNetwork(constant, tuple(linear), neurons)
