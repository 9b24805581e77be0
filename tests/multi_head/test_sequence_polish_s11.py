"""The sequence polish: a float32 box's decoded heads refitted on random sequences too.

Each test that checks a figure or a rule also runs a deliberately wrong variant that fails.
"""

from __future__ import annotations

import copy
import re
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import verified_attn as va
from verified_attn.errors import CertificateError, PrecisionExhausted
from verified_attn.models import MultiHeadAttention
from verified_attn.multi_head import sequence_fit as sf
from verified_attn.multi_head.canonical_learner import follow_up_query_bound, learn_multi_head
from verified_attn.multi_head.pipeline.budget import (
    float_query_bound,
    float_query_limit,
    float_ratios,
    max_length,
    polish_count,
)
from verified_attn.multi_head.pipeline.design import float_sequence, ratio_window
from verified_attn.multi_head.prediction_bound import parameter_gradient
from verified_attn.serialize import dump_number, load_number
from verified_attn.verification import fresh_sequences

F32 = 2.0**-24


def _heads(d: int, H: int, seed: int, affine: bool) -> list[tuple[np.ndarray, ...]]:
    rng = np.random.default_rng(seed)
    out: list[tuple[np.ndarray, ...]] = []
    for _ in range(H):
        hd: tuple[np.ndarray, ...] = (rng.normal(0, d**-0.5, (d, d)), rng.normal(0, 1, d))
        out.append((*hd, rng.normal(0, 0.5, d)) if affine else hd)
    return out


def _model(heads: list[tuple[np.ndarray, ...]], beta: float, affine: bool) -> MultiHeadAttention:
    return MultiHeadAttention(
        [tuple(x.tolist() for x in hd) for hd in heads], beta=beta if affine else None
    )


# --- the sequences and their compressed rows ---------------------------------------------


def test_polish_sequences_are_seeded_dyadic_and_not_the_verifications() -> None:
    a, b = sf.polish_sequences(4, 20, seed=3), sf.polish_sequences(4, 20, seed=3)
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    assert [len(x) for x in a[:15]] == list(range(2, 17))
    assert all(np.array_equal(x * 64, np.round(x * 64)) for x in a)
    fresh = fresh_sequences(4, 20, seed=3)
    assert not any(np.array_equal(x, y) for x in a for y in fresh if x.shape == y.shape)
    assert not np.array_equal(a[0], sf.polish_sequences(4, 1, seed=4)[0])


@pytest.mark.parametrize("affine", [False, True])
def test_compressed_rows_give_the_models_answers(affine: bool) -> None:
    # Repeated tokens (the design's two-token probes) and random sequences alike.
    heads = _heads(3, 2, 0, affine)
    model = _model(heads, 0.7, affine)
    u, b = np.array([0.5, -1.0, 0.25]), np.array([1.0, 0.5, -0.5])
    seqs = [float_sequence(u, b, 5, 3), float_sequence(u, b, 1, 64)]
    seqs += sf.polish_sequences(3, 6, seed=1)
    rows = sf.compress(seqs, np.zeros(len(seqs)))
    got = sf.model_values(heads, 0.7, rows, affine)
    want = np.array([float(model.evaluate_batch(X[None])[0]) for X in seqs])
    np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-13)
    assert rows.tokens.shape[1] == 7 and round(float(np.exp(rows.log_counts[0]).max())) == 5
    # The wrong variant: multiplicities dropped (each distinct token once).
    flat = sf.SequenceRows(
        rows.tokens,
        np.where(np.isfinite(rows.log_counts), 0.0, -np.inf),
        rows.queries,
        rows.answers,
    )
    assert not np.allclose(sf.model_values(heads, 0.7, flat, affine)[:2], want[:2], rtol=1e-6)


@pytest.mark.parametrize("affine", [False, True])
def test_jacobian_against_central_differences(affine: bool) -> None:
    heads = _heads(3, 2, 1, affine)
    seqs = [*sf.polish_sequences(3, 5, seed=2), float_sequence(np.ones(3), -np.ones(3), 3, 2)]
    rows = sf.compress(seqs, np.zeros(len(seqs)))
    theta = sf.pack_parameters(heads, 0.3, affine)
    _, J = sf._jacobian(heads, rows, affine)
    num = np.empty_like(J)
    for i in range(len(theta)):
        e = np.zeros_like(theta)
        e[i] = 1e-6
        hp, bp = sf.unpack_parameters(theta + e, 2, 3, affine)
        hm, bm = sf.unpack_parameters(theta - e, 2, 3, affine)
        num[:, i] = (
            sf.model_values(hp, bp, rows, affine) - sf.model_values(hm, bm, rows, affine)
        ) / 2e-6
    np.testing.assert_allclose(J, num, atol=1e-8)
    # The wrong variant: dW with query and token swapped (W^T's gradient).
    d = 3
    swapped = J.copy()
    block = swapped[:, : d * d].reshape(-1, d, d).transpose(0, 2, 1).reshape(-1, d * d)
    swapped[:, : d * d] = block
    assert not np.allclose(swapped, num, atol=1e-6)
    # The gradient of one answer is the prediction bound's parameter_gradient (one order).
    np.testing.assert_allclose(J[0], parameter_gradient(heads, seqs[0], affine), atol=1e-14)


def test_covariance_rows_are_the_pseudo_inverse_rows() -> None:
    rng = np.random.default_rng(0)
    J = rng.normal(size=(40, 7)) * np.array([1, 1, 1, 1, 1, 1e-3, 10])
    rows, sigma_min, sensitivity = sf.covariance_rows(J.T @ J)
    pinv = np.linalg.pinv(J)
    g = rng.normal(size=7)
    assert np.linalg.norm(rows @ g) == pytest.approx(np.linalg.norm(g @ pinv), rel=1e-9)
    assert sensitivity == pytest.approx(np.linalg.norm(pinv, axis=1).max(), rel=1e-9)
    assert sigma_min == pytest.approx(np.linalg.svd(J, compute_uv=False)[-1], rel=1e-9)
    # The wrong variant: J^T J's own rows (not its inverse) miss the pseudo-inverse.
    lam, V = np.linalg.eigh(J.T @ J)
    wrong = V.T * np.sqrt(lam)[:, None]
    assert np.linalg.norm(wrong @ g) != pytest.approx(np.linalg.norm(g @ pinv), rel=1e-3)
    # A singular J^T J has no rows: the estimate is inf, never a small figure.
    Js = np.hstack([J[:, :3], J[:, :1]])
    assert sf.covariance_rows(Js.T @ Js)[1:] == (0.0, np.inf)


def test_the_fit_reaches_the_heads_from_a_nearby_start() -> None:
    heads = _heads(3, 2, 4, True)
    seqs = sf.polish_sequences(3, 2 * 31, seed=0)
    model = _model(heads, -0.4, True)
    rows = sf.compress(seqs, [float(model.evaluate_batch(X[None])[0]) for X in seqs])
    start = [tuple(x + 0.02 for x in hd) for hd in heads]
    fit = sf.fit_sequences(start, -0.3, rows, affine=True)
    err = max(
        float(np.abs(a - b).max())
        for h, g in zip(fit.heads, heads, strict=True)
        for a, b in zip(h, g, strict=True)
    )
    assert err < 1e-9 and abs(fit.beta + 0.4) < 1e-9
    assert float(np.abs(fit.residuals).max()) < 1e-12
    # Never worse than the start: with no step allowed it returns the start itself.
    none = sf.fit_sequences(start, -0.3, rows.take(slice(0, 0)), affine=True)
    assert all(np.array_equal(a, b) for a, b in zip(none.heads[0], start[0], strict=True))


def _trials(monkeypatch: pytest.MonkeyPatch, seed: int) -> tuple[int, float]:
    """The fit's trial evaluations (model_values calls) from a start 1e-6 off, and its
    largest parameter error (d = 4, H = 3, affine, exact float64 answers)."""
    heads = _heads(4, 3, seed, True)
    seqs = sf.polish_sequences(4, 2 * 73, seed=seed)
    model = _model(heads, -0.4, True)
    rows = sf.compress(seqs, [float(model.evaluate_batch(X[None])[0]) for X in seqs])
    calls: list[int] = []
    values = sf.model_values

    def counted(*args: Any, **kwargs: Any) -> np.ndarray:
        calls.append(1)
        return values(*args, **kwargs)

    monkeypatch.setattr(sf, "model_values", counted)
    start = [tuple(x + 1e-6 for x in hd) for hd in heads]
    fit = sf.fit_sequences(start, -0.4 + 1e-6, rows, affine=True)
    monkeypatch.setattr(sf, "model_values", values)
    err = max(
        float(np.abs(a - b).max())
        for h, g in zip(fit.heads, heads, strict=True)
        for a, b in zip(h, g, strict=True)
    )
    return len(calls), err


@pytest.mark.parametrize("seed", [0, 1])
def test_the_fit_stops_at_its_rounding_floor(monkeypatch: pytest.MonkeyPatch, seed: int) -> None:
    # Measured: 5 trials, parameters within 1.1e-15; decreases below the cost's rounding
    # noise (sequence_fit.cost_noise) stop it.
    trials, err = _trials(monkeypatch, seed)
    assert trials <= 8 and err < 1e-14
    # The wrong variant: no noise rule (only the 1e-6 relative decrease) spends 29 - 35
    # trials on rounding noise for no better parameters.
    monkeypatch.setattr(sf, "_NOISE_FACTOR", 0.0)
    slow, slow_err = _trials(monkeypatch, seed)
    assert slow > 3 * trials and slow_err > err / 10


# --- the design: counts, window, bound -----------------------------------------------------


@pytest.mark.parametrize(
    ("d", "H", "polish"),
    # Up to four heads what the follow-up's count leaves (golden changed deliberately: the
    # design under the count took three and four heads and dropped the t = 1 sample,
    # test_float32_follow_up.py; E = 16, H = 4 spends two more pilot rounds of d 2H queries
    # each, taken off the polish); from five on 2 P.
    [(8, 2, 150), (8, 4, 310), (16, 4, 1646 - 2 * 128), (8, 5, 2 * 401), (16, 8, 2 * 2305)],
)
def test_golden_polish_counts(d: int, H: int, polish: int) -> None:
    assert polish_count(d, H, True, unit=F32) == polish
    assert polish_count(d, H, True) == 0  # float64: the u-group figures stand
    assert polish_count(d, 1, True, unit=F32) == 0  # one head: no coarse design
    # E = 32, H = 4 (4353 parameters) is past POLISH_PARAMETERS: the u-group figures.
    assert polish_count(32, 4, True, unit=F32) == 0


def test_the_bound_holds_the_polish() -> None:
    # E = 8, H = 5: 17 columns, 143 pairs x 11 ratios, 802 polish sequences.
    assert float_query_bound(8, 5, affine=True, unit=F32) == 17 + 143 * 11 + 802 == 2392
    rounds = 2 * 8 * 11 + 8 * (17 + 7) * 11
    assert float_query_limit(8, 5, affine=True, unit=F32) == 2392 + rounds
    # E = 8, H = 4, under the follow-up's count: 10 columns, 87 pairs x 8 ratios, 310
    # polish sequences, no adaptive round.
    assert float_query_bound(8, 4, affine=True, unit=F32) == 10 + 87 * 8 + 310 == 1016
    assert float_query_limit(8, 4, affine=True, unit=F32) == 1016


def test_a_coarse_box_keeps_the_short_window() -> None:
    assert max_length(4, unit=F32) == 65 and max_length(4) == 257
    assert max(k + m for k, m in float_ratios(8, unit=F32)) <= 65
    assert float_ratios(2, unit=F32) == float_ratios(2)  # two heads: narrow either way


# --- float32 modules -----------------------------------------------------------------------

torch = pytest.importorskip("torch")

from tests.adapters.test_torch_multi_head import _one_thread  # noqa: E402, F401 (autouse)
from tests.multi_head.test_float32_s5 import _parameter_error  # noqa: E402
from verified_attn.adapters.torch import attention_oracle  # noqa: E402


def _bench_module(E: int, H: int, seed: int) -> tuple[Any, np.ndarray]:
    """The float benchmark's modules (benchmarks/multi_head_float.py, torch_box)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    from multi_head_float import torch_box

    return torch_box(E, H, seed)


@pytest.fixture(scope="module")
def four_heads() -> tuple[Any, Any, np.ndarray]:
    # The float benchmark's E = 8, H = 4 module seed 2: refused before the polish (the
    # u-groups' estimate 1.7e-2 > the parameter tolerance 1e-3). Under the follow-up's count
    # (golden changed deliberately, test_float32_follow_up.py) one of its u-groups stops at
    # 1.2e3 x its floor and starts the polish all the same (decode_stage), its groups' head
    # orders taken on the polish sequences (reorder.py).
    mha, r = _bench_module(8, 4, 2)
    rec = learn_multi_head(attention_oracle(mha, r, dtype="float32"), heads=4, seed=2)
    return rec, mha, r


@pytest.mark.slow  # minutes of float multi-head learning: `pytest -m slow`
@pytest.mark.torch
def test_a_four_head_float32_module_is_learned(four_heads: Any) -> None:
    rec, mha, r = four_heads
    assert rec.queries_by_phase["polish"] == 310
    # Golden: 10 F(0), 87 pairs x 8 ratios, 310 polish; one query under 4Hd^2 - 2H + 1.
    assert rec.queries == 1016 == follow_up_query_bound(8, 4) - 1
    assert rec.queries <= rec.bound == float_query_limit(8, 4, affine=True, unit=F32)
    err = _parameter_error(rec, mha, r)
    # Measured (the benchmark's metric): parameters 2^-19.2 from the float64 module.
    assert err <= rec.parameter_error_estimate <= rec.parameter_rtol == 1e-3
    assert "310 of them on random sequences" in rec.notes[1]
    ref = attention_oracle(mha, r, dtype="float64")
    for X in fresh_sequences(8, 16, seed=77, lengths=list(range(1, 17))):
        y = float(ref.query(X))
        assert abs(float(rec.model.evaluate_batch(X[None])[0]) - y) <= 1e-4 * max(1.0, abs(y))


@pytest.mark.slow  # minutes of float multi-head learning: `pytest -m slow`
@pytest.mark.torch
def test_the_polished_certificate_rechecks_and_tampering_is_rejected(four_heads: Any) -> None:
    rec = four_heads[0]
    data = rec.certificate()
    assert data["result"]["parameter_error_estimate_kind"] == "sequences"
    assert len(data["answers"]["polish"]) == 310
    summary = " ".join(va.verify_certificate(data).summary)
    assert "sequence polish on all 1016 answers, 310 on random sequences" in summary
    # A polish answer moved by 1e-3: the claimed heads no longer reproduce it.
    bad = copy.deepcopy(data)
    bad["answers"]["polish"][5] = dump_number(load_number(bad["answers"]["polish"][5]) + 1e-3)
    with pytest.raises(CertificateError, match="learning answer"):
        va.verify_certificate(bad)
    # The estimate stated below half the recomputed one, or the kind changed: rejected.
    bad = copy.deepcopy(data)
    bad["result"]["parameter_error_estimate"] = dump_number(rec.parameter_error_estimate / 4)
    with pytest.raises(CertificateError, match="half the recomputed"):
        va.verify_certificate(bad)
    bad = copy.deepcopy(data)
    bad["result"]["parameter_error_estimate_kind"] = "u-groups"
    with pytest.raises(CertificateError, match="'sequences'"):
        va.verify_certificate(bad)
    bad = copy.deepcopy(data)
    del bad["answers"]["polish"]
    with pytest.raises(CertificateError, match="polish"):
        va.verify_certificate(bad)
    # The prediction bound stated over fewer sequences than it is computed on: rejected.
    bad = copy.deepcopy(data)
    bad["result"]["prediction_bound"]["sequences"] = 3
    with pytest.raises(CertificateError, match="must be over 64 sequences"):
        va.verify_certificate(bad)
    # An estimate stated over the stated tolerance: rejected.
    bad = copy.deepcopy(data)
    bad["result"]["parameter_error_estimate"] = dump_number(2e-3)
    with pytest.raises(CertificateError, match="stated parameter tolerance"):
        va.verify_certificate(bad)


@pytest.mark.slow  # minutes of float multi-head learning: `pytest -m slow`
@pytest.mark.torch
def test_without_the_polish_the_module_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    # The wrong variant: no polish (POLISH_PARAMETERS below the module's 321 parameters):
    # the u-group figures refuse the module that the polish learns.
    monkeypatch.setattr("verified_attn.multi_head.pipeline.budget.POLISH_PARAMETERS", 300)
    mha, r = _bench_module(8, 4, 2)
    with pytest.raises(va.errors.VerifiedAttnError):
        learn_multi_head(attention_oracle(mha, r, dtype="float32"), heads=4, seed=2)


@pytest.mark.slow  # minutes of float multi-head learning: `pytest -m slow`
@pytest.mark.torch
def test_the_long_window_would_hold_the_module_to_answers_it_rounds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The wrong variant: the 257-token window at four heads. The polish reaches the module's
    # heads (2.5e-6), but its float32 answer on one 257-token query is off from them by
    # 5.5e-4 of the heads' part, over rtol 1e-4: refused. Measured on the coarse design (d
    # columns, pinned here: FOLLOW_UP_COARSE_HEADS 2, as when measured); under the follow-up's
    # count this module with the long window is learned within its tolerances (parameters
    # 2.4e-6 from the float64 module, estimate 5.3e-5; fresh predictions 6.5e-6).
    monkeypatch.setattr("verified_attn.multi_head.pipeline.budget.FOLLOW_UP_COARSE_HEADS", 2)
    original = ratio_window
    monkeypatch.setattr(
        "verified_attn.multi_head.pipeline.budget.ratio_window",
        lambda H, *, unit=2.0**-53: original(H),
    )
    mha, r = _bench_module(8, 4, 2)
    with pytest.raises(PrecisionExhausted, match=re.escape("on the query of length 257")):
        learn_multi_head(attention_oracle(mha, r, dtype="float32"), heads=4, seed=2)


@pytest.mark.slow  # minutes of float multi-head learning: `pytest -m slow`
@pytest.mark.torch
def test_a_polished_box_outside_the_class_is_refused() -> None:
    # Four heads given as two (E = 8, float32): the polish cannot make two heads reproduce
    # the answers.
    mha, r = _bench_module(8, 4, 1)
    box = attention_oracle(mha, r, dtype="float32")
    with pytest.raises(
        (va.errors.PrecisionExhausted, va.errors.NotIdentifiable, va.errors.ModelClassMismatch)
    ):
        learn_multi_head(box, heads=2, seed=1)
    assert box.queries <= float_query_limit(8, 2, affine=True, unit=F32) + 8
