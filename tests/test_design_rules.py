"""The probe-design rules that learners and checkers share through the core design module.

Each rule is checked against its defining property (not against a copy of itself), and a
deliberately wrong variant of each is shown to fail the same property.
"""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction

from hypothesis import given
from hypothesis import strategies as st

from verified_attn.design import (
    design_queries,
    label_probe_scales,
    largest_dyadic_scale,
    noisy_design,
    paper_noisy_queries,
)

positive = st.fractions(min_value=Fraction(1, 10**6), max_value=Fraction(10**6))
nonzero = st.fractions(min_value=Fraction(1, 1000), max_value=Fraction(1000)).flatmap(
    lambda q: st.sampled_from([q, -q])
)


def _power_of_two(q: Fraction) -> bool:
    n, m = q.numerator, q.denominator
    return n > 0 and n & (n - 1) == 0 and m & (m - 1) == 0


def _is_largest_scale(rule: Callable[[Fraction], Fraction], x: Fraction) -> bool:
    b = rule(x)
    return _power_of_two(b) and b * b * x <= 1 < 4 * b * b * x


@given(positive)
def test_the_dyadic_scale_is_the_largest_power_of_two_within_the_bound(x: Fraction) -> None:
    assert _is_largest_scale(largest_dyadic_scale, x)


def test_a_scale_one_step_too_small_fails_the_property() -> None:
    def halved(x: Fraction) -> Fraction:
        return largest_dyadic_scale(x) / 2

    assert not _is_largest_scale(halved, Fraction(9))


def _label_scales_hold(
    rule: Callable[..., tuple[Fraction, Fraction]], ri: Fraction, rj: Fraction, w: Fraction
) -> bool:
    a, B = rule((ri, ri), (rj, rj), w)
    small = 8 * a * a * w * abs(rj) <= abs(ri)
    largest = abs(a) == 1 or 32 * a * a * w * abs(rj) > abs(ri)
    opposite = (a * rj > 0) != (ri > 0)
    range_ok = _power_of_two(B) and B * abs(a) * w <= 1 < 2 * B * abs(a) * w
    return _power_of_two(abs(a)) and small and largest and opposite and range_ok


@given(nonzero, nonzero, positive)
def test_the_label_scales_meet_their_rule(ri: Fraction, rj: Fraction, w: Fraction) -> None:
    assert _label_scales_hold(label_probe_scales, ri, rj, w)


def test_label_scales_of_the_wrong_sign_fail_the_rule() -> None:
    def same_sign(*args: object) -> tuple[Fraction, Fraction]:
        a, B = label_probe_scales(*args)  # type: ignore[arg-type]
        return -a, B

    assert not _label_scales_hold(same_sign, Fraction(1), Fraction(1), Fraction(1))


def test_the_noisy_designs() -> None:
    v_hat = [Fraction(1, 8), Fraction(-3), Fraction(1)]
    assert noisy_design(v_hat, "paper") == [
        [Fraction(int(i == k)) for k in range(3)] for i in range(3)
    ]
    U = noisy_design(v_hat, "norm")
    # p = 1 (the largest |v_hat_i|); column 0 (|1/8| < 3/4) gets e_0 + e_1, column 2 does not.
    assert [U[i][0] for i in range(3)] == [1, 1, 0]
    assert [U[i][2] for i in range(3)] == [0, 0, 1]


def test_the_paper_noisy_queries_measure_what_they_say() -> None:
    d, a, b = 2, Fraction(1, 2), Fraction(1, 4)
    queries = paper_noisy_queries(d, a, b)
    assert len(queries) == d * d + d
    assert queries[:d] == [[[Fraction(1), Fraction(0)]], [[Fraction(0), Fraction(1)]]]
    # [b e_i + a e_j; a e_j] for (i, j) = (0, 1): the third probe.
    assert queries[d + 1] == [[b, a], [Fraction(0), a]]


def test_the_design_queries_are_the_probes_of_u_k() -> None:
    U = [[Fraction(1), Fraction(2)], [Fraction(0), Fraction(1)]]  # u_1 = (2, 1)
    queries = dict((key, X) for key, X in design_queries(U, 2))
    assert queries[("v", 1)] == [[Fraction(0), Fraction(1)]]
    assert queries[("W", 1, 0)] == [[Fraction(3), Fraction(1)], [Fraction(1), Fraction(0)]]
    assert len(queries) == 6
