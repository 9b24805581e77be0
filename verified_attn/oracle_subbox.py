"""A box seen through another: an inner oracle's model whose queries go to an outer oracle.

A learner that reduces its box to a smaller one (a head through its subspace, a
Transformer's cell) answers the smaller box's queries by asking the outer oracle. The
outer oracle counts them under ``<label>/<inner phase>``, declared verification there
exactly when the inner phase is, so that the outer run's learning and verification counts
are the inner ones summed.

>>> import verified_attn as va
>>> class Doubled(SubBox):
...     model_class = "single-head"
...     def evaluate_rational(self, Xq, arith):
...         with self.forward():
...             return 2 * self.outer.query(Xq)
...     def evaluate_batch(self, Xs):
...         raise NotImplementedError
>>> outer = va.Oracle(va.SingleHeadAttention([[1]], [3]), "exact")
>>> inner = Doubled(outer, "twice").attach("exact")
>>> inner.query([[1]]), outer.queries_by_phase
(6, {'twice/other': 1})
"""

from __future__ import annotations

from typing import Any

from verified_attn.oracle import Oracle

__all__ = ["SubBox"]


class SubBox:
    """The model of an inner oracle whose answers come from ``outer`` (subclasses define
    ``model_class``, ``evaluate_rational`` and, for float, ``evaluate_batch``), with
    ``d`` the outer oracle's unless the subclass sets it."""

    model_class = "single-head"

    def __init__(self, outer: Oracle, label: str) -> None:
        self.outer = outer
        self.label = label
        self.d = outer.d
        self.inner: Oracle | None = None

    @property
    def inner_phase(self) -> str:
        """The inner oracle's phase name ("other" before it is attached)."""
        return "other" if self.inner is None else self.inner.phase_name

    def forward(self) -> Any:
        """The outer oracle's phase ``<label>/<inner phase>`` (a context manager)."""
        verification = self.inner is not None and self.inner.in_verification
        return self.outer.phase(f"{self.label}/{self.inner_phase}", verification=verification)

    def attach(self, arithmetic: Any) -> Oracle:
        """The inner oracle over this box (unrecorded: the outer oracle keeps the record)."""
        self.inner = Oracle(self, arithmetic, model_class=self.model_class, record=False)
        return self.inner
