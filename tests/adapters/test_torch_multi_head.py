"""Multi-head PyTorch modules: canonical heads from ``learn_multi_head`` on a float64 box.

>>> GOLDEN[(4, 2)], GOLDEN[(6, 3)]
(120, 378)

The oracle declares the affine class (PyTorch heads have score biases and an output bias),
so the float learner asks ``d + 1 + (2H + [H >= 2]) (d^2 + 2d - 1)`` queries (its ratio grid
with one redundant sample per pair), plus ``d (2H + [H >= 2])`` per pilot round it discards
(PyTorch's scores are ~3x smaller than the design's; at these sizes at most one such round
fits under the follow-up's count); the figures are written out.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import verified_attn as va

torch = pytest.importorskip("torch")

from verified_attn.adapters.torch import (  # noqa: E402
    HeadParameters,
    attention_oracle,
    attention_parameters,
)
from verified_attn.errors import (  # noqa: E402
    ModelClassMismatch,
    NotIdentifiable,
    PrecisionExhausted,
)
from verified_attn.multi_head.canonical_float import (  # noqa: E402
    float_query_bound,
    float_query_limit,
    float_ratios,
    precision_polish_count,
)
from verified_attn.multi_head.canonical_learner import (  # noqa: E402
    follow_up_query_bound,
    learn_multi_head,
)
from verified_attn.multi_head.pipeline.refine import refine_count  # noqa: E402
from verified_attn.recovery import Recovery  # noqa: E402

pytestmark = pytest.mark.torch

# (E, H) -> learning queries, d + 1 + (2H + 1)(d^2 + 2d - 1) with d = E, written out, plus
# the pilot's discarded rounds. Changed in issue 12 (the adaptive pilot): E = 8, H = 2 from
# 404 to 404 + 8 x 5 = 444 - the pilot sees scores ~3x below the design's and rescales u
# once; E = 6, H = 3 from 336 to 336 + 6 x 7 = 378 likewise. E = 2, 4: a discarded round
# would pass the follow-up's count, so the pilot keeps the design scale (no extra queries).
GOLDEN = {(2, 2): 38, (4, 2): 120, (8, 2): 444, (6, 3): 378}
# (E, H) -> the pilot rounds discarded in the GOLDEN runs.
DISCARDED = {(2, 2): 0, (4, 2): 0, (8, 2): 1, (6, 3): 1}
# (E, H) -> the precision polish's queries, ceil(P / 8) with P = H (E^2 + 2E) + 1 written out,
# in the runs whose decoded estimate is above its target (1e-12): the parametrized runs'
# ``polished`` flag says which (measured; the others stand at their decoded figures).
POLISH = {(2, 2): 3, (4, 2): 7, (8, 2): 21, (6, 3): 19}
VERIFY = 8
# Measured worst relative errors (float64, seeds 0-9, docs/pytorch.md): H = 1 1.5e-11,
# H = 2 1.7e-8, H = 3 2.5e-8 (when learned). The bound leaves a margin of ~4x over those.
REL_ERROR = 1e-7


@pytest.fixture(autouse=True, scope="module")
def _one_thread() -> Iterator[None]:
    old = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny modules: threads only add overhead on a shared machine
    yield
    torch.set_num_threads(old)


def _module(E: int, heads: int, seed: int, bias: bool) -> torch.nn.MultiheadAttention:
    """Random weights and, if ``bias``, random nonzero biases (PyTorch initialises them 0)."""
    torch.manual_seed(seed)
    mha = torch.nn.MultiheadAttention(E, heads, bias=bias, batch_first=True)
    if bias:
        with torch.no_grad():
            mha.in_proj_bias.normal_()
            mha.out_proj.bias.normal_()
    return mha


def _readout(E: int, seed: int) -> np.ndarray:
    torch.manual_seed(seed)
    return torch.randn(E, dtype=torch.float64).numpy()


def _error(rec: Recovery, truth: HeadParameters) -> float:
    """Largest relative error over the heads (best head order) and beta: W and c in W's
    units (scores), v and beta in v's (outputs), so zero biases are measured fairly."""
    heads = rec.parameters["heads"]
    assert len(heads) == truth.heads
    w_ref = float(np.abs(truth.W).max())
    c_ref = max(float(np.abs(truth.c).max()), w_ref)
    v_ref = float(np.abs(truth.v).max())
    best = min(
        max(
            max(
                float(np.abs(heads[p[h]][0] - truth.W[h]).max()) / w_ref,
                float(np.abs(heads[p[h]][1] - truth.v[h]).max()) / v_ref,
                float(np.abs(heads[p[h]][2] - truth.c[h]).max()) / c_ref,
            )
            for h in range(truth.heads)
        )
        for p in itertools.permutations(range(truth.heads))
    )
    beta = abs(rec.parameters["beta"] - truth.beta) / max(abs(truth.beta), v_ref)
    return max(best, beta)


def _entry_error(rec: Recovery, truth: HeadParameters) -> float:
    """Largest entry error of (W, v, c) over the best head order, and of beta (absolute)."""
    heads = rec.parameters["heads"]
    best = min(
        max(
            float(np.abs(np.concatenate([np.ravel(x) for x in heads[p[h]]]) - np.concatenate(
                [truth.W[h].ravel(), truth.v[h], truth.c[h]]
            )).max())
            for h in range(truth.heads)
        )
        for p in itertools.permutations(range(truth.heads))
    )
    return max(best, abs(float(rec.parameters["beta"]) - truth.beta))


@pytest.mark.parametrize(
    ("E", "H", "seed", "bias", "polished"),
    [
        (2, 2, 0, True, False),
        (2, 2, 0, False, False),
        # Decoded estimate 5.5e-11: the polish would take it past the follow-up's 125
        # queries, and the estimate is within 1e-10 (canonical_float.polish_wanted).
        (4, 2, 1, True, False),
        (4, 2, 1, False, False),
        pytest.param(8, 2, 2, True, False, marks=pytest.mark.slow),  # 6 s a run
        pytest.param(8, 2, 2, False, False, marks=pytest.mark.slow),  # 12 s a run
        (6, 3, 0, True, True),
        # measured: seeds 0, 1 refuse (PrecisionExhausted); 2, 3 learned
        (6, 3, 3, False, True),
    ],
)
def test_canonical_heads_of_a_multi_head_module(
    E: int, H: int, seed: int, bias: bool, polished: bool
) -> None:
    mha = _module(E, H, seed, bias)
    r = _readout(E, seed + 100)
    oracle = attention_oracle(mha, r, dtype="float64")
    rec = learn_multi_head(oracle, heads=H, seed=seed)
    pilot_round = E * (2 * H + 1)  # the d pilot pairs' queries
    extra = DISCARDED[(E, H)] * pilot_round
    assert GOLDEN[(E, H)] == float_query_bound(E, H, affine=True) + extra
    assert POLISH[(E, H)] == precision_polish_count(E, H, True)
    polish = POLISH[(E, H)] if polished else 0
    assert rec.queries_by_phase.get("polish", 0) == polish
    # The refinement asks what the follow-up's count leaves after the other phases.
    refined = rec.queries_by_phase.get("refinement", 0)
    asked = rec.queries - refined
    assert refined == refine_count(E, H, True, asked, rec.bound, unit=2.0**-53)
    assert asked == GOLDEN[(E, H)] + polish
    assert rec.queries_by_phase["pilot"] == (1 + DISCARDED[(E, H)]) * pilot_round
    assert rec.queries <= rec.bound == float_query_limit(E, H, affine=True)
    total = GOLDEN[(E, H)] + polish + refined + VERIFY
    assert oracle.queries == rec.queries + rec.verification_queries == total
    # max_length is the call's: the longest ratio-grid query k + m, or a fresh sequence (16).
    longest = max(k + m for k, m in float_ratios(H))
    assert rec.max_length == max(longest, 16) and rec.verified and not rec.exact
    assert va.verify_certificate(rec.certificate()).ok
    assert rec.verification_error is not None and rec.verification_error <= 1e-6
    assert _error(rec, attention_parameters(mha, r)) <= REL_ERROR


def test_the_error_measure_catches_a_wrong_head() -> None:
    mha = _module(4, 2, 1, True)
    r = _readout(4, 101)
    rec = learn_multi_head(attention_oracle(mha, r), heads=2, seed=1)
    truth = attention_parameters(mha, r)
    W, v, c = rec.parameters["heads"][1]
    rec.parameters["heads"][1] = (W, v, c + 1e-5 * float(np.abs(truth.W).max()))
    assert _error(rec, truth) > REL_ERROR


def test_too_few_heads_is_never_a_wrong_answer() -> None:
    mha = _module(4, 2, 1, True)
    oracle = attention_oracle(mha, _readout(4, 101))
    with pytest.raises((ModelClassMismatch, NotIdentifiable, PrecisionExhausted)):
        learn_multi_head(oracle, heads=1, seed=1)


def test_float32_module_is_refused_or_within_its_tolerance() -> None:
    # float32 answers (~6e-8 relative rounding) are decoded at rtol 1e-4: what comes back
    # must pass that verification; measured, the two-head module here is refused.
    mha = _module(4, 2, 1, True)
    oracle = attention_oracle(mha, _readout(4, 101), dtype="float32")
    try:
        rec = learn_multi_head(oracle, heads=2, seed=1)
    except (ModelClassMismatch, NotIdentifiable, PrecisionExhausted):
        return
    # the rule's allowance (rtol of the head's part + bias rounding in float32 ulps)
    assert rec.verified and rec.verification.max_ratio <= 1


def test_docs_multi_head_section_runs() -> None:
    """The ``python`` block of docs/pytorch.md's "Multi-head modules" section runs as
    written, on its own."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "pytorch.md").read_text()
    section = text.split("## Multi-head modules", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"^```python\n(.*?)^```", section, re.S | re.M)
    assert len(blocks) == 1
    namespace: dict[str, Any] = {}
    exec(compile(blocks[0], "docs/pytorch.md", "exec"), namespace)
    assert namespace["rec2"].queries == GOLDEN[(4, 2)] < follow_up_query_bound(4, 2)
    assert GOLDEN[(4, 2)] + POLISH[(4, 2)] > follow_up_query_bound(4, 2)  # why no polish


@pytest.mark.parametrize(("E", "H", "seed"), [(4, 1, 0), (4, 1, 2), (4, 2, 0), (8, 2, 1)])
def test_float32_modules_at_their_declared_rtol(E: int, H: int, seed: int) -> None:
    # A float32 box declares rtol 1e-4 (predictions) and parameter_rtol 1e-3 (parameters).
    # Measured (issue 12): (4, 1, 0) and (4, 1, 2) are learned, predictions within ~3e-6 of
    # the float64 module on fresh sequences; the two-head ones are refused (their first-order
    # parameter error estimate over 1e-3, or two standard deviations of the prediction error
    # over what the agreement rule allows at one of the 64 sequences it is bounded on: (8, 2,
    # 1) at 2.7x, (4, 2, 0) at 1.1x; before that bound, (8, 2, 1) was learned). Either way: a
    # returned result meets its rtol on fresh sequences of lengths 1-16 and its parameter
    # tolerance against the module's weights (both checked here, independently of the
    # learner), and a refusal names the figure.
    mha = _module(E, H, seed, True)
    r = _readout(E, seed + 100)
    oracle = attention_oracle(mha, r, dtype="float32")
    try:
        rec = learn_multi_head(oracle, heads=H, seed=seed)
    except PrecisionExhausted as exc:
        assert re.search("first-order parameter error estimate|predictions are too uncertain", str(exc))
        return
    assert rec.verification.rtol == oracle.arithmetic.rtol == 1e-4
    assert rec.parameter_rtol == oracle.arithmetic.parameter_rtol == 1e-3
    truth = attention_parameters(mha, r)
    size = max(1.0, abs(truth.beta), *(float(np.abs(x).max()) for x in (truth.W, truth.v, truth.c)))
    assert rec.parameter_error_estimate is not None
    assert _entry_error(rec, truth) / size <= rec.parameter_error_estimate <= rec.parameter_rtol
    reference = attention_oracle(mha, r, dtype="float64")
    rng = np.random.default_rng(77 + seed)
    for n in range(1, 17):
        X = rng.uniform(-1.5, 1.5, (n, E))
        truth = reference.query(X)
        got = float(rec.model.evaluate_batch(X[None])[0])
        assert abs(got - truth) <= 1e-4 * max(1.0, abs(truth))
