"""How the multi-head learners word a refusal: a mismatch restated with what the learner
knows about its cause, and a decoding failure replaced by a diagnosis where one shows more.

>>> from verified_attn.errors import ModelClassMismatch
>>> exc = restated(ModelClassMismatch("off", query=[[1]], observed=2, expected=3), "off; why")
>>> str(exc), exc.query, exc.observed, exc.expected
('off; why', [[1]], 2, 3)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from verified_attn.errors import ModelClassMismatch, NotIdentifiable, PrecisionExhausted

__all__ = ["diagnosed", "restated"]

T = TypeVar("T")


def restated(exc: ModelClassMismatch, message: str) -> ModelClassMismatch:
    """``exc`` with ``message`` in place of its own, the same evidence (query, observed and
    expected values) kept; raise it ``from exc``."""
    return ModelClassMismatch(
        message, query=exc.query, observed=exc.observed, expected=exc.expected
    )


def diagnosed(step: Callable[[], T], diagnose: Callable[[], ModelClassMismatch | None]) -> T:
    """``step()``; if its decoding fails (PrecisionExhausted or NotIdentifiable), the refusal
    ``diagnose()`` finds instead (raised from the failure), else the failure itself.

    >>> def step() -> int:
    ...     raise NotIdentifiable("no fit")
    >>> diagnosed(step, lambda: ModelClassMismatch("more heads"))
    Traceback (most recent call last):
    ...
    verified_attn.errors.ModelClassMismatch: more heads
    >>> diagnosed(step, lambda: None)
    Traceback (most recent call last):
    ...
    verified_attn.errors.NotIdentifiable: no fit
    >>> diagnosed(lambda: 7, lambda: None)
    7
    """
    try:
        return step()
    except (PrecisionExhausted, NotIdentifiable) as exc:
        diagnosis = diagnose()
        if diagnosis is not None:
            raise diagnosis from exc
        raise
