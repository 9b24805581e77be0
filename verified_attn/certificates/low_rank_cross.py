"""The low-rank checker's probes and the skeleton's cross re-solved from them.

>>> import verified_attn as va
>>> from verified_attn.certificates.kernel import parse_header
>>> from verified_attn.certificates.low_rank_cross import Cross
>>> W = [[2, 4, 0], [1, 2, 0], [-1, -2, 0]]
>>> data = va.learn_low_rank(va.Oracle(va.SingleHeadAttention(W, [1, 0, 1]), "exact")).certificate()
>>> cross = Cross(data, parse_header(data, "low-rank"))
>>> cross.rank, cross.W[0][0], len(cross.checks)
(1, 2, 1)

Every probe is a two-token query ``[b + t u; b]`` (see :mod:`~verified_attn.certificates.low_rank`);
it re-decodes to ``m = u^T W b``. The skeleton's learning probes are linear equations in the
unknowns ``Z = U^T W B`` and ``R = U_S^T W``; the probes on ``next_b`` (and those of the
phase ``rank-check``) are the rank checks, kept apart.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import flint
import numpy as np
import sympy

from verified_attn.arithmetic import Arithmetic, fmpq_matrix
from verified_attn.certificates import kernel
from verified_attn.certificates.common_checks import logit, rescales
from verified_attn.certificates.elimination import Elimination, Product
from verified_attn.errors import CertificateError
from verified_attn.probing import apply_exact, measured_array

__all__ = ["RANK_CHECK", "Cross", "Probe", "count_phases", "measure_all", "read_probes"]

#: The learner's second rank-0 test (a declared verification phase): a check, never an
#: equation of the cross, whatever column it is on.
RANK_CHECK = "rank-check"


@dataclass(frozen=True)
class Probe:
    """One stored probe: its phase, vectors, scale t = 16^-rescales and answer."""

    phase: str
    u: list[Fraction]
    b: list[Fraction]
    t: Fraction
    answer: Any
    rescales: int
    iu: int  # u's index in the probe-vector table (equal vectors, equal index)
    ib: int


def _vector(raw: Any, path: str, d: int, seen: dict[str, Fraction] | None = None) -> list[Fraction]:
    """d exact rationals; ``seen`` caches strings already parsed (probes repeat a few)."""
    out = []
    for i, q in enumerate(kernel.as_list(raw, path, d)):
        x = seen.get(q) if seen is not None and isinstance(q, str) else None
        if x is None:
            x = kernel.rational(q, f"{path}[{i}]")
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


def read_probes(data: dict[str, Any], head: kernel.Header) -> list[Probe]:
    """The stored probes; a probe's u and b are d rationals or an index into
    ``answers.vectors`` (the table of distinct probe vectors the writer stores)."""
    d, arith = head.d, head.arith
    raw = kernel.as_list(kernel.get(data, "answers.probes"), "answers.probes")
    answers = kernel.get(data, "answers")
    table_raw = answers.get("vectors") if isinstance(answers, dict) else None
    table_raw = [] if table_raw is None else kernel.as_list(table_raw, "answers.vectors")
    inline = sum(
        1
        for p in raw
        if isinstance(p, dict) and any(isinstance(p.get(k), list) for k in ("u", "b"))
    )
    # What the checker reads: the table's vectors, the inline ones, and a few per probe.
    if (len(table_raw) + 2 * inline) * d + 4 * len(raw) > kernel.MAX_ENTRIES:
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
    for path, p in kernel.as_objects(raw, "answers.probes"):
        phase = kernel.get(p, "phase")
        if not isinstance(phase, str) or not 0 < len(phase) <= 32:
            raise CertificateError(f"{path}.phase must be a short string")
        raw_t = kernel.get(p, "scale")
        parsed = scales.get(raw_t) if isinstance(raw_t, str) else None
        if parsed is None:
            t = kernel.rational(raw_t, f"{path}.scale")
            parsed = (t, rescales(t, f"{path}.scale", most=64))
            if isinstance(raw_t, str) and len(scales) < 64:
                scales[raw_t] = parsed
        iu, ib = vector(kernel.get(p, "u"), f"{path}.u"), vector(kernel.get(p, "b"), f"{path}.b")
        out.append(
            Probe(
                phase,
                vectors[iu],
                vectors[ib],
                parsed[0],
                kernel.number(kernel.get(p, "answer"), f"{path}.answer", arith),
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


def measure_all(arith: Arithmetic, v: list[Any], probes: list[Probe]) -> list[Any]:
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


def _decode(arith: Arithmetic, p: Probe, uv: Any, bv: Any, path: str) -> Any:
    t = arith.rational(p.t)
    y = (p.answer - bv) / (t * uv)
    return logit(arith, y, path) / (float(p.t) if arith.name == "float" else t)


def count_phases(
    probes: list[Probe], d: int, verification: set[str]
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


class Cross:
    """The skeleton's stored design and probes, and the cross re-solved from them."""

    def __init__(self, data: dict[str, Any], head: kernel.Header) -> None:
        d, arith = head.d, head.arith
        self.d, self.arith = d, arith
        self.rank = kernel.as_int(kernel.get(data, "rank"), "rank", low=0, high=d)
        given = kernel.get(data, "rank_given")
        self.rank_given = (
            None if given is None else kernel.as_int(given, "rank_given", low=1, high=d)
        )
        if self.rank_given is not None and self.rank > self.rank_given:
            raise CertificateError(f"rank {self.rank} exceeds rank_given {self.rank_given}")
        r = self.rank
        design = kernel.get(data, "design")
        seen: dict[str, Fraction] = {}  # U repeats a few strings ("0/1", "1/1") d^2 times
        self.U = [
            _vector(row, f"design.U[{i}]", d, seen)
            for i, row in enumerate(kernel.as_matrix(kernel.get(design, "U"), "design.U", d, d))
        ]
        U = _exact_matrix(self.U)
        if U.rank() < d:
            raise CertificateError("design.U is singular")
        self.U_inv = U.inv()
        # Which probe vectors are design columns u_k (most are): no solve needed for them.
        self.columns = {_key([self.U[i][k] for i in range(d)]): k for k in range(d)}
        basis = kernel.as_list(kernel.get(design, "basis"), "design.basis", r)
        self.B = [_vector(b, f"design.basis[{j}]", d) for j, b in enumerate(basis)]
        self.S = [
            kernel.as_int(s, f"design.pivots[{m}]", high=d - 1)
            for m, s in enumerate(kernel.as_list(kernel.get(design, "pivots"), "design.pivots", r))
        ]
        if len(set(self.S)) != r:
            raise CertificateError("design.pivots must be distinct rows")
        nb = kernel.get(design, "next_b")
        if (nb is None) != (r == d):
            raise CertificateError(
                "design.next_b must be given exactly when rank < d (the column that "
                "certifies the rank)"
            )
        self.next_b = None if nb is None else _vector(nb, "design.next_b", d)
        with arith.context():
            self.v = kernel.numbers(kernel.get(data, "answers.v"), "answers.v", arith, d)
            self.probes = read_probes(data, head)
            self.measured = measure_all(arith, self.v, self.probes)
            self._solve()

    def coordinates(self, u: list[Fraction]) -> dict[int, Fraction]:
        """``g = U^-1 u`` as {index: nonzero entry} (a unit vector for a design column)."""
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
        x = Elimination(arith, eqs, n, groups=(d * r, d))
        x.peel()  # the probes' own unknowns first: most entries of Z and R are measured
        x.add(self._pivot_constraints(x.known))
        x.solve()
        self.coupled = x.largest
        Z = measured_array(arith, [[x.known[a * r + j] for j in range(r)] for a in range(d)])
        R = measured_array(
            arith, [[x.known[d * r + m * d + col] for col in range(d)] for m in range(r)]
        )
        self.W = _assemble(arith, self.U_inv, Z, R, self.S, d)

    def _pivot_constraints(self, known: dict[int, Any]) -> list[tuple[dict[int, Fraction], Any]]:
        """Z[s_m, j] = R[m, :] b_j for every pivot row m and column j, the R entries already
        known moved to the right-hand side in one product per row (float: NumPy; certified:
        an arb matrix product; exact: sums), so each equation keeps only its unknowns."""
        d, r, arith = self.d, self.rank, self.arith
        zero = arith.rational(Fraction(0))
        product = Product(arith, self.B)
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
            Xb = flint.arb_mat(ZS.tolist()).solve(flint.arb_mat(R.tolist()))
        except (ZeroDivisionError, ValueError) as exc:
            raise CertificateError(
                "the pivot block Z[S, :] cannot be certified invertible at this precision"
            ) from exc
        Cb = flint.arb_mat(U_inv.transpose()) * flint.arb_mat(Z.tolist())
        Wm = Cb * Xb
        return np.array([[Wm[i, j] for j in range(d)] for i in range(d)], dtype=object)
    ZSm = sympy.Matrix(ZS.tolist())
    if ZSm.det() == 0:
        raise CertificateError("the pivot block Z[S, :] is singular")
    X = ZSm.LUsolve(sympy.Matrix(R.tolist()))
    C = apply_exact(arith, U_inv.transpose(), Z)
    Wm = sympy.Matrix(C.tolist()) * X
    return np.array(Wm.tolist(), dtype=object)
