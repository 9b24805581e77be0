"""The multi-head Transformer's four non-identifiabilities: exact pairs, equal (==) on
sequences of every length tried, and a perturbed variant of each that differs."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from verified_attn.ffn_heads import MultiHeadTransformer
from verified_attn.transformer import multi_head_hypotheses as mhh

BUILDERS = [mhh.dead_neuron, mhh.always_on_neuron, mhh.killed_head, mhh.colliding_heads]


def _sequences(d: int, seed: int) -> list[list[list[Fraction]]]:
    rng = np.random.default_rng(seed)
    return [
        [[Fraction(int(x), 4) for x in rng.integers(-8, 9, d)] for _ in range(n)]
        for n in (1, 2, 3, 5)
    ]


@pytest.mark.parametrize("build", BUILDERS)
@pytest.mark.parametrize(("d", "seed"), [(2, 0), (3, 1)])
def test_each_pair_is_two_parameter_sets_one_function(build, d: int, seed: int) -> None:  # type: ignore[no-untyped-def]
    pair = build(d=d, seed=seed)
    assert pair.first.parameter_count != pair.second.parameter_count or (
        pair.first.heads != pair.second.heads
    )
    assert pair.equal_on(_sequences(d, seed + 10))


def _differs(first: MultiHeadTransformer, second: MultiHeadTransformer) -> bool:
    return not mhh.TransformerPair("wrong", first, second, "").equal_on(_sequences(2, 3))


def test_without_its_reason_each_pair_differs() -> None:
    """The reason is what makes each pair equal: break it and the pair is told apart."""
    dead = mhh.dead_neuron(d=2, seed=0).second  # bias +1: the extra neuron switches on
    s = dead
    a = list(s.a)
    a[-1] = 1
    assert _differs(
        mhh.dead_neuron(d=2, seed=0).first, MultiHeadTransformer(s.heads, s.A, s.w_o, a=a, b=s.b)
    )
    pair = mhh.always_on_neuron(d=2, seed=0)  # the constant not moved into b
    s = pair.second
    assert _differs(pair.first, MultiHeadTransformer(s.heads, s.A, s.w_o, a=s.a, b=1))
    pair = mhh.killed_head(d=2, seed=0)  # a value the FFN does not annihilate: W_h shows
    f, s = pair.first, pair.second
    alive = [f.heads[0], (f.heads[1][0], f.heads[1][1] + f.heads[1][1].applyfunc(lambda x: 1))]
    alive2 = [s.heads[0], (s.heads[1][0], alive[1][1])]
    assert _differs(
        MultiHeadTransformer(alive, f.A, f.w_o, a=f.a, b=f.b),
        MultiHeadTransformer(alive2, s.A, s.w_o, a=s.a, b=s.b),
    )
    pair = mhh.colliding_heads(d=2, seed=0)  # two different W: both values show
    f = pair.first
    (W, V1), (_, V2) = f.heads
    apart = MultiHeadTransformer(
        [(W, V1), (W + W.applyfunc(lambda x: 1), V2)], f.A, f.w_o, a=f.a, b=f.b
    )
    assert _differs(apart, pair.second)
