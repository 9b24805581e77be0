"""Progress reports for long learner calls and sweeps: a tqdm bar, or your own callback.

Every learner takes ``progress=`` (off by default):

- ``False`` or ``None``: nothing is reported;
- ``True``: a tqdm bar on standard error over the call's queries (learning and
  verification), showing the current phase (see :mod:`verified_attn.phases`); its total is
  the learner's worst case where it declares one (``oracle.require_remaining``), else the
  bar only counts; it is redrawn every second, so its clock runs while the learner
  computes between batches (a float multi-head fit can take most of a run);
- a tqdm-like object (anything with ``update(n)``): advanced by the queries counted, its
  postfix set to the phase (``set_postfix_str``) where it has one; it is not closed;
- a callable ``progress(phase, done, total)``: called after each counted batch with the
  phase name, the queries this call has counted so far and the total (None if unknown).

>>> import verified_attn as va
>>> seen = []
>>> oracle = va.Oracle(va.SingleHeadAttention([[1, 2], [0, -1]], [3, 0]))
>>> rec = va.learn_single_head(oracle, verify=2, progress=lambda *a: seen.append(a))
>>> seen
[('v', 2, 8), ('W', 4, 8), ('W', 6, 8), ('verify', 8, 8)]
>>> va.learn_single_head(oracle, progress="yes")
Traceback (most recent call last):
...
verified_attn.errors.InvalidArgument: progress must be True, False, None, a callable (phase, done, total) or a tqdm-like object with update(n); got str 'yes'

The reports watch the oracle's count and change nothing: the queries, their answers and
the result are the same with progress on or off. Queries are counted on the oracle a
learner is given; a learner that calls another on the same oracle reports through the
outer call's bar (one bar per call, never two). An exception raised by a callback stops
the learner, as one from the black box would. :func:`~verified_attn.sweep` takes the same
argument and reports cells instead of queries.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Iterator
from typing import Any

from verified_attn.errors import InvalidArgument

__all__ = ["TICK_SECONDS", "Reporter", "check_progress", "reporting"]

#: How often a bar opened by ``progress=True`` is redrawn while no step is counted.
TICK_SECONDS = 1.0


def check_progress(progress: Any, name: str = "progress") -> Any:
    """``progress`` as given if it is a valid ``progress=`` value (None becomes False).

    >>> check_progress(None), check_progress(True)
    (False, True)
    >>> check_progress(1)
    Traceback (most recent call last):
    ...
    verified_attn.errors.InvalidArgument: progress must be True, False, None, a callable (phase, done, total) or a tqdm-like object with update(n); got int 1
    """
    if progress is None or progress is False:
        return False
    if progress is True or callable(getattr(progress, "update", None)) or callable(progress):
        return progress
    raise InvalidArgument(
        f"{name} must be True, False, None, a callable (phase, done, total) or a tqdm-like "
        f"object with update(n); got {type(progress).__name__} {progress!r}"
    )


class Reporter:
    """Where one call's progress goes: :meth:`advance` after each counted step.

    ``progress`` is a checked, non-False ``progress=`` value; ``True`` opens a tqdm bar on
    standard error (``desc``, ``unit``; the postfix names the ``kind`` of step and its
    label, e.g. "phase F(t)"), closed by :meth:`close`.

    >>> calls = []
    >>> r = Reporter(lambda *a: calls.append(a), desc="demo", total=None)
    >>> r.expect(5); r.expect(9); r.advance(2, "v"); r.advance(3, "W")
    >>> calls
    [('v', 2, 5), ('W', 5, 5)]
    """

    def __init__(
        self, progress: Any, *, desc: str, total: int | None, unit: str = "query", kind: str = "phase"
    ) -> None:
        self.done = 0
        self._kind = kind
        self.total = total
        self._label: str | None = None
        self._fn: Any = None
        self._bar: Any = None
        self._owned = progress is True
        self._title = desc, unit
        if progress is True:
            if total is not None:  # else opened when the total is declared, or at a first step
                self._open()
        elif callable(getattr(progress, "update", None)):
            self._bar = progress
        else:
            self._fn = progress

    def _open(self) -> None:
        from tqdm import tqdm

        desc, unit = self._title
        self._bar = tqdm(
            total=self.total, desc=desc, unit=unit, file=sys.stderr, leave=False, dynamic_ncols=True
        )
        # Between batches a learner may compute for minutes (a float multi-head fit): the
        # bar is redrawn every second meanwhile, so its clock shows the call is alive.
        self._stop = threading.Event()
        self._ticker = threading.Thread(target=self._tick, name="verified-attn-progress")
        self._ticker.daemon = True
        self._ticker.start()

    def _tick(self) -> None:
        while not self._stop.wait(TICK_SECONDS):
            self._bar.refresh()

    def expect(self, total: int) -> None:
        """Take ``total`` as the number of steps, unless one is already known."""
        if self.total is not None:
            return
        self.total = int(total)
        if self._owned and self._bar is None:
            self._open()
        elif self._owned:
            self._bar.total = self.total
            self._bar.refresh()

    def advance(self, n: int, label: str) -> None:
        """``n`` more steps done, the last of them in ``label`` (a phase, a cell)."""
        self.done += n
        if self._fn is not None:
            self._fn(label, self.done, self.total)
            return
        if self._owned and self._bar is None:
            self._open()
        if label != self._label and callable(getattr(self._bar, "set_postfix_str", None)):
            self._bar.set_postfix_str(f"{self._kind} {label}", refresh=False)
        self._label = label
        self._bar.update(n)

    def close(self) -> None:
        """Close the bar this reporter opened (a caller's own object stays open)."""
        if self._owned and self._bar is not None:
            self._stop.set()
            self._ticker.join()
            self._bar.close()


@contextlib.contextmanager
def reporting(oracle: Any, progress: Any, desc: str, *, total: int | None = None) -> Iterator[None]:
    """Report the queries counted on ``oracle`` inside the block (see the module's text).

    ``desc`` names the call (the bar's title); ``total``, if known, is the number of
    queries expected (else the first ``oracle.require_remaining`` inside, made before any
    :meth:`~verified_attn.oracle.Oracle.run` is open, gives it). Inside
    another report on the same oracle, or with ``progress`` off, the block reports nothing
    of its own.
    """
    progress = check_progress(progress)
    if progress is False or oracle.progress_hook is not None:
        yield
        return
    reporter = Reporter(progress, desc=desc, total=total)
    oracle.progress_hook = reporter
    try:
        yield
    finally:
        oracle.progress_hook = None
        reporter.close()
