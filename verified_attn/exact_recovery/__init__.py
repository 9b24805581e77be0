"""Theorem 4.1: exact recovery of a single head from d^2 + d queries.

>>> from verified_attn.exact_recovery import query_bound
>>> query_bound(3)
12
"""

from __future__ import annotations

from verified_attn.exact_recovery.learner import (
    decode_single_head,
    learn_single_head,
    query_bound,
)

__all__ = ["decode_single_head", "learn_single_head", "query_bound"]
