"""What an oracle keeps of its queries: counts per run, transcript entries, replays.

>>> from fractions import Fraction
>>> entry = TranscriptEntry("W", np.array([[0.5, 1.0]]), 2.0)
>>> entry.sequence == ((Fraction(1, 2), Fraction(1)),)
True
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Any

import flint
import numpy as np

from verified_attn.arithmetic import Arithmetic
from verified_attn.errors import OracleError

if TYPE_CHECKING:
    from verified_attn.oracle import Oracle

__all__ = ["QueryCounts", "Replay", "Run", "TranscriptEntry", "transcript_key"]

@dataclass(frozen=True)
class TranscriptEntry:
    """One query as sent, its phase, and the answer received.

    ``raw`` is the query as the oracle evaluated it (float array or exact flint matrix);
    :attr:`sequence` gives it as exact rationals.
    """

    phase: str
    raw: Any
    answer: Any

    @property
    def sequence(self) -> tuple[tuple[Fraction, ...], ...]:
        return transcript_key(self.raw)


@dataclass(frozen=True)
class QueryCounts:
    """What one learner call asked of an oracle, split by what each phase was declared.

    ``learning + verification`` is every query made during the run; a phase counts as
    verification because it was opened with ``oracle.phase(name, verification=True)``.
    ``tokens_sent`` and ``max_length`` are those of this run only.
    """

    learning: int
    verification: int
    by_phase: dict[str, int]
    verification_phases: tuple[str, ...]
    tokens_sent: int
    max_length: int


class Run:
    """The bookkeeping of one learner call on an oracle (see :meth:`Oracle.run`)."""

    def __init__(self, oracle: Oracle) -> None:
        self.oracle = oracle
        self._before = oracle.queries_by_phase
        self._tokens_before = oracle.tokens_sent
        self._verification: set[str] = set()
        self.max_length = 0

    @property
    def counts(self) -> QueryCounts:
        """The counts so far (final once the ``with`` block has ended)."""
        by_phase = self.oracle.queries_since(self._before)
        verification = sum(n for k, n in by_phase.items() if k in self._verification)
        return QueryCounts(
            learning=sum(by_phase.values()) - verification,
            verification=verification,
            by_phase=by_phase,
            verification_phases=tuple(k for k in by_phase if k in self._verification),
            tokens_sent=self.oracle.tokens_sent - self._tokens_before,
            max_length=self.max_length,
        )


def transcript_key(X: Any) -> tuple[tuple[Fraction, ...], ...]:
    if isinstance(X, flint.fmpq_mat):
        return tuple(
            tuple(Fraction(int(X[i, j].p), int(X[i, j].q)) for j in range(X.ncols()))
            for i in range(X.nrows())
        )
    return tuple(tuple(Fraction(float(x)) for x in row) for row in np.asarray(X))



class Replay:
    """A transcript posing as a model: the same answers for the same exact queries."""

    def __init__(self, table: dict[Any, Any], d: int) -> None:
        self.table = table
        self.d = d

    def _lookup(self, X: Any) -> Any:
        try:
            return self.table[transcript_key(X)]
        except KeyError:
            raise OracleError("query not in the replayed transcript") from None

    def _evaluate_rational(self, X: flint.fmpq_mat, arith: Arithmetic) -> Any:
        return self._lookup(X)

    def evaluate_batch(self, Xs: np.ndarray) -> np.ndarray:
        return np.array([self._lookup(X) for X in Xs], dtype=np.float64)
