"""Why the multi-head Transformer is learned in canonical form: four exact pairs of
different models computing the same function.

>>> pair = dead_neuron(d=2, seed=0)
>>> pair.first.m != pair.second.m, pair.equal_on([[[1, 2], [0, -1]]])
(True, True)

Each :class:`TransformerPair` holds two
:class:`~verified_attn.ffn_heads.MultiHeadTransformer` with different parameters and the
reason they are one function on every sequence:

- ``dead_neuron``: a neuron with no input weights and a negative bias is never active; its
  output weight is free.
- ``always_on_neuron``: a neuron with no input weights and a positive bias ``a_k`` is
  always active and adds the constant ``w_k a_k``: it merges into the output bias b.
- ``killed_head``: a head whose values the FFN's first layer annihilates (``V_h A = 0``)
  adds nothing to any pre-activation; its W_h is free.
- ``colliding_heads``: two heads with one W (and c) have one softmax on every sequence, so
  only the sum of their V is seen; the canonical form merges them.

Each is registered as the counterexample ``transformer/hypothesis/<kind>`` (with
``dead-neuron`` for the never-active neuron) by
:mod:`verified_attn.transformer.multi_head_counterexamples`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from verified_attn.ffn_heads import MultiHeadTransformer

__all__ = [
    "TransformerPair",
    "always_on_neuron",
    "colliding_heads",
    "dead_neuron",
    "killed_head",
    "random_multi_head_transformer",
]


@dataclass(frozen=True)
class TransformerPair:
    """Two models with different parameters, the same function; ``reason`` says why."""

    kind: str
    first: MultiHeadTransformer
    second: MultiHeadTransformer
    reason: str

    def equal_on(self, sequences: Sequence[Any]) -> bool:
        """Whether both give ``==`` exact answers on every sequence given."""
        return all(
            self.first.evaluate(X, "exact") == self.second.evaluate(X, "exact") for X in sequences
        )


def _matrix(rng: np.random.Generator, rows: int, cols: int) -> list[list[Fraction]]:
    return [[Fraction(int(x), 2) for x in r] for r in rng.integers(-3, 4, (rows, cols))]


def _base(d: int, seed: int) -> tuple[np.random.Generator, list[Any], list[Any], list[Any], Any]:
    """Two random heads (e = 2), A (2 x 2), w_o, a."""
    rng = np.random.default_rng(seed)
    heads = [(_matrix(rng, d, d), _matrix(rng, d, 2)) for _ in range(2)]
    A = _matrix(rng, 2, 2)
    return rng, heads, A, [1, -2], [Fraction(1, 2), Fraction(-1, 3)]


def dead_neuron(*, d: int = 2, seed: int = 0) -> TransformerPair:
    """A third neuron with zero input weights and bias -1: never active, any weight."""
    _, heads, A, w, a = _base(d, seed)
    first = MultiHeadTransformer(heads, A, w, a=a, b=1)
    wider = [[*row, 0] for row in A]
    second = MultiHeadTransformer(heads, wider, [*w, 7], a=[*a, -1], b=1)
    return TransformerPair("dead-neuron", first, second, "ReLU(0 - 1) = 0 on every input")


def always_on_neuron(*, d: int = 2, seed: int = 0) -> TransformerPair:
    """A third neuron with zero input weights and bias 2, weight 3: the constant 6 in b."""
    _, heads, A, w, a = _base(d, seed)
    wider = [[*row, 0] for row in A]
    first = MultiHeadTransformer(heads, wider, [*w, 3], a=[*a, 2], b=1)
    second = MultiHeadTransformer(heads, A, w, a=a, b=1 + 3 * 2)
    return TransformerPair("always-on-neuron", first, second, "3 ReLU(0 + 2) = 6, in b")


def killed_head(*, d: int = 2, seed: int = 0) -> TransformerPair:
    """A = u r^T has rank one; a head with V_h = x p^T, p^T u = 0, has V_h A = 0."""
    rng, heads, _, w, a = _base(d, seed)
    u, r = [1, 2], [Fraction(1, 2), Fraction(-1)]
    A = [[ui * rj for rj in r] for ui in u]
    x = [int(v) or 1 for v in rng.integers(-2, 3, d)]
    V_killed = [[2 * xi, -xi] for xi in x]  # rows x_i (2, -1): (2, -1) . u = 0
    kept = heads[0]
    first = MultiHeadTransformer([kept, (heads[1][0], V_killed)], A, w, a=a, b=1)
    other_W = [[q + 1 for q in row] for row in heads[1][0]]
    second = MultiHeadTransformer([kept, (other_W, V_killed)], A, w, a=a, b=1)
    return TransformerPair("killed-head", first, second, "V_h A = 0: W_h is never seen")


def colliding_heads(*, d: int = 2, seed: int = 0) -> TransformerPair:
    """Two heads with one W and values V_1, V_2 against one head with V_1 + V_2."""
    _, heads, A, w, a = _base(d, seed)
    W = heads[0][0]
    V1, V2 = heads[0][1], heads[1][1]
    first = MultiHeadTransformer([(W, V1), (W, V2)], A, w, a=a, b=1)
    total = [[p + q for p, q in zip(r1, r2, strict=True)] for r1, r2 in zip(V1, V2, strict=True)]
    second = MultiHeadTransformer([(W, total)], A, w, a=a, b=1)
    return TransformerPair("colliding-heads", first, second, "one softmax: only V_1 + V_2 shows")


def random_multi_head_transformer(
    d: int, H: int, m: int, seed: int, *, e: int | None = None
) -> MultiHeadTransformer:
    """A random bias-carrying multi-head Transformer with small rational entries (the
    benchmark's boxes): W_h entries k/2, V_h (d x e, e = d by default), A, w_o, a, b small
    integers.

    >>> T = random_multi_head_transformer(2, 3, 4, 0)
    >>> T.H, T.d, T.e, T.m, T.biased
    (3, 2, 2, 4, True)
    """
    e = d if e is None else e
    rng = np.random.default_rng([seed, d, H, m, 11])
    heads = [(_matrix(rng, d, d), rng.integers(-2, 3, (d, e)).tolist()) for _ in range(H)]
    return MultiHeadTransformer(
        heads,
        rng.integers(-2, 3, (e, m)).tolist(),
        [int(x) or 1 for x in rng.integers(-2, 3, m)],
        a=rng.integers(-2, 3, m).tolist(),
        b=int(rng.integers(-2, 3)),
    )
