"""The trusted core every certificate checker shares: bounded parsing and the common checks.

>>> from verified_attn.certificates.kernel import get, as_int
>>> as_int(get({"d": 3}, "d"), "d", low=1)
3
>>> get({"answers": {}}, "answers.v")
Traceback (most recent call last):
...
verified_attn.errors.CertificateError: missing field answers.v

Nothing here evaluates text from the file: numbers are parsed by
:func:`verified_attn.serialize.load_number` (rational strings, float hex, balls, a
whitelisted expression grammar), and every size a file can name (d, precision, lengths,
counts, digits) is bounded before any work is done, so a hostile file gets a
:class:`~verified_attn.errors.CertificateError` naming the field, fast.

The common sections of every certificate (written by
:mod:`verified_attn.certificates.writer`):

- header: ``format``, ``kind``, ``theorem``, ``d``, ``arithmetic``, ``precision``,
  ``rtol`` and ``unit_roundoff`` (float mode), ``seed``, ``assumptions``;
- ``queries``: ``learning``, ``verification``, ``by_phase``, ``verification_phases``,
  ``bound``;
- ``verification``: ``count``, ``seed``, ``lengths``, ``bias`` and the ``answers`` to the
  fresh sequences that count, seed and lengths determine
  (:func:`verified_attn.verification.fresh_sequences`), re-checked against the claimed
  model with the one agreement rule (:func:`verified_attn.agreement.agree`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import flint
import numpy as np
import sympy

from verified_attn.arithmetic import Arithmetic, get_arithmetic, workprec
from verified_attn.errors import CertificateError, VerifiedAttnError
from verified_attn.serialize import load_number, load_rational, short_repr

__all__ = [
    "FORMAT",
    "MAX_D",
    "MAX_PRECISION",
    "Header",
    "answer_calls",
    "as_bool",
    "as_int",
    "as_list",
    "as_matrix",
    "as_objects",
    "check_counts",
    "check_verification",
    "exact_ball",
    "get",
    "largest_unique_denominator",
    "loads",
    "number",
    "numbers",
    "parse_header",
    "rational",
]

FORMAT = "verified-attn-certificate/2"
#: Largest dimension a certificate may name (a d x d design is read in full).
MAX_D = 4096
#: Largest working precision (bits) a certified certificate may ask for.
MAX_PRECISION = 1 << 16
#: Largest count of stored answers of any one kind.
MAX_ENTRIES = 1 << 24

#: Number kinds each arithmetic produces.
NUMBER_KINDS = {"exact": ("rational", "sympy"), "certified": ("arb",), "float": ("float",)}


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise CertificateError(
                f"the key {_short(key)} appears twice in one JSON object; another parser "
                "could read the other value, so a certificate has each key once"
            )
        out[key] = value
    return out


def loads(text: str) -> Any:
    """JSON text parsed strictly: a key twice in one object is refused (NaN and Infinity
    literals are read, and refused by the field's own check, which names the field).

    >>> loads('{"a": 1}')
    {'a': 1}
    >>> loads('{"result": 1, "result": 2}')
    Traceback (most recent call last):
    ...
    verified_attn.errors.CertificateError: the key 'result' appears twice in one JSON object; ...
    """
    import json

    return json.loads(text, object_pairs_hook=_no_duplicates)


def get(obj: Any, path: str) -> Any:
    """The field at a dotted ``path`` ("answers.v"); CertificateError naming what is missing."""
    cur = obj
    done: list[str] = []
    for key in path.split("."):
        where = ".".join(done) or "the certificate"
        if not isinstance(cur, dict):
            raise CertificateError(f"{where} must be a JSON object, got {type(cur).__name__}")
        done.append(key)
        if key not in cur:
            raise CertificateError(f"missing field {'.'.join(done)}")
        cur = cur[key]
    return cur


def as_int(x: Any, path: str, *, low: int = 0, high: int | None = None) -> int:
    """An int in [low, high]."""
    if isinstance(x, bool) or not isinstance(x, int):
        raise CertificateError(f"{path} must be an int, got {type(x).__name__} {_short(x)}")
    if x < low or (high is not None and x > high):
        span = f">= {low}" if high is None else f"in {low}..{high}"
        raise CertificateError(f"{path} must be an int {span}, got {x}")
    return x


def as_bool(x: Any, path: str) -> bool:
    if not isinstance(x, bool):
        raise CertificateError(f"{path} must be true or false, got {_short(x)}")
    return x


def as_list(x: Any, path: str, length: int | None = None) -> list[Any]:
    if not isinstance(x, list):
        raise CertificateError(f"{path} must be a list, got {type(x).__name__}")
    if length is not None and len(x) != length:
        raise CertificateError(f"{path} has {len(x)} entries, expected {length}")
    if len(x) > MAX_ENTRIES:
        raise CertificateError(f"{path} has {len(x)} entries, more than {MAX_ENTRIES}")
    return x


def as_matrix(x: Any, path: str, rows: int, cols: int) -> list[list[Any]]:
    return [as_list(row, f"{path}[{i}]", cols) for i, row in enumerate(as_list(x, path, rows))]


def as_objects(items: list[Any], path: str) -> list[tuple[str, dict[str, Any]]]:
    """Each entry of a stored list, which must be a JSON object, with its path.

    >>> as_objects([{"x": 1}], "answers")
    [('answers[0]', {'x': 1})]
    >>> as_objects([3], "answers")
    Traceback (most recent call last):
    ...
    verified_attn.errors.CertificateError: answers[0] must be a JSON object
    """
    out = []
    for i, item in enumerate(items):
        where = f"{path}[{i}]"
        if not isinstance(item, dict):
            raise CertificateError(f"{where} must be a JSON object")
        out.append((where, item))
    return out


def rational(s: Any, path: str) -> Fraction:
    """A stored exact rational ("p/q")."""
    try:
        return load_rational(s)
    except CertificateError as exc:
        raise CertificateError(f"{path}: {exc}") from exc


#: Largest expression (counted in calls, ``Add(...)``, ``exp(...)``, ...) an exact answer
#: to one probe (a sequence of length 1 or 2) may be: the learner's have about 15.
PROBE_CALLS = 64


def answer_calls(length: int) -> int:
    """Largest expression an exact answer to a sequence of ``length`` tokens may be.

    >>> answer_calls(16)
    576

    The answer is a softmax average: about 4.5 calls per token for one head with entries
    +-1/2, +-1 (281 at length 64), up to ~13 per token with the fresh sequences' entries
    k/8 and for sums of heads or a Transformer's FFN over the pooled token (211 measured at
    length 16); 32 per token plus a margin keeps the checker's symbolic work linear in the
    length and bounded.
    """
    return 32 * length + PROBE_CALLS


def number(obj: Any, path: str, arith: Arithmetic, *, max_calls: int | None = None) -> Any:
    """One stored answer or parameter, of a kind ``arith`` produces, as its number.

    Exact rationals come back as SymPy Rationals in exact mode; balls must be finite with a
    non-negative radius; floats finite. Call inside ``arith.context()`` for balls.
    ``max_calls`` bounds the size of an exact closed-form answer (see :func:`answer_calls`).
    """
    kinds = NUMBER_KINDS[arith.name]
    if not isinstance(obj, dict) or len(obj) != 1:
        raise CertificateError(f"{path}: malformed number {_short(obj)}")
    (kind,) = obj
    text = obj[kind]
    if kind == "sympy" and max_calls is not None and isinstance(text, str):
        if text.count("(") > max_calls:
            raise CertificateError(
                f"{path}: an expression of {text.count('(')} calls, larger than any answer "
                f"to this query (at most {max_calls})"
            )
    if kind not in kinds:
        raise CertificateError(
            f"{path}: a {kind!r} number in a {arith.name} certificate (expected "
            + " or ".join(repr(k) for k in kinds)
            + ")"
        )
    try:
        x = load_number(obj)
    except CertificateError as exc:
        raise CertificateError(f"{path}: {exc}") from exc
    except Exception as exc:  # SymPy refusing a well-formed but meaningless tree
        raise CertificateError(f"{path}: malformed number: {exc}") from exc
    if isinstance(x, Fraction) and arith.name == "exact":
        return sympy.Rational(x.numerator, x.denominator)
    if isinstance(x, sympy.Basic) and (
        not isinstance(x, sympy.Expr)
        or x.free_symbols
        or x.has(sympy.Float, sympy.zoo, sympy.nan, sympy.oo, -sympy.oo)
    ):
        # An exact answer is a closed-form real number: no unknowns, no rounded floats.
        raise CertificateError(f"{path}: {_short(x)} is not an exact closed-form number")
    if isinstance(x, flint.arb) and not x.is_finite():
        raise CertificateError(f"{path}: ball {x} is not finite")
    if isinstance(x, float) and not math.isfinite(x):
        raise CertificateError(f"{path}: {x} is not finite")
    return x


def numbers(
    obj: Any,
    path: str,
    arith: Arithmetic,
    length: int | None = None,
    *,
    max_calls: int | None = None,
) -> list[Any]:
    """A stored list of numbers."""
    return [
        number(a, f"{path}[{i}]", arith, max_calls=max_calls)
        for i, a in enumerate(as_list(obj, path, length))
    ]


def exact_ball(x: Any, precision: int = 128) -> flint.arb:
    """A ball containing the closed-form number ``x`` (as :func:`number` admits them).

    Rigorous and fast whatever the expression's shape, where SymPy's symbolic equality can
    take seconds: checkers use it to refuse a wrong exact answer before any simplification.

    >>> import sympy
    >>> ball = exact_ball(sympy.exp(sympy.Rational(1, 2)) + 1)
    >>> ball.contains(flint.arb("2.6487212707 +/- 1e-10")), ball.rad() < 1e-37
    (False, True)
    >>> ball.overlaps(flint.arb("2.6487212707 +/- 1e-10"))
    True
    """
    with workprec(precision):
        return +_ball(sympy.sympify(x))


def _ball(x: Any) -> flint.arb:
    if x.is_Rational:
        return flint.arb(flint.fmpq(int(x.p), int(x.q)))
    if x is sympy.E:
        return flint.arb(1).exp()
    args = [_ball(a) for a in x.args]
    if x.is_Add:
        out = flint.arb(0)
        for a in args:
            out += a
        return out
    if x.is_Mul:
        out = flint.arb(1)
        for a in args:
            out *= a
        return out
    if isinstance(x, sympy.exp):
        return args[0].exp()
    if isinstance(x, sympy.log):
        return args[0].log()
    if x.is_Pow:
        base, exponent = args
        if x.exp.is_Integer:
            return base ** int(x.exp)
        return (exponent * base.log()).exp()
    raise CertificateError(f"cannot evaluate {_short(x)}")


@dataclass
class Header:
    """The parsed common header of a certificate."""

    kind: str
    theorem: str
    d: int
    arith: Arithmetic
    seed: int
    assumptions: list[str] = field(default_factory=list)

    def describe(self) -> str:
        prec = f" at {self.arith.precision} bits" if self.arith.precision else ""
        rtol = f", rtol {self.arith.rtol:g}" if self.arith.name == "float" else ""
        return (
            f"{self.theorem} {self.kind}, d = {self.d}, arithmetic {self.arith.name}{prec}"
            f"{rtol}, seed {self.seed}"
        )


def parse_header(data: Any, kind: str, *, max_d: int = MAX_D) -> Header:
    """Check ``format``, ``kind`` and the common header fields; return them parsed."""
    if not isinstance(data, dict):
        raise CertificateError(f"a certificate is a JSON object, got {type(data).__name__}")
    fmt = get(data, "format")
    if fmt != FORMAT:
        raise CertificateError(f"unknown certificate format {_short(fmt)}; expected {FORMAT!r}")
    if get(data, "kind") != kind:
        raise CertificateError(f"kind is {_short(data['kind'])}, this checker reads {kind!r}")
    theorem = get(data, "theorem")
    if not isinstance(theorem, str) or len(theorem) > 64:
        raise CertificateError(f"theorem must be a short string, got {_short(theorem)}")
    d = as_int(get(data, "d"), "d", low=1, high=max_d)
    name = get(data, "arithmetic")
    if not isinstance(name, str) or name not in NUMBER_KINDS:
        raise CertificateError(f"arithmetic must be exact, certified or float, got {_short(name)}")
    precision = get(data, "precision")
    rtol = data.get("rtol")
    if name == "certified":
        precision = as_int(precision, "precision", low=32, high=MAX_PRECISION)
    elif precision is not None:
        raise CertificateError(
            f"precision must be null in {name} arithmetic, got {_short(precision)}"
        )
    if name == "float":
        if isinstance(rtol, bool) or not isinstance(rtol, int | float) or not 0 < rtol < 1:
            raise CertificateError(
                f"rtol must be a number in (0, 1) in float mode, got {_short(rtol)}"
            )
    elif rtol is not None:
        raise CertificateError(f"rtol must be null in {name} arithmetic, got {_short(rtol)}")
    unit = data.get("unit_roundoff")
    if name == "float":
        if isinstance(unit, bool) or not isinstance(unit, int | float) or not 0 < unit <= rtol:
            raise CertificateError(
                f"unit_roundoff must be a number in (0, rtol] in float mode, got {_short(unit)}"
            )
    elif unit is not None:
        raise CertificateError(
            f"unit_roundoff must be null in {name} arithmetic, got {_short(unit)}"
        )
    try:
        arith = get_arithmetic(name, precision)
        if name == "float":
            arith = type(arith)(float(rtol), float(unit))
    except VerifiedAttnError as exc:
        raise CertificateError(f"arithmetic: {exc}") from exc
    seed = as_int(get(data, "seed"), "seed", low=0)
    assumptions = as_list(get(data, "assumptions"), "assumptions")
    if not all(isinstance(a, str) and len(a) < 4096 for a in assumptions):
        raise CertificateError("assumptions must be a list of strings")
    # Informational, but typed: a file whose every field is checked has no hiding place.
    versions = data.get("versions", {})
    if not isinstance(versions, dict) or not all(
        isinstance(v, str) and len(v) < 256 for v in versions.values()
    ):
        raise CertificateError(
            f"versions must map names to version strings, got {_short(versions)}"
        )
    return Header(kind, theorem, d, arith, seed, list(assumptions))


def check_counts(
    data: dict[str, Any],
    *,
    learning: int | None = None,
    bound: int | None = None,
    phases: dict[str, int] | None = None,
    verification_phases: tuple[str, ...] = ("verify",),
) -> dict[str, Any]:
    """Check the ``queries`` section adds up; with the given figures, that it has them.

    ``learning``/``bound``: the exact learning count and bound the stored design implies;
    ``phases``: exact per-phase counts implied. Returns the parsed section.
    """
    # Full paths from the root, so that a missing or malformed field is named in full.
    got_learning = as_int(get(data, "queries.learning"), "queries.learning")
    got_verification = as_int(get(data, "queries.verification"), "queries.verification")
    got_bound = as_int(get(data, "queries.bound"), "queries.bound")
    by_phase = get(data, "queries.by_phase")
    if not isinstance(by_phase, dict):
        raise CertificateError("queries.by_phase must be a JSON object")
    for phase, n in by_phase.items():
        as_int(n, f"queries.by_phase.{phase}", low=1)
    declared = as_list(get(data, "queries.verification_phases"), "queries.verification_phases")
    if not all(isinstance(p, str) and p in by_phase for p in declared):
        raise CertificateError(
            "queries.verification_phases must name phases of queries.by_phase, got "
            f"{_short(declared)}"
        )
    if sorted(declared) != sorted(p for p in verification_phases if p in by_phase):
        raise CertificateError(
            f"queries.verification_phases is {declared}, expected the phases "
            f"{[p for p in verification_phases if p in by_phase]}"
        )
    in_verification = sum(by_phase[p] for p in declared)
    if got_verification != in_verification:
        raise CertificateError(
            f"queries.verification is {got_verification}, but the verification phases add "
            f"up to {in_verification}"
        )
    if got_learning != sum(by_phase.values()) - in_verification:
        raise CertificateError(
            f"queries.learning is {got_learning}, but the learning phases add up to "
            f"{sum(by_phase.values()) - in_verification}"
        )
    if learning is not None and got_learning != learning:
        raise CertificateError(
            f"queries.learning is {got_learning}, but the stored design and answers "
            f"imply {learning}"
        )
    if bound is not None and got_bound != bound:
        raise CertificateError(f"queries.bound is {got_bound}, the theorem's bound is {bound}")
    for phase, n in (phases or {}).items():
        if by_phase.get(phase, 0) != n:
            raise CertificateError(
                f"queries.by_phase.{phase} is {by_phase.get(phase, 0)}, the stored design "
                f"implies {n}"
            )
    return {
        "learning": got_learning,
        "verification": got_verification,
        "bound": got_bound,
        "by_phase": by_phase,
    }


def check_verification(
    data: dict[str, Any],
    header: Header,
    predict: Callable[[np.ndarray], Any],
    *,
    expected_queries: int | None = None,
) -> str:
    """Re-check the ``verification`` section against a prediction function.

    The fresh sequences are regenerated from the stored count, seed and lengths; every
    stored answer must agree with ``predict(X)`` under
    :func:`verified_attn.agreement.agree` (the learner's rule). ``expected_queries``:
    the verification count the ``queries`` section states (default: the stored count).
    Returns the summary line.
    """
    from verified_attn.validation import MAX_LENGTH
    from verified_attn.verification import agree, float_floor, fresh_sequences

    count = as_int(get(data, "verification.count"), "verification.count", high=MAX_ENTRIES)
    seed = as_int(get(data, "verification.seed"), "verification.seed")
    raw_lengths = as_list(get(data, "verification.lengths"), "verification.lengths")
    if len(raw_lengths) > MAX_LENGTH:
        raise CertificateError(f"verification.lengths has more than {MAX_LENGTH} entries")
    lengths = tuple(
        as_int(n, f"verification.lengths[{i}]", low=1, high=MAX_LENGTH)
        for i, n in enumerate(raw_lengths)
    )
    if not lengths:
        raise CertificateError("verification.lengths must not be empty")
    if count * max(lengths) * header.d > MAX_ENTRIES:
        raise CertificateError("verification asks for more sequence entries than a checker reads")
    arith = header.arith
    precision = get(data, "verification.precision")
    if precision is not None:
        if arith.name != "certified":
            raise CertificateError("verification.precision is set outside certified arithmetic")
        precision = as_int(precision, "verification.precision", low=32, high=MAX_PRECISION)
        arith = get_arithmetic("certified", precision)
    stated = get(data, "queries.verification")
    if count != (stated if expected_queries is None else expected_queries):
        raise CertificateError(
            f"verification.count is {count}, but queries.verification is {stated}"
        )
    with arith.context():
        answers = numbers(
            get(data, "verification.answers"),
            "verification.answers",
            arith,
            count,
            max_calls=answer_calls(max(lengths)),
        )
        bias_raw = get(data, "verification.bias")
        bias = 0.0 if bias_raw is None else float(number(bias_raw, "verification.bias", arith))
        sequences = fresh_sequences(header.d, count, seed, lengths)
        floor = float_floor(answers, bias) if arith.name == "float" else 0.0
        worst = 0.0
        for i, (X, observed) in enumerate(zip(sequences, answers, strict=True)):
            try:
                expected = predict(X)
            except VerifiedAttnError as exc:
                raise CertificateError(f"evaluating the claimed model failed: {exc}") from exc
            if arith.name == "exact" and not exact_ball(observed).overlaps(exact_ball(expected)):
                ok, gap = False, 0.0  # certainly different: no symbolic work needed
            else:
                ok, gap = agree(arith, observed, expected, bias=bias, floor=floor)
            if not ok:
                raise CertificateError(
                    f"verification.answers[{i}]: the stored answer {observed} to the fresh "
                    f"sequence of length {X.shape[0]} disagrees with the claimed model's "
                    f"{expected}"
                )
            worst = max(worst, gap)
    if as_bool(get(data, "verified"), "verified") != (count > 0):
        raise CertificateError(
            f"verified is {data['verified']}, but {count} verification answers are stored"
        )
    if count == 0:
        return "verification: none stored (the result was not verified)"
    rule = (
        f"agree to rtol {arith.rtol:g} (max gap {worst:.2e})"
        if arith.name == "float"
        else {"exact": "equal", "certified": "overlap"}[arith.name]
    )
    used = sorted({int(X.shape[0]) for X in sequences})
    return (
        f"verification: {count} fresh sequences (seed {seed}, lengths "
        f"{', '.join(map(str, used))}) {rule} with the claimed model"
    )


def largest_unique_denominator(lo: Fraction, hi: Fraction) -> int | None:
    """The largest D with (hi - lo) D^2 < 1 (None for a point: any D works).

    Two rationals with denominators <= D differ by at least 1/D^2, so [lo, hi] holds at
    most one of them: the rule every checker uses to accept a reconstructed rational.

    >>> largest_unique_denominator(Fraction(0), Fraction(1, 100)), largest_unique_denominator(Fraction(1), Fraction(1))
    (9, None)
    """
    width = hi - lo
    if width == 0:
        return None
    return math.isqrt(math.ceil(1 / width) - 1)


def _short(x: Any) -> str:
    """A bounded repr (a hostile value may be a huge or deeply nested list)."""
    text = short_repr(x)
    return text if len(text) <= 80 else text[:77] + "..."
