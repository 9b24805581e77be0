"""Rationals as Coq text, and the precision Coq Interval needs for a run's probes.

>>> from fractions import Fraction
>>> coq_q(Fraction(-1, 3)), coq_q(Fraction(4))
('(-1 # 3)%Q', '(4)%Q')
>>> print(vec_table("x", [Fraction(1, 2)], "0", "A vector."))
(** A vector. *)
Definition x : qvec := fun i => match i with
  | 0%nat => (1 # 2)%Q
  | _ => 0%Q
  end.
<BLANKLINE>

The exported files state every number as a rational of Coq's ``Q``; the helpers here
read certificate entries into :class:`~fractions.Fraction` and print them back.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction
from typing import Any, NamedTuple

import mpmath

from verified_attn.arithmetic import fmpq_matrix
from verified_attn.certificates.kernel import as_list, as_matrix, rational
from verified_attn.errors import CertificateError

__all__ = [
    "Probe",
    "ball",
    "bracket_delta",
    "bracket_tactic",
    "certified_header",
    "coq_q",
    "enum_tactics",
    "exact_entry",
    "head_tables",
    "inverse",
    "mat_table",
    "mpf",
    "probe_precision",
    "probe_tables",
    "rational_matrix",
    "rational_vector",
    "vec_table",
]


class Probe(NamedTuple):
    """One two-token probe: its answer is a + s sigmoid(t m); recorded in [lo, hi]."""

    a: Fraction
    s: Fraction
    t: Fraction
    m: Fraction
    mlo: Fraction
    mhi: Fraction
    lo: Fraction
    hi: Fraction


def rational_matrix(raw: Any, path: str, rows: int, cols: int) -> list[list[Fraction]]:
    """A rows x cols matrix of "p/q" entries read into fractions (errors name the entry)."""
    return [
        [rational(q, f"{path}[{i}][{j}]") for j, q in enumerate(row)]
        for i, row in enumerate(as_matrix(raw, path, rows, cols))
    ]


def rational_vector(raw: Any, path: str, n: int | None) -> list[Fraction]:
    """A vector of "p/q" entries (of length n if given) read into fractions."""
    return [rational(q, f"{path}[{i}]") for i, q in enumerate(as_list(raw, path, n))]


def ball(x: Any, path: str) -> tuple[Fraction, Fraction]:
    """The interval [mid - rad, mid + rad] of a certified answer {'arb': [mid, rad]}."""
    if not (isinstance(x, dict) and set(x) == {"arb"}):
        raise CertificateError(f"{path}: a certified answer is a ball {{'arb': [mid, rad]}}")
    mid, rad = as_list(x["arb"], path, 2)
    m, r = rational(mid, f"{path}.mid"), rational(rad, f"{path}.rad")
    if r < 0:
        raise CertificateError(f"{path}: negative radius")
    return m - r, m + r


def exact_entry(x: Any, path: str) -> Fraction:
    """A result entry {'rational': 'p/q'}; anything else is refused."""
    if not (isinstance(x, dict) and set(x) == {"rational"}):
        raise CertificateError(f"{path}: the exported result must be exact rationals")
    return rational(x["rational"], path)


def inverse(U: list[list[Fraction]]) -> list[list[Fraction]]:
    """U^{-1}, or zeros when U is singular (Coq's check of U Uinv = I then fails)."""
    m = fmpq_matrix(U)
    if m.det() == 0:
        return [[Fraction(0)] * len(U) for _ in U]
    inv = m.inv()
    d = len(U)
    return [[Fraction(int(inv[i, j].p), int(inv[i, j].q)) for j in range(d)] for i in range(d)]


def bracket_delta(Uinv: list[list[Fraction]], D: int, den: int) -> Fraction:
    """Half-width of the logit brackets: U^{-T} maps errors below it to widths < 1/(D den)."""
    d = len(Uinv)
    spread = max(1, math.ceil(max(sum(abs(Uinv[k][i]) for k in range(d)) for i in range(d))))
    return Fraction(1, 2 ** ((4 * D * den * spread).bit_length() + 2))


def mpf(q: Fraction) -> Any:
    """q as an mpmath number at the working precision."""
    return mpmath.mpf(q.numerator) / q.denominator


def probe_precision(probes: Sequence[Probe], delta: Fraction) -> tuple[int, int]:
    """Bits for [interval]: to show each answer in [lo, hi], and each bracket outside it."""
    bits = br_bits = 53
    with mpmath.workprec(4 * max(256, delta.denominator.bit_length()) + 64):
        for p in probes:
            scale = mpf(max(Fraction(1), abs(p.a), abs(p.s)))

            def g(mm: Fraction, p: Probe = p) -> Any:
                return mpf(p.a) + mpf(p.s) / (1 + mpmath.exp(-mpf(p.t) * mpf(mm)))

            hold = min(g(p.m) - mpf(p.lo), mpf(p.hi) - g(p.m))
            sign = 1 if p.s > 0 else -1
            br = min(sign * (mpf(p.lo) - g(p.mlo)), sign * (g(p.mhi) - mpf(p.hi)))
            if hold > 0:
                bits = max(bits, int(mpmath.log(scale / hold, 2)) + 24)
            if br > 0:
                br_bits = max(br_bits, int(mpmath.log(scale / br, 2)) + 24)
    return bits, br_bits


def coq_q(q: Fraction) -> str:
    """A rational as a Coq ``Q`` literal."""
    return f"({q.numerator})%Q" if q.denominator == 1 else f"({q.numerator} # {q.denominator})%Q"


def vec_table(name: str, xs: list[Fraction], default: str, doc: str) -> str:
    """A ``qvec`` definition listing xs (``default`` past the end)."""
    rows = "\n".join(f"  | {i}%nat => {coq_q(q)}" for i, q in enumerate(xs))
    return (
        f"(** {doc} *)\nDefinition {name} : qvec := fun i => match i with\n{rows}\n"
        f"  | _ => {default}%Q\n  end.\n"
    )


def mat_table(name: str, xs: list[list[Fraction]], default: str, doc: str) -> str:
    """A ``qmat`` definition listing xs[i][j] (``default`` elsewhere)."""
    rows = "\n".join(
        f"  | {i}%nat, {j}%nat => {coq_q(q)}" for i, row in enumerate(xs) for j, q in enumerate(row)
    )
    return (
        f"(** {doc} *)\nDefinition {name} : qmat := fun i j => match i, j with\n{rows}\n"
        f"  | _, _ => {default}%Q\n  end.\n"
    )


def head_tables(x: dict[str, Any]) -> list[str]:
    """The certified affine head (W_c, c_c, v_c, beta_c) and the design (U, t_probe,
    tc_probe) of a single-head file (a plain head: c = 0, beta = 0).

    >>> one = [[Fraction(1)]]
    >>> x = {"W": one, "c": [0], "v": [2], "beta": 0, "U": one, "t": one, "tc": [1]}
    >>> [t.split(" :")[0].split()[-1] for t in head_tables(x)][:4]
    ['W_c', 'c_c', 'v_c', 'beta_c']
    """
    return [
        mat_table("W_c", x["W"], "0", "The certified W (row i, column j)."),
        vec_table("c_c", x["c"], "0", "The certified score bias c."),
        vec_table("v_c", x["v"], "0", "The certified v."),
        f"(** The certified output bias. *)\nDefinition beta_c : Q := {coq_q(x['beta'])}.\n",
        mat_table("U", x["U"], "0", "The design: u_k is column k."),
        mat_table("t_probe", x["t"], "0", "t_kj: the query [e_j + t_kj u_k; e_j]."),
        vec_table("tc_probe", x["tc"], "0", "tc_k: the query [tc_k u_k; 0]."),
    ]


def probe_tables(
    wb: list[list[tuple[Fraction, Fraction]]], Uinv: list[list[Fraction]]
) -> list[str]:
    """The tables w_lo, w_hi bracketing every recorded probe answer (``wb[k][j]``), then the
    auxiliary numbers' heading and the inverse U_inv of the design.

    >>> one = Fraction(1)
    >>> print(probe_tables([[(one, 2 * one)]], [[one]])[2])
    (** Auxiliary numbers for the proof (any wrong one makes it fail). *)
    """
    return [
        mat_table(
            "w_lo",
            [[b[0] for b in row] for row in wb],
            "1",
            "The recorded answer to [e_j + t_kj u_k; e_j] lies in [w_lo k j, w_hi k j].",
        ),
        mat_table("w_hi", [[b[1] for b in row] for row in wb], "0", "(upper ends)"),
        "(** Auxiliary numbers for the proof (any wrong one makes it fail). *)",
        mat_table("U_inv", Uinv, "0", "An inverse of U."),
    ]


def bracket_tactic(br_prec: int) -> str:
    """The Coq tactic that closes one probe's bracket goal: either side of the disjunction,
    each by Coq Interval (at 60 bits, then at ``br_prec``).

    >>> bracket_tactic(80).count("i_prec 80")
    2
    """
    return (
        f"first [left; split; [interval with (i_prec 60)|split; interval with (i_prec {br_prec})]\n"
        f"          | right; split; [interval with (i_prec 60)|split; interval with (i_prec {br_prec})]]"
    )


def enum_tactics(unfold: str) -> list[str]:
    """The tactics a certified run's proof uses: ``enum`` splits an index below d into its
    cases, ``data`` unfolds the file's tables (``unfold``) in one probe's goal.

    >>> print(enum_tactics("W_c")[1])
    Ltac data := cbv beta iota zeta delta [W_c].
    <BLANKLINE>
    """
    return [
        "Ltac enum k H := destruct k as [|k];\n"
        "  [idtac | tryif (exfalso; lia) then idtac else enum k H].\n",
        f"Ltac data := cbv beta iota zeta delta [{unfold}].\n",
    ]


def certified_header(x: dict[str, Any], what: str, head: str, queries: str, instance: str) -> str:
    """The header of a certified run's file: the certificate, then ``run_identified`` in words.

    ``what`` names the model, ``head`` the certified parameters, ``queries`` the recorded
    queries and ``instance`` the general theorem the proof instantiates (its file).

    >>> x = {"describe": "d = 1", "sha256": "0" * 8, "D": 4}
    >>> text = certified_header(x, "head", "(W_c, v_c)", "2 queries", "CertHead.plain_identified")
    >>> "denominators at most D = 4" in text and "[CertHead.plain_identified]" in text
    True
    """
    module = instance.split(".")[0]
    return (
        f"(** * A certified {what}, checked by Coq's kernel.\n\n"
        f"    Certificate: {x['describe']}; sha256 {x['sha256']}.\n\n"
        "    Theorem [run_identified] (at the end of this file) states, with the recorded data\n"
        "    below:\n"
        f"    1. the certified head {head} answers each of the\n"
        f"       {queries}\n"
        "       inside its recorded interval;\n"
        f"    2. its entries are rationals with denominators at most D = {x['D']};\n"
        "    3. every head over the reals whose entries are rationals with denominators at most\n"
        "       D and that answers every recorded query inside its interval is the certified\n"
        "       head.\n"
        f"    It instantiates [{instance}] (formal/{module}.v),\n"
        "    proved for every d; the checks over Q run by computation, each probe's\n"
        "    inequalities about exp are proved by Coq Interval. *)\n"
    )
