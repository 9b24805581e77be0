"""Parts 7 and 8 of an exported certified multi-head file: from the recorded intervals.

>>> from fractions import Fraction
>>> close_bound(1, 1, 4) == 5 * (1 + 2 * 5 * 5 * 3 * 16) ** 2
True
>>> close_params(1, [Fraction(1, 3)], [Fraction(3, 2**201)], 4) == (1, Fraction(1, 2**199))
True
>>> close_params(1, [Fraction(1, 3)], [Fraction(1, 2**20)], 4) is None  # too wide
True

``CertMultiHeadBound.mh_pairs_close`` turns answers known to lie in the recorded intervals
into the certified (residue, score) pairs at every pair of the design, for every model that
meets the stated assumption: every score u^T W_h b and residue u^T v_h at the design's
pairs is a rational with denominator at most D, and every score lies in [-Sm, Sm]. Its
check ``check_close`` (over Q, in the file) asks that every recorded interval be at most
eps wide and that kz(H0, Sm, D) * 2 eps * D^(2 H0) < 1, kz the integer bound
:func:`close_bound` on the constant of the quantitative Cauchy elimination. The exporter
picks Sm (the smallest natural above the certified scores) and eps (the smallest power of
two above the widest interval) and states parts 7 and 8 only when that check passes here
first; a wrong Sm or eps can only make the proof fail. The certified learner asks its
learning queries at :func:`~verified_attn.multi_head.canonical_bounds.answer_precision`
bits, enough for this check under its D for scores in [-4, 4].
"""

from __future__ import annotations

import math
from fractions import Fraction

# The learner sizes its answers' precision by the same bound (answer_precision).
from verified_attn.multi_head.canonical_bounds import close_bound

__all__ = ["close_bound", "close_header", "close_params", "close_parts"]


def close_params(
    H0: int, scores: list[Fraction], widths: list[Fraction], D: int
) -> tuple[int, Fraction] | None:
    """(Sm, eps) for ``check_close``, or None when the intervals are too wide for D (the
    bits the run would need: log2 of close_bound * 2 * D^(2 H0))."""
    Sm = math.ceil(max((abs(s) for s in scores), default=Fraction(0)))
    widest = Fraction(max(widths))
    eps = Fraction(0)
    if widest > 0:  # the smallest power of two >= widest, in integers (a float log2
        # underflows below 2^-1074: a run asked at 1297 bits)
        e = widest.numerator.bit_length() - widest.denominator.bit_length()
        eps = Fraction(2) ** (e + 1)
        while eps / 2 >= widest:
            eps /= 2
    if close_bound(H0, Sm, D) * 2 * eps * D ** (2 * H0) < 1:
        return Sm, eps
    return None


def close_parts(d: int, H0: int, part8: bool, run: str = "run") -> tuple[str, str]:
    """(the statement of parts 7 and 8, their proof bullets) for ``run_consistent``, about
    the Coq run ``run`` (``run_h``: a run that found fewer heads, read with H0 = H)."""
    hold = "hold" if run == "run" else "hold_h"
    inside = (
        f"  (forall hs' : list head, (length hs' <= {H0})%nat -> meets {run} Sm hs' ->\n"
        f"     answers_mh {run} hs' ->\n"
    )
    seven = (
        f" /\\\n{inside}"
        "     Forall (fun p => Permutation\n"
        f"       (score_pairs {d} (rvec (fst p)) (rvec (snd p)) (rheads heads_c))\n"
        f"       (score_pairs {d} (rvec (fst p)) (rvec (snd p)) hs')) (mh_pairs {d} U B))"
    )
    eight = (
        f" /\\\n{inside}"
        f"     forall N X, multi_head {d} N X hs' = multi_head {d} N X (rheads heads_c))"
    )
    vm = "vm_compute; reflexivity"
    proof7 = (
        f"  - intros hs' L M A. apply (mh_pairs_close {run} Sm eps hs');\n"
        f"      [{vm} | exact {hold} | {vm} | {vm} | {vm} | exact L | exact M | exact A].\n"
    )
    proof8 = (
        f"  - intros hs' L M A. apply (mh_identified_close {run} Sm eps U_inv B_inv hs');\n"
        f"      [{vm} | {vm} | apply Nat.ltb_lt; {vm} | {vm} | exact {hold} | {vm}\n"
        f"      | {vm} | {vm} | {vm} | {vm} | exact L | exact M | exact A].\n"
    )
    return seven + (eight if part8 else ""), proof7 + (proof8 if part8 else "")


def close_header(H0: int, Sm: int, eps: Fraction, part8: bool) -> str:
    """Parts 7 and 8 of the file's header."""
    seven = (
        f"    7. every model of at most {H0} heads that meets the assumption [meets]: at every\n"
        "       pair of the design each head's score u^T W b and residue u^T v are rationals\n"
        f"       with denominator at most D and its score lies in [-Sm, Sm], Sm = {Sm}, and\n"
        "       that answers every learning query inside its recorded interval has, at every\n"
        "       pair, the certified heads' (residue, score) pairs up to order (every interval\n"
        f"       is at most eps = 2^{eps.numerator.bit_length() - eps.denominator.bit_length() if eps else '-inf'} wide and K 2 eps D^(2 H0) < 1 for K\n"
        "       the constant of the quantitative interpolation: [check_close] over Q)"
    )
    eight = (
        "    8. every such model gives the certified model's output on every sequence of\n"
        "       every length (7., then the labelling of 6.)"
    )
    return f"{seven}{';' if part8 else '.'}\n" + (f"{eight}.\n" if part8 else "")
