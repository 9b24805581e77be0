"""The low-rank learner's stated parameter error estimate against the true error.

The joint low-rank Gauss-Newton fit states ``|J^+ r|`` (its step still to go, entry by
entry) plus the worst case of the answers' noise ``(|r_perp|^2 + |unit y|^2)^(1/2)`` through
each row of its Jacobian's pseudo-inverse
(:func:`~verified_attn.multi_head.pipeline.skeleton_refine.low_rank_estimate`). On every
box below the stated figure is at least the true parameter error (measured 5.8x to 48x of
it), while two deliberately smaller variants fall under the true error on some box: the
noise spread evenly over the N answers (the standard deviation, 1/sqrt(N) of the worst
case; measured 0.37x to 2.8x) and the rounding alone (the residual dropped; 0.47x to 14x).
"""

from __future__ import annotations

import copy
import math
from typing import Any

import numpy as np
import pytest
from test_low_rank_skeleton import _rank_box

import verified_attn as va
from verified_attn.errors import CertificateError
from verified_attn.multi_head.pipeline import skeleton_result
from verified_attn.multi_head.pipeline.skeleton_refine import (
    _Theta,
    _to_heads,
    heads_estimate,
    low_rank_estimate,
)
from verified_attn.serialize import dump_number, load_number

_RANK_BOXES = [(2, 0), (2, 1), (3, 1), (4, 0)]  # (H, seed): d = 8, rank 2, bias-free
_TORCH_BOXES = [(4, 0), (4, 2)]  # nn.MultiheadAttention E = 8 (rank 2), float64, affine


def _torch_box(H: int, seed: int) -> tuple[Any, list[tuple[np.ndarray, ...]], float]:
    torch = pytest.importorskip("torch")
    from verified_attn.adapters.torch import attention_oracle, attention_parameters

    torch.manual_seed(seed)
    mha = torch.nn.MultiheadAttention(8, H, batch_first=True)
    with torch.no_grad():
        mha.in_proj_bias.normal_()
        mha.out_proj.bias.normal_()
    readout = np.random.default_rng(100 + seed).standard_normal(8)
    T = attention_parameters(mha, readout)
    truth = [(np.asarray(T.W[h]), np.asarray(T.v[h]), np.asarray(T.c[h])) for h in range(H)]
    return attention_oracle(mha, readout, dtype="float64"), truth, float(T.beta)


def _boxes() -> list[tuple[str, Any, list[tuple[np.ndarray, ...]], float]]:
    out = []
    for H, seed in _RANK_BOXES:
        model, heads = _rank_box(8, H, 2, seed)
        out.append((f"rank box H={H} seed={seed}", va.Oracle(model, "float"), heads, 0.0))
    for H, seed in _TORCH_BOXES:
        oracle, truth, beta = _torch_box(H, seed)
        out.append((f"torch E=8 H={H} seed={seed}", oracle, truth, beta))
    return out


def _true_error(
    th: _Theta, affine: bool, truth: list[tuple[np.ndarray, ...]], beta: float
) -> float:
    """Largest error of one parameter (best matching true head), over max(1, largest fitted
    parameter): the measure the estimate states."""
    heads = _to_heads(th, affine)
    size = max(1.0, abs(th.beta), *(float(np.abs(x).max()) for hd in heads for x in hd))
    worst = max(
        min(
            max(
                float(np.abs(np.asarray(a) - np.asarray(b)).max())
                for a, b in zip(hd, t, strict=True)
            )
            for t in truth
        )
        for hd in heads
    )
    return max(worst, abs(th.beta - beta)) / size


def _learn_capturing(monkeypatch: pytest.MonkeyPatch, oracle: Any, H: int) -> tuple[Any, dict]:
    """Learn (rank 2) and keep the arguments the learner's estimate was computed from."""
    seen: dict[str, Any] = {}

    def spy(rows: Any, th: _Theta, res: np.ndarray, unit: float, gauge: int) -> float | None:
        seen.update(rows=rows, th=th, res=res, unit=unit, gauge=gauge)
        return low_rank_estimate(rows, th, res, unit, gauge)

    monkeypatch.setattr(skeleton_result, "low_rank_estimate", spy)
    return va.learn_multi_head(oracle, heads=H, rank=2), seen


def test_the_stated_estimate_covers_the_true_error_and_smaller_variants_do_not(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    short_sd, short_rounding = [], []
    for name, oracle, truth, beta in _boxes():
        rec, seen = _learn_capturing(monkeypatch, oracle, len(truth))
        rows, th, res, unit, gauge = (seen[k] for k in ("rows", "th", "res", "unit", "gauge"))
        true = _true_error(th, rows.affine, truth, beta)
        assert rec.parameter_error_estimate is not None
        assert rec.parameter_error_estimate >= true, name
        assert rec.parameter_error_estimate <= rec.parameter_rtol
        # The figure is homogeneous in (residuals, unit): scaled by 1/sqrt(N) it is the
        # standard deviation of evenly spread noise; with the residual dropped, rounding only.
        root = math.sqrt(len(rows.y))
        sd = low_rank_estimate(rows, th, res / root, unit / root, gauge)
        rounding = low_rank_estimate(rows, th, 0 * res, unit, gauge)
        assert sd is not None and rounding is not None
        short_sd.append(sd < true)
        short_rounding.append(rounding < true)
    assert any(short_sd) and any(short_rounding)


def test_the_step_still_to_go_counts_signed(monkeypatch: pytest.MonkeyPatch) -> None:
    # Heads moved off the fit: the estimate at them covers the move (|J^+ r| entry by
    # entry, r now mostly in J's range), which the noise term alone would not.
    model, _ = _rank_box(8, 2, 2, seed=1)
    rec, seen = _learn_capturing(monkeypatch, va.Oracle(model, "float"), 2)
    got = [(np.asarray(W), np.asarray(v)) for W, v in rec.parameters["heads"]]
    moved = [(got[0][0] * (1 + 1e-7), got[0][1]), got[1]]
    at_fit = heads_estimate(seen["rows"], got, 0.0, 2, seen["unit"])
    off = heads_estimate(seen["rows"], moved, 0.0, 2, seen["unit"])
    assert at_fit is not None and off is not None
    size = max(1.0, max(float(np.abs(x).max()) for hd in got for x in hd))
    shift = 1e-7 * float(np.abs(got[0][0]).max()) / size
    assert at_fit < shift / 10 <= 0.9 * shift <= off
    # The learner's own figure is the checker's, recomputed at the returned heads.
    assert rec.parameter_error_estimate is not None
    assert at_fit / 2 <= rec.parameter_error_estimate <= 2 * at_fit


def test_the_checker_recomputes_the_estimate() -> None:
    model, _ = _rank_box(8, 2, 2, seed=1)
    rec = va.learn_multi_head(va.Oracle(model, "float"), heads=2, rank=2)
    data = rec.certificate()
    report = str(va.verify_certificate(data))
    assert "recomputed" in report
    told = float(load_number(data["result"]["parameter_error_estimate"]))
    # A stored estimate under half the recomputed one, or over the tolerance, fails.
    stated = float(load_number(data["result"]["parameter_rtol"]))
    for wrong in (told / 10, 2 * stated):
        bad = copy.deepcopy(data)
        bad["result"]["parameter_error_estimate"] = dump_number(wrong)
        with pytest.raises(CertificateError, match="parameter_error_estimate"):
            va.verify_certificate(bad)
    # A tolerance under the recomputed estimate fails.
    bad = copy.deepcopy(data)
    bad["result"]["parameter_rtol"] = dump_number(told / 10)
    bad["result"]["parameter_error_estimate"] = dump_number(told / 10)
    with pytest.raises(CertificateError, match="exceeds the stated parameter tolerance"):
        va.verify_certificate(bad)
