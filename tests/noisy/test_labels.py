"""Appendix B: label-only learning by bisection; identifiability up to a positive scale."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import verified_attn as va
from verified_attn.errors import InvalidArgument, ModelClassMismatch, NotIdentifiable
from verified_attn.noisy.labels import label_query_bound, learn_from_labels
from verified_attn.oracle_wrappers import LabelOracle


def _labels(model: va.SingleHeadAttention, arithmetic: str = "exact") -> LabelOracle:
    return LabelOracle(va.Oracle(model, arithmetic))


@pytest.mark.parametrize(("d", "bits", "total"), [(1, 10, 12), (2, 10, 54), (3, 5, 61)])
def test_golden_label_query_counts(d: int, bits: int, total: int) -> None:
    assert label_query_bound(d, bits) == total
    model = va.SingleHeadAttention(np.eye(d) / (2 * d), np.arange(1, d + 1))
    oracle = _labels(model, "certified")
    rec = learn_from_labels(oracle, w_bound=1, bits=bits, verify=2)
    assert rec.queries == rec.bound == total
    assert oracle.queries == total + 2
    assert rec.queries_by_phase["signs"] == 2 * d
    # 2d + (d - 1) bits length-1 queries, d^2 bits length-2 ones, verification lengths 1, 2.
    assert rec.tokens_sent == 2 * d + (d - 1) * bits + 2 * d * d * bits + 3


@settings(deadline=None, max_examples=10)
@given(seed=st.integers(0, 1000), d=st.integers(1, 3))
def test_enclosures_contain_the_normalised_truth(seed: int, d: int) -> None:
    rng = np.random.default_rng(seed)
    W = rng.integers(-4, 5, (d, d)) / 8
    W = W / max(1.0, float(np.linalg.norm(W)))
    W = np.round(W * 2**20) / 2**20  # keep ||W||_F <= 1 after rounding
    W = W * (np.linalg.norm(W) <= 1)
    v = rng.choice([-1, 1], d) * rng.integers(1, 5, d) / 2
    model = va.SingleHeadAttention(W, v)
    rec = learn_from_labels(_labels(model, "certified"), w_bound=1, bits=24)
    p = rec.enclosures["p"]
    assert p == rec.p
    vt = v / abs(v[p])
    Wi, vi = rec.enclosures["W"], rec.enclosures["v"]
    assert ((Wi["lower"] <= W) & (W <= Wi["upper"])).all()
    assert ((vi["lower"] <= vt) & (vt <= vi["upper"])).all()
    assert (Wi["upper"] - Wi["lower"]).max() < 1e-3
    assert va.verify_certificate(rec.certificate()).ok


def test_precision_grows_with_bits_and_ratios_reconstruct_exactly() -> None:
    model = va.SingleHeadAttention([[0.25, -0.5], [0.5, 0]], [3, -2])
    widths = []
    for bits in (8, 16, 32):
        rec = learn_from_labels(_labels(model), w_bound=1, bits=bits, max_denominator=10)
        Wi = rec.enclosures["W"]
        widths.append(float((Wi["upper"] - Wi["lower"]).max()))
    assert widths[0] > 2**7 * widths[1] and widths[1] > 2**7 * widths[2]
    assert rec.enclosures["v_exact"] == [Fraction(1), Fraction(-2, 3)]


def test_v_only_up_to_positive_scale() -> None:
    W = [[0.25, 0.5], [-0.5, 0]]
    small, big = va.SingleHeadAttention(W, [1, -2]), va.SingleHeadAttention(W, [5, -10])
    flipped = va.SingleHeadAttention(W, [-1, 2])
    rng = np.random.default_rng(0)
    differs = False
    for k in range(30):
        X = rng.integers(-3, 4, (1 + k % 3, 2)) / 2
        assert _labels(small).query(X) == _labels(big).query(X)
        differs |= _labels(small).query(X) != _labels(flipped).query(X)
    assert differs  # a negative scale is told apart
    r1 = learn_from_labels(_labels(small), w_bound=1, bits=12)
    r2 = learn_from_labels(_labels(big), w_bound=1, bits=12)
    assert (r1.W == r2.W).all() and (r1.v == r2.v).all()


def test_unidentifiable_and_bad_cases() -> None:
    with pytest.raises(NotIdentifiable, match="v = 0"):
        learn_from_labels(_labels(va.SingleHeadAttention([[1]], [0])), w_bound=1)
    with pytest.raises(NotIdentifiable, match="v_1 = 0"):
        learn_from_labels(_labels(va.SingleHeadAttention([[1, 0], [0, 1]], [1, 0])), w_bound=2)
    model = va.SingleHeadAttention([[0]], [1])
    with pytest.raises(InvalidArgument, match="bits"):
        learn_from_labels(_labels(model), w_bound=1, bits=0)
    with pytest.raises(InvalidArgument, match="bits"):
        learn_from_labels(_labels(model), w_bound=1, bits=49)
    with pytest.raises(InvalidArgument, match="w_bound"):
        learn_from_labels(_labels(model), w_bound=0)
    with pytest.raises(InvalidArgument, match="labels"):
        learn_from_labels(va.Oracle(model, "float"), w_bound=1)
    negative = LabelOracle(va.Oracle.from_callable(lambda X: -1.0, d=1))
    with pytest.raises(ModelClassMismatch, match="odd"):
        learn_from_labels(negative, w_bound=1)
