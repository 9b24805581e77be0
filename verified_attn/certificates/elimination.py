"""Exact block elimination of a square linear system whose right-hand sides are measured.

>>> from fractions import Fraction
>>> from verified_attn.arithmetic import get_arithmetic
>>> exact = get_arithmetic("exact")
>>> one = Fraction(1)
>>> eqs = [({0: one, 1: one}, exact.rational(Fraction(3))), ({0: one}, exact.rational(Fraction(1)))]
>>> x = Elimination(exact, eqs, 2, groups=(2, 2)).solve()
>>> x.known
{0: 1, 1: 2}
>>> Elimination(exact, [({0: one}, 1), ({0: one}, 2)], 1, groups=(1, 1)).solve()
Traceback (most recent call last):
...
verified_attn.errors.CertificateError: the stored probes do not determine the cross (an equation is implied by the others: singular)

The low-rank checker re-solves the cross ``Z = U^T W B``, ``R = U_S^T W`` with it: the
coefficients are the exact probe coordinates, the right-hand sides the numbers re-decoded
from the stored answers (exact, balls or floats), so every step is exact linear algebra on
the coefficients and the certificate's arithmetic on the values.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import flint
import numpy as np

from verified_attn.arithmetic import Arithmetic, fmpq_matrix
from verified_attn.errors import CertificateError
from verified_attn.probing import apply_exact, measured_array

__all__ = ["MAX_REDUCED", "Elimination", "Product"]

#: Largest block of the cross a checker inverts exactly (at most r + 1 for the skeleton's
#: own certificates, whose pivot rows decouple).
MAX_REDUCED = 1200


class Product:
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
            return [
                float(y) for y in self.M @ np.array([0.0 if v is None else float(v) for v in x])
            ]
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


class Elimination:
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

    def solve(self) -> Elimination:
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
