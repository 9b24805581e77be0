"""The single-head float learner's first-order prediction bound (issue 39).

A float32 ``nn.MultiheadAttention`` with one head, biases N(0, 1) and readout N(0, 1)
(``benchmarks/multi_head_float.py: torch_box``) was returned verified at rtol 1e-4 while
off by more on sequences it did not ask (E = 32, module seeds 2 and 5, docs/pytorch.md).
The learner now refuses a float result whose bound does not fit the agreement rule, naming
the rtol at which it does; these tests hold it to the actual errors against the float64
module on the bound's own 64 sequences.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import verified_attn as va
from verified_attn.arithmetic import FloatArithmetic
from verified_attn.design import default_design, unit_query
from verified_attn.exact_recovery import float_bound as fb
from verified_attn.exact_recovery.learner import decode_single_head
from verified_attn.verification import bias_allowance, float_floor, fresh_sequences, tolerance

torch = pytest.importorskip("torch")

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from multi_head_float import torch_box  # type: ignore[import-not-found]  # noqa: E402

from verified_attn.adapters.torch import attention_oracle  # noqa: E402


def _actual_ratio(rec: Any, mha: Any, r: Any, seed: int, rtol: float) -> float:
    """The worst |prediction - float64 answer| over the rule's allowance at ``rtol``, on
    the bound's 64 sequences (none asked by the learner)."""
    truth = attention_oracle(mha, r, dtype="float64")
    arith = FloatArithmetic(rtol, 2.0**-24)
    beta = float(rec.parameters["beta"])
    seqs = fresh_sequences(rec.parameters["W"].shape[0], fb.PREDICTION_SEQUENCES, seed=seed)
    preds = np.array([float(rec.model.evaluate_batch(X[None])[0]) for X in seqs])
    answers = np.array([truth.query(X) for X in seqs])
    floor = float_floor(list(answers), beta)
    allowed = np.array([tolerance(arith, y, bias=beta, floor=floor) for y in answers])
    return float(np.max(np.abs(preds - answers) / allowed))


def _named_rtol(exc: BaseException) -> float:
    found = re.search(r"fits at rtol ([0-9.e-]+)", str(exc))
    assert found, str(exc)
    return float(found.group(1))


# ---------------------------------------------------------------------------------------
# The chain rule, against finite differences of the decoding itself.
# ---------------------------------------------------------------------------------------


def _synthetic(d: int = 3) -> tuple[Any, Any, dict[str, Any], dict[str, Any]]:
    arith = FloatArithmetic(1e-4, 2.0**-24)
    model = va.SingleHeadAttention(
        [[0.5, -0.25, 0.75], [0.125, 0.5, -0.5], [-0.375, 0.25, 0.25]],
        [0.5, -0.75, 0.25],
        c=[0.25, -0.5, 0.125],
        beta=3.0,
    )
    f = lambda X: float(model.evaluate_batch(np.asarray(X, dtype=float)[None])[0])  # noqa: E731
    v = np.array([f(unit_query(d, i)) - f(unit_query(d, None)) for i in range(d)])
    design = default_design(arith, v, d, True)
    answers = {
        "beta": f(unit_query(d, None)),
        "v": [f(unit_query(d, i)) for i in range(d)],
        "W": [[f(design.w_query(j, k)) for j in range(d)] for k in range(d)],
        "c": [f(design.c_query(k)) for k in range(d)],
    }
    with arith.context():
        params = decode_single_head(arith, design, answers)
    params["beta"] = answers["beta"]
    return arith, design, answers, params


def _predict(params: dict[str, Any], X: np.ndarray) -> float:
    m = va.SingleHeadAttention(
        np.asarray(params["W"]),
        np.asarray(params["v"]),
        c=np.asarray(params["c"]),
        beta=float(params["beta"]),
    )
    return float(m.evaluate_batch(X[None])[0])


def test_answer_gradients_match_finite_differences_of_the_decoding() -> None:
    arith, design, answers, params = _synthetic()
    pr = fb.Probes.of(design, answers)
    X = fresh_sequences(3, 6, seed=4)[5]
    xa, q, gv = fb.head_gradients(
        np.asarray(params["W"]), np.asarray(params["v"]), np.asarray(params["c"]), X
    )
    gb, ga, gF, gG = fb.answer_gradients(pr, np.linalg.inv(pr.U), xa, q, gv, 1.0)
    h = 1e-6

    def moved(key: str, ix: tuple[int, ...]) -> float:
        out = []
        for sign in (1, -1):
            ans = {k: np.array(a, dtype=float) for k, a in answers.items()}
            ans[key][ix] += sign * h
            with arith.context():
                p = decode_single_head(arith, design, {k: a.tolist() for k, a in ans.items()})
            p["beta"] = float(ans["beta"])
            out.append(_predict(p, X))
        return (out[0] - out[1]) / (2 * h)

    assert gG is not None
    assert moved("beta", ()) == pytest.approx(gb, rel=1e-5, abs=1e-7)
    for i in range(3):
        assert moved("v", (i,)) == pytest.approx(ga[i], rel=1e-5, abs=1e-7)
        assert moved("c", (i,)) == pytest.approx(gG[i], rel=1e-5, abs=1e-7)
        for j in range(3):
            assert moved("W", (i, j)) == pytest.approx(gF[i, j], rel=1e-5, abs=1e-7)
    # v's and beta's answers matter: every W and c entry depends on them through u_k^T v.
    assert abs(gb) > 1e-3 and np.abs(ga).max() > 1e-3


def test_head_gradients_are_the_multi_head_output_gradients() -> None:
    from verified_attn.multi_head.prediction_bound import output_gradients

    _, _, _, params = _synthetic()
    W, v, c = (np.asarray(params[k]) for k in ("W", "v", "c"))
    X = fresh_sequences(3, 8, seed=1)[6]
    xa, q, gv = fb.head_gradients(W, v, c, X)
    gW, gv2, gc = output_gradients([(W, v, c)], X, affine=True)[0]
    assert gc is not None
    assert np.allclose(np.outer(xa, q), gW) and np.allclose(gv, gv2) and np.allclose(xa, gc)


# ---------------------------------------------------------------------------------------
# nn.MultiheadAttention in float32: refused where the real errors are over the rule.
# ---------------------------------------------------------------------------------------


def test_small_module_over_its_rtol_is_refused_and_learned_at_the_named_rtol() -> None:
    """E = 4, module seed 3 (beta = -0.03): the result the learner used to return was off by
    1.26 x the rule's allowance at rtol 1e-4 on the bound's sequences."""
    mha, r = torch_box(4, 1, 3)
    with pytest.raises(va.PrecisionExhausted, match=r"rtol 0\.0001 ") as info:
        va.learn_single_head(attention_oracle(mha, r, dtype="float32"), seed=3)
    rtol = _named_rtol(info.value)
    assert 1e-4 < rtol < 1e-3
    rec = va.learn_single_head(attention_oracle(mha, r, dtype="float32", rtol=rtol), seed=3)
    assert rec.verified and _actual_ratio(rec, mha, r, 3, rtol) <= 1


def test_small_module_within_its_rtol_is_learned() -> None:
    mha, r = torch_box(4, 1, 0)
    rec = va.learn_single_head(attention_oracle(mha, r, dtype="float32"), seed=0)
    assert rec.verified and rec.queries == 31  # 25 + 6 refined probes, as before
    assert _actual_ratio(rec, mha, r, 0, 1e-4) <= 1


def _float64_unit(monkeypatch: pytest.MonkeyPatch) -> None:
    """A wrong variant: the bound at float64's unit roundoff, not the box's."""
    real = fb.answer_noise
    monkeypatch.setattr(fb, "answer_noise", lambda unit, pr, params: real(2.0**-53, pr, params))


def _no_v_beta(monkeypatch: pytest.MonkeyPatch) -> None:
    """A wrong variant: the chain rule without v's and beta's answers."""
    real = fb.answer_gradients

    def grads(*args: Any) -> Any:
        _, ga, gF, gG = real(*args)
        return 0.0, 0.0 * ga, gF, gG

    monkeypatch.setattr(fb, "answer_gradients", grads)


def _answer_sized_noise(monkeypatch: pytest.MonkeyPatch) -> None:
    """A wrong variant: each answer's rounding as unit * |answer| (a refined probe's large
    scale enters the box's scores and values, not its answer)."""

    def noise(unit: float, pr: Any, params: Any) -> Any:
        G = None if pr.G is None else unit * np.abs(pr.G)
        return unit * abs(pr.b), unit * np.abs(pr.a), unit * np.abs(pr.F), G

    monkeypatch.setattr(fb, "answer_noise", noise)


@pytest.mark.parametrize("variant", [_float64_unit, _no_v_beta])
def test_wrong_variants_let_the_bad_small_module_through(
    monkeypatch: pytest.MonkeyPatch, variant: Any
) -> None:
    variant(monkeypatch)
    mha, r = torch_box(4, 1, 3)
    rec = va.learn_single_head(attention_oracle(mha, r, dtype="float32"), seed=3)
    assert _actual_ratio(rec, mha, r, 3, 1e-4) > 1  # what the refusal test above catches


@pytest.mark.parametrize("seed", [2, 5])
def test_e32_modules_over_their_rtol_are_refused(seed: int) -> None:
    """The issue's modules: returned verified at rtol 1e-4, off by 4.5e-4 and 1.15e-4
    (relative to max(1, |answer|)); 1.86 and 1.32 x the rule's allowance on the bound's
    sequences. Refused, and learned at the rtol the refusal names, which they meet."""
    mha, r = torch_box(32, 1, seed)
    with pytest.raises(va.PrecisionExhausted, match=r"rtol 0\.0001 ") as info:
        va.learn_single_head(attention_oracle(mha, r, dtype="float32"), seed=seed)
    rtol = _named_rtol(info.value)
    rec = va.learn_single_head(attention_oracle(mha, r, dtype="float32", rtol=rtol), seed=seed)
    assert rec.verified and rec.queries == 2113
    assert _actual_ratio(rec, mha, r, seed, rtol) <= 1


@pytest.mark.parametrize("variant", [_float64_unit, _answer_sized_noise])
def test_wrong_variants_let_e32_seed_2_through(
    monkeypatch: pytest.MonkeyPatch, variant: Any
) -> None:
    """Without the box's unit roundoff, or with each answer's rounding sized by the answer
    alone, the E = 32 seed-2 module is returned at rtol 1e-4 although it is off by more."""
    variant(monkeypatch)
    mha, r = torch_box(32, 1, 2)
    rec = va.learn_single_head(attention_oracle(mha, r, dtype="float32"), seed=2)
    assert _actual_ratio(rec, mha, r, 2, 1e-4) > 1


# ---------------------------------------------------------------------------------------
# The parameter estimate, and refutations explained by precision.
# ---------------------------------------------------------------------------------------


def _worst_case_by_differences(
    arith: Any, design: Any, answers: dict[str, Any], noise: Any
) -> dict[str, np.ndarray]:
    """``sum_i |d param / d answer_i| sigma_i`` per entry, by central differences of the
    decoding itself (the true first-order worst case under ``noise``)."""
    s_b, s_a, s_F, s_G = noise
    sigma = {"beta": np.array(s_b), "v": s_a, "W": s_F, "c": s_G}
    out: dict[str, np.ndarray] = {}
    for key, s in sigma.items():
        for ix in np.ndindex(np.shape(s)):
            h = 1e-6
            got = []
            for sign in (1, -1):
                ans = {k: np.array(a, dtype=float) for k, a in answers.items()}
                ans[key][ix] += sign * h
                with arith.context():
                    p = decode_single_head(arith, design, {k: a.tolist() for k, a in ans.items()})
                p["beta"] = float(ans["beta"])
                got.append({k: np.asarray(x, dtype=float) for k, x in p.items()})
            for k in got[0]:
                term = np.abs(got[0][k] - got[1][k]) / (2 * h) * float(np.asarray(s)[ix])
                out[k] = out.get(k, 0.0) + term
    return out


def _drop_v_noise(monkeypatch: pytest.MonkeyPatch) -> None:
    real = fb.answer_noise

    def noise(unit: float, pr: Any, params: Any) -> Any:
        _, s_a, s_F, s_G = real(unit, pr, params)
        return 0.0, 0 * s_a, s_F, s_G

    monkeypatch.setattr(fb, "answer_noise", noise)


@pytest.mark.parametrize("variant", [None, _drop_v_noise])
def test_parameter_bounds_cover_the_worst_case_of_the_decoding(
    monkeypatch: pytest.MonkeyPatch, variant: Any
) -> None:
    arith, design, answers, params = _synthetic()
    pr = fb.Probes.of(design, answers)
    truth = _worst_case_by_differences(
        arith, design, answers, fb.answer_noise(2.0**-24, pr, params)
    )
    if variant is not None:
        variant(monkeypatch)
    bounds = fb.parameter_bounds(2.0**-24, design, answers, params)
    ratios = {k: np.ravel(bounds[k]) / np.ravel(truth[k]) for k in ("W", "v", "c", "beta")}
    covered = all(bool((r >= 1 - 1e-4).all()) for r in ratios.values())
    assert covered == (variant is None), ratios
    if variant is None:  # and not vacuous: within 8x of the true worst case per entry
        assert all(bool((r <= 8).all()) for r in ratios.values()), ratios


def test_a_refutation_within_the_worst_case_is_precision_beyond_it_the_class() -> None:
    arith, design, answers, params = _synthetic()
    X = fresh_sequences(3, 6, seed=4)[5]
    worst = float(fb.prediction_bounds(2.0**-24, design, answers, params, [X])[0, 0])
    pred = _predict(params, X)

    def refuted(gap: float, a: Any = arith) -> None:
        exc = va.ModelClassMismatch("refuted", query=X, observed=pred + gap, expected=pred)
        fb.precision_or_mismatch(
            fb.DecodedHead(a, design, answers, params), exc, seed=0, lengths=(1, 2)
        )

    with pytest.raises(va.PrecisionExhausted, match="within the first-order worst case") as info:
        refuted(0.5 * worst)
    assert isinstance(info.value.__cause__, va.ModelClassMismatch)
    assert _named_rtol(info.value) > 0
    # Past the bound and the bias's allowance: the caller's ModelClassMismatch stands.
    refuted(4 * worst + 2 * bias_allowance(arith, float(params["beta"])))
    refuted(0.5 * worst, va.get_arithmetic("exact"))  # exact results: never precision
