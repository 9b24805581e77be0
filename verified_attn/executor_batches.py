"""A black box's batches evaluated on an executor: a ``concurrent.futures`` pool or Dask.

At real sizes the box is the cost: one forward pass of an E = 256 attention layer per
query. :class:`ExecutorBatches` splits a batch of equal-length queries into pieces, asks
the pieces on the executor's workers and puts the answers back in the batch's order, so
that an :class:`~verified_attn.oracle.Oracle` built with ``executor=`` counts, phases and
records exactly what the serial run does (counting happens in the oracle, once per query,
whatever the workers do).

* A Dask ``distributed.Client`` receives the box once per worker (``scatter`` with
  ``broadcast=True``); each piece then ships only its queries. A
  ``concurrent.futures`` process pool pickles the box with every piece (keep pieces
  large: see ``min_rows``); a thread pool shares it.
* A piece whose worker dies (a broken pool, a killed or lost Dask worker, a cancelled
  future) is asked again: on the executor while it still works, else in this process. An
  answer is never dropped and the oracle counts the query once. An exception raised by
  the box itself is the box's answer and propagates unchanged.

>>> from concurrent.futures import ThreadPoolExecutor
>>> import numpy as np
>>> with ThreadPoolExecutor(2) as pool:
...     batches = ExecutorBatches(lambda Xs: Xs.sum(axis=(1, 2)), pool, min_rows=2)
...     batches(np.arange(24.0).reshape(6, 2, 2)).tolist()
[6.0, 22.0, 38.0, 54.0, 70.0, 86.0]
"""

from __future__ import annotations

import concurrent.futures
import itertools
import pickle
from collections.abc import Callable
from typing import Any

import numpy as np

from verified_attn.errors import InvalidArgument

__all__ = [
    "ExecutorBatches",
    "check_executor",
    "is_dask_client",
    "on_executor",
    "worker_count",
]

#: Exceptions that mean "the worker is gone", by class name (Dask's need no import here).
LOST_WORKER = frozenset(
    {
        "BrokenExecutor",
        "BrokenProcessPool",
        "BrokenThreadPool",
        "CancelledError",
        "FutureCancelledError",
        "KilledWorker",
        "CommClosedError",
        "StreamClosedError",
    }
)


def is_dask_client(executor: Any) -> bool:
    """Whether ``executor`` is a Dask ``distributed.Client`` (duck-typed: no import).

    >>> is_dask_client(object())
    False
    """
    return type(executor).__module__.split(".")[0] == "distributed" and all(
        hasattr(executor, name) for name in ("scatter", "submit", "scheduler_info")
    )


def check_executor(executor: Any) -> Any:
    """``executor`` if it is a ``concurrent.futures.Executor`` or a Dask client, else
    :class:`~verified_attn.errors.InvalidArgument`.

    >>> check_executor("threads")
    Traceback (most recent call last):
    ...
    verified_attn.errors.InvalidArgument: executor must be a concurrent.futures.Executor (a thread or process pool) or a dask.distributed Client, got str
    """
    if isinstance(executor, concurrent.futures.Executor) or is_dask_client(executor):
        return executor
    raise InvalidArgument(
        "executor must be a concurrent.futures.Executor (a thread or process pool) or a "
        f"dask.distributed Client, got {type(executor).__name__}"
    )


def worker_count(executor: Any) -> int:
    """How many workers ``executor`` has now (1 when it does not say).

    >>> from concurrent.futures import ThreadPoolExecutor
    >>> with ThreadPoolExecutor(3) as pool:
    ...     worker_count(pool)
    3
    """
    if is_dask_client(executor):
        return max(1, len(executor.scheduler_info().get("workers", {})))
    return max(1, int(getattr(executor, "_max_workers", 1) or 1))


def _lost(exc: BaseException) -> bool:
    return any(cls.__name__ in LOST_WORKER for cls in type(exc).__mro__)


def _require_picklable(fn: Any) -> None:
    """A process pool pickles the box with every piece: refuse one that cannot be, up front
    (the pool would fail later, in its feeder thread)."""
    try:
        pickle.dumps(fn)
    except Exception as exc:
        raise InvalidArgument(
            f"the box cannot be sent to a process pool's workers (pickle: {exc}); use a "
            "thread pool, a Dask client (cloudpickle) or a box defined at module level"
        ) from exc


def _apply(fn: Callable[[np.ndarray], Any], piece: np.ndarray) -> np.ndarray:
    """What a worker runs: the box on one piece (module level, so pools can pickle it)."""
    return np.asarray(fn(piece))


class ExecutorBatches:
    """``fn(Xs) -> answers`` for a (B, N, d) batch, evaluated piecewise on ``executor``.

    ``min_rows`` is the smallest piece sent to a worker (smaller batches stay one piece);
    a batch is cut into at most two pieces per worker. ``retries`` is how often a piece
    whose worker was lost is sent to the executor again before it is asked here.
    ``lost_pieces`` counts the pieces asked again (for reports and tests).
    """

    def __init__(
        self,
        fn: Callable[[np.ndarray], Any],
        executor: Any,
        *,
        min_rows: int = 64,
        retries: int = 2,
    ) -> None:
        if not callable(fn):
            raise InvalidArgument(f"fn must be callable, got {type(fn).__name__}")
        if isinstance(min_rows, bool) or not isinstance(min_rows, int) or min_rows < 1:
            raise InvalidArgument(f"min_rows must be an int >= 1, got {min_rows!r}")
        if isinstance(retries, bool) or not isinstance(retries, int) or not 0 <= retries <= 10:
            raise InvalidArgument(f"retries must be an int in 0..10, got {retries!r}")
        self.fn = fn
        self.executor = check_executor(executor)
        self.min_rows = min_rows
        self.retries = retries
        self.lost_pieces = 0
        self._dask = is_dask_client(executor)
        self._shipped: Any = None
        if isinstance(executor, concurrent.futures.ProcessPoolExecutor):
            _require_picklable(fn)
        self._remote_fn()  # Dask: the box goes to every worker now, so a bad box fails here

    def __call__(self, Xs: np.ndarray) -> np.ndarray:
        Xs = np.asarray(Xs)
        n = Xs.shape[0]
        pieces = max(1, min(2 * worker_count(self.executor), n // self.min_rows))
        bounds = np.linspace(0, n, pieces + 1).astype(int)
        chunks = [Xs[a:b] for a, b in itertools.pairwise(bounds)]
        futures = [self._submit(chunk) for chunk in chunks]
        answers = [self._answer(f, chunk) for f, chunk in zip(futures, chunks, strict=True)]
        return np.concatenate(answers) if answers else np.asarray(self.fn(Xs))

    def _remote_fn(self) -> Any:
        """The box as the workers see it: scattered to every Dask worker once."""
        if not self._dask:
            return self.fn
        if self._shipped is None:
            try:
                self._shipped = self.executor.scatter(self.fn, broadcast=True, hash=False)
            except TypeError as exc:  # Dask's "Could not serialize object of type ..."
                raise InvalidArgument(
                    f"the box cannot be sent to the Dask workers ({exc}); every object it "
                    "holds must pickle (cloudpickle)"
                ) from exc
        return self._shipped

    def _submit(self, chunk: np.ndarray) -> Any:
        try:
            if self._dask:
                return self.executor.submit(_apply, self._remote_fn(), chunk, pure=False)
            return self.executor.submit(_apply, self.fn, chunk)
        except Exception as exc:
            if _lost(exc) or isinstance(exc, RuntimeError):  # shut down or broken: ask here
                return exc
            raise

    def _answer(self, future: Any, chunk: np.ndarray) -> np.ndarray:
        for attempt in range(self.retries + 1):
            if isinstance(future, BaseException):
                break
            try:
                return np.asarray(future.result())
            except BaseException as exc:
                if not _lost(exc):
                    raise
                self.lost_pieces += 1
                if attempt == self.retries:
                    break
                if self._dask:
                    self._shipped = None  # the copy may have died with its worker
                future = self._submit(chunk)
        if isinstance(future, BaseException):
            self.lost_pieces += 1
        return _apply(self.fn, chunk)


def on_executor(fn: Callable[[np.ndarray], Any], executor: Any, arithmetic: str) -> Any:
    """``fn`` answered on ``executor``'s workers, or ``fn`` itself when ``executor`` is None
    (what ``Oracle(..., executor=)`` uses; only float batches are spread).

    >>> f = len
    >>> on_executor(f, None, "exact") is f
    True
    """
    if executor is None:
        return fn
    if arithmetic != "float":
        raise InvalidArgument(
            f"executor= spreads float batches; arithmetic {arithmetic!r} answers each query "
            "in this process"
        )
    return ExecutorBatches(fn, executor)
