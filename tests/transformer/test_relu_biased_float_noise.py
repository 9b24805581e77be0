"""Float mode of the biased ReLU FFN learner: decisions within the answers' rounding error,
pieces refitted over their segments, faint bends refused (issue 37)."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import numpy as np
import pytest

import verified_attn as va
from verified_attn.errors import ModelClassMismatch
from verified_attn.models import ReluFFN
from verified_attn.transformer import canonical_biased_network
from verified_attn.transformer import relu_biased as rb
from verified_attn.transformer.claims_biased import random_biased_ffn
from verified_attn.transformer.relu_biased_canonical import BiasedReluNetwork


def _benchmark_ffn(d: int, m: int, seed: int) -> ReluFFN:
    """The network of benchmarks/_transformer_biased.py's row (d, m, seed)."""
    return random_biased_ffn(d, m, np.random.default_rng([seed, d, m, 7]))


def _parameter_error(net: BiasedReluNetwork, truth: BiasedReluNetwork) -> float:
    """Largest difference between a neuron of ``truth`` and its nearest learned neuron (n, c,
    gamma), and between the affine parts."""
    worst = abs(float(net.constant) - float(truth.constant))
    worst = max(
        [worst, *(abs(float(a) - float(b)) for a, b in zip(net.linear, truth.linear, strict=True))]
    )
    for (n, c), gamma in truth.neurons:
        want = np.array([*map(float, n), float(c), float(gamma)])
        worst = max(
            worst,
            min(float(np.abs(np.array([*k, ck, gk]) - want).max()) for (k, ck), gk in net.neurons),
        )
    return worst


def test_d4_seed0_has_the_true_width_and_parameters_within_the_stated_error() -> None:
    # Before: a 9th neuron (gamma 3.6e-7, a junk direction) from slope noise, on line 2.
    g = _benchmark_ffn(4, 8, 0)
    oracle = va.Oracle(g, "float")
    rec = va.learn_relu_ffn(oracle, seed=0)
    truth = canonical_biased_network(g)
    assert (rec.network.width, truth.width) == (8, 8)
    assert (rec.queries, rec.attempts) == (81, 1)  # golden
    scale = max(1.0, max(abs(float(x)) for (n, c), gm in truth.neurons for x in (*n, c, gm)))
    assert _parameter_error(rec.network, truth) <= oracle.arithmetic.parameter_rtol * scale
    assert rec.verified and rec.verification_error < 1e-9


def test_without_the_refit_the_spurious_kink_comes_back(monkeypatch: pytest.MonkeyPatch) -> None:
    """A deliberately wrong variant: pieces kept as measured over their short steps. At
    d = 16, seed 0 the first line's network is then refuted, and only re-measuring its thin
    cells (relu_biased_refine, 1058 queries in all) saves it; with the refit: 633 queries,
    30 neurons on the first line, nothing re-measured."""
    monkeypatch.setattr(rb.LineSearch, "_refit", lambda self, kinks, pieces: (kinks, pieces))
    g = _benchmark_ffn(16, 32, 0)
    rec = va.learn_relu_ffn(va.Oracle(g, "float"), seed=0)
    wrong = rec.network.width != canonical_biased_network(g).width or rec.attempts > 1
    assert wrong or rec.queries > BENCHMARK[16, 0][0]


# (d, seed): queries, canonical width learned (d = 8, seed 1: one hyperplane meets the line
# outside its window and is affine on the fresh points; exact mode misses it the same way).
BENCHMARK = {
    (2, 0): (37, 4), (2, 1): (35, 3), (2, 2): (25, 2),
    (4, 0): (81, 8), (4, 1): (82, 8), (4, 2): (90, 8),
    (8, 0): (207, 15), (8, 1): (163, 12), (8, 2): (194, 14),
    (16, 0): (633, 30), (16, 1): (594, 27), (16, 2): (546, 26),
}  # fmt: skip


@pytest.mark.parametrize(("d", "seed"), sorted(BENCHMARK))
def test_the_benchmark_networks_are_learned_on_the_first_line(d: int, seed: int) -> None:
    g = _benchmark_ffn(d, 2 * d, seed)
    rec = va.learn_relu_ffn(va.Oracle(g, "float"), seed=seed)
    truth = canonical_biased_network(g)
    assert rec.attempts == 1 and rec.verified
    assert (rec.queries, rec.network.width) == BENCHMARK[d, seed]  # golden
    if (d, seed) != (8, 1):
        assert rec.network.width == truth.width and _parameter_error(rec.network, truth) < 1e-6
    else:  # the same network as exact mode's (which equals it ==), within float error
        exact = va.learn_relu_ffn(va.Oracle(g, "exact"), seed=seed).network
        assert exact.width == 12 and _parameter_error(rec.network, exact) < 1e-6


def _thin_bump(gap: Fraction) -> ReluFFN:
    return ReluFFN([[1, 1, 0], [2, 2, 1]], [3, -3, 1], a=[1, 1 + gap, -1], b=2)


@pytest.mark.parametrize(("gap", "error"), [(Fraction(1, 10**3), 1e-9), (Fraction(1, 10**6), 1e-6)])
def test_two_parallel_kinks_close_together_are_told_apart(gap: Fraction, error: float) -> None:
    # (exact mode refuses the 1e-6 gap: its probes sit 2^-16 of the interval beside a kink)
    g = _thin_bump(gap)
    rec = va.learn_relu_ffn(va.Oracle(g, "float"))
    truth = canonical_biased_network(g)
    assert rec.verified and rec.network.width == truth.width == 3
    # the cell between the kinks is gap wide: its gradient, and the neurons, err more
    assert _parameter_error(rec.network, truth) < error


def test_a_too_loose_tolerance_merges_the_two_kinks(monkeypatch: pytest.MonkeyPatch) -> None:
    """A deliberately wrong variant: AGREE 2^30 takes the bump's two kinks 1e-3 apart for
    one; the fresh sequences then refute every line (refused, so the test above fails)."""
    monkeypatch.setattr(rb, "AGREE", 2**30)
    with pytest.raises(ModelClassMismatch, match="not the learned ReLU network"):
        va.learn_relu_ffn(va.Oracle(_thin_bump(Fraction(1, 10**3)), "float"))


def test_a_zero_tolerance_refuses_an_in_class_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """A deliberately wrong variant: no rounding allowance (NOISE_ULPS 0) makes every pair
    of pieces differ, down to float64 resolution: refused, never a wrong network."""
    monkeypatch.setattr(rb, "NOISE_ULPS", 0)
    with pytest.raises(ModelClassMismatch, match="not piecewise linear"):
        va.learn_relu_ffn(va.Oracle(_benchmark_ffn(4, 8, 0), "float"), seed=0)


def _gelu(X: Any) -> float:
    from scipy.special import erf

    z = float(np.asarray(X, dtype=np.float64)[-1] @ np.array([1.0, -2.0])) + 0.5
    return 0.5 * z * (1 + float(erf(z / np.sqrt(2))))


def test_a_smooth_box_bends_too_faintly_on_every_line_and_is_refused_cheaply() -> None:
    oracle = va.Oracle.from_callable(_gelu, d=2)
    with pytest.raises(ModelClassMismatch, match="not piecewise linear") as info:
        va.learn_relu_ffn(oracle)
    assert str(info.value).count("slope change within") == 3  # each of the 3 lines
    assert oracle.queries < 500  # (about 12000 before faint bends were refused)
    assert info.value.query is not None and info.value.observed != info.value.expected
