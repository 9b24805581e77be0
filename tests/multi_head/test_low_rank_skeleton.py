"""The float multi-head learner's low-rank skeleton design (``learn_multi_head(rank=)``).

Golden counts, counted on the oracle object, against the formula of
:mod:`verified_attn.multi_head.pipeline.low_rank_design`:

    Q = J + (m J + (d - m) q + [m < d and q < J] + d - 1 + min(4, J)) (2H + [H >= 2])

(J = d, affine d + 1 probe columns; m full u-groups: p given, p + 1 found; q = p columns of
the partial groups; the rank check pair; the d - 1 halved links; the pilot's pairs). With
m = q = p = r, J = d: ``d + (2rd - r^2 + d + 4)(2H + [H >= 2])``.
"""

from __future__ import annotations

import numpy as np
import pytest

import verified_attn as va
from verified_attn.errors import InvalidArgument, ModelClassMismatch, PrecisionExhausted
from verified_attn.models import MultiHeadAttention
from verified_attn.multi_head.pipeline.design import random_float_box
from verified_attn.multi_head.pipeline.low_rank_design import (
    low_rank_parameter_count,
    low_rank_query_count,
)
from verified_attn.verification import fresh_sequences


def _rank_box(d: int, H: int, r: int, seed: int) -> tuple[MultiHeadAttention, list]:
    """H heads with W_h = A_h B_h^T of rank r (entries N(0, 1/d) scale), v_h ~ N(0, 1)."""
    rng = np.random.default_rng(seed)
    heads = []
    for _ in range(H):
        A = rng.normal(0, 1 / np.sqrt(d), (d, r))
        B = rng.normal(0, 1 / np.sqrt(r), (d, r))
        heads.append((A @ B.T, rng.normal(0, 1, d)))
    return MultiHeadAttention([(W.tolist(), v.tolist()) for W, v in heads]), heads


def _relative_error(rec: va.MultiHeadRecovery, heads: list) -> float:
    """Largest entry error over the largest true entry, heads in canonical (W row-major) order."""
    truth = sorted(heads, key=lambda hd: tuple(hd[0].ravel()))
    largest = max(float(np.abs(x).max()) for hd in truth for x in hd)
    err = max(
        float(np.abs(np.asarray(a) - b).max())
        for got, want in zip(rec.parameters["heads"], truth, strict=True)
        for a, b in zip(got, want, strict=True)
    )
    return err / largest


@pytest.mark.parametrize(
    ("H", "rank", "golden"),
    [(2, 2, 208), (3, 2, 288), (2, "find", 238)],
)
def test_golden_counts_random_rank_two_heads(H: int, rank: int | str, golden: int) -> None:
    model, heads = _rank_box(8, H, 2, seed=1)
    oracle = va.Oracle(model, "float")
    rec = va.learn_multi_head(oracle, heads=H, rank=rank)
    assert rec.method == "canonical-low-rank" and rec.verified
    # Counted on the oracle: the learning queries (every phase but the verification).
    learning = oracle.queries - oracle.queries_by_phase["verify"]
    assert rec.queries == learning == golden
    assert golden == low_rank_query_count(8, H, 2, found=rank == "find")
    # The closed form for rank given: d + (2rd - r^2 + d + 4)(2H + 1).
    if rank == 2:
        assert golden == 8 + (2 * 2 * 8 - 4 + 8 + 4) * (2 * H + 1)
    # A count formula off by one would fail the golden.
    assert golden not in (low_rank_query_count(8, H, 2) + 1, low_rank_query_count(8, H, 2) - 1)
    assert rec.parameter_count == low_rank_parameter_count(8, H, 2) == H * (2 * 2 * 8 - 4 + 8)
    # Far under the follow-up's count 4Hd^2 - 2H + 1.
    assert golden < 4 * H * 64 - 2 * H + 1
    # The heads, after canonical ordering, are the truth's (figures measured 1e-13 - 1e-12).
    assert _relative_error(rec, heads) <= 1e-9
    assert rec.parameter_error_estimate is not None and rec.parameter_error_estimate <= 1e-6
    # Fresh predictions (not the verification's seed) within the stated rtol.
    for X in fresh_sequences(8, 16, seed=99, lengths=(3, 7, 12)):
        got = float(rec.model.evaluate_batch(X[None])[0])
        want = float(model.evaluate_batch(X[None])[0])
        assert abs(got - want) / max(abs(want), 1.0) <= oracle.arithmetic.rtol


def test_the_result_states_its_design() -> None:
    model, _ = _rank_box(8, 2, 2, seed=1)
    rec = va.learn_multi_head(va.Oracle(model, "float"), heads=2, rank=2)
    assert "low-rank skeleton design (rank 2, given" in rec.notes[0]
    data = rec.certificate()
    assert data["design"]["kind"] == "low-rank skeleton"
    assert (data["design"]["rank"], data["design"]["full_groups"]) == (2, 2)
    assert data["queries"]["learning"] == 208


def test_torch_module_golden_count() -> None:
    torch = pytest.importorskip("torch")
    from verified_attn.adapters.torch import attention_oracle, attention_parameters

    torch.manual_seed(0)
    mha = torch.nn.MultiheadAttention(8, 4, batch_first=True).double()
    with torch.no_grad():
        mha.in_proj_bias.normal_()
    readout = np.random.default_rng(100).standard_normal(8)
    oracle = attention_oracle(mha, readout, dtype="float64")
    rec = va.learn_multi_head(oracle, heads=4, rank=2)  # E/H = 2; affine: J = 9
    learning = oracle.queries - oracle.queries_by_phase["verify"]
    # The formula's 387 and one conditioning round (2 columns at 9 ratios) of the partial
    # u_8, whose fit has two heads' scores within CROWDED_GAP at a column (Skeleton.uncrowd),
    # refitted in the full groups' row space.
    assert oracle.queries_by_phase["conditioning"] == 2 * 9
    assert rec.queries == learning == low_rank_query_count(8, 4, 2, affine=True) + 18 == 405
    assert any("u_8 refitted" in n and "crowded" in n for n in rec.notes)
    truth = attention_parameters(mha, readout)
    heads = [(W, v) for W, v in zip(truth.W, truth.v, strict=True)]
    got = rec.parameters["heads"]
    order = sorted(range(4), key=lambda h: tuple(np.asarray(heads[h][0]).ravel()))
    largest = max(float(np.abs(x).max()) for hd in heads for x in hd)
    err = max(float(np.abs(np.asarray(got[i][0]) - heads[h][0]).max()) for i, h in enumerate(order))
    assert rec.verified and err / largest <= 1e-6


def test_a_full_rank_box_with_a_rank_claimed_is_refused() -> None:
    # random_float_box heads have full rank 8: the rank-2 completion misses the check pair.
    model = random_float_box(8, 2, 0)
    with pytest.raises(ModelClassMismatch, match="rank above 2"):
        va.learn_multi_head(va.Oracle(model, "float"), heads=2, rank=2)


def test_a_rank_found_too_small_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    # The rank finder's threshold made so coarse that it stops at rank 1 on rank-2 heads:
    # the result is refused (not returned).
    monkeypatch.setattr(
        "verified_attn.multi_head.pipeline.skeleton.rank_tolerance", lambda unit: 0.9
    )
    model, _ = _rank_box(8, 2, 2, seed=1)
    with pytest.raises((ModelClassMismatch, PrecisionExhausted), match="rank-1 skeleton"):
        va.learn_multi_head(va.Oracle(model, "float"), heads=2, rank="find")


def test_rank_argument_is_checked() -> None:
    model, _ = _rank_box(3, 1, 1, seed=0)
    with pytest.raises(InvalidArgument, match="rank"):
        va.learn_multi_head(va.Oracle(model, "float"), heads=1, rank="guess")
    with pytest.raises(InvalidArgument, match="rank"):
        va.learn_multi_head(va.Oracle(model, "float"), heads=1, rank=0)
    with pytest.raises(InvalidArgument, match="float oracles"):
        va.learn_multi_head(va.Oracle(model, "float"), max_heads=2, rank=1)


def test_the_certificate_checks_and_wrong_variants_fail() -> None:
    import copy

    from verified_attn.errors import CertificateError

    model, _ = _rank_box(8, 2, 2, seed=1)
    rec = va.learn_multi_head(va.Oracle(model, "float"), heads=2, rank=2)
    data = rec.certificate()
    report = str(va.verify_certificate(data))
    assert "canonical-low-rank" in report and "208 learning" in report
    # A count off by one (header and phase together): not the skeleton's count.
    bad = copy.deepcopy(data)
    bad["queries"]["learning"] -= 1
    bad["queries"]["by_phase"]["F(t)"] -= 1
    with pytest.raises(CertificateError, match="imply 208"):
        va.verify_certificate(bad)
    # Another rank stated for the same answers.
    bad = copy.deepcopy(data)
    bad["design"]["rank"] = 3
    with pytest.raises(CertificateError, match="full_groups"):
        va.verify_certificate(bad)
    # A head entry moved: some learning answer is no longer reproduced.
    bad = copy.deepcopy(data)
    W = bad["result"]["heads"][0]["W"]
    W[0][0] = W[1][1]
    with pytest.raises(CertificateError):
        va.verify_certificate(bad)


@pytest.mark.slow  # about a minute: `pytest -m slow`
def test_torch_module_e16_h4_golden_count() -> None:
    # nn.MultiheadAttention E = 16, H = 4 (rank 4, biases N(0, 1)): 17 + (4 + 4 x 17 +
    # 12 x 4 + 1 + 15) x 9 = 1241 learning queries (measured parameter error 6.5e-10),
    # against H(2rd - r^2 + d) = 512 parameters and the follow-up's 4089.
    torch = pytest.importorskip("torch")
    from verified_attn.adapters.torch import attention_oracle

    torch.manual_seed(0)
    mha = torch.nn.MultiheadAttention(16, num_heads=4, batch_first=True)
    with torch.no_grad():
        mha.in_proj_bias.normal_()
        mha.out_proj.bias.normal_()
    readout = np.random.default_rng(100).standard_normal(16)
    oracle = attention_oracle(mha, readout, dtype="float64")
    rec = va.learn_multi_head(oracle, heads=4, rank=4)
    learning = oracle.queries - oracle.queries_by_phase["verify"]
    assert rec.queries == learning == low_rank_query_count(16, 4, 4, affine=True) == 1241
    assert 1241 == 17 + (4 + 4 * 17 + 12 * 4 + 1 + 15) * 9
    assert rec.verified and rec.parameter_error_estimate is not None
    assert rec.parameter_error_estimate <= rec.parameter_rtol
