"""The multi-head Transformer's four exact pairs as registered hypothesis counterexamples.

>>> cx = killed_head(d=2, seed=0)
>>> cx.theorem, cx.kind, cx.proof.rule, cx.check()
('transformer', 'killed-head', 'killed-head', True)

Each wraps a :class:`~verified_attn.transformer.multi_head_hypotheses.TransformerPair` in
a :class:`~verified_attn.counterexample.Counterexample` whose relation is "equal" on every
sequence: the structural rule named after the kind
(:mod:`verified_attn.certificates.pairs_heads`) re-checks from the stored parameters that
the two models differ only in the stated way, and the pair is also evaluated exactly at
the spot-check sequences in ``proof.checked`` (lengths 1 to 4).
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from verified_attn.counterexample import Counterexample, Proof, model_dict
from verified_attn.serialize import dump_rational
from verified_attn.transformer import multi_head_hypotheses as mhh

__all__ = ["always_on_neuron", "colliding_heads", "dead_neuron", "killed_head"]

_RULE = {
    "dead-neuron": "never-active-neuron",
    "always-on-neuron": "always-on-neuron",
    "killed-head": "killed-head",
    "colliding-heads": "colliding-heads",
}
_WHY = {
    "dead-neuron": "a neuron with zero input weights and a negative bias is never active: "
    "its output weight is free",
    "always-on-neuron": "a neuron with zero input weights and a positive bias a_k is always "
    "active: its constant w_k a_k merges into the output bias b",
    "killed-head": "a head whose values the FFN annihilates (V_h A = 0) adds nothing to any "
    "pre-activation: its W_h is free",
    "colliding-heads": "two heads with one W (and c) share one softmax: only the sum of "
    "their V is seen",
}


def _checked(d: int, seed: int) -> list[list[list[Fraction]]]:
    rng = np.random.default_rng([seed, d, 37])
    return [
        [[Fraction(int(x), 4) for x in rng.integers(-8, 9, d)] for _ in range(n)]
        for n in (1, 2, 3, 4)
    ]


def _counterexample(pair: mhh.TransformerPair, d: int, seed: int) -> Counterexample:
    checked = _checked(d, seed)
    proof = Proof(
        _RULE[pair.kind],
        f"{_WHY[pair.kind]} ({pair.reason}): the two multi-head Transformers are one map "
        "on every sequence",
        pair.equal_on(checked),
        {"checked": [[[dump_rational(x) for x in row] for row in X] for X in checked]},
    )
    return Counterexample(
        "transformer",
        pair.kind,
        d,
        seed,
        f"Without canonical form the multi-head Transformer is not identifiable: {_WHY[pair.kind]}; "
        "two models with different parameters are equal on every sequence.",
        pair.first,
        pair.second,
        "equal",
        None,
        proof,
        figures={
            "heads": f"{pair.first.H} and {pair.second.H}",
            "neurons": f"{pair.first.m} and {pair.second.m}",
        },
        payload={"first": model_dict(pair.first), "second": model_dict(pair.second)},
    )


def dead_neuron(*, d: int = 3, seed: int = 0) -> Counterexample:
    """A never-active third neuron with any output weight: the same map."""
    return _counterexample(mhh.dead_neuron(d=d, seed=seed), d, seed)


def always_on_neuron(*, d: int = 3, seed: int = 0) -> Counterexample:
    """An always-on third neuron against its constant in b: the same map."""
    return _counterexample(mhh.always_on_neuron(d=d, seed=seed), d, seed)


def killed_head(*, d: int = 3, seed: int = 0) -> Counterexample:
    """A head with V_h A = 0 and two different W_h: the same map."""
    return _counterexample(mhh.killed_head(d=d, seed=seed), d, seed)


def colliding_heads(*, d: int = 3, seed: int = 0) -> Counterexample:
    """Two heads with one W against one head with their summed V: the same map."""
    return _counterexample(mhh.colliding_heads(d=d, seed=seed), d, seed)
