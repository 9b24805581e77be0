"""Fresh queries and the one agreement rule every learner and certificate checker uses.

>>> import verified_attn as va
>>> from verified_attn.verification import fresh_sequences, verify_model
>>> [X.shape[0] for X in fresh_sequences(3, 8, seed=0)]  # the 7th: the 8th, permuted
[1, 2, 3, 4, 6, 8, 16, 16]
>>> model = va.SingleHeadAttention([[1, 0], [0, 2]], [1, -1])
>>> oracle = va.Oracle(model, "exact")
>>> with oracle.run() as run:
...     record = verify_model(oracle, model, count=8, seed=0)
>>> record.count, record.lengths, run.counts.verification
(8, (1, 2, 3, 4, 6, 8, 12, 16), 8)
>>> verify_model(oracle, va.SingleHeadAttention([[1, 0], [0, 3]], [1, -1]), count=8, seed=0)
Traceback (most recent call last):
...
verified_attn.errors.ModelClassMismatch: the oracle is not the recovered model: on the fresh sequence of length 2 ...

The rule (:func:`~verified_attn.agreement.agree`) is in :mod:`verified_attn.agreement`.

Fresh sequences have the lengths :data:`DEFAULT_LENGTHS` in turn (configurable; every
learner records which it used) and entries k/8 with 1 <= |k| <= 16; the first entry of the
last token is neither 0 nor 1, so none equals a learning query of the probe designs (whose
last token is 0 or a basis vector). Some are permuted copies of others
(:func:`permuted_pairs`: by default the 7th is the 8th, length 16, with its context tokens
reversed): every model class here is invariant under permuting the context tokens, so a
box whose answers depend on token positions (a sliding window, positional encodings) is
refused with :class:`~verified_attn.errors.ModelClassMismatch` naming both sequences
(:func:`check_positions`), at no extra query.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from verified_attn.agreement import (
    BIAS_ULPS,
    FLOOR,
    agree,
    agree_or_refuse,
    bias_allowance,
    float_floor,
    require_bias_resolution,
    tolerance,
)
from verified_attn.arithmetic import Arithmetic
from verified_attn.errors import InvalidArgument, ModelClassMismatch
from verified_attn.precision import bits
from verified_attn.validation import check_lengths, check_seed, check_verify

__all__ = [
    "BIAS_ULPS",
    "DEFAULT_LENGTHS",
    "DEFAULT_VERIFY",
    "FLOOR",
    "HIGH_PRECISION_FACTOR",
    "Verification",
    "agree",
    "ask_fresh",
    "bias_allowance",
    "check_positions",
    "check_record",
    "float_floor",
    "fresh_sequences",
    "permute_context",
    "permuted_pairs",
    "require_bias_resolution",
    "tolerance",
    "verify_candidate",
    "verify_if_asked",
    "verify_model",
]

#: Fresh verification sequences per learner call, by default.
DEFAULT_VERIFY = 8
#: Their lengths, in turn: short ones see the probes' regime, long ones what only long
#: sequences show (a sliding window, position dependence).
DEFAULT_LENGTHS: tuple[int, ...] = (1, 2, 3, 4, 6, 8, 12, 16)

# Entries k/8, 1 <= |k| <= 16: exact dyadic floats with enough distinct values that long
# sequences in small d see new inputs (four values made d = 1 checks nearly blind).
_ENTRIES = np.array([k / 8 for k in range(-16, 17) if k != 0])
# The last token's first entry is never 0 or 1, so no fresh sequence is a probe ([b + t u; b]
# ends in 0 or a basis vector).
_LAST = np.array([k / 8 for k in range(-16, 17) if k not in (0, 8)])

Predictor = Callable[[np.ndarray], Any]


def fresh_sequences(
    d: int, count: int, seed: int, lengths: Sequence[int] = DEFAULT_LENGTHS
) -> list[np.ndarray]:
    """``count`` seeded random sequences, the i-th of length ``lengths[i % len(lengths)]``.

    Entries are exact dyadic floats (so the same sequences are exact rationals).
    """
    count = check_verify(count)
    lengths = check_lengths(lengths)
    rng = np.random.default_rng(check_seed(seed))
    out = []
    for i in range(count):
        n = lengths[i % len(lengths)]
        X = rng.choice(_ENTRIES, size=(n, d))
        X[-1, 0] = rng.choice(_LAST)
        out.append(X)
    for copy, source in permuted_pairs(count, lengths):
        out[copy] = permute_context(out[source])
    return out


def permuted_pairs(count: int, lengths: Sequence[int]) -> list[tuple[int, int]]:
    """Which fresh sequences are permuted copies of which: ``(copy, source)`` index pairs.

    In every full run of ``len(lengths) >= 2`` sequences, the one in the second-to-last
    slot is replaced by the one in the last slot (the longest, by default) with its context
    tokens (all but the last) reversed; with a single length, every odd-indexed sequence is
    the previous one so permuted. Only sources of length >= 3 are used (a shorter context
    has no nontrivial permutation). A softmax head is invariant under such a permutation,
    so a pair whose answers disagree proves the answers depend on token positions (a
    sliding window, positional encodings), whatever the learned model. The count is
    unchanged: the copy takes the place of a fresh sequence.

    >>> permuted_pairs(8, DEFAULT_LENGTHS), permuted_pairs(4, (5,))
    ([(6, 7)], [(1, 0), (3, 2)])
    """
    L = len(lengths)
    pairs = []
    if L == 1:
        if lengths[0] >= 3:
            pairs = [(i, i - 1) for i in range(1, count, 2)]
        return pairs
    for start in range(0, count - L + 1, L):
        if lengths[L - 1] >= 3:
            pairs.append((start + L - 2, start + L - 1))
    return pairs


def permute_context(X: np.ndarray) -> np.ndarray:
    """X with its context tokens (all rows but the last) reversed (rotated if that is X)."""
    out = X.copy()
    out[:-1] = X[:-1][::-1]
    if np.array_equal(out, X):
        out[:-1] = np.roll(X[:-1], 1, axis=0)
    return out


@dataclass
class Verification:
    """What a result was verified on: which fresh sequences, under which rule.

    ``max_gap`` is the largest relative gap (float mode; None otherwise). ``sequences``
    and ``answers`` are the fresh queries and what the oracle said (kept for certificates).
    """

    count: int
    seed: int
    lengths: tuple[int, ...]
    precision: int | None
    arithmetic: str
    rtol: float | None
    max_gap: float | None
    sequences: list[np.ndarray] = field(default_factory=list, repr=False)
    answers: list[Any] = field(default_factory=list, repr=False)
    #: Float mode: the largest |answer - prediction| as a fraction of what the rule allows
    #: (<= 1 for a verified result; the bias rounding term can let max_gap exceed rtol).
    max_ratio: float | None = None
    #: The arithmetic the answers were given in (the oracle's, or at the raised precision).
    working: Arithmetic | None = field(default=None, repr=False, compare=False)
    #: Float mode: the terms of the rule as applied (:meth:`rule`): the output bias beta,
    #: the floor, the box's unit roundoff and the bias-rounding allowance; None otherwise.
    bias: float | None = None
    floor: float | None = None
    unit_roundoff: float | None = None
    allowance: float | None = None
    #: Float mode: the sequence closest to the limit, ``{"length", "gap", "size",
    #: "allowed"}`` (|answer - prediction|, max(|answer - beta|, floor), what the rule allows).
    tightest: dict[str, float] | None = None
    #: The distinct lengths sent, where the sequences are not kept (a loaded result).
    lengths_sent: tuple[int, ...] | None = None

    @property
    def lengths_used(self) -> tuple[int, ...]:
        """The distinct lengths actually sent (fewer than ``lengths`` if count is small)."""
        if not self.sequences and self.lengths_sent is not None:
            return tuple(self.lengths_sent)
        return tuple(sorted({int(X.shape[0]) for X in self.sequences}))

    def rule(self) -> str:
        """The agreement rule exactly as :func:`agree` applied it, with its figures.

        >>> Verification(1, 0, (1,), None, "exact", None, None).rule()
        '=='
        """
        if self.arithmetic != "float":
            return {"exact": "==", "certified": "balls overlap"}.get(self.arithmetic, "?")
        if self.rtol is None:  # a learner's own rule (its describe() states it)
            return "the learner's own rule"
        if self.floor is None or self.allowance is None:
            return f"relative gap <= rtol {self.rtol:g}"
        unit = _power_of_two(self.unit_roundoff or 2.0**-53)
        source = (
            f"{BIAS_ULPS} ulps of |beta| = {abs(self.bias or 0.0):.4g} at unit roundoff {unit}"
            if self.allowance
            else "no output bias"
        )
        return (
            "|answer - prediction| <= rtol * max(|answer - beta|, floor) + allowance, with "
            f"rtol {self.rtol:g}, floor {self.floor:.4g} ({FLOOR:g} x the median "
            f"|answer - beta|), allowance {self.allowance:.4g} ({source})"
        )

    def describe(self) -> str:
        """One line for summaries."""
        if self.count == 0:
            return "not verified (verify=0)"
        text = (
            f"{self.count} fresh sequences (seed {self.seed}, lengths "
            f"{', '.join(map(str, self.lengths_used))}), {self.rule()}"
        )
        if self.precision is not None:
            text += f", asked and predicted at {self.precision} bits"
        if self.max_gap is not None:
            text += f"; max relative gap {self.max_gap:.4g} ({bits(self.max_gap):.1f} bits)"
        t = self.tightest
        if t is not None and self.rtol is not None and self.allowance is not None:
            text += (
                f"; closest to the limit (length {int(t['length'])}): |answer - prediction| "
                f"{t['gap']:.4g} <= {self.rtol:g} * {t['size']:.4g} + {self.allowance:.4g} "
                f"= {t['allowed']:.4g}"
            )
        return text

    def to_dict(self) -> dict[str, Any]:
        """The JSON-ready record (answers excluded: certificates store them exactly)."""
        return {
            "count": self.count,
            "seed": self.seed,
            "lengths": list(self.lengths),
            "lengths_used": list(self.lengths_used),
            "precision": self.precision,
            "arithmetic": self.arithmetic,
            "rtol": self.rtol,
            "max_gap": self.max_gap,
            "max_ratio": self.max_ratio,
            "rule_text": self.rule(),
            "bias": self.bias,
            "floor": self.floor,
            "unit_roundoff": self.unit_roundoff,
            "allowance": self.allowance,
            "tightest": None if self.tightest is None else dict(self.tightest),
        }


def verify_model(
    oracle: Any,
    model: Any,
    *,
    count: int = DEFAULT_VERIFY,
    seed: int = 0,
    lengths: Sequence[int] = DEFAULT_LENGTHS,
    bias: Any = 0.0,
    precision: int | None = None,
    phase: str = "verify",
    what: str = "the recovered model",
) -> Verification:
    """Ask ``count`` fresh sequences in a verification phase and check every answer.

    ``model`` is one of our model objects (evaluated in the oracle's arithmetic) or a
    callable ``X -> prediction`` in that arithmetic (e.g. ball-valued parameters).
    ``bias`` is the result's output bias (float rule only). ``precision`` (certified
    oracles that :attr:`~verified_attn.oracle.Oracle.can_raise_precision`): ask and predict
    at that many bits, so that a candidate within the learning precision of the truth but
    not equal to it is told apart (only a truth within about 2^-precision of the candidate
    can then still agree). Raises
    :class:`~verified_attn.errors.ModelClassMismatch` naming the first fresh sequence that
    disagrees, with both values. Equivalent to :func:`ask_fresh` then :func:`check_record`.
    """
    record = ask_fresh(
        oracle, count=count, seed=seed, lengths=lengths, precision=precision, phase=phase
    )
    return check_record(record, model, bias=bias, what=what)


def verify_if_asked(
    oracle: Any, model: Any, *, count: int, seed: int, lengths: Sequence[int], what: str
) -> Verification | None:
    """:func:`verify_model` when ``count`` > 0; None (the result is not verified) at 0.

    >>> import verified_attn as va
    >>> verify_if_asked(va.Oracle(va.SingleHeadAttention([[1]], [1])), None, count=0,
    ...                 seed=0, lengths=(1,), what="the head") is None
    True
    """
    if not count:
        return None
    return verify_model(oracle, model, count=count, seed=seed, lengths=lengths, what=what)


def ask_fresh(
    oracle: Any,
    *,
    count: int = DEFAULT_VERIFY,
    seed: int = 0,
    lengths: Sequence[int] = DEFAULT_LENGTHS,
    precision: int | None = None,
    phase: str = "verify",
) -> Verification:
    """Ask the fresh sequences (a declared verification phase); check nothing yet."""
    lengths = check_lengths(lengths)
    sequences = fresh_sequences(oracle.d, count, seed, lengths)
    if precision is not None and not oracle.can_raise_precision:
        precision = None  # a black box answers at its own precision
    with oracle.phase(phase, verification=True):
        answers = oracle.query_many(sequences, precision=precision) if sequences else []
    arith = oracle.arithmetic
    if precision is not None:
        from verified_attn.arithmetic import get_arithmetic

        working = get_arithmetic("certified", precision)
    else:
        working = arith
    return Verification(
        working=working,
        count=len(sequences),
        seed=seed,
        lengths=lengths,
        precision=precision,
        arithmetic=arith.name,
        rtol=float(arith.rtol) if arith.name == "float" else None,
        max_gap=None,
        sequences=sequences,
        answers=list(answers),
    )


def check_record(
    record: Verification, model: Any, *, bias: Any = 0.0, what: str = "the recovered model"
) -> Verification:
    """Check a record's answers against ``model`` with the one rule; the record, completed.

    Predictions are computed in the record's arithmetic (at its raised precision, if any).
    """
    if record.working is None:
        raise InvalidArgument("check_record needs a record made by ask_fresh")
    arith = record.working
    predict = _predictor(model, arith)
    beta = float(bias) if arith.name == "float" else 0.0
    floor = float_floor(record.answers, beta) if arith.name == "float" else 0.0
    worst = ratio = 0.0
    tightest: dict[str, float] | None = None
    with arith.context():
        check_positions(record, arith, bias=beta, floor=floor)
        for X, observed in zip(record.sequences, record.answers, strict=True):
            expected = predict(X)
            gap = agree_or_refuse(
                arith,
                (X, observed, expected),
                bias=beta,
                floor=floor,
                reason=f"the oracle is not {what}: on the fresh sequence of length {X.shape[0]} "
                f"{X.tolist()} it answered {observed}, {what} gives {expected}",
            )
            worst = max(worst, gap)
            if arith.name == "float":
                allowed = tolerance(arith, observed, bias=beta, floor=floor)
                diff = abs(float(observed) - float(expected))
                if tightest is None or diff / allowed > ratio:
                    size = max(abs(float(observed) - beta), floor, 1e-300)
                    tightest = {"length": X.shape[0], "gap": diff, "size": size, "allowed": allowed}
                ratio = max(ratio, diff / allowed)
    if arith.name == "float" and record.sequences:
        record.max_gap = worst
        record.max_ratio = ratio
        record.bias, record.floor, record.tightest = beta, floor, tightest
        record.unit_roundoff = float(getattr(arith, "unit_roundoff", 2.0**-53))
        record.allowance = bias_allowance(arith, beta)
    return record


def _power_of_two(x: float) -> str:
    """``2^-24`` for a power of two, else the number."""
    m, e = np.frexp(x)
    return f"2^{int(e) - 1}" if m == 0.5 else f"{x:g}"


#: Certified verification of a reconstructed (rational) result asks and predicts at this
#: multiple of the learning precision, where the oracle allows it.
HIGH_PRECISION_FACTOR = 4


def verify_candidate(
    oracle: Any,
    model: Any,
    *,
    count: int,
    seed: int,
    lengths: Sequence[int],
    phase: str = "verify",
    what: str = "the recovered model",
) -> tuple[Verification | None, str | None]:
    """Verify a candidate whose exactness rests on reconstruction from balls.

    Returns ``(record, refutation)``. In certified mode, where the oracle
    :attr:`~verified_attn.oracle.Oracle.can_raise_precision`, the fresh sequences are asked
    and predicted at :data:`HIGH_PRECISION_FACTOR` times the oracle's precision: only a
    truth within about 2^-(k p) of the candidate can then still agree. If the candidate
    disagrees there but agrees at the learning precision, ``refutation`` is a sentence
    naming the sequence (the candidate is close to the truth but not equal to it: the
    caller falls back to balls or refuses); if it disagrees even at the learning precision,
    :class:`~verified_attn.errors.ModelClassMismatch` propagates. Elsewhere this is
    :func:`verify_model` and ``refutation`` is None. ``count=0``: ``(None, None)``.
    """
    if not count:
        return None, None
    arith = oracle.arithmetic
    if arith.name != "certified" or not oracle.can_raise_precision:
        return (
            verify_model(
                oracle, model, count=count, seed=seed, lengths=lengths, phase=phase, what=what
            ),
            None,
        )
    high = int(arith.precision) * HIGH_PRECISION_FACTOR
    record = ask_fresh(oracle, count=count, seed=seed, lengths=lengths, precision=high, phase=phase)
    try:
        return check_record(record, model, what=what), None
    except ModelClassMismatch as exc:
        low = Verification(
            count=record.count,
            seed=record.seed,
            lengths=record.lengths,
            precision=None,
            arithmetic=record.arithmetic,
            rtol=None,
            max_gap=None,
            sequences=record.sequences,
            answers=record.answers,
            working=arith,
        )
        check_record(low, model, what=what)  # visible at the learning precision: not the class
        length = np.shape(exc.query)[0] if exc.query is not None else "?"
        return record, (
            f"a fresh sequence of length {length} asked at {high} bits "
            f"({HIGH_PRECISION_FACTOR} x the learning precision {arith.precision}) refutes "
            f"{what}, which agrees at the learning precision: the truth is near it but not "
            "equal to it"
        )


def check_positions(
    record: Verification, arith: Arithmetic, *, bias: float = 0.0, floor: float = 0.0
) -> None:
    """Refuse a record whose permuted pairs (:func:`permuted_pairs`) got different answers.

    The same tokens at other positions must give the same answer (under the one rule,
    one answer of the pair standing for the other's prediction); otherwise
    :class:`~verified_attn.errors.ModelClassMismatch` names both sequences.
    """
    if len(record.sequences) != record.count:
        return
    for copy, source in permuted_pairs(record.count, record.lengths):
        X, Y = record.sequences[source], record.sequences[copy]
        a, b = record.answers[source], record.answers[copy]
        agree_or_refuse(
            arith,
            (Y, b, a),
            bias=bias,
            floor=floor,
            reason="not a softmax attention model: the answers depend on token positions; the "
            f"same tokens at other positions give different answers: the fresh sequence "
            f"{X.tolist()} (length {X.shape[0]}) gives {a}, the same tokens with the "
            f"context reversed {Y.tolist()} give {b}",
        )


def _predictor(model: Any, arith: Arithmetic) -> Predictor:
    if callable(model) and not hasattr(model, "evaluate_batch"):
        return model
    if arith.name == "float":
        return lambda X: float(model.evaluate_batch(np.asarray(X, dtype=np.float64)[None])[0])
    from verified_attn.models import as_rational_sequence

    return lambda X: model.evaluate_rational(as_rational_sequence(X, model.d), arith)
