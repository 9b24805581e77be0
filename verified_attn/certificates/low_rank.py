"""Re-check a low-rank (Theorem 5.1) certificate from its stored probes and answers alone.

>>> import verified_attn as va
>>> from verified_attn.certificates.low_rank import verify
>>> W = [[2, 4, 0], [1, 2, 0], [-1, -2, 0]]                      # rank 1
>>> data = va.learn_low_rank(va.Oracle(va.SingleHeadAttention(W, [1, 0, 1]), "exact")).certificate()
>>> print(verify(data).summary[2])
cross: re-solved 6 unknowns of Z = U^T W B and R = U_S^T W from 5 probes and 1 pivot constraints (substitution alone); W = U^-T Z Z_S^-1 R
>>> data["result"]["parameters"]["W"][0][0] = {"rational": "3/1"}
>>> verify(data)
Traceback (most recent call last):
...
verified_attn.errors.CertificateError: result W[0][0]: claimed 3, the stored answers give 2

One module for both methods, dispatching on the certificate's ``method``. It uses the core
arithmetic, models and kernel only, never the learner's code.

**Every probe** is a two-token query ``[b + t u; b]`` stored as exact rationals (u, b, t)
with the oracle's answer f (u and b as indices into ``answers.vectors``, the table of the
distinct probe vectors, or inline). With v from the length-1 answers, the checker re-decodes
``m = logit((f - b^T v) / (t u^T v)) / t = u^T W b`` (requiring u^T v certainly nonzero
and the ratio certainly in (0, 1)), and counts: ``t = 16^-n`` means n re-asks.

**skeleton** (``method: "skeleton"``): the unknowns are ``Z = U^T W B`` (d x r) and
``R = U_S^T W`` (r x d), with U the stored invertible design, B the stored generic
columns, S the stored pivot rows. Each learning probe is one linear equation with exact
coefficients: on a basis column b_j, ``(U^{-1} u)^T Z[:, j] = m``; on a pivot row u_s,
``R[s, :] b = m``; and the cross closes with ``Z[S, :] = R B``. The system must be square
(2dr equations) and exactly invertible; it is solved block by block (an equation with one
unknown left by substitution, a pivot row's coupled unknowns by one exact inverse: blocks
of at most r + 1 unknowns, so the check stays cheap at large d), then
``W = U^{-T} Z Z[S, :]^{-1} R``. Probes on
the stored next column ``next_b`` are the rank checks: each must agree with the claimed W
(exact ``==``, certified overlap, float ``|m - u^T W b| <= rank_tol * scale``, the scale
``max(|m|, sum |u_i| |W_ij| |b_j|, 1e4 eps (1 + ||U^{-1} u||_1) max |v|)``). With the rank
given, those checks are the declared verification phase ``rank``; probes in the phase
``rank-check`` (the learner's second test of a rank-0 claim, always verification) are
checks too, whatever their column. (U, B and S are only the
coordinates the cross is solved in: any that the stored probes determine give the same W,
so the checker needs no trust in them.)

The claimed W, v are compared with the re-solved ones: exact ``==``; certified: a claimed
rational must lie in its re-solved ball and be the only rational there with a denominator
that small, a claimed ball must contain the re-solved ball; float: agreement to
:data:`FLOAT_RTOL` relative to the largest entry of W (at least 1): the checker's
substitution and solve differ from the learner's column-by-column cross in rounding only.

**nuclear** (``method: "nuclear"``, float only): the rank-one measurements t_k are
re-decoded from the answers; the claimed v must equal the length-1 answers, and the
reported relative residual ``||A(W) - t|| / ||t||`` of the claimed W must be the one
recomputed here (to :data:`RESIDUAL_RTOL` relative, or :data:`RESIDUAL_ATOL`), and so
must the reported verification error (the largest relative gap on the fresh sequences).

Both: the counts add up (learning = d + the learning probes + their re-asks, the bound is
the method's formula), and the verification answers agree with the claimed model under the
learner's one rule (:func:`verified_attn.certificates.kernel.check_verification`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import flint
import numpy as np
import sympy

from verified_attn.arithmetic import Arithmetic, OutsideUnitInterval, arb_bounds, fmpq_matrix
from verified_attn.certificates import CertificateCheck
from verified_attn.certificates.kernel import (
    MAX_ENTRIES,
    Header,
    as_bool,
    as_int,
    as_list,
    as_matrix,
    check_counts,
    check_verification,
    get,
    largest_unique_denominator,
    number,
    numbers,
    parse_header,
    rational,
)
from verified_attn.errors import CertificateError, VerifiedAttnError
from verified_attn.models import SingleHeadAttention, as_rational_sequence, attention_output
from verified_attn.probing import apply_exact, measured_array

__all__ = ["FLOAT_RTOL", "MAX_REDUCED", "RESIDUAL_ATOL", "RESIDUAL_RTOL", "redecode", "verify"]

#: Relative agreement required between claimed and re-solved float parameters (the two
#: solution paths differ in rounding only: measured at most 1.2e-14 up to d = 256, r = 8).
FLOAT_RTOL = 1e-11
#: Nuclear: agreement of the reported and recomputed measurement residuals.
RESIDUAL_RTOL = 1e-6
RESIDUAL_ATOL = 1e-12
#: Largest block of the cross a checker inverts exactly (at most r + 1 for the skeleton's
#: own certificates, whose pivot rows decouple).
MAX_REDUCED = 1200
_EPS = float(np.finfo(np.float64).eps)
METHODS = ("skeleton", "nuclear")
#: The learner's second rank-0 test (a declared verification phase): a check, never an
#: equation of the cross, whatever column it is on.
RANK_CHECK = "rank-check"
THEOREM = "thm-5.1"


@dataclass(frozen=True)
class _Probe:
    phase: str
    u: list[Fraction]
    b: list[Fraction]
    t: Fraction
    answer: Any
    rescales: int
    iu: int  # u's index in the probe-vector table (equal vectors, equal index)
    ib: int


def verify(data: dict[str, Any]) -> CertificateCheck:
    """Re-check a ``low-rank`` certificate dict; CertificateError naming what fails."""
    head = parse_header(data, "low-rank")
    method = get(data, "method")
    if method not in METHODS:
        raise CertificateError(f"method must be 'skeleton' or 'nuclear', got {method!r:.80}")
    if head.theorem != THEOREM:
        raise CertificateError(f"theorem is {head.theorem!r}, a low-rank certificate is {THEOREM!r}")
    lines = [f"{head.describe()}, method {method}"]
    if method == "skeleton":
        lines.extend(_verify_skeleton(data, head))
    else:
        lines.extend(_verify_nuclear(data, head))
    lines.extend(f"assumption: {a}" for a in head.assumptions)
    return CertificateCheck(ok=True, kind="low-rank", theorem=head.theorem, summary=lines)


def redecode(data: dict[str, Any]) -> dict[str, np.ndarray]:
    """The skeleton's W (d x d) and v re-solved from a certificate's stored probes.

    Call inside the certificate's ``arith.context()``; the writer uses it to store balls
    that contain both its own and this checker's enclosures.
    """
    head = parse_header(data, "low-rank")
    cross = _Cross(data, head)
    return {"W": cross.W, "v": np.array(cross.v, dtype=object)}


# ---------------------------------------------------------------------------------------
# Probes.
# ---------------------------------------------------------------------------------------


def _vector(
    raw: Any, path: str, d: int, seen: dict[str, Fraction] | None = None
) -> list[Fraction]:
    """d exact rationals; ``seen`` caches strings already parsed (probes repeat a few)."""
    out = []
    for i, q in enumerate(as_list(raw, path, d)):
        x = seen.get(q) if seen is not None and isinstance(q, str) else None
        if x is None:
            x = rational(q, f"{path}[{i}]")
            if seen is not None and len(seen) < 1 << 16:
                seen[q] = x
        out.append(x)
    return out


def _exact_matrix(rows: list[list[Fraction]]) -> flint.fmpq_mat:
    """fmpq_matrix(rows), from one integer matrix when every entry is an integer (a
    design's 0/1 U: d^2 entries without a rational object each)."""
    if all(q.denominator == 1 for row in rows for q in row):
        n, m = len(rows), len(rows[0]) if rows else 0
        return flint.fmpq_mat(flint.fmpz_mat(n, m, [q.numerator for row in rows for q in row]))
    return fmpq_matrix(rows)


def _key(x: list[Fraction]) -> tuple[int, ...]:
    """A fast dictionary key for an exact vector (hashing Fractions is slow)."""
    return tuple(n for q in x for n in (q.numerator, q.denominator))


def _rescales(t: Fraction, path: str) -> int:
    """n with t = 16^-n: every probe starts at t = 1 and is re-asked at t / 16."""
    if t <= 0 or t.numerator != 1 or t.denominator & (t.denominator - 1):
        raise CertificateError(f"{path} = {t} is not 16^-n")
    n = (t.denominator.bit_length() - 1) // 4
    if n > 64 or Fraction(1, 16**n) != t:
        raise CertificateError(f"{path} = {t} is not 16^-n (n <= 64)")
    return n


def _probes(data: dict[str, Any], head: Header) -> list[_Probe]:
    """The stored probes; a probe's u and b are d rationals or an index into
    ``answers.vectors`` (the table of distinct probe vectors the writer stores)."""
    d, arith = head.d, head.arith
    raw = as_list(get(data, "answers.probes"), "answers.probes")
    answers = get(data, "answers")
    table_raw = answers.get("vectors") if isinstance(answers, dict) else None
    table_raw = [] if table_raw is None else as_list(table_raw, "answers.vectors")
    inline = sum(
        1
        for p in raw
        if isinstance(p, dict) and any(isinstance(p.get(k), list) for k in ("u", "b"))
    )
    # What the checker reads: the table's vectors, the inline ones, and a few per probe.
    if (len(table_raw) + 2 * inline) * d + 4 * len(raw) > MAX_ENTRIES:
        raise CertificateError("answers.probes holds more entries than a checker reads")
    seen: dict[str, Fraction] = {}
    table = [_vector(x, f"answers.vectors[{k}]", d, seen) for k, x in enumerate(table_raw)]
    ids: dict[tuple[int, ...], int] = {}  # built at the first inline vector (if any)
    vectors = list(table)

    def vector(x: Any, path: str) -> int:
        if isinstance(x, int) and not isinstance(x, bool):
            if not 0 <= x < len(table):
                raise CertificateError(f"{path} = {x} is not an index of answers.vectors")
            return x
        vec = _vector(x, path, d, seen)
        if not ids:
            ids.update((_key(y), k) for k, y in enumerate(vectors))
        k = ids.setdefault(_key(vec), len(vectors))
        if k == len(vectors):
            vectors.append(vec)
        return k

    out = []
    scales: dict[str, tuple[Fraction, int]] = {}
    for i, p in enumerate(raw):
        path = f"answers.probes[{i}]"
        if not isinstance(p, dict):
            raise CertificateError(f"{path} must be a JSON object")
        phase = get(p, "phase")
        if not isinstance(phase, str) or not 0 < len(phase) <= 32:
            raise CertificateError(f"{path}.phase must be a short string")
        raw_t = get(p, "scale")
        parsed = scales.get(raw_t) if isinstance(raw_t, str) else None
        if parsed is None:
            t = rational(raw_t, f"{path}.scale")
            parsed = (t, _rescales(t, f"{path}.scale"))
            if isinstance(raw_t, str) and len(scales) < 64:
                scales[raw_t] = parsed
        iu, ib = vector(get(p, "u"), f"{path}.u"), vector(get(p, "b"), f"{path}.b")
        out.append(
            _Probe(
                phase,
                vectors[iu],
                vectors[ib],
                parsed[0],
                number(get(p, "answer"), f"{path}.answer", arith),
                parsed[1],
                iu,
                ib,
            )
        )
    return out


def _dot(arith: Arithmetic, x: list[Fraction], v: list[Any]) -> Any:
    acc: Any = arith.rational(Fraction(0))
    if arith.name == "float":
        return float(np.dot(np.array([float(q) for q in x]), np.asarray(v, dtype=np.float64)))
    for q, vi in zip(x, v, strict=True):
        if q:
            acc = acc + arith.rational(q) * vi
    return acc


def _measure_all(arith: Arithmetic, v: list[Any], probes: list[_Probe]) -> list[Any]:
    """u^T W b for every probe (the module docstring's formula); x^T v once per vector."""
    dots: dict[int, Any] = {}

    def dot(k: int, x: list[Fraction]) -> Any:
        val = dots.get(k)
        if val is None:
            val = dots[k] = _dot(arith, x, v)
        return val

    out = []
    for i, p in enumerate(probes):
        path = f"answers.probes[{i}]"
        uv = dot(p.iu, p.u)
        if arith.sign(uv) not in (-1, 1):
            raise CertificateError(f"{path}: u^T v = {uv} is not certainly nonzero")
        out.append(_decode(arith, p, uv, dot(p.ib, p.b), path))
    return out


def _decode(arith: Arithmetic, p: _Probe, uv: Any, bv: Any, path: str) -> Any:
    t = arith.rational(p.t)
    y = (p.answer - bv) / (t * uv)
    if arith.name == "float":
        if not 0 < y < 1:
            raise CertificateError(f"{path}: the probe ratio {y} is not in (0, 1)")
        return (math.log(y) - math.log1p(-y)) / float(p.t)
    try:
        return arith.logit(y) / t
    except OutsideUnitInterval as exc:
        raise CertificateError(f"{path}: the probe ratio {y} is not certainly in (0, 1)") from exc


def _count_phases(
    probes: list[_Probe], d: int, verification: set[str]
) -> tuple[int, dict[str, int], int]:
    """(learning count, per-phase counts, verification probes + their re-asks)."""
    phases: dict[str, int] = {"v": d}
    learning = d
    in_verification = 0
    for p in probes:
        phases[p.phase] = phases.get(p.phase, 0) + 1
        if p.rescales:
            name = f"{p.phase}-rescale" if p.phase in verification else "rescale"
            phases[name] = phases.get(name, 0) + p.rescales
        if p.phase in verification:
            in_verification += 1 + p.rescales
        else:
            learning += 1 + p.rescales
    return learning, phases, in_verification


# ---------------------------------------------------------------------------------------
# Skeleton.
# ---------------------------------------------------------------------------------------


class _Cross:
    """The skeleton's stored design and probes, and the cross re-solved from them."""

    def __init__(self, data: dict[str, Any], head: Header) -> None:
        d, arith = head.d, head.arith
        self.d, self.arith = d, arith
        self.rank = as_int(get(data, "rank"), "rank", low=0, high=d)
        given = get(data, "rank_given")
        self.rank_given = None if given is None else as_int(given, "rank_given", low=1, high=d)
        if self.rank_given is not None and self.rank > self.rank_given:
            raise CertificateError(f"rank {self.rank} exceeds rank_given {self.rank_given}")
        r = self.rank
        design = get(data, "design")
        seen: dict[str, Fraction] = {}  # U repeats a few strings ("0/1", "1/1") d^2 times
        self.U = [
            _vector(row, f"design.U[{i}]", d, seen)
            for i, row in enumerate(as_matrix(get(design, "U"), "design.U", d, d))
        ]
        U = _exact_matrix(self.U)
        if U.rank() < d:
            raise CertificateError("design.U is singular")
        self.U_inv = U.inv()
        # Which probe vectors are design columns u_k (most are): no solve needed for them.
        self.columns = {_key([self.U[i][k] for i in range(d)]): k for k in range(d)}
        basis = as_list(get(design, "basis"), "design.basis", r)
        self.B = [_vector(b, f"design.basis[{j}]", d) for j, b in enumerate(basis)]
        self.S = [
            as_int(s, f"design.pivots[{m}]", high=d - 1)
            for m, s in enumerate(as_list(get(design, "pivots"), "design.pivots", r))
        ]
        if len(set(self.S)) != r:
            raise CertificateError("design.pivots must be distinct rows")
        nb = get(design, "next_b")
        if (nb is None) != (r == d):
            raise CertificateError(
                "design.next_b must be given exactly when rank < d (the column that "
                "certifies the rank)"
            )
        self.next_b = None if nb is None else _vector(nb, "design.next_b", d)
        with arith.context():
            self.v = numbers(get(data, "answers.v"), "answers.v", arith, d)
            self.probes = _probes(data, head)
            self.measured = _measure_all(arith, self.v, self.probes)
            self._solve()

    def coordinates(self, u: list[Fraction]) -> dict[int, Fraction]:
        """g = U^{-1} u as {index: nonzero entry} (a unit vector for a design column)."""
        k = self.columns.get(_key(u))
        if k is not None:
            return {k: Fraction(1)}
        g = self.U_inv * fmpq_matrix([[q] for q in u])
        return {a: Fraction(int(g[a, 0].p), int(g[a, 0].q)) for a in range(self.d) if g[a, 0] != 0}

    def _solve(self) -> None:
        d, r, arith = self.d, self.rank, self.arith
        n = 2 * d * r
        if len(self.probes) + r * r < n:  # before any work of size n
            raise CertificateError(
                f"{len(self.probes)} stored probes cannot determine the 2dr = {n} unknowns "
                f"of a rank-{r} cross"
            )
        eqs: list[tuple[dict[int, Fraction], Any]] = []
        self.checks: list[int] = []
        basis = {_key(b): j for j, b in enumerate(self.B)}
        next_b = None if self.next_b is None else _key(self.next_b)
        pivot = {s: m_ix for m_ix, s in enumerate(self.S)}
        keys: dict[int, tuple[int, ...]] = {}  # per probe-vector index: probes repeat vectors
        coords: dict[int, dict[int, Fraction]] = {}
        support: dict[int, list[tuple[int, Fraction]]] = {}
        for i, (p, m) in enumerate(zip(self.probes, self.measured, strict=True)):
            bkey = keys.get(p.ib)
            if bkey is None:
                bkey = keys[p.ib] = _key(p.b)
            if (next_b is not None and bkey == next_b) or p.phase == RANK_CHECK:
                self.checks.append(i)
                continue
            if self.rank_given is not None and p.phase == "rank":
                raise CertificateError(
                    f"answers.probes[{i}]: a verification rank test off the column next_b"
                )
            j = basis.get(bkey)
            if j is not None:
                g = coords.get(p.iu)
                if g is None:
                    g = coords[p.iu] = self.coordinates(p.u)
                coeffs = {a * r + j: q for a, q in g.items()}
            else:
                ukey = keys.get(p.iu)
                if ukey is None:
                    ukey = keys[p.iu] = _key(p.u)
                k = self.columns.get(ukey)
                m_ix = pivot.get(k) if k is not None else None
                if m_ix is None:
                    raise CertificateError(
                        f"answers.probes[{i}] is neither on a basis column, on a pivot row "
                        "nor on next_b"
                    )
                nz = support.get(p.ib)
                if nz is None:
                    nz = support[p.ib] = [(col, q) for col, q in enumerate(p.b) if q]
                base = d * r + m_ix * d
                coeffs = {base + col: q for col, q in nz}
            eqs.append((coeffs, m))
        self.n_probe_equations = len(eqs)
        if len(eqs) + r * r != n:
            raise CertificateError(
                f"the stored probes give {len(eqs)} equations (+ {r * r} pivot "
                f"constraints) for the 2dr = {n} unknowns of the cross: it is not determined"
            )
        x = _Elimination(arith, eqs, n, groups=(d * r, d))
        x.peel()  # the probes' own unknowns first: most entries of Z and R are measured
        x.add(self._pivot_constraints(x.known))
        x.solve()
        self.coupled = x.largest
        Z = measured_array(arith, [[x.known[a * r + j] for j in range(r)] for a in range(d)])
        R = measured_array(
            arith, [[x.known[d * r + m * d + col] for col in range(d)] for m in range(r)]
        )
        self.W = _assemble(arith, self.U_inv, Z, R, self.S, d)


    def _pivot_constraints(
        self, known: dict[int, Any]
    ) -> list[tuple[dict[int, Fraction], Any]]:
        """Z[s_m, j] = R[m, :] b_j for every pivot row m and column j, the R entries already
        known moved to the right-hand side in one product per row (float: NumPy; certified:
        an arb matrix product; exact: sums), so each equation keeps only its unknowns."""
        d, r, arith = self.d, self.rank, self.arith
        zero = arith.rational(Fraction(0))
        product = _Product(arith, self.B)
        out = []
        for m_ix, s in enumerate(self.S):
            base = d * r + m_ix * d
            vals = [known.get(base + c) for c in range(d)]
            consts = product(vals, zero)
            free = [c for c in range(d) if vals[c] is None]  # few: R[m, P], the solved part
            for j in range(r):
                coeffs = {s * r + j: Fraction(1)}
                for col in free:
                    q = self.B[j][col]
                    if q:
                        coeffs[base + col] = -q
                out.append((coeffs, consts[j]))
        return out


class _Product:
    """B x for the r x d exact matrix B and a vector x of measured numbers (None as 0)."""

    def __init__(self, arith: Arithmetic, B: list[list[Fraction]]) -> None:
        self.arith, self.B = arith, B
        if arith.name == "float":
            self.M: Any = np.array([[float(q) for q in row] for row in B])
        elif arith.name == "certified":
            self.M = flint.arb_mat(fmpq_matrix(B))

    def __call__(self, x: list[Any], zero: Any) -> list[Any]:
        arith, B = self.arith, self.B
        if arith.name == "float":
            return [float(y) for y in self.M @ np.array([0.0 if v is None else float(v) for v in x])]
        if arith.name == "certified":
            out = self.M * flint.arb_mat([[zero if v is None else v] for v in x])
            return [out[j, 0] for j in range(len(B))]
        acc = []
        for row in B:
            total: Any = zero
            for q, v in zip(row, x, strict=True):
                if q and v is not None:
                    total = total + arith.rational(q) * v
            acc.append(total)
        return acc


class _Elimination:
    """Solve a square linear system with exact coefficients by blocks, exactly.

    Equations with one unknown left are solved by substitution; otherwise a block of
    unknowns (the unknowns ``groups[0] + k * groups[1] + (0..groups[1] - 1)``, one pivot
    row R[k, :] of the cross) whose remaining equations involve no other unknown is
    inverted exactly as one square block; if neither applies, everything left is one
    block. Every equation is used exactly once: an equation left with no unknown means
    the system is singular. Blocks larger than :data:`MAX_REDUCED` are refused. (Each
    step solves a square nonsingular subsystem whose equations involve only its own
    unknowns, so the values are those of the unique solution of the whole system.)
    """

    def __init__(
        self,
        arith: Arithmetic,
        eqs: list[tuple[dict[int, Fraction], Any]],
        n: int,
        groups: tuple[int, int],
    ) -> None:
        self.arith = arith
        self.eqs = list(eqs)
        self.n = n
        self.groups = groups
        zero = arith.rational(Fraction(0))
        self.acc: list[Any] = [zero if rhs is None else rhs for _, rhs in eqs]
        self.free: list[set[int]] = [set(c) for c, _ in eqs]
        self.used = [False] * len(eqs)
        self.occurs: dict[int, list[int]] = {}
        for e, (coeffs, _) in enumerate(eqs):
            for u in coeffs:
                self.occurs.setdefault(u, []).append(e)
        self.known: dict[int, Any] = {}
        self.largest = 0  # the largest block inverted exactly
        self._ready = [e for e, f in enumerate(self.free) if len(f) == 1]
        self._dirty = set(range(len(eqs)))
        self._cands: dict[int, set[int]] = {}
        self._conv: dict[int, Any] = {}

    def _c(self, q: Fraction) -> Any:
        # Keyed by identity (hashing Fractions is slow): coefficients are shared objects,
        # alive in self.eqs for as long as this table is.
        val = self._conv.get(id(q))
        if val is None:
            val = self._conv[id(q)] = self.arith.rational(q)
        return val

    def add(self, eqs: list[tuple[dict[int, Fraction], Any]]) -> None:
        """More equations, their known unknowns substituted now."""
        zero = self.arith.rational(Fraction(0))
        for coeffs, rhs in eqs:
            e = len(self.eqs)
            self.eqs.append((coeffs, rhs))
            acc = zero if rhs is None else rhs
            free = set()
            for u, c in coeffs.items():
                if u in self.known:
                    acc = acc - self._c(c) * self.known[u]
                else:
                    free.add(u)
                    self.occurs.setdefault(u, []).append(e)
            self.acc.append(acc)
            self.free.append(free)
            self.used.append(False)
            self._changed(e)

    def _changed(self, e: int) -> None:
        """Equation e lost an unknown: queue it if one is left; none left is singular."""
        self._dirty.add(e)
        if len(self.free[e]) == 1:
            self._ready.append(e)
        elif not self.free[e]:
            raise CertificateError(
                "the stored probes do not determine the cross (an equation is implied "
                "by the others: singular)"
            )

    def peel(self) -> None:
        """Solve every equation with one unknown left, and what that frees, in turn."""
        self._peel()

    def _set(self, u: int, val: Any) -> None:
        if u in self.known:
            raise CertificateError("two stored probes measure the same cross entry")
        self.known[u] = val
        for e in self.occurs.get(u, ()):
            if self.used[e]:
                continue
            free = self.free[e]
            free.discard(u)
            self.acc[e] = self.acc[e] - self._c(self.eqs[e][0][u]) * val
            self._changed(e)

    def _peel(self) -> bool:
        progress = False
        while self._ready:
            e = self._ready.pop()
            if self.used[e] or len(self.free[e]) != 1:
                continue
            (u,) = self.free[e]
            self.used[e] = True
            progress = True
            self._set(u, self.acc[e] / self._c(self.eqs[e][0][u]))
        return progress

    def _block(self, unknowns: list[int], rows: list[int]) -> None:
        if len(unknowns) != len(rows):
            raise CertificateError(
                f"the cross is not determined: {len(rows)} coupled equations for "
                f"{len(unknowns)} unknowns"
            )
        if len(unknowns) > MAX_REDUCED:
            raise CertificateError(
                f"the coupled part of the cross has {len(unknowns)} unknowns, more than "
                f"{MAX_REDUCED} this checker inverts"
            )
        self.largest = max(self.largest, len(unknowns))
        where = {u: k for k, u in enumerate(unknowns)}
        A = [[Fraction(0)] * len(unknowns) for _ in unknowns]
        for row, e in enumerate(rows):
            for u in self.free[e]:
                A[row][where[u]] = self.eqs[e][0][u]
        Am = fmpq_matrix(A)
        if Am.rank() < len(unknowns):
            raise CertificateError("the stored probes do not determine the cross (singular)")
        sol = apply_exact(
            self.arith, Am.inv(), measured_array(self.arith, [[self.acc[e]] for e in rows])
        )[:, 0]
        for e in rows:
            self.used[e] = True
        for u, val in zip(unknowns, sol, strict=True):
            self._set(u, val)

    def _group_blocks(self) -> bool:
        """Solve every pivot-row block whose equations are ready; whether any was.

        A group's candidates are the unused equations whose unknowns left all lie in it
        (an equation only loses unknowns, so it stays a candidate of its group); as many
        candidates as unknowns among them make a square block.
        """
        start, size = self.groups
        for e in self._dirty:
            if self.used[e] or not self.free[e]:
                continue
            gs = {(u - start) // size if u >= start else -1 for u in self.free[e]}
            if len(gs) == 1 and -1 not in gs:
                self._cands.setdefault(gs.pop(), set()).add(e)
        self._dirty = set()
        progress = False
        for g in sorted(self._cands):
            rows = sorted(e for e in self._cands[g] if not self.used[e])
            if not rows:
                del self._cands[g]
                continue
            unknowns = sorted(set().union(*(self.free[e] for e in rows)))
            if len(unknowns) <= len(rows):  # fewer: the rows are dependent (_block says so)
                del self._cands[g]
                self._block(unknowns, rows)
                progress = True
        return progress

    def solve(self) -> _Elimination:
        while len(self.known) < self.n:
            if self._peel():
                continue
            if self._group_blocks():
                continue
            rows = [e for e in range(len(self.eqs)) if not self.used[e]]
            unknowns = sorted(set(range(self.n)) - set(self.known))
            self._block(unknowns, rows)
        if not all(self.used):
            raise CertificateError("the stored probes do not determine the cross (singular)")
        return self


def _assemble(
    arith: Arithmetic, U_inv: flint.fmpq_mat, Z: np.ndarray, R: np.ndarray, S: list[int], d: int
) -> np.ndarray:
    """W = U^{-T} Z Z[S, :]^{-1} R (W = 0 at rank 0)."""
    r = len(S)
    if r == 0:
        return measured_array(arith, [[arith.rational(Fraction(0))] * d for _ in range(d)])
    ZS = Z[S, :]
    if arith.name == "float":
        try:
            X = np.linalg.solve(np.asarray(ZS, np.float64), np.asarray(R, np.float64))
        except np.linalg.LinAlgError as exc:
            raise CertificateError("the pivot block Z[S, :] is singular") from exc
        C = apply_exact(arith, U_inv.transpose(), np.asarray(Z, np.float64))
        return np.asarray(C, np.float64) @ X
    if arith.name == "certified":
        try:
            X = flint.arb_mat(ZS.tolist()).solve(flint.arb_mat(R.tolist()))
        except (ZeroDivisionError, ValueError) as exc:
            raise CertificateError(
                "the pivot block Z[S, :] cannot be certified invertible at this precision"
            ) from exc
        C = flint.arb_mat(U_inv.transpose()) * flint.arb_mat(Z.tolist())
        Wm = C * X
        return np.array(
            [[Wm[i, j] for j in range(d)] for i in range(d)], dtype=object
        )
    ZSm = sympy.Matrix(ZS.tolist())
    if ZSm.det() == 0:
        raise CertificateError("the pivot block Z[S, :] is singular")
    X = ZSm.LUsolve(sympy.Matrix(R.tolist()))
    C = apply_exact(arith, U_inv.transpose(), Z)
    Wm = sympy.Matrix(C.tolist()) * X
    return np.array(Wm.tolist(), dtype=object)


def _verify_skeleton(data: dict[str, Any], head: Header) -> list[str]:
    d, arith = head.d, head.arith
    tol_raw = get(data, "rank_tol")
    if arith.name == "float":
        if isinstance(tol_raw, bool) or not isinstance(tol_raw, float) or not 0 < tol_raw < 1:
            raise CertificateError(f"rank_tol must be a float in (0, 1), got {tol_raw!r:.80}")
    elif tol_raw is not None:
        raise CertificateError("rank_tol must be null outside float arithmetic")
    cross = _Cross(data, head)
    r = cross.rank
    verification = {"rank", RANK_CHECK} if cross.rank_given is not None else {RANK_CHECK}
    learning, phases, in_ver = _count_phases(cross.probes, d, verification)
    if cross.rank_given is not None:
        g = cross.rank_given
        bound, formula = d + 2 * d * g - g * g, f"d + 2dr - r^2 at the given r = {g}"
    else:
        bound = d + 2 * d * r - r * r + (1 if r < d else 0)
        formula = f"d + 2dr - r^2 + [r < d] at the found r = {r}"
    q = check_counts(
        data,
        learning=learning,
        bound=bound,
        phases=phases,
        verification_phases=(
            "verify", *sorted(verification), "rank-rescale", f"{RANK_CHECK}-rescale"
        ),
    )
    extra = set(q["by_phase"]) - {*phases, "verify"}
    if extra:
        raise CertificateError(f"queries.by_phase has unknown phases {sorted(extra)}")
    rescales = learning - d - sum(1 for p in cross.probes if p.phase not in verification)
    lines = [
        f"queries: {q['learning']} learning (bound {bound} = {formula}"
        + (f", + {rescales} re-asked probes" if rescales else "")
        + f"); {q['verification']} verification",
        f"cross: re-solved {2 * d * r} unknowns of Z = U^T W B and R = U_S^T W from "
        f"{cross.n_probe_equations} probes and {r * r} pivot constraints ("
        + (
            f"substitution and exact inverses of blocks of at most {cross.coupled} unknowns"
            if cross.coupled
            else "substitution alone"
        )
        + "); W = U^-T Z Z_S^-1 R",
    ]
    exact = as_bool(get(data, "result.exact"), "result.exact")
    if arith.name == "exact" and not exact:
        raise CertificateError("result.exact is false in exact arithmetic")
    if arith.name == "float" and exact:
        raise CertificateError("result.exact is true in float arithmetic")
    with arith.context():
        claimed = _claimed(data, head, exact)
        decoded = {"W": list(np.asarray(cross.W, dtype=object).reshape(-1)), "v": cross.v}
        lines.append(_compare(arith, exact, claimed, decoded))
        lines.append(_rank_checks(cross, claimed, exact, tol_raw))
        lines.append(
            check_verification(
                data,
                head,
                _predictor(head, claimed, exact),
                expected_queries=q["verification"] - in_ver,
            )
        )
    return lines


def _rank_checks(
    cross: _Cross, claimed: dict[str, list[tuple[str, Any]]], exact: bool, rank_tol: Any
) -> str:
    """Every probe on next_b agrees with the claimed W (the rank is no larger)."""
    d, arith = cross.d, cross.arith
    Wc = [x for _, x in claimed["W"]]
    vmax = max((arith.magnitude(x) for x in cross.v), default=0.0)
    Wf: np.ndarray | None = None
    for i in cross.checks:
        p, m = cross.probes[i], cross.measured[i]
        path = f"answers.probes[{i}]"
        if arith.name == "float":
            if Wf is None:
                Wf = np.array([float(x) for x in Wc]).reshape(d, d)
            uf = np.array([float(q) for q in p.u])
            bf = np.array([float(q) for q in p.b])
            pred = float(uf @ Wf @ bf)  # sum_a,c u_a W_ac b_c
            size = float(np.abs(uf) @ np.abs(Wf) @ np.abs(bf))  # sum of |terms|
            g1 = sum(abs(float(q)) for q in cross.coordinates(p.u).values())
            scale = max(abs(float(m)), size, 1e4 * _EPS * (1 + g1) * vmax)
            if abs(float(m) - pred) > rank_tol * scale:
                raise CertificateError(
                    f"{path}: u^T W b = {pred!r} for the claimed W, the answer gives {m!r}: "
                    f"more than rank_tol {rank_tol:g} apart, so rank W exceeds the claim"
                )
            continue
        pred = arith.rational(Fraction(0))
        for a in range(d):
            if not p.u[a]:
                continue
            for c in range(d):
                if p.b[c]:
                    w = Wc[a * d + c]
                    w = arith.rational(w) if isinstance(w, Fraction) else w
                    pred = pred + arith.rational(p.u[a] * p.b[c]) * w
        if not arith.agree(m, pred):
            raise CertificateError(
                f"{path}: u^T W b = {pred} for the claimed W, but the answer gives {m}: "
                "the rank exceeds the claim"
            )
    if not cross.checks:
        if cross.rank < d:
            raise CertificateError(
                f"no stored probe on design.next_b: nothing shows that rank W is not above "
                f"{cross.rank}"
            )
        return "rank: full rank, nothing to check"
    return (
        f"rank: {len(cross.checks)} probes on the next column agree with the claimed W "
        f"(rank {cross.rank})"
    )


# ---------------------------------------------------------------------------------------
# Claimed parameters, comparison, prediction.
# ---------------------------------------------------------------------------------------


def _claimed(data: dict[str, Any], head: Header, exact: bool) -> dict[str, list[tuple[str, Any]]]:
    """Claimed W, v as flat lists of (label, number); exact results as Fractions."""
    d, arith = head.d, head.arith
    params = get(data, "result.parameters")
    if not isinstance(params, dict):
        raise CertificateError("result.parameters must be a JSON object")
    extra = set(params) - {"W", "v"}
    if extra:
        raise CertificateError(f"result.parameters has unexpected entries {sorted(extra)}")
    want = exact and arith.name != "float"
    out: dict[str, list[tuple[str, Any]]] = {}
    for name in ("W", "v"):
        raw = get(params, name)
        path = f"result.parameters.{name}"
        if name == "W":
            labels = [
                (f"W[{i}][{j}]", x)
                for i, row in enumerate(as_matrix(raw, path, d, d))
                for j, x in enumerate(row)
            ]
        else:
            labels = [(f"v[{i}]", x) for i, x in enumerate(as_list(raw, path, d))]
        entries = []
        for label, x in labels:
            if want:
                if not (isinstance(x, dict) and set(x) == {"rational"}):
                    raise CertificateError(f"result {label}: an exact result stores rationals")
                entries.append((label, rational(x["rational"], f"result {label}")))
            else:
                entries.append((label, number(x, f"result {label}", arith)))
        out[name] = entries
    return out


def _show(q: Fraction) -> str:
    return str(q.numerator) if q.denominator == 1 else f"{q.numerator}/{q.denominator}"


def _compare(
    arith: Arithmetic,
    exact: bool,
    claimed: dict[str, list[tuple[str, Any]]],
    decoded: dict[str, list[Any]],
) -> str:
    if arith.name == "exact":
        for name, entries in claimed.items():
            for (label, q), again in zip(entries, decoded[name], strict=True):
                if sympy.Rational(q.numerator, q.denominator) != again:
                    raise CertificateError(
                        f"result {label}: claimed {_show(q)}, the stored answers give {again}"
                    )
        return "result: the claimed W, v == those re-solved exactly from the answers"
    if arith.name == "float":
        worst = 0.0
        for name, entries in claimed.items():
            again = [float(x) for x in decoded[name]]
            scale = max([abs(y) for y in again] + ([1.0] if name == "W" else [0.0]))
            for (label, x), y in zip(entries, again, strict=True):
                if not math.isfinite(y):
                    raise CertificateError(f"result {label}: the stored answers give {y}")
                err = abs(float(x) - y)
                if err > FLOAT_RTOL * max(scale, abs(float(x))):
                    raise CertificateError(
                        f"result {label}: claimed {float(x)!r}, the stored answers give {y!r} "
                        f"(differ by {err:.3e}, more than {FLOAT_RTOL:g} relative)"
                    )
                if scale:
                    worst = max(worst, err / scale)
        return (
            f"result: the claimed W, v agree with the re-solved ones to {worst:.2e} relative "
            f"(allowed {FLOAT_RTOL:g})"
        )
    if exact:
        bound: int | None = None
        for name, entries in claimed.items():
            for (label, q), ball in zip(entries, decoded[name], strict=True):
                lo, hi = arb_bounds(ball)
                if not lo <= q <= hi:
                    raise CertificateError(
                        f"result {label}: claimed {_show(q)} lies outside the ball {ball} "
                        "re-solved from the stored answers"
                    )
                D = largest_unique_denominator(lo, hi)
                if D is not None and q.denominator > D:
                    raise CertificateError(
                        f"result {label}: claimed {_show(q)} is not the only rational of its "
                        f"denominator in the ball {ball} (unique only up to denominator {D})"
                    )
                if D is not None:
                    bound = D if bound is None else min(bound, D)
        where = "any denominators" if bound is None else f"denominators <= {bound}"
        return (
            "result: every claimed rational lies in its re-solved ball, the only rational "
            f"there with {where}"
        )
    for name, entries in claimed.items():
        for (label, ball), again in zip(entries, decoded[name], strict=True):
            lo, hi = arb_bounds(ball)
            lo2, hi2 = arb_bounds(again)
            if not (lo <= lo2 and hi2 <= hi):
                raise CertificateError(
                    f"result {label}: the claimed ball {ball} does not contain the ball "
                    f"{again} re-solved from the stored answers"
                )
    return "result: every claimed ball contains the ball re-solved from the stored answers"


def _predictor(head: Header, claimed: dict[str, list[tuple[str, Any]]], exact: bool) -> Any:
    """f(X) of the claimed head in the certificate's arithmetic."""
    d, arith = head.d, head.arith
    flat = [x for _, x in claimed["W"]]
    W = [flat[i * d : (i + 1) * d] for i in range(d)]
    v = [x for _, x in claimed["v"]]
    if arith.name == "certified" and not exact:

        def balls(X: np.ndarray) -> Any:
            rows = [[flint.arb(float(x)) for x in row] for row in X]
            return attention_output(rows, W, v, None, flint.arb(0), exp=lambda s: s.exp())

        return balls
    try:
        model = SingleHeadAttention(W, v)
    except VerifiedAttnError as exc:
        raise CertificateError(f"the claimed parameters are not a model: {exc}") from exc

    def evaluate(X: np.ndarray) -> Any:
        if arith.name == "float":
            return float(model.evaluate_batch(np.asarray(X, dtype=np.float64)[None])[0])
        return model.evaluate_rational(as_rational_sequence(X, d), arith)

    return evaluate


# ---------------------------------------------------------------------------------------
# Nuclear.
# ---------------------------------------------------------------------------------------


def _verify_nuclear(data: dict[str, Any], head: Header) -> list[str]:
    d, arith = head.d, head.arith
    if arith.name != "float":
        raise CertificateError("a nuclear certificate is float arithmetic only")
    given = get(data, "rank_given")
    if given is not None:
        as_int(given, "rank_given", low=1, high=d)
    m = as_int(get(data, "measurements"), "measurements", low=1, high=d * d)
    v = numbers(get(data, "answers.v"), "answers.v", arith, d)
    probes = _probes(data, head)
    if len(probes) != m or any(p.phase != "rop" for p in probes):
        raise CertificateError(
            f"answers.probes must hold the {m} rank-one probes (phase 'rop'), got {len(probes)}"
        )
    learning, phases, _ = _count_phases(probes, d, set())
    q = check_counts(data, learning=learning, bound=d + m, phases=phases)
    extra = set(q["by_phase"]) - {*phases, "verify"}
    if extra:
        raise CertificateError(f"queries.by_phase has unknown phases {sorted(extra)}")
    if as_bool(get(data, "result.exact"), "result.exact"):
        raise CertificateError("result.exact is true in float arithmetic")
    claimed = _claimed(data, head, False)
    cv = [float(x) for _, x in claimed["v"]]
    for i, (x, y) in enumerate(zip(cv, v, strict=True)):
        if x != float(y):
            raise CertificateError(f"result v[{i}]: claimed {x!r}, the answer to [e_{i}] is {y!r}")
    W = np.array([float(x) for _, x in claimed["W"]]).reshape(d, d)
    t = np.array(_measure_all(arith, v, probes))
    a = np.array([[float(x) for x in p.u] for p in probes])
    b = np.array([[float(x) for x in p.b] for p in probes])
    fit = np.einsum("ki,ij,kj->k", a, W, b)
    scale = float(np.linalg.norm(t))
    gap = float(np.linalg.norm(fit - t))
    again = gap / scale if scale else gap
    reported = float(number(get(data, "result.residual"), "result.residual", arith))
    if not _close(reported, again):
        raise CertificateError(
            f"result.residual is {reported:.6e}, the stored answers and the claimed W give "
            f"{again:.6e}"
        )
    rescales = learning - d - m
    predict = _predictor(head, claimed, False)
    verified = check_verification(data, head, predict)  # parses the section first
    return [
        f"queries: {q['learning']} learning (bound d + m = {d + m}"
        + (f", + {rescales} re-asked probes" if rescales else "")
        + f"); {q['verification']} verification",
        f"measurements: {m} rank-one probes re-decoded; the claimed W fits them with "
        f"relative residual {again:.3e} (reported {reported:.3e})",
        verified,
        _verification_error(data, head, predict),
    ]


def _close(a: float, b: float) -> bool:
    return math.isfinite(b) and abs(a - b) <= RESIDUAL_RTOL * max(abs(a), abs(b)) + RESIDUAL_ATOL


def _verification_error(data: dict[str, Any], head: Header, predict: Any) -> str:
    """The reported largest relative gap on the fresh sequences, recomputed here."""
    from verified_attn.verification import agree, float_floor, fresh_sequences

    ver = get(data, "verification")
    count, seed = ver["count"], ver["seed"]  # validated by check_verification
    raw = get(data, "result.verification_error")
    if count == 0:
        if raw is not None:
            raise CertificateError("result.verification_error must be null when not verified")
        return "verification error: none (not verified)"
    reported = float(number(raw, "result.verification_error", head.arith))
    answers = [float(a) for a in numbers(ver["answers"], "verification.answers", head.arith)]
    sequences = fresh_sequences(head.d, count, seed, tuple(ver["lengths"]))
    floor = float_floor(answers, 0.0)
    worst = max(
        agree(head.arith, a, predict(X), floor=floor)[1]
        for X, a in zip(sequences, answers, strict=True)
    )
    if not _close(reported, worst):
        raise CertificateError(
            f"result.verification_error is {reported:.6e}, the stored verification answers "
            f"give {worst:.6e}"
        )
    return f"verification error: the largest relative gap {worst:.3e} is the reported one"
