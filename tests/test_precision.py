"""Float figures in bits (verified_attn/precision.py) and the figures results state."""

from __future__ import annotations

import math

import numpy as np
import pytest

import verified_attn as va
from verified_attn.errors import InvalidArgument
from verified_attn.precision import (
    ErrorFigures,
    bits,
    bits_text,
    relative_parameter_error,
    stated_relative_error,
)
from verified_attn.recovery_report import recovery_text


def test_bits_is_minus_log2() -> None:
    for k in (0, 1, 20, 52, 100):
        assert bits(2.0**-k) == k
    assert bits(0.0) == math.inf and bits(None) is None
    assert bits(3e-16) == pytest.approx(-math.log2(3e-16), rel=0, abs=1e-12)
    # A wrong variant (log10, or log2 without the minus) gives other figures.
    assert bits(1e-15) != -math.log10(1e-15) and bits(0.25) != math.log2(0.25)


@pytest.mark.parametrize("bad", [-1e-16, float("nan"), -math.inf])
def test_bits_refuses_a_negative_or_nan_error(bad: float) -> None:
    with pytest.raises(InvalidArgument, match="relative_error"):
        bits(bad)


def test_bits_text() -> None:
    assert bits_text(2.0**-48) == "3.55e-15 (48.0 bits)"
    assert bits_text(None) == "not stated"


def test_relative_parameter_error_is_max_entry_error_over_max_entry() -> None:
    truth = [(np.array([[4.0, 0.0], [0.0, 1.0]]), np.array([1.0, -2.0]))]
    got = [(truth[0][0] + np.array([[0.0, 1e-12], [0.0, 0.0]]), truth[0][1] - [0.0, 3e-12])]
    # largest entry error 3e-12 over largest |entry| 4 (not the Frobenius norm, not v alone)
    assert relative_parameter_error(got, truth) == pytest.approx(3e-12 / 4, rel=1e-3)


def test_relative_parameter_error_matches_heads() -> None:
    a, b = ([1.0, 0.0],), ([0.0, 8.0],)
    assert relative_parameter_error([b, a], [a, b]) == 0.0
    # Canonical order compares head h with head h: a swapped result is off by 8 / 8.
    assert relative_parameter_error([b, a], [a, b], ordered=True) == 1.0


def test_relative_parameter_error_refuses_what_it_cannot_compare() -> None:
    with pytest.raises(InvalidArgument, match="heads"):
        relative_parameter_error([([1.0],)], [([1.0],), ([2.0],)])
    with pytest.raises(InvalidArgument, match="nonzero"):
        relative_parameter_error([([1.0],)], [([0.0],)])
    with pytest.raises(InvalidArgument, match="same entries"):
        relative_parameter_error([([1.0, 2.0],)], [([1.0],)])


def test_stated_relative_error_converts_to_the_largest_entry() -> None:
    # The learners state the estimate relative to max(1, |beta|, largest entry).
    heads = [(np.array([[0.25]]), np.array([0.5]))]
    assert stated_relative_error(1e-12, heads) == pytest.approx(2e-12)
    assert stated_relative_error(1e-12, heads, beta=3.0) == pytest.approx(6e-12)
    assert stated_relative_error(1e-12, [(np.array([[5.0]]), np.array([0.5]))]) == 1e-12


def test_error_figures_round_trip_and_json() -> None:
    f = ErrorFigures(2.0**-40, 0.0)
    assert f.parameter_bits == 40 and f.prediction_bits == math.inf
    assert f.to_dict() == {
        "parameter_error": 2.0**-40,
        "parameter_bits": 40.0,
        "prediction_error": 0.0,
        "prediction_bits": None,
    }


def _random_heads(d: int, H: int, seed: int) -> list[tuple[list[list[float]], list[float]]]:
    rng = np.random.default_rng(seed)
    return [
        (rng.normal(0, 1 / np.sqrt(d), (d, d)).tolist(), rng.normal(0, 1, d).tolist())
        for _ in range(H)
    ]


def test_multi_head_float_result_states_its_figures_in_bits() -> None:
    model = va.MultiHeadAttention(_random_heads(4, 2, 1001))
    rec = va.learn_multi_head(va.Oracle(model, "float"), heads=2, seed=1001)
    fig = rec.error_figures
    heads = rec.parameters["heads"]
    largest = max(float(np.abs(x).max()) for h in heads for x in h)
    assert fig.parameter_error == pytest.approx(
        rec.parameter_error_estimate * max(1.0, largest) / largest, rel=1e-12
    )
    assert fig.prediction_error == rec.verification.max_gap
    line = f"precision: {fig.text()}"
    assert line in rec.summary() and line in recovery_text(rec)
    assert f"({fig.parameter_bits:.1f} bits)" in line
    stored = rec.to_dict()["error_figures"]
    assert stored["parameter_bits"] == pytest.approx(-math.log2(fig.parameter_error))
    assert va.Recovery.from_dict(rec.to_dict()).error_figures == fig


def test_exact_result_states_no_float_figures() -> None:
    rec = va.learn_single_head(va.Oracle(va.SingleHeadAttention([[2]], [3]), "exact"))
    assert rec.error_figures == ErrorFigures(None, None)
    assert "precision:" not in rec.summary()
    single = va.learn_single_head(va.Oracle(va.SingleHeadAttention([[2.0]], [3.0]), "float"))
    # Its largest entry is 3 > 1: the estimate is already relative to it.
    assert single.error_figures.parameter_error == pytest.approx(single.parameter_error_estimate)
    assert 30 < single.error_figures.parameter_bits < 53
    assert single.error_figures.prediction_error == single.verification.max_gap
    assert "bits)" in single.verification.describe()
