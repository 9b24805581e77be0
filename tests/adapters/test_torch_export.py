"""``rec.to_torch()``: a learned head as an nn.MultiheadAttention plus an nn.Linear readout.

The module, read at the last position as the adapters read a module, must compute the
learned model (float64), and ``attention_parameters`` (the mapping the other way) must
give back the learned parameters.
"""

from __future__ import annotations

import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import verified_attn as va  # noqa: E402
from verified_attn.adapters.torch import attention_oracle, attention_parameters  # noqa: E402

SEQUENCES = [np.random.default_rng(7).uniform(-1.5, 1.5, size=(3, n, 4)) for n in (1, 2, 5, 9)]


def _outputs(mha: object, readout: object, Xs: np.ndarray) -> np.ndarray:
    X = torch.from_numpy(Xs)
    with torch.no_grad():
        out = mha(X, X, X, need_weights=False)[0][:, -1]  # type: ignore[operator]
        return readout(out).numpy()[:, 0]  # type: ignore[operator]


def _module(seed: int, E: int, H: int) -> tuple[object, np.ndarray]:
    torch.manual_seed(seed)
    mha = torch.nn.MultiheadAttention(E, num_heads=H, batch_first=True)
    with torch.no_grad():
        mha.in_proj_bias.normal_()
        mha.out_proj.bias.normal_()
    return mha, np.random.default_rng(seed).standard_normal(E)


def _matches(rec: va.Recovery, tol: float = 1e-12) -> float:
    mha, readout = rec.to_torch()
    assert isinstance(mha, torch.nn.MultiheadAttention) and isinstance(readout, torch.nn.Linear)
    worst = 0.0
    for Xs in SEQUENCES:
        want = rec.model.evaluate_batch(Xs)
        got = _outputs(mha, readout, Xs)
        worst = max(worst, float(np.abs(got - want).max() / max(1.0, np.abs(want).max())))
    assert worst <= tol, worst
    return worst


def test_a_single_head() -> None:
    rec = va.learn_single_head(
        va.Oracle(
            va.SingleHeadAttention(
                [[1, -2, 0, 1], [3, 0, 1, 0], [0, 1, 1, 2], [1, 1, 0, -1]], [2, -1, 0, 1]
            ),
            "exact",
        )
    )
    _matches(rec)
    p = attention_parameters(*rec.to_torch())
    assert np.allclose(p.W[0], np.array(rec.W, dtype=float), rtol=0, atol=1e-13)
    assert np.allclose(p.v[0], np.array(rec.v, dtype=float)[:, 0], rtol=0, atol=1e-13)
    assert np.abs(p.c).max() == 0 and p.beta == 0


def test_an_affine_head_learned_from_a_module_round_trips() -> None:
    mha, r = _module(0, 4, 1)
    rec = va.learn_single_head(attention_oracle(mha, r, dtype="float64"))
    _matches(rec)
    p = attention_parameters(*rec.to_torch())
    for name in ("W", "c", "v"):
        assert np.abs(getattr(p, name)[0] - rec.parameters[name]).max() <= 1e-13, name
    assert abs(p.beta - rec.beta) <= 1e-13
    # the rebuilt module is the learned one as a black box: learned again, the same head
    again = va.learn_single_head(attention_oracle(*rec.to_torch(), dtype="float64"))
    assert np.abs(again.parameters["W"] - rec.parameters["W"]).max() <= 1e-9


def test_two_heads_learned_from_a_module() -> None:
    mha, r = _module(4, 4, 2)
    rec = va.learn_multi_head(attention_oracle(mha, r, dtype="float64"), heads=2)
    _matches(rec)
    p = attention_parameters(*rec.to_torch())
    for h, (W, v, c) in enumerate(rec.heads):
        assert np.abs(p.W[h] - W).max() <= 1e-12 and np.abs(p.v[h] - v).max() <= 1e-12
        assert np.abs(p.c[h] - c).max() <= 1e-12
    assert abs(p.beta - float(rec.beta)) <= 1e-12


def test_a_wrong_readout_is_seen() -> None:
    # The comparison can fail: the same module read by another vector does not match.
    rec = va.learn_single_head(va.Oracle(va.SingleHeadAttention([[1, 2], [0, 1]], [1, 1]), "exact"))
    mha, readout = rec.to_torch()
    with torch.no_grad():
        readout.weight.mul_(2)
    Xs = np.random.default_rng(1).uniform(-1, 1, size=(3, 4, 2))
    assert np.abs(_outputs(mha, readout, Xs) - rec.model.evaluate_batch(Xs)).max() > 1e-3


def test_heads_of_too_high_rank_and_other_kinds_are_refused() -> None:
    two = va.MultiHeadAttention([([[1, 0], [0, -1]], [1, 2]), ([[0, 1], [1, 0]], [-1, 1])])
    rec = va.learn_multi_head(va.Oracle(two, "exact"), heads=2)
    with pytest.raises(va.InvalidArgument, match="rank 2 > E / H = 1"):
        rec.to_torch()
    ffn = va.learn_relu_ffn(va.Oracle(va.ReluFFN([[1, -1], [2, 1]], [1, -2]), "exact"))
    with pytest.raises(va.InvalidArgument, match="single- or multi-head"):
        ffn.to_torch()


def test_without_torch_the_error_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    rec = va.learn_single_head(va.Oracle(va.SingleHeadAttention([[2]], [3]), "exact"))
    monkeypatch.setitem(sys.modules, "torch", None)
    with pytest.raises(ImportError, match=r"pip install 'verified-attn\[torch\]'"):
        rec.to_torch()


def test_the_callers_random_state_is_left_as_it_was() -> None:
    """Building the modules draws no number from torch's global generator."""
    rec = va.learn_single_head(va.Oracle(va.SingleHeadAttention([[1, 0], [2, 1]], [1, -1]), "exact"))
    torch.manual_seed(3)
    expected = torch.rand(4)
    torch.manual_seed(3)
    rec.to_torch()
    assert torch.equal(torch.rand(4), expected)
