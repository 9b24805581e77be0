"""The biased FFN learner's window assumption: a neuron whose hyperplane meets the search
line only outside |t| <= R is not seen, and every result says so (and its certificate
must).

The network below (``random_biased_ffn(8, 16, default_rng([1, 8, 16, 7]))``, a benchmark
row) is such a case: exact mode returns width 12 for the truth's 13, and the missing
neuron's hyperplane crosses the line beyond the window; the stated assumption is the one
that fails there.
"""

from __future__ import annotations

import copy
from fractions import Fraction

import numpy as np
import pytest

import verified_attn as va
from verified_attn.errors import CertificateError
from verified_attn.transformer import canonical_biased_network
from verified_attn.transformer.claims_biased import random_biased_ffn
from verified_attn.transformer.relu_biased_learner import WINDOW_ASSUMPTION


def _line(assumption: str) -> tuple[list[Fraction], list[Fraction], Fraction]:
    """x0, u and R read back from the stated assumption."""
    R = Fraction(assumption.split("|t| <= ")[1].split(" ")[0])
    x0 = [Fraction(q) for q in assumption.split("x0 = [")[1].split("]")[0].split(", ")]
    u = [Fraction(q) for q in assumption.split("u = [")[1].split("]")[0].split(", ")]
    return x0, u, R


def test_a_neuron_outside_the_window_is_the_stated_assumption_failing() -> None:
    g = random_biased_ffn(8, 16, np.random.default_rng([1, 8, 16, 7]))
    truth = canonical_biased_network(g)
    rec = va.learn_relu_ffn(va.Oracle(g, "exact"), seed=1)
    assert rec.verified and rec.network.width == truth.width - 1  # one neuron unseen
    (window,) = [a for a in rec.assumptions if a.startswith(WINDOW_ASSUMPTION)]
    x0, u, R = _line(window)
    learned = {key for key, _ in rec.network.neurons}
    missing = [key for key, _ in truth.neurons if key not in learned]
    assert len(missing) == 1
    (n, c) = missing[0]
    # n^T (x0 + t u) + c = 0 at t = -(n^T x0 + c) / n^T u: outside the searched window.
    nu = sum(a * b for a, b in zip(n, u, strict=True))
    t = -(sum(a * b for a, b in zip(n, x0, strict=True)) + c) / nu
    assert abs(t) > R
    # Every learned neuron's hyperplane does cross inside it (the assumption holds there).
    for (m, cm), _ in rec.network.neurons:
        mu = sum(a * b for a, b in zip(m, u, strict=True))
        assert abs(-(sum(a * b for a, b in zip(m, x0, strict=True)) + cm) / mu) <= R


@pytest.mark.parametrize("arithmetic", ["exact", "certified", "float"])
def test_every_result_states_its_window(arithmetic: str) -> None:
    g = random_biased_ffn(2, 4, np.random.default_rng(0))
    rec = va.learn_relu_ffn(va.Oracle(g, arithmetic), seed=0)
    (window,) = [a for a in rec.assumptions if a.startswith(WINDOW_ASSUMPTION)]
    x0, u, R = _line(window)
    assert len(x0) == len(u) == 2 and R == 64


def test_a_certificate_without_the_window_is_rejected() -> None:
    g = random_biased_ffn(2, 4, np.random.default_rng(0))
    data = va.learn_relu_ffn(va.Oracle(g, "exact")).certificate()
    assert va.verify_certificate(copy.deepcopy(data)).ok
    data["assumptions"] = [a for a in data["assumptions"] if not a.startswith(WINDOW_ASSUMPTION)]
    with pytest.raises(CertificateError, match="window"):
        va.verify_certificate(data)
