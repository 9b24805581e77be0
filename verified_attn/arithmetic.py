"""The three number systems a learner can run in, and rational reconstruction.

>>> from fractions import Fraction
>>> from verified_attn.arithmetic import get_arithmetic, simplest_rational_between
>>> simplest_rational_between(Fraction(332, 1000), Fraction(334, 1000))
Fraction(1, 3)
>>> exact = get_arithmetic("exact")
>>> exact.logit(exact.rational(Fraction(1, 2)))
0

The learner chooses its queries as exact rationals and only ever inverts exact rational
design matrices; the oracle's answers are the only inexact numbers. So one learner runs in
three arithmetics that differ only in what a *measured number* is:

=============  ==============================  =====================================
mode           a measured number is            a result means
=============  ==============================  =====================================
``exact``      a SymPy expression              equal (``==``) to the truth
``certified``  a python-flint ``arb`` ball     an interval that contains the truth
``float``      a numpy float64                 floating point, errors reported
=============  ==============================  =====================================

Each mode is an :class:`Arithmetic` object with the handful of operations learners need
(convert a rational, take a logit, decide a sign, apply an exact matrix, compare two
answers). Precision is a context (:meth:`Arithmetic.context`), never a global left changed.
"""

from __future__ import annotations

import contextlib
import math
import threading
from collections.abc import Callable, Iterator, Sequence
from fractions import Fraction
from numbers import Integral
from typing import Any

import flint
import numpy as np
import sympy

from verified_attn.errors import InvalidArgument, PrecisionExhausted

__all__ = [
    "ARITHMETICS",
    "Arithmetic",
    "CertifiedArithmetic",
    "ExactArithmetic",
    "FloatArithmetic",
    "arb_bounds",
    "ball_rational",
    "fraction_from_arb",
    "get_arithmetic",
    "reconstruct_rational",
    "simplest_rational_between",
    "to_fraction",
    "workprec",
]

ARITHMETICS = ("exact", "certified", "float")
DEFAULT_PRECISION = 256


# ---------------------------------------------------------------------------------------
# Exact rationals: the lingua franca of queries and design matrices.
# ---------------------------------------------------------------------------------------


def to_fraction(x: Any, *, name: str = "value") -> Fraction:
    """The exact rational value of ``x``; floats convert exactly (binary rationals).

    >>> to_fraction(0.5), to_fraction(3), to_fraction("1/3", name="q")
    Traceback (most recent call last):
    ...
    verified_attn.errors.InvalidArgument: q must be a real number (int, float, Fraction, SymPy Rational or flint fmpq), got str '1/3'
    >>> to_fraction(0.25)
    Fraction(1, 4)
    """
    if isinstance(x, (bool, np.bool_)):
        raise InvalidArgument(f"{name} must be a real number, got bool {x!r}")
    if isinstance(x, Fraction):
        return x
    if isinstance(x, Integral):
        return Fraction(int(x))
    if isinstance(x, (float, np.floating)):
        if not math.isfinite(float(x)):
            raise InvalidArgument(f"{name} must be finite, got {float(x)!r}")
        return Fraction(float(x))
    if isinstance(x, flint.fmpq):
        return Fraction(int(x.p), int(x.q))
    if isinstance(x, flint.fmpz):
        return Fraction(int(x))
    if isinstance(x, sympy.Basic):
        if x.is_Rational:
            return Fraction(int(x.p), int(x.q))
        if x.is_Float:
            if not x.is_finite:
                raise InvalidArgument(f"{name} must be finite, got {x}")
            # A SymPy Float is a binary rational at any precision; sympy.Rational(x) is its
            # exact value (str(x) would round a high-precision Float to decimal digits).
            q = sympy.Rational(x)
            return Fraction(int(q.p), int(q.q))
        raise InvalidArgument(
            f"{name} must be rational; got the SymPy expression {x} "
            "(irrational parameters are not supported)"
        )
    raise InvalidArgument(
        f"{name} must be a real number (int, float, Fraction, SymPy Rational or flint fmpq), "
        f"got {type(x).__name__} {x!r}"
    )


def simplest_rational_between(lo: Fraction, hi: Fraction) -> Fraction:
    """The rational with the smallest denominator in the closed interval [lo, hi].

    (Continued fractions / the Stern-Brocot tree; ties in the denominator go to the
    smallest absolute numerator.)

    >>> simplest_rational_between(Fraction(3, 10), Fraction(4, 10))
    Fraction(1, 3)
    >>> simplest_rational_between(Fraction(-7, 2), Fraction(-3, 1))
    Fraction(-3, 1)
    """
    if lo > hi:
        raise InvalidArgument(f"empty interval: lo={lo} > hi={hi}")
    if lo <= 0 <= hi:
        return Fraction(0)
    if hi < 0:
        return -simplest_rational_between(-hi, -lo)
    # Iterative continued-fraction descent: x in [lo, hi], 0 < lo.
    # Convergents p/q built from the shared partial quotients.
    p0, q0, p1, q1 = 0, 1, 1, 0
    while True:
        a = math.floor(lo)
        if Fraction(a) == lo or a + 1 <= hi:
            # An integer lies in [lo, hi]: the smallest one closes the expansion.
            a = a if Fraction(a) == lo else a + 1
            return Fraction(a * p1 + p0, a * q1 + q0)
        p0, q0, p1, q1 = p1, q1, a * p1 + p0, a * q1 + q0
        lo, hi = 1 / (hi - a), 1 / (lo - a)


def reconstruct_rational(lo: Fraction, hi: Fraction, max_denominator: int) -> Fraction | None:
    """The unique rational with denominator <= ``max_denominator`` in [lo, hi], or None.

    Two distinct rationals with denominators <= D differ by at least 1/D^2, so an interval
    narrower than that holds at most one; wider intervals return None (not unique).

    >>> reconstruct_rational(Fraction(333333, 10**6), Fraction(333334, 10**6), 100)
    Fraction(1, 3)
    >>> reconstruct_rational(Fraction(0), Fraction(1, 2), 100) is None
    True
    """
    if max_denominator < 1:
        raise InvalidArgument(f"max_denominator must be >= 1, got {max_denominator}")
    if (hi - lo) * max_denominator * max_denominator >= 1:
        return None
    q = simplest_rational_between(lo, hi)
    return q if q.denominator <= max_denominator else None


def fraction_from_arb(x: flint.arf | flint.arb) -> Fraction:
    """The exact dyadic value of an ``arf`` (or of an ``arb``'s midpoint)."""
    if isinstance(x, flint.arb):
        x = x.mid()
    man, exp = x.man_exp()
    m, e = int(man), int(exp)
    return Fraction(m * 2**e) if e >= 0 else Fraction(m, 2**-e)


def arb_bounds(x: flint.arb) -> tuple[Fraction, Fraction]:
    """Exact rational endpoints [mid - rad, mid + rad] of a ball."""
    if not x.is_finite():
        raise PrecisionExhausted(f"ball {x} is not finite: precision exhausted")
    mid = fraction_from_arb(x.mid())
    rad = fraction_from_arb(x.rad())
    return mid - rad, mid + rad


def ball_rational(x: flint.arb, max_denominator: int, refuse: Callable[[], Exception]) -> Fraction:
    """The unique rational with denominator <= ``max_denominator`` in the ball ``x``
    (:func:`reconstruct_rational` of its exact endpoints); where there is none, raises
    ``refuse()``, the caller's error saying what the ball was.

    >>> ball_rational(flint.arb(1) / 3, 100, lambda: ValueError("no"))
    Fraction(1, 3)
    >>> ball_rational(flint.arb(0.5, 0.5), 100, lambda: ValueError("not unique"))
    Traceback (most recent call last):
    ...
    ValueError: not unique
    """
    q = reconstruct_rational(*arb_bounds(x), max_denominator)
    if q is None:
        raise refuse()
    return q


# ---------------------------------------------------------------------------------------
# The three arithmetics.
# ---------------------------------------------------------------------------------------


class Arithmetic:
    """What a measured number is, and the few operations learners do with one.

    Subclasses: :class:`ExactArithmetic`, :class:`CertifiedArithmetic`,
    :class:`FloatArithmetic`. Obtain one with :func:`get_arithmetic`.
    """

    name: str = ""
    precision: int | None = None
    #: Float mode: the relative agreement answers are held to (None in the other modes).
    rtol: float | None = None

    def context(self) -> contextlib.AbstractContextManager[None]:
        """Context inside which this arithmetic's numbers are combined."""
        return contextlib.nullcontext()

    def rational(self, q: Fraction) -> Any:
        raise NotImplementedError

    def logit(self, y: Any) -> Any:
        """log(y / (1 - y)); raises :class:`OutsideUnitInterval` unless 0 < y < 1."""
        raise NotImplementedError

    def sign(self, x: Any) -> int | None:
        """-1, 0 or 1 where decidable in this arithmetic, else None."""
        raise NotImplementedError

    def magnitude(self, x: Any) -> float:
        """A float estimate of |x|, for choosing well-conditioned designs only."""
        raise NotImplementedError

    def apply(self, matrix: flint.fmpq_mat, columns: Any) -> Any:
        """The exact rational ``matrix`` times a matrix of measured numbers."""
        raise NotImplementedError

    def agree(self, a: Any, b: Any, *, scale: float = 1.0) -> bool:
        """Whether two answers to the same query are consistent in this arithmetic."""
        raise NotImplementedError

    def to_float(self, x: Any) -> float:
        raise NotImplementedError

    def __repr__(self) -> str:
        prec = f", precision={self.precision}" if self.precision is not None else ""
        return f"{type(self).__name__}({self.name!r}{prec})"


class OutsideUnitInterval(Exception):
    """Internal: a logit was asked of a number not certainly in (0, 1).

    ``undecided`` is True when certified arithmetic could not decide (needs precision),
    False when the number is certainly outside.
    """

    def __init__(self, undecided: bool) -> None:
        super().__init__()
        self.undecided = undecided


class ExactArithmetic(Arithmetic):
    """SymPy: rationals exact, exp of a rational kept symbolic, logit undone exactly.

    >>> a = ExactArithmetic()
    >>> import sympy
    >>> y = sympy.exp(sympy.Rational(2, 3)) / (1 + sympy.exp(sympy.Rational(2, 3)))
    >>> a.logit(y)
    2/3
    """

    name = "exact"

    def rational(self, q: Fraction) -> sympy.Rational:
        return sympy.Rational(q.numerator, q.denominator)

    def logit(self, y: sympy.Expr) -> sympy.Expr:
        y = sympy.sympify(y)
        # y = e^s / (e^s + 1) after cancellation, so y / (1 - y) collapses to e^s and
        # log(e^s) = s for real rational s: no numerics involved. Recognising e^s first
        # also decides 0 < y < 1 (y = r / (1 + r) with r = e^s > 0) where SymPy's numeric
        # comparison cannot (a score of -9374 makes y - 1 vanish at any working precision).
        ratio = sympy.cancel(sympy.together(y / (1 - y)))
        s = _rational_exponent(ratio)
        if s is not None:
            return s
        try:
            inside = bool(y > 0) and bool(y < 1)
        except TypeError:  # SymPy cannot decide: then y is no sigmoid of a rational either
            inside = True
        if not inside:
            raise OutsideUnitInterval(undecided=False)
        # Not e^(rational): y is not the sigmoid of a rational. Return the logit unsimplified
        # (callers test is_Rational); sympy.simplify here can run for minutes on the
        # answers of a model that is not a single head.
        return sympy.log(ratio)

    def sign(self, x: sympy.Expr) -> int | None:
        x = sympy.sympify(x)
        if x.is_zero:
            return 0
        if x.is_positive:
            return 1
        if x.is_negative:
            return -1
        z = x.equals(0)
        if z is True:
            return 0
        if z is False:
            return 1 if bool(x > 0) else -1
        return None

    def magnitude(self, x: sympy.Expr) -> float:
        return abs(float(sympy.N(x, 20)))

    def apply(self, matrix: flint.fmpq_mat, columns: sympy.Matrix) -> sympy.Matrix:
        m = sympy.Matrix(
            matrix.nrows(),
            matrix.ncols(),
            [sympy.Rational(int(q.p), int(q.q)) for q in matrix.entries()],
        )
        return m * sympy.Matrix(columns)

    def agree(self, a: Any, b: Any, *, scale: float = 1.0) -> bool:
        return exact_equal(a, b)

    def to_float(self, x: Any) -> float:
        return float(sympy.N(x, 30))


def _rational_exponent(ratio: sympy.Expr) -> sympy.Rational | None:
    """q if ``ratio`` is e^q for a rational q (1 = e^0 and E = e^1 included), else None."""
    if ratio == 1:
        return sympy.Integer(0)
    if ratio == sympy.E:
        return sympy.Integer(1)
    if isinstance(ratio, sympy.exp) and ratio.args[0].is_Rational:
        return ratio.args[0]
    if ratio.is_Pow and ratio.base == sympy.E and ratio.exp.is_Rational:
        return ratio.exp
    return None


def exact_equal(a: Any, b: Any) -> bool:
    """Decide a == b for closed-form SymPy numbers (structural, then symbolic)."""
    a, b = sympy.sympify(a), sympy.sympify(b)
    if a == b:
        return True
    if _balls_apart(a, b):  # a proof of a != b, before the (possibly huge) symbolic cancel
        return False
    diff = sympy.cancel(sympy.together(a - b))
    if diff == 0:
        return True
    z = diff.equals(0)
    return bool(z is True)


def _balls_apart(a: sympy.Expr, b: sympy.Expr) -> bool:
    """Whether 128-bit balls around two closed forms (rationals and exp) are disjoint, which
    proves them different; False when they overlap or are not such closed forms.

    >>> _balls_apart(sympy.exp(sympy.Rational(1, 3)), sympy.Rational(7, 5))
    True
    >>> _balls_apart(sympy.exp(sympy.Rational(1, 3)), sympy.exp(sympy.Rational(2, 6)))
    False
    """
    from verified_attn.errors import ModelClassMismatch
    from verified_attn.rational_interpolation import to_arb

    try:
        with workprec(128):
            diff = to_arb(a) - to_arb(b)
            return bool(diff.is_finite()) and not diff.contains(0)
    except ModelClassMismatch:
        return False


class CertifiedArithmetic(Arithmetic):
    """python-flint ``arb`` balls at a fixed precision (bits); every ball contains the truth.

    >>> a = CertifiedArithmetic(128)
    >>> with a.context():
    ...     y = a.rational(Fraction(1, 3))
    ...     print(a.logit(y).overlaps(-flint.arb(2).log()))   # logit(1/3) = -log 2
    True
    """

    name = "certified"
    precision: int  # always set (bits), unlike the base class's optional one

    def __init__(self, precision: int = DEFAULT_PRECISION) -> None:
        if isinstance(precision, bool) or not isinstance(precision, Integral):
            raise InvalidArgument(f"precision must be an int (bits), got {precision!r}")
        if not 32 <= int(precision) <= 1_000_000:
            raise InvalidArgument(f"precision must be between 32 and 1000000 bits, got {precision}")
        self.precision = int(precision)

    def context(self) -> contextlib.AbstractContextManager[None]:
        return workprec(self.precision)

    def rational(self, q: Fraction) -> flint.arb:
        return flint.arb(flint.fmpq(q.numerator, q.denominator))

    def logit(self, y: flint.arb) -> flint.arb:
        if (y > 0) and (y < 1):
            return (y / (1 - y)).log()
        certainly_out = (y <= 0) or (y >= 1)
        raise OutsideUnitInterval(undecided=not certainly_out)

    def sign(self, x: flint.arb) -> int | None:
        if x > 0:
            return 1
        if x < 0:
            return -1
        if x.is_zero():
            return 0
        return None

    def magnitude(self, x: flint.arb) -> float:
        return abs(float(x.mid()))

    def apply(self, matrix: flint.fmpq_mat, columns: flint.arb_mat) -> flint.arb_mat:
        return flint.arb_mat(matrix) * columns

    def agree(self, a: flint.arb, b: flint.arb, *, scale: float = 1.0) -> bool:
        return bool(flint.arb(a).overlaps(flint.arb(b)))

    def to_float(self, x: flint.arb) -> float:
        return float(x.mid())


#: python-flint's working precision (``flint.ctx.prec``) is one value per process, set and
#: restored around certified work all over the package: two threads doing certified work
#: at once change each other's precision (a run then meets balls too wide to reconstruct
#: and probes that look saturated, and asks more queries). Code that runs learners or
#: claims in threads holds this lock around
#: each run (:func:`verified_attn.sweep.sweep` does); processes need nothing.
PRECISION_LOCK = threading.Lock()


@contextlib.contextmanager
def workprec(bits: int) -> Iterator[None]:
    """Set python-flint's working precision to ``bits`` for the block, then restore it.

    >>> with workprec(100):
    ...     flint.ctx.prec
    100
    """
    old = flint.ctx.prec
    flint.ctx.prec = bits
    try:
        yield
    finally:
        flint.ctx.prec = old


class FloatArithmetic(Arithmetic):
    """numpy float64; ``agree`` uses a relative tolerance (default 1e-6 of the scale).

    >>> FloatArithmetic().logit(0.5)
    0.0
    """

    name = "float"
    rtol: float  # always set, unlike the base class's optional one

    def __init__(
        self,
        rtol: float = 1e-6,
        unit_roundoff: float = 2.0**-53,
        parameter_rtol: float | None = None,
    ) -> None:
        if not (isinstance(rtol, float | int) and 0 < rtol < 1):
            raise InvalidArgument(f"rtol must be a number in (0, 1), got {rtol!r}")
        if not (isinstance(unit_roundoff, float | int) and 0 < unit_roundoff <= rtol):
            raise InvalidArgument(
                f"unit_roundoff must be a number in (0, rtol], got {unit_roundoff!r}"
            )
        self.rtol = float(rtol)
        #: The unit roundoff of the box's own arithmetic (2^-53 float64, 2^-24 float32):
        #: the rounding its answers carry on a large output bias is measured in it.
        self.unit_roundoff = float(unit_roundoff)
        if parameter_rtol is None:
            parameter_rtol = rtol
        if isinstance(parameter_rtol, bool) or not (
            isinstance(parameter_rtol, float | int) and rtol <= parameter_rtol < 1
        ):
            raise InvalidArgument(
                f"parameter_rtol must be a number in [rtol, 1), got {parameter_rtol!r}"
            )
        #: The loosest relative tolerance a learner may state for float *parameters*
        #: (relative to max(1, largest parameter)), apart from the predictions' rtol: a box
        #: whose answers are rounded coarsely (float32) pins the predictions at rtol while
        #: the decoding amplifies the rounding in the parameters. Default: rtol.
        self.parameter_rtol = float(parameter_rtol)

    def rational(self, q: Fraction) -> float:
        return float(q)

    def logit(self, y: float) -> float:
        y = float(y)
        if not 0.0 < y < 1.0:
            raise OutsideUnitInterval(undecided=False)
        return math.log(y) - math.log1p(-y)

    def sign(self, x: float) -> int | None:
        return int(x > 0) - int(x < 0)

    def magnitude(self, x: float) -> float:
        return abs(float(x))

    def apply(self, matrix: flint.fmpq_mat, columns: np.ndarray) -> np.ndarray:
        # The exact matrix rounded once to float64: integer numerators over one common
        # denominator (fast: no per-entry Fractions).
        num, den = matrix.numer_denom()
        ints = [int(x) for x in num.entries()]
        if int(den) < 2**900 and all(abs(x) < 2**900 for x in ints):
            dense = np.array(ints, dtype=np.float64) / float(int(den))
        else:  # too large for float64 as a numerator/denominator pair: round entry by entry
            dense = np.array([float(Fraction(int(q.p), int(q.q))) for q in matrix.entries()])
        dense = dense.reshape(matrix.nrows(), matrix.ncols())
        return dense @ np.asarray(columns, dtype=np.float64)

    def agree(self, a: float, b: float, *, scale: float = 1.0) -> bool:
        return abs(float(a) - float(b)) <= self.rtol * max(scale, abs(float(a)), abs(float(b)))

    def to_float(self, x: float) -> float:
        return float(x)


def get_arithmetic(name: str | Arithmetic, precision: int | None = None) -> Arithmetic:
    """The arithmetic called ``name`` ("exact", "certified" or "float").

    >>> get_arithmetic("certified", 128)
    CertifiedArithmetic('certified', precision=128)
    >>> get_arithmetic("fuzzy")
    Traceback (most recent call last):
    ...
    verified_attn.errors.InvalidArgument: arithmetic must be one of 'exact', 'certified', 'float'; got 'fuzzy'
    """
    if isinstance(name, Arithmetic):
        return name
    if name == "exact":
        return ExactArithmetic()
    if name == "certified":
        return CertifiedArithmetic(DEFAULT_PRECISION if precision is None else precision)
    if name == "float":
        return FloatArithmetic()
    raise InvalidArgument(
        "arithmetic must be one of " + ", ".join(repr(a) for a in ARITHMETICS) + f"; got {name!r}"
    )


def fmpq_matrix(rows: Sequence[Sequence[Fraction]]) -> flint.fmpq_mat:
    """An exact flint matrix from rows of Fractions."""
    n = len(rows)
    m = len(rows[0]) if n else 0
    return flint.fmpq_mat(
        n, m, [flint.fmpq(q.numerator, q.denominator) for row in rows for q in row]
    )
