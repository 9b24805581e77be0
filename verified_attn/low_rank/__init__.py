"""Theorem 5.1: low-rank heads from O(rd) queries — exact skeleton (ours) or nuclear norm.

>>> from verified_attn.low_rank import skeleton_query_bound, parameter_count
>>> skeleton_query_bound(64, 4), parameter_count(64, 4)
(561, 560)
"""

from __future__ import annotations

from verified_attn.low_rank.learner import learn_low_rank, parameter_count
from verified_attn.low_rank.skeleton import skeleton_query_bound

__all__ = ["learn_low_rank", "parameter_count", "skeleton_query_bound"]
