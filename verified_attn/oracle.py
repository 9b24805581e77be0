"""The black box a learner queries, with exact bookkeeping on the object itself.

>>> import verified_attn as va
>>> oracle = va.Oracle(va.SingleHeadAttention([[1]], [2]), arithmetic="exact", budget=3)
>>> with oracle.phase("demo"):
...     oracle.query([[1]])
2
>>> oracle.queries, oracle.queries_by_phase, oracle.tokens_sent, oracle.max_length
(1, {'demo': 1}, 1, 1)
>>> oracle.query_many([[[1]], [[2]], [[3]]])
Traceback (most recent call last):
...
verified_attn.errors.QueryBudgetExceeded: query budget 3 would be exceeded: 1 used, 3 more requested

Counts live here and nowhere else (a module-global counter that silently stays 0 is the
classic failure of extraction code). Every answer is checked to be one finite real number;
anything else is an :class:`~verified_attn.errors.OracleError`.
"""

from __future__ import annotations

import contextlib
import json
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

from verified_attn.arithmetic import Arithmetic, FloatArithmetic, get_arithmetic
from verified_attn.errors import (
    CertificateError,
    InvalidArgument,
    OracleError,
    QueryBudgetExceeded,
)
from verified_attn.executor_batches import on_executor
from verified_attn.models import as_float_sequence, as_rational_sequence
from verified_attn.oracle_batches import Scratch
from verified_attn.oracle_batches import batched as _batched
from verified_attn.oracle_batches import check_answer as _check_answer
from verified_attn.oracle_batches import chunk_size as _chunk_size
from verified_attn.oracle_batches import dyadic_matrix as _dyadic_matrix
from verified_attn.oracle_batches import kept_copy as _kept_copy
from verified_attn.oracle_batches import sequence_length as _length
from verified_attn.oracle_records import QueryCounts, Run, TranscriptEntry
from verified_attn.oracle_records import Replay as _Replay
from verified_attn.serialize import dump_number, dump_rational, load_number, load_rational
from verified_attn.types import Answer, Queries, SequenceLike

__all__ = ["Oracle", "QueryCounts", "Run", "Scratch", "TranscriptEntry"]

_AUTO_RECORD_NUMBERS = 1 << 25  # record=None keeps at most this many query entries (<= 256 MB)


class Oracle:
    """Answers f(X) for sequences X, counting every query by phase.

    ``Oracle(model, arithmetic=..., precision=..., budget=...)`` wraps one of our models and
    answers in the chosen arithmetic; :meth:`from_callable` wraps any function of a float
    (N, d) array (float mode). ``budget`` caps the number of queries: a query that would
    exceed it raises :class:`QueryBudgetExceeded` *before* it is made.
    """

    def __init__(
        self,
        model: Any,
        arithmetic: str | Arithmetic = "certified",
        *,
        precision: int | None = None,
        budget: int | None = None,
        record: bool | None = None,
        model_class: str | None = None,
        executor: Any = None,
    ) -> None:
        if not hasattr(model, "evaluate_batch") or not hasattr(model, "d"):
            hint = "wrap other black boxes with Oracle.from_callable"
            if type(model).__module__.startswith(("torch", "transformers")):  # no torch import
                hint = (
                    "use verified_attn.adapters.torch.attention_oracle(module, readout) for "
                    "nn.MultiheadAttention or verified_attn.adapters.hf.attention_oracle(module, "
                    f"readout) for HuggingFace attention modules ({hint})"
                )
            raise InvalidArgument(
                f"model must be a verified_attn model (e.g. SingleHeadAttention) or follow "
                f"the BlackBoxModel protocol (d, evaluate_batch, evaluate_rational), got "
                f"{type(model).__name__}; {hint}"
            )
        if precision is not None and arithmetic != "certified":
            raise InvalidArgument(
                f"precision applies to arithmetic='certified' only; got arithmetic={arithmetic!r}"
            )
        self.model = model
        self.arithmetic = get_arithmetic(arithmetic, precision)
        self.d = int(model.d)
        self._fn: Callable[[np.ndarray], Any] | None = None
        self._batch_fn: Callable[[np.ndarray], Any] | None = None
        if model_class is None:
            model_class = _model_class_of(model)
        self.model_class = model_class
        self._model_batches = on_executor(model.evaluate_batch, executor, self.arithmetic.name)
        self._init_counts(budget, record)

    @classmethod
    def from_callable(
        cls,
        fn: Callable[[np.ndarray], Any],
        d: int,
        *,
        budget: int | None = None,
        batch_fn: Callable[[np.ndarray], Any] | None = None,
        record: bool | None = None,
        model_class: str | None = None,
        rtol: float = 1e-6,
        unit_roundoff: float = 2.0**-53,
        parameter_rtol: float | None = None,
        executor: Any = None,
    ) -> Oracle:
        """Wrap ``fn(X: ndarray (N, d)) -> float`` as a float-mode oracle.

        ``batch_fn(Xs: ndarray (B, N, d)) -> ndarray (B,)``, if given, answers many
        equal-length queries at once. ``model_class`` ("single-head" or
        "single-head-affine") tells learners which hypothesis class the box is in.
        ``rtol`` is the relative agreement learners' verification asks of its answers (raise
        it for a box that computes in lower precision, e.g. float32); ``unit_roundoff`` is
        that arithmetic's unit roundoff (2^-24 for float32), which bounds the rounding on
        a large output bias; ``parameter_rtol`` (default ``rtol``) is the loosest tolerance
        a learner may state for the parameters it decodes from such answers. ``executor``
        (a ``concurrent.futures`` pool or a Dask client) answers ``batch_fn``'s batches on
        its workers (:mod:`verified_attn.executor_batches`): same counts and transcript.

        >>> oracle = Oracle.from_callable(lambda X: float(X.sum()), d=2)
        >>> oracle.query([[1, 2]]), oracle.queries
        (3.0, 1)
        """
        if not callable(fn):
            raise InvalidArgument(f"fn must be callable, got {type(fn).__name__}")
        if batch_fn is not None and not callable(batch_fn):
            raise InvalidArgument(f"batch_fn must be callable, got {type(batch_fn).__name__}")
        self = cls.__new__(cls)
        self.model = None
        self.arithmetic = FloatArithmetic(rtol, unit_roundoff, parameter_rtol)
        self.d = _positive_int(d, "d")
        self._fn = fn
        if executor is not None and batch_fn is None:
            raise InvalidArgument("executor= needs batch_fn= (the batches it spreads)")
        self._batch_fn = None if batch_fn is None else on_executor(batch_fn, executor, "float")
        self.model_class = model_class
        self._init_counts(budget, record)
        return self

    def _init_counts(self, budget: int | None, record: bool | None) -> None:
        if budget is not None:
            budget = _positive_int(budget, "budget", allow_zero=True)
        if record is not None and not isinstance(record, bool):
            raise InvalidArgument(f"record must be True, False or None, got {record!r}")
        self.budget = budget
        # None: record until the transcript would hold _AUTO_RECORD_NUMBERS numbers, then
        # stop and say so in transcript_complete (a d = 512 run would otherwise keep 2 GB).
        self.record = record
        self.transcript_complete = True
        self._recorded_numbers = 0
        self._counts: Counter[str] = Counter()
        self._phase = "other"
        self._in_verification = False
        self._runs: list[Run] = []
        self.progress_hook: Any = None  # a learner call's verified_attn.progress.Reporter
        self.tokens_sent = 0
        self.max_length = 0
        # Recorded batches (phase, queries, answers), expanded into entries on request: a
        # TranscriptEntry per query costs more than a fast box's answer at large d.
        self._batches: list[tuple[str, Sequence[Any], list[Any]]] = []
        self._scratch = Scratch()  # the box's copies of batches not handed over (owned)

    # -- bookkeeping -----------------------------------------------------------------
    @property
    def queries(self) -> int:
        """Total number of queries answered (or attempted) so far."""
        return sum(self._counts.values())

    @property
    def queries_by_phase(self) -> dict[str, int]:
        """Queries per phase name, in the order phases were first used."""
        return dict(self._counts)

    def queries_since(self, before: dict[str, int]) -> dict[str, int]:
        """Queries per phase made since ``before``, an earlier :attr:`queries_by_phase`.

        >>> import verified_attn as va
        >>> o = va.Oracle(va.SingleHeadAttention([[1]], [1]), "exact")
        >>> before = o.queries_by_phase
        >>> with o.phase("demo"):
        ...     _ = o.query_many([[[1]], [[2]]])
        >>> o.queries_since(before)
        {'demo': 2}
        """
        return {k: n - before.get(k, 0) for k, n in self._counts.items() if n != before.get(k, 0)}

    @property
    def remaining(self) -> int | None:
        """Queries left in the budget (None if unlimited)."""
        return None if self.budget is None else self.budget - self.queries

    @property
    def transcript(self) -> list[TranscriptEntry]:
        """Every recorded query and answer, in order (empty if ``record=False``)."""
        return list(self._entries())

    def _entries(self) -> Iterator[TranscriptEntry]:
        for phase, queries, answers in self._batches:
            compact = isinstance(queries, np.ndarray) and queries.dtype == np.float32
            for X, a in zip(queries, answers, strict=True):
                yield TranscriptEntry(phase, X.astype(np.float64) if compact else X, a)

    @contextlib.contextmanager
    def phase(self, name: str, *, verification: bool = False) -> Iterator[None]:
        """Attribute the queries made inside the block to phase ``name``.

        ``verification=True`` declares the phase a verification phase for every open
        :meth:`run`: its queries are then counted as verification, not learning.
        """
        if not isinstance(name, str) or not name:
            raise InvalidArgument(f"phase name must be a non-empty string, got {name!r}")
        if verification:
            for run in self._runs:
                run._verification.add(name)
        old = self._phase, self._in_verification
        self._phase, self._in_verification = name, verification
        try:
            yield
        finally:
            self._phase, self._in_verification = old

    @property
    def phase_name(self) -> str:
        """The phase queries are attributed to now (wrappers that forward queries use it)."""
        return self._phase

    @property
    def in_verification(self) -> bool:
        """Whether the current phase was declared a verification phase.

        An oracle that forwards its queries to another (a restricted or antisymmetrised
        view) opens its forwarding phase with ``verification=outer.in_verification``, so
        the real oracle's runs count them the same way.
        """
        return self._in_verification

    @contextlib.contextmanager
    def run(self) -> Iterator[Run]:
        """One learner call's bookkeeping: its counts, split by declared phase kind.

        >>> import verified_attn as va
        >>> o = va.Oracle(va.SingleHeadAttention([[1]], [1]), "exact")
        >>> with o.run() as run:
        ...     with o.phase("v"):
        ...         _ = o.query([[1]])
        ...     with o.phase("check", verification=True):
        ...         _ = o.query_many([[[1], [2]], [[1]]])
        >>> c = run.counts
        >>> c.learning, c.verification, c.by_phase, c.tokens_sent, c.max_length
        (1, 2, {'v': 1, 'check': 2}, 4, 2)
        """
        run = Run(self)
        self._runs.append(run)
        try:
            yield run
        finally:
            self._runs.remove(run)

    def require_remaining(self, learning: int, verification: int, purpose: str) -> None:
        """Raise QueryBudgetExceeded now, before any query, unless the budget covers a run.

        Learners call this first so that a too-small budget leaves nothing half-done.

        >>> import verified_attn as va
        >>> o = va.Oracle(va.SingleHeadAttention([[1]], [1]), "exact", budget=3)
        >>> o.require_remaining(2, 2, "demo")
        Traceback (most recent call last):
        ...
        verified_attn.errors.QueryBudgetExceeded: demo needs 2 learning + 2 verification queries; the oracle has 3 left
        """
        needed = learning + verification
        if self.progress_hook is not None and not self._runs:  # a call's own, not a part's
            self.progress_hook.expect(needed)
        if self.remaining is not None and self.remaining < needed:
            raise QueryBudgetExceeded(
                f"{purpose} needs {learning} learning + {verification} verification queries; "
                f"the oracle has {self.remaining} left",
                budget=self.budget or 0,
                used=self.queries,
                requested=needed,
            )

    def _reserve(self, n: int) -> None:
        if self.budget is not None and self.queries + n > self.budget:
            raise QueryBudgetExceeded(
                f"query budget {self.budget} would be exceeded: {self.queries} used, "
                f"{n} more requested",
                budget=self.budget,
                used=self.queries,
                requested=n,
            )

    def _account(self, n_queries: int, lengths: Sequence[int]) -> None:
        self._counts[self._phase] += n_queries
        if self.progress_hook is not None:
            self.progress_hook.advance(n_queries, self._phase)
        self.tokens_sent += int(sum(lengths))
        if lengths:
            longest = int(max(lengths))
            self.max_length = max(self.max_length, longest)
            for run in self._runs:
                run.max_length = max(run.max_length, longest)

    # -- queries ---------------------------------------------------------------------
    def query(self, X: SequenceLike) -> Answer:
        """f(X) in this oracle's arithmetic; X is an (N, d) array of rationals."""
        return self.query_many([X])[0]

    @property
    def can_raise_precision(self) -> bool:
        """Whether :meth:`query_many` can answer at a higher precision than the oracle's
        (certified arithmetic over one of our models; not a callable or a replay)."""
        return (
            self.arithmetic.name == "certified"
            and self.model is not None
            and not isinstance(self.model, _Replay)
        )

    def query_many(
        self, Xs: Queries, *, precision: int | None = None, owned: bool = False
    ) -> list[Answer]:
        """Answers to several non-adaptive queries (one round; vectorised in float mode).

        ``precision`` (certified arithmetic, where :attr:`can_raise_precision`): answer
        these queries with balls computed at that many bits instead of the oracle's own.
        ``owned=True`` (a (B, N, d) float64 array in float mode): the caller hands the array
        over and will not read it again, so a black box's ``batch_fn`` is given it without
        the defensive copy, unless the transcript keeps it (then the box gets a copy, as
        always, so a box that writes into its input cannot alter the record).
        """
        if (
            isinstance(Xs, np.ndarray)
            and Xs.ndim == 3
            and Xs.dtype.kind in "fiu"
            and self.arithmetic.name == "float"
        ):
            return self._query_array(Xs, owned=owned)
        if isinstance(Xs, np.ndarray) and Xs.ndim != 3 and Xs.dtype != object:
            # A single (N, d) query passed here would otherwise be read as N queries.
            raise InvalidArgument(
                f"Xs must be a sequence of (N, d) queries (a (B, N, d) array); got an array of "
                f"shape {Xs.shape}; for a single query use query(X)"
            )
        if isinstance(Xs, Sequence | np.ndarray):
            seqs = list(Xs)
        else:
            raise InvalidArgument(
                f"Xs must be a sequence of (N, d) arrays, got {type(Xs).__name__}"
            )
        if not seqs:
            return []
        if precision is not None:
            precision = _positive_int(precision, "precision")
            if not self.can_raise_precision:
                raise InvalidArgument(
                    "precision= needs a certified oracle over one of our models; this one "
                    f"answers in {self.arithmetic.name} arithmetic from "
                    + ("a black box" if self.model is None else type(self.model).__name__)
                )
        converted = [self._convert(X) for X in seqs]  # validate all before spending budget
        self._reserve(len(converted))
        lengths = [_length(X) for X in converted]
        self._account(len(converted), lengths)
        # Wrappers override _answer(converted) and never raise precision.
        answers = (
            self._answer(converted) if precision is None else self._answer(converted, precision)
        )
        self._record(converted, answers, lengths)
        return answers

    def _will_record(self, size: int) -> bool:
        """Whether a batch of ``size`` numbers would be kept in the transcript."""
        if self.record is False:
            return False
        return not (self.record is None and self._recorded_numbers + size > _AUTO_RECORD_NUMBERS)

    def _record(self, converted: Sequence[Any], answers: list[Any], lengths: list[int]) -> None:
        size = sum(lengths) * self.d
        if not self._will_record(size):
            self.transcript_complete = False
            return
        self._recorded_numbers += size
        # A copy: callers own the answer list they get back and may overwrite entries.
        self._batches.append((self._phase, converted, list(answers)))

    def _query_array(self, Xs: np.ndarray, *, owned: bool = False) -> list[Any]:
        """Fast path: a (B, N, d) float array of queries, validated as a whole."""
        if Xs.shape[0] == 0:
            return []
        if Xs.shape[1] < 1 or Xs.shape[2] != self.d:
            raise InvalidArgument(
                f"each query must have shape (N >= 1, d = {self.d}); got a batch of shape "
                f"{Xs.shape}"
            )
        Xs = Xs.astype(np.float64, copy=False)
        # A finite sum proves every entry finite (an inf or NaN makes it inf or NaN), in one
        # pass with no boolean temporary; only an overflowing sum needs the entrywise check.
        if not np.isfinite(np.add.reduce(Xs, axis=None)) and not np.all(np.isfinite(Xs)):
            raise InvalidArgument("a query has a non-finite entry (NaN or inf)")
        self._reserve(Xs.shape[0])
        lengths = [Xs.shape[1]] * Xs.shape[0]
        self._account(Xs.shape[0], lengths)
        # The transcript keeps its own copy, made before the box sees the batch, so neither
        # the caller nor a box writing into its input can alter the record.
        kept = _kept_copy(Xs) if self._will_record(Xs.size) else Xs
        # The box may be handed the caller's array itself only if nobody reads it again.
        answers = self._answer_array(Xs, copy=not owned)
        self._record(kept, answers, lengths)  # type: ignore[arg-type]  # (B, N, d): B views
        return answers

    def _answer_array(self, Xs: np.ndarray, *, copy: bool = True) -> list[Any]:
        """Answers to a (B, N, d) float batch, evaluated in slices (no re-stacking)."""
        if self.model is not None:
            fn = self._model_batches
        elif self._batch_fn is not None:
            return self._answer_batch_fn(Xs, copy)
        else:
            return self._answer(list(Xs))
        out: list[Any] = []
        step = _chunk_size(Xs.shape[1:])
        for start in range(0, Xs.shape[0], step):
            out.extend(fn(Xs[start : start + step]))
        return out

    def _answer_batch_fn(self, Xs: np.ndarray, copy: bool) -> list[float]:
        """A black box's batch answers, checked as arrays (one pass), else one by one."""
        out: list[float] = []
        step = _chunk_size(Xs.shape[1:])
        for start in range(0, Xs.shape[0], step):
            chunk = Xs[start : start + step]
            raw = self._guarded_batch(chunk, copy=copy)
            if raw.dtype.kind in "fiu" and bool(np.isfinite(raw).all()):
                out.extend(raw.astype(np.float64).tolist())
            else:  # the per-answer check says what came back instead of a finite number
                out.extend(_check_answer(r, X) for r, X in zip(raw, chunk, strict=True))
        return out

    def _convert(self, X: Any) -> Any:
        if self.arithmetic.name == "float":
            return as_float_sequence(X, self.d)
        fast = _dyadic_matrix(X, self.d)
        return fast if fast is not None else as_rational_sequence(X, self.d)

    def _answer(self, converted: list[Any], precision: int | None = None) -> list[Any]:
        if self.model is not None:
            if self.arithmetic.name == "float":
                return _batched(converted, self._model_batches)
            evaluate = getattr(self.model, "evaluate_rational", None)
            if evaluate is None:  # the package's internal views implement the private name
                evaluate = self.model._evaluate_rational
            arith = self.arithmetic if precision is None else get_arithmetic("certified", precision)
            with arith.context():
                return [evaluate(X, arith) for X in converted]
        if self._batch_fn is not None:
            raw = _batched(converted, self._guarded_batch)
            return [_check_answer(r, X) for r, X in zip(raw, converted, strict=True)]
        return [_check_answer(self._guarded(X), X) for X in converted]

    def _guarded(self, X: np.ndarray) -> Any:
        assert self._fn is not None
        try:
            return self._fn(X.copy())
        except Exception as exc:  # the black box's failure, reported as ours
            raise OracleError(
                f"the black box raised {type(exc).__name__}: {exc} (on a query of length "
                f"{X.shape[0]})"
            ) from exc

    def _guarded_batch(self, Xs: np.ndarray, *, copy: bool = True) -> np.ndarray:
        assert self._batch_fn is not None
        if copy:  # the box may write into its copy; it is reused only if the box kept none
            given = self._scratch.take(Xs.shape)
            np.copyto(given, Xs)
        else:
            given = Xs
        try:
            out = np.asarray(self._batch_fn(given))
        except Exception as exc:
            raise OracleError(
                f"the black box's batch_fn raised {type(exc).__name__}: {exc}"
            ) from exc
        if out.shape != (Xs.shape[0],):
            raise OracleError(
                f"batch_fn must return shape ({Xs.shape[0]},) for {Xs.shape[0]} queries; "
                f"got shape {out.shape}"
            )
        return out

    # -- transcripts -----------------------------------------------------------------
    def save_transcript(self, path: str | Path) -> None:
        """Write the transcript as JSON (exact rationals; answers bit-exact)."""
        if not self.transcript_complete:
            raise InvalidArgument(
                "the transcript is incomplete (record=False, or record=None and it grew past "
                f"{_AUTO_RECORD_NUMBERS} numbers); create the oracle with record=True to save it"
            )
        data = {
            "format": "verified-attn-transcript/1",
            "d": self.d,
            "arithmetic": self.arithmetic.name,
            "precision": self.arithmetic.precision,
            "model_class": self.model_class,
            "entries": [
                {
                    "phase": e.phase,
                    "sequence": [[dump_rational(q) for q in row] for row in e.sequence],
                    "answer": dump_number(e.answer),
                }
                for e in self._entries()
            ],
        }
        Path(path).write_text(json.dumps(data))

    @classmethod
    def replay(cls, path: str | Path, *, budget: int | None = None) -> Oracle:
        """An oracle that answers from a saved transcript; unknown queries raise OracleError.

        A missing, truncated or malformed file raises
        :class:`~verified_attn.errors.InvalidArgument` naming the problem.
        """
        if not isinstance(path, str | Path):
            raise InvalidArgument(f"path must be a str or Path, got {type(path).__name__}")
        try:
            data = json.loads(Path(path).read_text())
        except OSError as exc:
            raise InvalidArgument(f"cannot read transcript {str(path)!r}: {exc.strerror}") from exc
        except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
            raise InvalidArgument(f"transcript {str(path)!r} is not valid JSON: {exc}") from exc
        try:
            if data.get("format") != "verified-attn-transcript/1":
                raise InvalidArgument(f"{str(path)!r} is not a verified-attn transcript")
            arith = get_arithmetic(data["arithmetic"], data.get("precision"))
            d = _positive_int(data["d"], "d")
            table: dict[tuple[tuple[Fraction, ...], ...], Any] = {}
            with arith.context():
                for e in data["entries"]:
                    key = tuple(tuple(load_rational(q) for q in row) for row in e["sequence"])
                    if any(len(row) != d for row in key) or not key:
                        raise InvalidArgument(f"a transcript entry is not an (N, {d}) sequence")
                    table[key] = load_number(e["answer"])
        except (KeyError, TypeError, AttributeError, CertificateError) as exc:
            raise InvalidArgument(
                f"transcript {str(path)!r} is malformed: {type(exc).__name__} {exc}"
            ) from exc
        self = cls.__new__(cls)
        self.model = _Replay(table, d)
        self.arithmetic = arith
        self.d = d
        self._fn = None
        self._batch_fn = None
        self._model_batches = self.model.evaluate_batch
        self.model_class = data.get("model_class")
        self._init_counts(budget, record=True)
        return self

    def __repr__(self) -> str:
        return (
            f"Oracle(d={self.d}, arithmetic={self.arithmetic.name!r}, queries={self.queries}"
            + (f", budget={self.budget}" if self.budget is not None else "")
            + ")"
        )



def _model_class_of(model: Any) -> str | None:
    name = type(model).__name__
    if name == "SingleHeadAttention":
        return "single-head-affine" if model.affine else "single-head"
    return getattr(model, "model_class", None)


def _positive_int(x: Any, name: str, *, allow_zero: bool = False) -> int:
    if isinstance(x, bool) or not isinstance(x, int | np.integer):
        raise InvalidArgument(f"{name} must be an int, got {type(x).__name__} {x!r}")
    if int(x) < (0 if allow_zero else 1):
        bound = ">= 0" if allow_zero else ">= 1"
        raise InvalidArgument(f"{name} must be {bound}, got {x}")
    return int(x)
