"""Prop 7.1 and beyond: the multi-head room.

>>> from verified_attn.multi_head import counterexample
>>> counterexample("multi-head", d=2, heads=2, kind="permutation").proof.holds
True

Counterexamples with proofs (:mod:`.counterexamples`, :mod:`.symbolic`), canonical forms
and an exact equivalence decision (:mod:`.canonical`), the Jacobian rank of the query map
(:mod:`.identifiability`), and two learners: heads in known orthogonal subspaces
(:mod:`.learner`) and canonical recovery without that assumption (:mod:`.canonical_learner`,
which dispatches to :mod:`.canonical_certified` for exact/certified oracles and
:mod:`.canonical_float` for float ones, after :mod:`.head_count_float` counts the heads
of a float box given only ``max_heads``). Both return a
:class:`~verified_attn.recovery.MultiHeadRecovery` whose ``certificate()`` is checked by
:mod:`verified_attn.certificates.multi_head`; a :class:`CounterexamplePair`'s by
:mod:`verified_attn.certificates.counterexample`.
"""

from __future__ import annotations

from verified_attn.multi_head.canonical import CanonicalForm, Verdict, canonical_form, equivalent
from verified_attn.multi_head.canonical_learner import (
    canonical_query_bound,
    canonical_query_limit,
    follow_up_query_bound,
    learn_multi_head,
)
from verified_attn.multi_head.counterexamples import (
    KINDS,
    CounterexamplePair,
    counterexample,
    counterexample_report,
    random_multi_head,
    to_json,
)
from verified_attn.multi_head.head_count_float import HeadCount, count_heads
from verified_attn.multi_head.identifiability import LocalDimension, local_dimension
from verified_attn.multi_head.learner import (
    learn_orthogonal_heads,
    orthogonal_heads_model,
    orthogonal_query_bound,
)
from verified_attn.multi_head.symbolic import EquivalenceProof, prove_same_map

__all__ = [
    "KINDS",
    "CanonicalForm",
    "CounterexamplePair",
    "EquivalenceProof",
    "HeadCount",
    "LocalDimension",
    "Verdict",
    "canonical_form",
    "canonical_query_bound",
    "canonical_query_limit",
    "count_heads",
    "counterexample",
    "counterexample_report",
    "equivalent",
    "follow_up_query_bound",
    "learn_multi_head",
    "learn_orthogonal_heads",
    "local_dimension",
    "orthogonal_heads_model",
    "orthogonal_query_bound",
    "prove_same_map",
    "random_multi_head",
    "to_json",
]
