"""Prop 7.1's four non-identifiabilities as :class:`~verified_attn.counterexample.Counterexample`.

>>> from verified_attn.multi_head.hypotheses import permutation
>>> cx = permutation(d=2, seed=0)
>>> cx.relation, cx.sequences is None, cx.check()
('equal', True, True)

The pairs are built by :func:`verified_attn.multi_head.counterexamples.counterexample`
(with its :class:`~verified_attn.multi_head.symbolic.EquivalenceProof`); their
certificates are the room's ``counterexample`` certificates (per distinct W the summed v
agree: the structural proof, re-run by the checker, plus exact evaluation at the recorded
sequences).
"""

from __future__ import annotations

from verified_attn.counterexample import Counterexample
from verified_attn.multi_head.counterexamples import counterexample as _pair

__all__ = ["cancelling_values", "dead_head", "permutation", "shared_score_split"]

#: The fewest heads each kind needs (the default).
MIN_HEADS = {"permutation": 2, "shared-score-split": 2, "dead-head": 1, "cancelling-values": 2}

_STATEMENTS = {
    "permutation": "Heads are identified only up to order: reordering them changes the "
    "parameters, not the map.",
    "shared-score-split": "Heads sharing one W can split their summed v arbitrarily.",
    "dead-head": "A head with v_h = 0 may have any W_h.",
    "cancelling-values": "Two equal-W heads with values v and -v vanish whatever W is.",
}


def _build(kind: str, d: int, seed: int, heads: int | None = None) -> Counterexample:
    H = MIN_HEADS[kind] if heads is None else heads
    pair = _pair("multi-head", d=d, heads=H, kind=kind, seed=seed)
    return Counterexample(
        "prop-7.1",
        kind,
        d,
        seed,
        _STATEMENTS[kind],
        pair.first,
        pair.second,
        "equal",
        None,
        pair.proof,
        figures={"heads": H, "concrete lengths checked": [n for n, _ in pair.proof.concrete]},
        payload={"pair": pair},
    )


def permutation(*, d: int = 3, seed: int = 0, heads: int | None = None) -> Counterexample:
    return _build("permutation", d, seed, heads)


def shared_score_split(*, d: int = 3, seed: int = 0, heads: int | None = None) -> Counterexample:
    return _build("shared-score-split", d, seed, heads)


def dead_head(*, d: int = 3, seed: int = 0, heads: int | None = None) -> Counterexample:
    return _build("dead-head", d, seed, heads)


def cancelling_values(*, d: int = 3, seed: int = 0, heads: int | None = None) -> Counterexample:
    return _build("cancelling-values", d, seed, heads)
