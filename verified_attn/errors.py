"""One exception hierarchy for the whole package.

>>> from verified_attn.errors import InvalidArgument, VerifiedAttnError
>>> issubclass(InvalidArgument, ValueError) and issubclass(InvalidArgument, VerifiedAttnError)
True

Every error a user can see is a :class:`VerifiedAttnError`; catching that one class
catches everything this package raises on purpose.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "CertificateError",
    "InvalidArgument",
    "ModelClassMismatch",
    "NotIdentifiable",
    "OracleError",
    "PrecisionExhausted",
    "QueryBudgetExceeded",
    "VerifiedAttnError",
]


class VerifiedAttnError(Exception):
    """Root of every error raised on purpose by verified-attn."""


class InvalidArgument(VerifiedAttnError, ValueError):
    """A public argument has the wrong type, shape or value; the message names it."""


class QueryBudgetExceeded(VerifiedAttnError):
    """The oracle's query budget would be exceeded; raised *before* the query is made."""

    def __init__(self, message: str, *, budget: int, used: int, requested: int) -> None:
        super().__init__(message)
        self.budget = budget
        self.used = used
        self.requested = requested


class NotIdentifiable(VerifiedAttnError):
    """The parameters cannot be determined from queries (v = 0, rank too low, margin
    violated, ...); the message says which condition failed and why."""


class ModelClassMismatch(VerifiedAttnError):
    """The oracle's answers are inconsistent with the assumed model class.

    Carries the offending query and the two values that disagree, so the evidence can be
    inspected or replayed.
    """

    def __init__(
        self, message: str, *, query: Any = None, observed: Any = None, expected: Any = None
    ) -> None:
        super().__init__(message)
        self.query = query
        self.observed = observed
        self.expected = expected


class PrecisionExhausted(VerifiedAttnError):
    """Certified arithmetic at the current precision cannot decide a needed fact
    (a sign, a logit, a unique rational); rerun at a higher precision."""


class OracleError(VerifiedAttnError):
    """The black box raised, or returned something that is not one finite real number."""


class CertificateError(VerifiedAttnError):
    """A certificate is malformed, or re-checking it does not reproduce its claims."""
