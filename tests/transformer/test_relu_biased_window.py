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
from typing import Any

import numpy as np
import pytest

import verified_attn as va
from verified_attn.errors import CertificateError
from verified_attn.transformer import canonical_biased_network
from verified_attn.transformer.claims_biased import random_biased_ffn
from verified_attn.transformer.relu_biased_learner import WINDOW_ASSUMPTION


def _window(rec: Any) -> str:
    """The result's stated window assumption; it writes out the line the result carries."""
    (window,) = [a for a in rec.assumptions if a.startswith(WINDOW_ASSUMPTION)]
    line = rec.search_line
    assert f"|t| <= {line.radius} " in window
    assert "x0 = [" + ", ".join(str(x) for x in line.x0) + "]" in window
    assert "u = [" + ", ".join(str(x) for x in line.u) + "]" in window
    return window


def test_a_neuron_outside_the_window_is_the_stated_assumption_failing() -> None:
    g = random_biased_ffn(8, 16, np.random.default_rng([1, 8, 16, 7]))
    truth = canonical_biased_network(g)
    rec = va.learn_relu_ffn(va.Oracle(g, "exact"), seed=1)
    assert rec.verified and rec.network.width == truth.width - 1  # one neuron unseen
    _window(rec)
    line = rec.search_line
    learned = {key for key, _ in rec.network.neurons}
    missing = [(key, gamma) for key, gamma in truth.neurons if key not in learned]
    assert len(missing) == 1
    ((n, c), _) = missing[0]
    # n^T (x0 + t u) + c = 0 at t = -(n^T x0 + c) / n^T u: outside the searched window.
    nu = sum(a * b for a, b in zip(n, line.u, strict=True))
    t = -(sum(a * b for a, b in zip(n, line.x0, strict=True)) + c) / nu
    assert line.crossing(n, c) == t and abs(t) > line.radius
    assert not line.holds(truth.neurons) and not line.holds(missing)
    # Every learned neuron's hyperplane does cross inside it (the assumption holds there).
    assert line.holds(rec.network.neurons)


@pytest.mark.parametrize("arithmetic", ["exact", "certified", "float"])
def test_every_result_states_its_window(arithmetic: str) -> None:
    g = random_biased_ffn(2, 4, np.random.default_rng(0))
    rec = va.learn_relu_ffn(va.Oracle(g, arithmetic), seed=0)
    _window(rec)
    line = rec.search_line
    assert len(line.x0) == len(line.u) == 2 and line.radius == 64
    assert line.holds(rec.network.neurons)


def test_a_certificate_without_the_window_is_rejected() -> None:
    g = random_biased_ffn(2, 4, np.random.default_rng(0))
    data = va.learn_relu_ffn(va.Oracle(g, "exact")).certificate()
    assert va.verify_certificate(copy.deepcopy(data)).ok
    data["assumptions"] = [a for a in data["assumptions"] if not a.startswith(WINDOW_ASSUMPTION)]
    with pytest.raises(CertificateError, match="window"):
        va.verify_certificate(data)
