"""What every learner of the room does around its algorithm: checks, answers, verification.

>>> import verified_attn as va
>>> from verified_attn.models import ReluFFN
>>> oracle = va.Oracle(ReluFFN([[1, -1]], [2, 1]), "exact")
>>> learner_arguments(oracle, "learn_relu_ffn", {"verify": 4, "lengths": (1, 2)}).lengths
(1, 2)
>>> learner_arguments(va.Oracle(ReluFFN([[1]], [1]), "float"), "learn_relu_ffn", {})
Traceback (most recent call last):
...
verified_attn.errors.InvalidArgument: learn_relu_ffn needs an oracle with arithmetic 'exact' or 'certified' (rational answers); got arithmetic='float'
>>> rational_answer(oracle.arithmetic, oracle.query([[3]]), (3,), 2**16)
Fraction(6, 1)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from fractions import Fraction
from typing import Any, TypeVar

import sympy

from verified_attn.arithmetic import Arithmetic, ball_rational
from verified_attn.errors import InvalidArgument, ModelClassMismatch, PrecisionExhausted
from verified_attn.learner_options import LearnerOptions, learner_options
from verified_attn.oracle import Oracle
from verified_attn.validation import check_oracle
from verified_attn.verification import Verification, verify_candidate

__all__ = [
    "first_success",
    "learner_arguments",
    "length_one_ffn",
    "rational_answer",
    "verify_learned",
    "verify_network",
]

T = TypeVar("T")


def learner_arguments(
    oracle: Oracle,
    learner: str,
    options: Mapping[str, Any],
    *,
    rational: bool = True,
) -> LearnerOptions:
    """The oracle and the shared keywords of ``learner`` checked (:func:`learner_options`);
    ``rational``: the learner needs rational answers (an oracle in exact or certified
    arithmetic)."""
    check_oracle(oracle)
    opts = learner_options(learner, options)
    name = oracle.arithmetic.name
    if rational and name not in ("exact", "certified"):
        raise InvalidArgument(
            f"{learner} needs an oracle with arithmetic 'exact' or 'certified' (rational "
            f"answers); got arithmetic={name!r}"
        )
    return opts


def length_one_ffn(learn: Callable[..., T], oracle: Oracle, opts: LearnerOptions) -> T:
    """The FFN g(x) = T([x]) learned by ``learn`` from length-1 queries with the caller's
    keywords, checked on length 1 only: the Transformer's own check covers every length."""
    return learn(
        oracle,
        verify=opts.verify,
        seed=opts.seed,
        lengths=(1,),
        denominator_bound=opts.denominator_bound,
    )


def first_success(
    attempts: int,
    attempt: Callable[[int], T],
    retry: tuple[type[Exception], ...],
    refusal: str,
) -> tuple[T, list[Exception]]:
    """``attempt(0)``, ``attempt(1)``, ... until one returns: its value and the exceptions
    (of the ``retry`` types) the ones before it raised. After ``attempts`` failures,
    :class:`ModelClassMismatch`: ``refusal`` with every failure's reason. The FFN learners'
    random planes and lines.

    >>> def attempt(i):
    ...     if i < 2:
    ...         raise ValueError(f"plane {i} failed")
    ...     return i
    >>> value, failed = first_success(3, attempt, (ValueError,), "no fit")
    >>> value, [str(e) for e in failed]
    (2, ['plane 0 failed', 'plane 1 failed'])
    >>> first_success(2, attempt, (ValueError,), "no fit after 2 planes")
    Traceback (most recent call last):
    ...
    verified_attn.errors.ModelClassMismatch: no fit after 2 planes (plane 0 failed; plane 1 failed)
    """
    failed: list[Exception] = []
    for i in range(attempts):
        try:
            return attempt(i), failed
        except retry as exc:
            failed.append(exc)
    raise ModelClassMismatch(f"{refusal} ({'; '.join(str(e) for e in failed)})")


def rational_answer(arith: Arithmetic, y: Any, point: Sequence[Fraction], D: int) -> Fraction:
    """The answer ``y`` at the length-1 query ``point`` as a Fraction: exact answers must be
    rational (else :class:`ModelClassMismatch`), certified ones are reconstructed as the
    unique rational with denominator <= D in the ball (else :class:`PrecisionExhausted`)."""
    shown = "[" + ", ".join(str(x) for x in point) + "]"
    if arith.name == "exact":
        y = sympy.sympify(y)
        if not y.is_Rational:
            raise ModelClassMismatch(
                f"not a ReLU network with rational parameters: g({shown}) = {y} is not rational",
                query=point,
                observed=y,
                expected="a rational number",
            )
        return Fraction(int(y.p), int(y.q))
    return ball_rational(
        y,
        D,
        lambda: PrecisionExhausted(
            f"at {arith.precision} bits the answer {y} at {shown} does not pin down a "
            f"rational with denominator <= {D}; raise the oracle's precision"
        ),
    )


def verify_learned(
    oracle: Oracle,
    model: Any,
    *,
    count: int,
    seed: int,
    lengths: Sequence[int],
    what: str,
    phase: str = "verify",
    retry: type[Exception] | None = None,
) -> Verification | None:
    """Fresh sequences against the learned ``model``
    (:func:`~verified_attn.verification.verify_candidate`). A model close to the truth but
    not equal to it (its rationals outside the denominator bound) is
    :class:`PrecisionExhausted`; a refuted one raises ``retry`` (the learner's signal to try
    again) when given, else :class:`ModelClassMismatch` propagates."""
    try:
        checked, refuted = verify_candidate(
            oracle, model, count=count, seed=seed, lengths=lengths, phase=phase, what=what
        )
    except ModelClassMismatch as exc:
        if retry is None:
            raise
        raise retry(str(exc)) from exc
    if refuted is not None:
        raise PrecisionExhausted(
            f"{refuted}: its answers are not rationals within the denominator bound; raise "
            "the oracle's precision or give a denominator_bound"
        )
    return checked


def verify_network(
    oracle: Oracle,
    net: Any,
    *,
    count: int,
    seed: int,
    lengths: Sequence[int],
    retry: type[Exception],
) -> Verification | None:
    """A learned canonical FFN ``net`` on fresh sequences (phase ``ffn-verify``), as
    :func:`verify_learned`: refuted, it raises ``retry`` (the learner tries another line
    or plane)."""
    return verify_learned(
        oracle,
        net.model(),
        count=count,
        seed=seed,
        lengths=lengths,
        phase="ffn-verify",
        what="the learned ReLU network",
        retry=retry,
    )
