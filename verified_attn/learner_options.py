"""The keywords every learner shares, checked in one place.

Each learner takes its own arguments and then the same block: ``verify`` (fresh
sequences checked against the result; 0: not verified), ``seed``, ``lengths`` (the
lengths of those sequences), ``progress`` (a bar or callback, :mod:`verified_attn.progress`)
and, where answers are reconstructed as rationals, ``denominator_bound``. The learners
declare the block as ``**options: Unpack[CheckOptions]`` (or :class:`ExactOptions`) and
read it with :func:`learner_options`, which applies the defaults, checks each value and
refuses a keyword the learner does not take, as Python would.

>>> opts = learner_options("learn_x", {"verify": 4, "lengths": [1, 2]})
>>> opts.verify, opts.seed, opts.lengths, opts.denominator_bound, opts.progress
(4, 0, (1, 2), None, False)
>>> learner_options("learn_x", {"seed": -1})
Traceback (most recent call last):
...
verified_attn.errors.InvalidArgument: seed must be an int >= 0, got -1
>>> learner_options("learn_x", {"denominator_bound": 8}, CheckOptions)
Traceback (most recent call last):
...
TypeError: learn_x() got an unexpected keyword argument 'denominator_bound'
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple, TypedDict

from verified_attn.progress import check_progress
from verified_attn.validation import (
    check_denominator_bound,
    check_lengths,
    check_seed,
    check_verify,
)
from verified_attn.verification import DEFAULT_LENGTHS, DEFAULT_VERIFY

__all__ = [
    "CheckOptions",
    "ExactOptions",
    "LearnerOptions",
    "learner_options",
    "refuse_unknown",
]


class CheckOptions(TypedDict, total=False):
    """The final check and the progress report: every learner takes these keywords."""

    verify: int
    seed: int
    lengths: Sequence[int]
    progress: Any


class ExactOptions(CheckOptions, total=False):
    """:class:`CheckOptions` and the denominator bound of rational reconstruction."""

    denominator_bound: int | None


class LearnerOptions(NamedTuple):
    """The shared keywords, checked, with their defaults filled in (a tuple, so that a
    learner can unpack it)."""

    verify: int
    seed: int
    lengths: tuple[int, ...]
    denominator_bound: int | None
    progress: Any


def refuse_unknown(learner: str, options: Mapping[str, Any], kind: type = ExactOptions) -> None:
    """TypeError, as Python's own, for a keyword in ``options`` that ``kind`` does not
    declare (a learner that passes its keywords on checks them under its own name)."""
    allowed = kind.__optional_keys__  # type: ignore[attr-defined]
    for key in options:
        if key not in allowed:
            raise TypeError(f"{learner}() got an unexpected keyword argument {key!r}")


def learner_options(
    learner: str,
    options: Mapping[str, Any],
    kind: type = ExactOptions,
    *,
    verify: int = DEFAULT_VERIFY,
) -> LearnerOptions:
    """``options`` (keywords of ``kind``) checked in the order verify, seed, lengths,
    denominator_bound, progress; ``verify`` is the learner's default count."""
    refuse_unknown(learner, options, kind)
    return LearnerOptions(
        verify=check_verify(options.get("verify", verify)),
        seed=check_seed(options.get("seed", 0)),
        lengths=check_lengths(options.get("lengths", DEFAULT_LENGTHS)),
        denominator_bound=check_denominator_bound(options.get("denominator_bound")),
        progress=check_progress(options.get("progress", False)),
    )
