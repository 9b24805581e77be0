"""Checks several certificate kinds share, next to the kernel and built on it only.

>>> from fractions import Fraction
>>> from verified_attn.certificates.common_checks import rescales
>>> rescales(Fraction(1, 256), "design.scales[0][0]")
2
>>> rescales(Fraction(1, 2), "design.scales[0][0]")
Traceback (most recent call last):
...
verified_attn.errors.CertificateError: design.scales[0][0] = 1/2 is not 16^-n

What is here: the theorem a kind claims, ``result.exact`` against the arithmetic, the
16^-n re-ask scales and the phases a count may name, the claimed parameters read by shape,
their comparison with the parameters re-derived from the stored answers (exact ``==``,
certified containment and unique rational reconstruction, float agreement), the claimed
single head as a prediction function, and a stored exact or ball answer against an exact
value. Each kind's own module keeps only what is particular to its theorem.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from fractions import Fraction
from typing import Any

import flint
import numpy as np
import sympy

from verified_attn.arithmetic import Arithmetic, OutsideUnitInterval, arb_bounds
from verified_attn.certificates import CertificateCheck, kernel
from verified_attn.errors import CertificateError, VerifiedAttnError
from verified_attn.serialize import short_repr

__all__ = [
    "Claimed",
    "check_phases",
    "check_seed",
    "check_theorem",
    "claimed_parameters",
    "compare_parameters",
    "exact_header",
    "head_predictor",
    "logit",
    "matches_exact",
    "matrix",
    "passed",
    "rescales",
    "result_exact",
    "show",
    "stored_answers",
    "vector",
]

#: An exact point or vector.
Vec = tuple[Fraction, ...]
#: Largest answers x (neurons + 1) x d a network checker evaluates.
MAX_WORK = 1 << 26

#: Claimed parameters by name, each a flat list of (label, number), e.g. ("W[0][1]", 3).
Claimed = dict[str, list[tuple[str, Any]]]


def check_theorem(head: kernel.Header, theorem: str) -> None:
    """The header's theorem must be the one the kind's learner proves.

    >>> from verified_attn.certificates.kernel import Header
    >>> from verified_attn.arithmetic import get_arithmetic
    >>> check_theorem(Header("low-rank", "thm-4.1", 2, get_arithmetic("exact"), 0), "thm-5.1")
    Traceback (most recent call last):
    ...
    verified_attn.errors.CertificateError: theorem is 'thm-4.1', a low-rank certificate is 'thm-5.1'
    """
    if head.theorem != theorem:
        raise CertificateError(
            f"theorem is {head.theorem!r:.80}, a {head.kind} certificate is {theorem!r}"
        )


def exact_header(data: dict[str, Any], kind: str, theorem: str, learner: str) -> kernel.Header:
    """The header of a ``kind`` certificate whose ``learner`` is exact: exact or certified
    arithmetic, ``result.exact`` true, and the ``theorem`` that learner proves.

    >>> import verified_attn as va
    >>> data = va.learn_relu_ffn(va.Oracle(va.ReluFFN([[1]], [1]), "exact")).certificate()
    >>> exact_header(data, "relu-ffn", "ffn/relu", "FFN").theorem
    'ffn/relu'
    >>> exact_header(data, "relu-ffn", "ffn/relu-biased", "FFN")
    Traceback (most recent call last):
    ...
    verified_attn.errors.CertificateError: theorem is 'ffn/relu', expected 'ffn/relu-biased'
    """
    head = kernel.parse_header(data, kind)
    if head.arith.name == "float":
        raise CertificateError(f"arithmetic must be exact or certified for a {kind} certificate")
    if kernel.get(data, "result.exact") is not True:
        raise CertificateError(f"result.exact must be true (the {learner} learner is exact)")
    if head.theorem != theorem:
        raise CertificateError(f"theorem is {head.theorem!r}, expected {theorem!r}")
    return head


def result_exact(data: dict[str, Any], arith: Arithmetic) -> bool:
    """``result.exact``: true in exact arithmetic, false in float, either when certified.

    >>> from verified_attn.arithmetic import get_arithmetic
    >>> result_exact({"result": {"exact": True}}, get_arithmetic("exact"))
    True
    >>> result_exact({"result": {"exact": True}}, get_arithmetic("float"))
    Traceback (most recent call last):
    ...
    verified_attn.errors.CertificateError: result.exact is true in float arithmetic
    """
    exact = kernel.as_bool(kernel.get(data, "result.exact"), "result.exact")
    if arith.name == "exact" and not exact:
        raise CertificateError("result.exact is false in exact arithmetic")
    if arith.name == "float" and exact:
        raise CertificateError("result.exact is true in float arithmetic")
    return exact


def rescales(t: Fraction, path: str, *, most: int | None = None) -> int:
    """n with t = 16^-n: a learner starts every probe at t = 1 and re-asks at t / 16.

    ``most`` bounds n (a hostile scale cannot claim more re-asks than that).
    """
    cap = "" if most is None else f" (n <= {most})"
    if t <= 0 or t.numerator != 1 or t.denominator & (t.denominator - 1):
        raise CertificateError(f"{path} = {t} is not 16^-n{cap}")
    n = (t.denominator.bit_length() - 1) // 4
    if (most is not None and n > most) or Fraction(1, 16**n) != t:
        raise CertificateError(f"{path} = {t} is not 16^-n{cap}")
    return n


def check_seed(data: dict[str, Any], seed: int, rule: str, *, when_verified: bool = False) -> None:
    """``verification.seed`` must be ``seed``, the one the learner drew its fresh sequences
    with (``rule`` says why); ``when_verified``: only when answers are stored.

    >>> check_seed({"verification": {"seed": 3}}, 3, "the learner uses one seed for both")
    >>> check_seed({"verification": {"seed": 4}}, 3, "the learner uses one seed for both")
    Traceback (most recent call last):
    ...
    verified_attn.errors.CertificateError: seed is 3, but the verification's fresh sequences were drawn with seed 4: the learner uses one seed for both
    """
    if when_verified and not kernel.get(data, "verification.count"):
        return
    stored = kernel.get(data, "verification.seed")
    if stored != seed:
        raise CertificateError(
            f"seed is {seed}, but the verification's fresh sequences were drawn with seed "
            f"{short_repr(stored)[:40]}: {rule}"
        )


def passed(head: kernel.Header, lines: list[str]) -> CertificateCheck:
    """The certificate's check: its summary ``lines``, then the assumptions in force.

    >>> from verified_attn.arithmetic import get_arithmetic
    >>> head = kernel.Header("noisy", "thm-6.1", 1, get_arithmetic("exact"), 0, ["bounded noise"])
    >>> passed(head, ["counts add up"]).summary
    ['counts add up', 'assumption: bounded noise']
    """
    summary = [*lines, *(f"assumption: {a}" for a in head.assumptions)]
    return CertificateCheck(ok=True, kind=head.kind, theorem=head.theorem, summary=summary)


def check_phases(by_phase: Iterable[str], known: Iterable[str]) -> None:
    """Every phase counted in ``queries.by_phase`` is one the kind's learner asks in.

    >>> check_phases({"v": 2, "verify": 8}, {"v"})
    >>> check_phases({"v": 2, "guess": 1}, {"v"})
    Traceback (most recent call last):
    ...
    verified_attn.errors.CertificateError: queries.by_phase has unknown phases ['guess']
    """
    extra = set(by_phase) - {*known, "verify"}
    if extra:
        raise CertificateError(f"queries.by_phase has unknown phases {sorted(extra)}")


def claimed_parameters(
    data: dict[str, Any], arith: Arithmetic, shapes: dict[str, tuple[int, ...]], exact: bool
) -> Claimed:
    """``result.parameters`` by name and shape ((d, d) a matrix, (d,) a vector, () a scalar).

    Exact results (not float) store ``{"rational": "p/q"}`` entries, read as Fractions;
    others store numbers of the certificate's arithmetic (call inside ``arith.context()``).

    >>> from verified_attn.arithmetic import get_arithmetic
    >>> data = {"result": {"parameters": {"v": [{"rational": "1/2"}]}}}
    >>> claimed_parameters(data, get_arithmetic("exact"), {"v": (1,)}, True)
    {'v': [('v[0]', Fraction(1, 2))]}
    >>> claimed_parameters(data, get_arithmetic("exact"), {"W": (1, 1)}, True)
    Traceback (most recent call last):
    ...
    verified_attn.errors.CertificateError: result.parameters has unexpected entries ['v']
    """
    params = kernel.get(data, "result.parameters")
    if not isinstance(params, dict):
        raise CertificateError("result.parameters must be a JSON object")
    extra = set(params) - set(shapes)
    if extra:
        raise CertificateError(f"result.parameters has unexpected entries {sorted(extra)}")
    want = exact and arith.name != "float"
    out: Claimed = {}
    for name, shape in shapes.items():
        path = f"result.parameters.{name}"
        raw = kernel.get(data, path)
        if len(shape) == 2:
            labels = [
                (f"{name}[{i}][{j}]", x)
                for i, row in enumerate(kernel.as_matrix(raw, path, *shape))
                for j, x in enumerate(row)
            ]
        elif len(shape) == 1:
            labels = [
                (f"{name}[{i}]", x) for i, x in enumerate(kernel.as_list(raw, path, shape[0]))
            ]
        else:
            labels = [(name, raw)]
        entries = []
        for label, x in labels:
            if want and not (isinstance(x, dict) and set(x) == {"rational"}):
                raise CertificateError(f"result {label}: an exact result stores rationals")
            if want:
                entries.append((label, kernel.rational(x["rational"], f"result {label}")))
            else:
                entries.append((label, kernel.number(x, f"result {label}", arith)))
        out[name] = entries
    return out


def show(q: Fraction) -> str:
    """A rational as the certificates print it.

    >>> show(Fraction(3)), show(Fraction(-1, 2))
    ('3', '-1/2')
    """
    return str(q.numerator) if q.denominator == 1 else f"{q.numerator}/{q.denominator}"


def compare_parameters(
    arith: Arithmetic,
    exact: bool,
    claimed: Claimed,
    again: dict[str, list[Any]],
    *,
    rtol: float,
    prefix: str = "decoding",
    verb: str = "re-decoded",
    what: str = "parameters",
) -> str:
    """The claimed parameters against those ``again`` re-derived from the stored answers.

    Exact: ``==``. Certified, exact result: each claimed rational lies in its re-derived
    ball and is the only rational there of its denominator. Certified balls: each claimed
    ball contains the re-derived one. Float: agreement to ``rtol`` relative to the largest
    re-derived entry of the parameter (at least 1 for W and c, whose logit-derived rounding
    is absolute). ``prefix``, ``verb`` and ``what`` word the summary line.

    >>> from verified_attn.arithmetic import get_arithmetic
    >>> claimed = {"v": [("v[0]", Fraction(1, 2))]}
    >>> compare_parameters(get_arithmetic("exact"), True, claimed, {"v": [sympy.Rational(1, 2)]}, rtol=0)
    'decoding: the claimed parameters == those re-decoded exactly from the answers'
    >>> compare_parameters(get_arithmetic("exact"), True, claimed, {"v": [sympy.Rational(1, 3)]}, rtol=0)
    Traceback (most recent call last):
    ...
    verified_attn.errors.CertificateError: result v[0]: claimed 1/2, the stored answers give 1/3
    """
    if arith.name == "exact":
        for name, entries in claimed.items():
            for (label, q), y in zip(entries, again[name], strict=True):
                if sympy.Rational(q.numerator, q.denominator) != y:
                    raise CertificateError(
                        f"result {label}: claimed {show(q)}, the stored answers give {y}"
                    )
        return f"{prefix}: the claimed {what} == those {verb} exactly from the answers"
    if arith.name == "float":
        worst = _compare_floats(claimed, again, rtol)
        return (
            f"{prefix}: the claimed {what} agree with the {verb} ones to {worst:.2e} "
            f"relative (allowed {rtol:g})"
        )
    if exact:
        return f"{prefix}: " + _compare_rationals(claimed, again, verb)
    widest = Fraction(0)
    for name, entries in claimed.items():
        for (label, ball), y in zip(entries, again[name], strict=True):
            lo, hi = arb_bounds(ball)
            lo2, hi2 = arb_bounds(y)
            if not (lo <= lo2 and hi2 <= hi):
                raise CertificateError(
                    f"result {label}: the claimed ball {ball} does not contain the ball "
                    f"{y} {verb} from the stored answers"
                )
            widest = max(widest, (hi - lo) / 2)
    return (
        f"{prefix}: every claimed ball contains the ball {verb} from the stored answers "
        f"(largest claimed radius {float(widest):.3g})"
    )


def _compare_floats(claimed: Claimed, again: dict[str, list[Any]], rtol: float) -> float:
    worst = 0.0
    for name, entries in claimed.items():
        ys = [float(y) for y in again[name]]
        scale = max((abs(y) for y in ys), default=0.0)
        if name in ("W", "c"):
            scale = max(scale, 1.0)
        for (label, raw), y in zip(entries, ys, strict=True):
            x = float(raw)
            if not math.isfinite(y):
                raise CertificateError(f"result {label}: the stored answers give {y}")
            err = abs(x - y)
            if not err <= rtol * max(scale, abs(x)):
                raise CertificateError(
                    f"result {label}: claimed {x!r}, the stored answers give {y!r} "
                    f"(differ by {err:.3e}, more than {rtol:g} relative)"
                )
            if scale:
                worst = max(worst, err / max(scale, abs(x)))
    return worst


def _compare_rationals(claimed: Claimed, again: dict[str, list[Any]], verb: str) -> str:
    bound: int | None = None
    for name, entries in claimed.items():
        for (label, q), ball in zip(entries, again[name], strict=True):
            lo, hi = arb_bounds(ball)
            if not lo <= q <= hi:
                raise CertificateError(
                    f"result {label}: claimed {show(q)} lies outside the ball {ball} "
                    f"{verb} from the stored answers"
                )
            D = kernel.largest_unique_denominator(lo, hi)
            if D is not None and q.denominator > D:
                raise CertificateError(
                    f"result {label}: claimed {show(q)} is not the only rational of its "
                    f"denominator in the ball {ball} (unique only up to denominator {D})"
                )
            if D is not None:
                bound = D if bound is None else min(bound, D)
    where = "any denominators" if bound is None else f"denominators <= {bound}"
    return f"every claimed rational lies in its {verb} ball, the only rational there with {where}"


def logit(arith: Arithmetic, y: Any, path: str) -> Any:
    """log(y / (1 - y)) of a probe ratio that must lie (certainly) in (0, 1).

    >>> from verified_attn.arithmetic import get_arithmetic
    >>> logit(get_arithmetic("float"), 0.5, "answers.W[0][0]")
    0.0
    >>> logit(get_arithmetic("float"), 1.5, "answers.W[0][0]")
    Traceback (most recent call last):
    ...
    verified_attn.errors.CertificateError: answers.W[0][0]: the probe ratio 1.5 is not in (0, 1)
    """
    if arith.name == "float":
        if not 0 < y < 1:
            raise CertificateError(f"{path}: the probe ratio {y} is not in (0, 1)")
        return math.log(y) - math.log1p(-y)
    try:
        return arith.logit(y)
    except OutsideUnitInterval as exc:
        raise CertificateError(f"{path}: the probe ratio {y} is not certainly in (0, 1)") from exc


def head_predictor(
    head: kernel.Header, claimed: Claimed, exact: bool, *, affine: bool = False
) -> Callable[[np.ndarray], Any]:
    """f(X) of the claimed single head (W, v, and c, beta when ``affine``) in the
    certificate's arithmetic; balls that did not reconstruct are evaluated by the model's
    definition in ball arithmetic.

    >>> from verified_attn.arithmetic import get_arithmetic
    >>> claimed = {"W": [("W[0][0]", Fraction(0))], "v": [("v[0]", Fraction(2))]}
    >>> head = kernel.Header("single-head", "thm-4.1", 1, get_arithmetic("exact"), 0)
    >>> head_predictor(head, claimed, True)(np.array([[1.0]]))
    2
    """
    from verified_attn.models import SingleHeadAttention, as_rational_sequence, attention_output

    d, arith = head.d, head.arith
    values = {name: [x for _, x in entries] for name, entries in claimed.items()}
    W = [values["W"][i * d : (i + 1) * d] for i in range(d)]
    v = values["v"]
    c = values.get("c") if affine else None
    beta = values["beta"][0] if affine else None
    if arith.name == "certified" and not exact:

        def balls(X: np.ndarray) -> Any:
            rows = [[flint.arb(float(x)) for x in row] for row in X]
            b = beta if beta is not None else flint.arb(0)
            return attention_output(rows, W, v, c, b, exp=lambda s: s.exp())

        return balls
    try:
        model = SingleHeadAttention(W, v, c=c, beta=beta)
    except VerifiedAttnError as exc:
        raise CertificateError(f"the claimed parameters are not a model: {exc}") from exc

    def evaluate(X: np.ndarray) -> Any:
        if arith.name == "float":
            return float(model.evaluate_batch(np.asarray(X, dtype=np.float64)[None])[0])
        return model.evaluate_rational(as_rational_sequence(X, d), arith)

    return evaluate


def matches_exact(y: Any, want: Fraction, arith: Arithmetic, D: int) -> bool:
    """Whether a stored answer ``y`` is the exact value ``want``: equal in exact arithmetic;
    certified, a ball holding ``want`` whose denominator is at most ``D`` (the largest the
    ball pins down uniquely).

    >>> from verified_attn.arithmetic import get_arithmetic
    >>> matches_exact(sympy.Rational(1, 2), Fraction(1, 2), get_arithmetic("exact"), 1)
    True
    >>> matches_exact(sympy.Rational(1, 3), Fraction(1, 2), get_arithmetic("exact"), 1)
    False
    """
    if arith.name == "exact":
        return bool(y == sympy.Rational(want.numerator, want.denominator))
    lo, hi = arb_bounds(y)
    return lo <= want <= hi and want.denominator <= D


def vector(raw: Any, path: str, d: int) -> Vec:
    """d stored exact rationals.

    >>> vector(["1/2", "-3/1"], "x", 2)
    (Fraction(1, 2), Fraction(-3, 1))
    """
    return tuple(
        kernel.rational(q, f"{path}[{i}]") for i, q in enumerate(kernel.as_list(raw, path, d))
    )


def matrix(raw: Any, path: str, rows: int, cols: int) -> list[list[Fraction]]:
    """A rows x cols matrix of stored exact rationals.

    >>> matrix([["1/2", "0/1"]], "result.A", 1, 2)
    [[Fraction(1, 2), Fraction(0, 1)]]
    """
    return [
        [kernel.rational(q, f"{path}[{i}][{j}]") for j, q in enumerate(row)]
        for i, row in enumerate(kernel.as_matrix(raw, path, rows, cols))
    ]


def stored_answers(
    data: dict[str, Any],
    head: kernel.Header,
    values: Callable[[list[Vec]], list[Fraction]],
    width: int,
    D: int,
) -> int:
    """Every stored ``answers[i]`` (a point x and the answer y) reproduced by the learned
    network, whose exact values at the points ``values`` gives (``width`` neurons); the
    points distinct. A certified answer must hold the value, whose denominator is at most
    ``D``. Returns how many answers there are.

    >>> from verified_attn.arithmetic import get_arithmetic
    >>> head = kernel.Header("relu-ffn", "ffn", 1, get_arithmetic("exact"), 0)
    >>> data = {"answers": [{"x": ["1/1"], "y": {"rational": "2/1"}}]}
    >>> stored_answers(data, head, lambda xs: [2 * x[0] for x in xs], 1, 1)
    1
    >>> stored_answers(data, head, lambda xs: [3 * x[0] for x in xs], 1, 1)
    Traceback (most recent call last):
    ...
    verified_attn.errors.CertificateError: answers[0]: the stored answer 2 at x = ['1'] is not reproduced by the learned network (it gives 3)
    """
    arith, d = head.arith, head.d
    raw = kernel.as_list(kernel.get(data, "answers"), "answers")
    if len(raw) * (width + 1) * d > MAX_WORK:
        raise CertificateError("answers: more answers x neurons than a checker evaluates")
    seen: set[Vec] = set()
    points: list[Vec] = []
    for path, item in kernel.as_objects(raw, "answers"):
        x = vector(kernel.get(item, "x"), f"{path}.x", d)
        if x in seen:
            raise CertificateError(f"{path}.x repeats an earlier point")
        seen.add(x)
        points.append(x)
    wants = values(points)
    with arith.context():
        for i, (item, x, want) in enumerate(zip(raw, points, wants, strict=True)):
            path = f"answers[{i}]"
            y = kernel.number(kernel.get(item, "y"), f"{path}.y", arith)
            if not matches_exact(y, want, arith, D):
                raise CertificateError(
                    f"{path}: the stored answer {y} at x = {[str(q) for q in x]} is not "
                    f"reproduced by the learned network (it gives {want})"
                )
    return len(raw)
