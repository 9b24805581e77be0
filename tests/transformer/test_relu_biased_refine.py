"""Float biased FFN learner: thin cells re-measured at wide points after a refutation
(relu_biased_refine), and the float multi-head Transformer learner's FFN learned again
when a cell's center refutes it (issue 37: the d = 16, m = 32 rows)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import verified_attn as va
from verified_attn.errors import ModelClassMismatch
from verified_attn.precision import relative_parameter_error
from verified_attn.transformer import canonical_biased_network
from verified_attn.transformer import multi_head_float as mhf
from verified_attn.transformer import relu_biased_learner as rbl
from verified_attn.transformer.claims_biased import random_biased_ffn
from verified_attn.transformer.relu_biased import Answers, Retry
from verified_attn.transformer.relu_biased_canonical import BiasedReluNetwork
from verified_attn.transformer.relu_biased_line import assemble, learn_line
from verified_attn.transformer.relu_biased_refine import refine_line

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import _transformer_heads_float  # the benchmark rows' box construction


def _error(net: BiasedReluNetwork, truth: BiasedReluNetwork) -> float:
    """Largest difference between a learned neuron (n, c, gamma) and its nearest true one."""
    worst = 0.0
    for (n, c), gamma in net.neurons:
        got = np.array([*map(float, n), float(c), float(gamma)])
        worst = max(
            worst,
            min(
                float(np.abs(np.array([*map(float, k), float(ck), float(gk)]) - got).max())
                for (k, ck), gk in truth.neurons
            ),
        )
    return worst


def _line(seed: int = 0) -> tuple[Any, Any, BiasedReluNetwork]:
    """The first line of the d = 16, m = 32 benchmark network (seed 0) and its truth."""
    g = random_biased_ffn(16, 32, np.random.default_rng([seed, 16, 32, 7]))
    answers = Answers(va.Oracle(g, "float"), None)
    net, search = learn_line(answers, 16, np.random.default_rng(seed), radius=64, grid=1, shrink=0)
    return net, search, canonical_biased_network(g)


def test_remeasured_cells_bring_the_neurons_closer_and_are_counted() -> None:
    net, search, truth = _line()
    before = search.queries()
    better = refine_line(search)
    assert better.width == net.width == truth.width == 30
    assert search.refined == 25 and search.queries() == before + 17 * 25  # d + 1 each
    assert _error(better, truth) < _error(net, truth) / 10
    assert _error(better, truth) < 1e-9


def test_a_remeasured_cell_that_disagrees_with_the_line_is_a_retry() -> None:
    """A deliberately wrong variant: every cell's gradient off by 1e-3 (the hyperplanes,
    differences of cells, unchanged): the wide points contradict it."""
    _, search, _ = _line()
    search.cell_maps = [(tuple(x + 1e-3 for x in G), b) for G, b in search.cell_maps]
    with pytest.raises(Retry, match="a hyperplane the line did not show"):
        refine_line(search)


def _torch_block(d: int, H: int, seed: int) -> tuple[Any, Any]:
    """benchmarks/_transformer_heads_float.py's torch row (d, H, seed): oracle, truth."""
    pytest.importorskip("torch")
    return _transformer_heads_float._box("torch", d, H, seed)


def test_the_d16_torch_block_ffn_is_learned_on_its_first_line() -> None:
    oracle, T = _torch_block(16, 2, 0)
    rec = rbl.learn_biased_relu_ffn(oracle, seed=0, lengths=(1,))
    truth = canonical_biased_network(T.ffn())
    # one of the 32 hyperplanes meets the line only beyond |t| = 64 (the window assumption)
    assert (rec.attempts, rec.network.width, truth.width) == (1, 31, 32)
    assert rec.verified and rec.queries == rec.bound == 1128  # golden
    # measured 4.3e-9 on entries up to 907 (the line's network alone: up to 2.6e-6 off)
    assert _error(rec.network, truth) < 1e-8


def test_without_the_remeasurement_the_d16_torch_block_ffn_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A deliberately wrong variant: the refuted line's network kept as it was (its thin
    cells' neurons err by up to 3e-6): refuted on every line, as before the fix."""
    oracle, _ = _torch_block(16, 2, 0)
    monkeypatch.setattr(
        rbl, "refine_line", lambda s: assemble(s, s.line_kinks, s.cell_maps)
    )
    with pytest.raises(ModelClassMismatch, match="no one-hidden-layer ReLU network"):
        rbl.learn_biased_relu_ffn(oracle, seed=0, lengths=(1,))


@pytest.mark.slow
def test_the_d16_torch_block_is_learned_with_a_second_ffn(monkeypatch: pytest.MonkeyPatch) -> None:
    """The FFN of the first lines misses a hyperplane (beyond its window) that cell 9's
    center is across: the FFN is learned again on new lines, every query counted. With one
    FFN only (a deliberately wrong variant), the center's refutation is final."""
    oracle, T = _torch_block(16, 2, 0)
    rec = va.learn_transformer(oracle, max_heads=2, seed=0)
    assert rec.verified and rec.model.H == 2 and rec.network.width == 32
    assert any("refuted at a cell's center" in n for n in rec.notes)
    assert (rec.queries, rec.bound, rec.parameter_count) == (9029, 12921, 1633)  # golden
    assert rec.parameters["error_estimate"] <= oracle.arithmetic.parameter_rtol
    got = [(np.asarray(W), np.asarray(c)) for W, _, c in rec.parameters["heads"]]
    truth = [(T._W_float[h], T._c_float[h]) for h in range(T.H)]
    assert relative_parameter_error(got, truth) < 1e-7  # measured 1.7e-8
    monkeypatch.setattr(mhf, "FFN_ATTEMPTS", 1)
    oracle, _ = _torch_block(16, 2, 0)
    with pytest.raises(ModelClassMismatch, match="refuted at a cell's center"):
        va.learn_transformer(oracle, max_heads=2, seed=0)
