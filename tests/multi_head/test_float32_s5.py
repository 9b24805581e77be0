"""Float32 multi-head modules: predictions at the box's rtol, parameters at its stated
parameter tolerance, both re-checked; the noise-aware link rule.

A float32 ``nn.MultiheadAttention`` declares rtol 1e-4 (predictions, verified on fresh
sequences) and parameter_rtol 1e-3 (what the result states for the heads: the first-order
parameter error estimate must be at most it). A float32 box is decoded with the coarse
design (d redundant probe columns from two heads on). Measured (the modules below, seeds
0-7): E = 8, H = 2 7 of 8 learned, estimates 2.4e-6 .. 1.7e-4, the heads' actual errors
3.1e-7 .. 4.6e-6; E = 4, H = 2 (polished jointly) 7 of 8, estimates 2.0e-6 .. 5.3e-4,
errors 2.4e-7 .. 3.9e-5.

>>> from verified_attn.arithmetic import FloatArithmetic
>>> FloatArithmetic(1e-4, 2.0**-24, 1e-3).parameter_rtol, FloatArithmetic(1e-4).parameter_rtol
(0.001, 0.0001)
"""

from __future__ import annotations

import copy
import itertools
import re
from typing import Any

import numpy as np
import pytest

import verified_attn as va
from tests.multi_head.test_float32_follow_up_conditioning import rounded_box
from verified_attn.arithmetic import FloatArithmetic
from verified_attn.errors import CertificateError, InvalidArgument, PrecisionExhausted
from verified_attn.multi_head.canonical_learner import learn_multi_head
from verified_attn.multi_head.float_fit import fit_groups, group_model, link_noise, link_orders
from verified_attn.multi_head.pipeline.poles import link_decided
from verified_attn.multi_head.pipeline.verify import heads_error_estimate
from verified_attn.serialize import dump_number, load_number

torch = pytest.importorskip("torch")

from tests.adapters.test_torch_multi_head import _one_thread  # noqa: E402, F401 (autouse)
from tests.multi_head.polish_pin import no_polish  # noqa: E402, F401 (autouse: u-group figures)
from verified_attn.adapters.torch import attention_oracle, attention_parameters  # noqa: E402

pytestmark = pytest.mark.torch


def _module(E: int, H: int, seed: int) -> tuple[Any, np.ndarray]:
    """``nn.MultiheadAttention(E, H)`` with N(0, 1) biases (the independent check's boxes)."""
    torch.manual_seed(9000 + seed)
    mha = torch.nn.MultiheadAttention(E, num_heads=H, batch_first=True)
    with torch.no_grad():
        mha.in_proj_bias.normal_()
        mha.out_proj.bias.normal_()
    return mha, np.random.default_rng(seed + 33).standard_normal(E)


def _parameter_error(rec: Any, mha: Any, r: np.ndarray) -> float:
    """Largest entry error of (W, v, c) over the best head order and of beta, relative to
    max(1, largest true parameter): the measure the stated tolerance is relative to."""
    truth = attention_parameters(mha.double(), r)
    mha.float()
    true = [
        np.concatenate([truth.W[h].ravel(), truth.v[h], truth.c[h]]) for h in range(truth.heads)
    ]
    got = [np.concatenate([W.ravel(), v, c]) for W, v, c in rec.parameters["heads"]]
    size = max(1.0, abs(truth.beta), *(float(np.abs(x).max()) for x in true))
    best = min(
        max(float(np.abs(got[p[h]] - true[h]).max()) for h in range(len(true)))
        for p in itertools.permutations(range(len(true)))
    )
    return max(best, abs(float(rec.parameters["beta"]) - truth.beta)) / size


def learned32(E: int, H: int, seed: int) -> tuple[Any, Any, np.ndarray]:
    """(result, module, readout) of the float32 module ``_module(E, H, seed)``, learned with
    the same seed."""
    mha, r = _module(E, H, seed)
    return learn_multi_head(attention_oracle(mha, r, dtype="float32"), heads=H, seed=seed), mha, r


@pytest.fixture(scope="module")
def learned() -> tuple[Any, Any, np.ndarray]:
    # Measured: learned in 3 s (772 queries), estimate 3.9e-6, parameter error 3.9e-7.
    return learned32(8, 2, 4)


@pytest.fixture(scope="module")
def joint() -> tuple[Any, Any, np.ndarray]:
    # E = 4, H = 2 (parameters x answers <= 1e5: polished jointly). Module seed 7 (seed 0,
    # estimate 3.5e-4, is refused since the prediction bound: 2 standard deviations of its
    # prediction error are 1.1x what the rule allows at one sequence). Measured: estimate
    # 4.8e-4 (over the rtol 1e-4, under the parameter tolerance 1e-3).
    return learned32(4, 2, 7)


def test_a_float32_module_is_learned_at_its_declared_tolerances(learned: Any) -> None:
    rec, mha, r = learned
    assert rec.verification.rtol == 1e-4 and rec.parameter_rtol == 1e-3
    assert rec.parameter_error_estimate is not None
    assert rec.parameter_error_estimate <= rec.parameter_rtol
    # Against the module's own weights (float64), not the learner's figures: the stated
    # tolerance holds, and so does the first-order estimate it covers.
    error = _parameter_error(rec, mha, r)
    assert error <= rec.parameter_error_estimate <= rec.parameter_rtol
    # Predictions against the float64 module on fresh sequences of lengths 1-16.
    reference = attention_oracle(mha.double(), r, dtype="float64")
    mha.float()
    rng = np.random.default_rng(4077)
    for n in range(1, 17):
        X = rng.uniform(-1.5, 1.5, (n, 8))
        truth = reference.query(X)
        assert abs(float(rec.model.evaluate_batch(X[None])[0]) - truth) <= 1e-4 * max(
            1.0, abs(truth)
        )
    assert f"parameter tolerance {rec.parameter_rtol:g}" in rec.notes[1]
    assert va.verify_certificate(rec.certificate()).ok
    data = rec.to_dict()
    assert data["parameter_rtol"] == 1e-3
    assert data["parameter_error_estimate"] == rec.parameter_error_estimate


def test_a_joint_estimate_is_stored_and_bounded(joint: Any) -> None:
    # E = 4, H = 2 is polished jointly on every answer (parameters x answers <= 1e5): its
    # estimate is stored, bounded by the stated tolerance, and not recomputed.
    rec, mha, r = joint
    assert _parameter_error(rec, mha, r) <= rec.parameter_error_estimate <= rec.parameter_rtol
    data = rec.certificate()
    assert data["result"]["parameter_error_estimate_kind"] == "joint"
    check = va.verify_certificate(data)
    assert check.ok and any("of the joint fit, stored" in line for line in check.summary)
    bad = copy.deepcopy(data)
    bad["result"]["parameter_rtol"] = dump_number(rec.parameter_error_estimate / 2)
    with pytest.raises(CertificateError, match="parameter"):
        va.verify_certificate(bad)
    # The kind is fixed by the sizes: a file cannot choose the figure that is checked.
    bad = copy.deepcopy(data)
    bad["result"]["parameter_error_estimate_kind"] = "u-groups"
    with pytest.raises(CertificateError, match="must be 'joint' at these sizes"):
        va.verify_certificate(bad)


def _rounded_box(parameter_rtol: float) -> tuple[va.Oracle, Any]:
    """A random d = 8, H = 3 box whose answers are rounded to float32, declared as such
    (rtol 1e-4): decoded by u-groups, with the coarse design. Measured: estimate 1.3e-4
    (box seed 10, over the rtol: refused at parameter_rtol 1e-4 for that; at 1e-3 refused
    since the prediction bound, 2 standard deviations of its prediction error being 195x what
    the rule allows at a sequence whose prediction is -5.7e-5)."""
    return rounded_box(8, 3, 10, rtol=1e-4, parameter_rtol=parameter_rtol)


@pytest.fixture(scope="module")
def rounded() -> Any:
    # A u-groups result whose estimate is over the rtol and under the parameter tolerance:
    # module seed 5 (measured: estimate 1.65e-4, 732 queries). (Until the prediction bound
    # this was the rounded box above, now refused.)
    return learned32(8, 2, 5)


def test_the_u_group_estimate_is_recomputed_by_the_checker(rounded: Any) -> None:
    rec, mha, r = rounded
    assert rec.verification.rtol < rec.parameter_error_estimate <= rec.parameter_rtol == 1e-3
    assert _parameter_error(rec, mha, r) <= rec.parameter_error_estimate
    data = rec.certificate()
    assert data["result"]["parameter_error_estimate_kind"] == "u-groups"
    check = va.verify_certificate(data)
    assert check.ok and any("recomputed from the answers" in line for line in check.summary)
    estimate = float(load_number(data["result"]["parameter_error_estimate"]))
    # A tolerance tampered below the estimate (with the stored estimate lowered to match):
    # the recomputed figure rejects it.
    bad = copy.deepcopy(data)
    bad["result"]["parameter_rtol"] = dump_number(1e-4)
    bad["result"]["parameter_error_estimate"] = dump_number(1e-4)
    with pytest.raises(CertificateError, match="recomputed from the stored answers"):
        va.verify_certificate(bad)
    # A stored estimate tampered far below the recomputed one.
    bad = copy.deepcopy(data)
    bad["result"]["parameter_error_estimate"] = dump_number(estimate / 10)
    with pytest.raises(CertificateError, match="under half the recomputed"):
        va.verify_certificate(bad)
    # Below the predictions' rtol: a parameter tolerance is never tighter than that.
    bad = copy.deepcopy(data)
    bad["result"]["parameter_rtol"] = dump_number(1e-5)
    with pytest.raises(CertificateError, match="parameter_rtol must be in"):
        va.verify_certificate(bad)
    # Without the fields a certificate states rtol, which these heads do not support.
    bad = copy.deepcopy(data)
    del bad["result"]["parameter_rtol"], bad["result"]["parameter_error_estimate"]
    with pytest.raises(
        CertificateError, match=re.escape("exceeds the stated parameter tolerance 0.0001")
    ):
        va.verify_certificate(bad)


def test_heads_off_by_more_than_the_noise_raise_the_recomputed_estimate(rounded: Any) -> None:
    # The checker's figure sees the heads: a head moved by 1e-3 leaves residuals far over
    # the noise and an estimate over the stated tolerance (the fit check at rtol sees it too).
    rec, _, _ = rounded
    data = rec.certificate()
    d = 8
    U = np.array([[load_number(x) for x in row] for row in data["design"]["U"]])
    B = np.array([[load_number(x) for x in row] for row in data["design"]["B"]])
    f0 = np.array([load_number(x) for x in data["answers"]["F0"]])
    ans = np.array([[load_number(x) for x in row] for row in data["answers"]["F"]])
    t = np.array([k / m for k, m in data["design"]["ratios"]])
    heads = [tuple(np.array(x) for x in hd) for hd in rec.parameters["heads"]]
    beta = float(rec.parameters["beta"])
    grid = ans[: d * len(B)]
    good = heads_error_estimate(U, B, f0, grid, t, heads, beta, 2.0**-24, True)
    # The stored one is the larger of two figures, here this one itself (computed before the
    # heads were put in canonical order: the sums run in another order, a few ulps apart).
    stored = rec.parameter_error_estimate
    assert good <= stored or good == pytest.approx(stored, rel=1e-12)
    moved = [(heads[0][0], heads[0][1] + 1e-3, heads[0][2]), *heads[1:]]
    assert heads_error_estimate(U, B, f0, grid, t, moved, beta, 2.0**-24, True) > 10 * good


def test_a_float32_module_over_its_parameter_tolerance_is_refused() -> None:
    # Measured: E = 4, H = 2, seed 3: estimate 1.3e-3 > 1e-3 (1 s; 1.8e-2 with the square
    # design and the operator-norm estimate).
    mha, r = _module(4, 2, 3)
    with pytest.raises(PrecisionExhausted, match=re.escape("parameter tolerance 0.001 ")):
        learn_multi_head(attention_oracle(mha, r, dtype="float32"), heads=2, seed=3)


def test_the_old_rule_refuses_what_the_parameter_tolerance_states() -> None:
    # The variant without a separate parameter tolerance (parameters held to the
    # predictions' rtol, as before): the rounded box (learned at parameter_rtol 1e-3,
    # estimate 1.3e-4) is refused at 1e-4.
    box, _ = _rounded_box(1e-4)
    assert box.arithmetic.parameter_rtol == box.arithmetic.rtol == 1e-4
    with pytest.raises(PrecisionExhausted, match=re.escape("parameter tolerance 0.0001 ")):
        learn_multi_head(box, heads=3, seed=0)


def test_parameter_rtol_is_validated() -> None:
    with pytest.raises(InvalidArgument, match="parameter_rtol"):
        FloatArithmetic(1e-4, 2.0**-24, 1e-5)
    with pytest.raises(InvalidArgument, match="parameter_rtol"):
        FloatArithmetic(1e-4, 2.0**-24, 1.0)
    mha, r = _module(4, 2, 0)
    with pytest.raises(InvalidArgument, match="parameter_rtol"):
        attention_oracle(mha, r, dtype="float32", parameter_rtol=1e-6)
    assert attention_oracle(mha, r).arithmetic.parameter_rtol == 1e-6  # float64: rtol


# ---------------------------------------------------------------------------------------
# The halved-link rule.
# ---------------------------------------------------------------------------------------


def _two_groups(seed: int, noise: float) -> tuple[Any, ...]:
    """Two u-groups (H = 3, 4 pairs) fitted from answers with relative noise ``noise``, and
    the exact halved link's answers with the same noise."""
    rng = np.random.default_rng(seed)
    lt = np.log(2.0 ** np.linspace(-6, 6, 7))
    r = rng.normal(0, 1, (2, 3))
    s = rng.normal(0, 2, (2, 4, 3))
    Y = group_model(lt, r, s)
    noisy = Y + noise * np.abs(Y) * rng.standard_normal(Y.shape)
    fit = fit_groups(lt, noisy, r, s, floor=0.0)
    p = rng.permutation(3)  # group 2's heads in another order
    rf, sf = fit.r.copy(), fit.s.copy()
    rf[1], sf[1] = fit.r[1][np.argsort(p)], fit.s[1][:, np.argsort(p)]
    link = group_model(lt, ((r[0] + r[1]) / 2)[None], ((s[0, 0] + s[1, 0]) / 2)[None, None])[0, 0]
    link = link + noise * np.abs(link) * rng.standard_normal(link.shape)
    floor = noise * np.sqrt((Y**2).sum(axis=(1, 2)))
    return lt, rf, sf, link, p, np.sqrt(fit.residual**2 + floor**2), noise * np.linalg.norm(link)


@pytest.mark.parametrize("seed", range(6))
def test_the_link_noise_bound_covers_the_true_order(seed: int) -> None:
    lt, r, s, link, p, noise, own = _two_groups(seed, 1e-6)
    orders, miss = link_orders(lt, link, r[0], s[0, 0], r[1], s[1, 0])
    true = p  # group 2 holds true head h at position p[h]
    i = next(i for i, o in enumerate(orders) if (o == true).all())
    predicted = link_noise(lt, r, s, 1, true, noise) + own
    assert miss[i] <= predicted  # measured: 450 of 450 seeds at noise 1e-4 .. 3e-3
    if link_decided(miss, predicted):  # seed 4 (a poorly conditioned group): undecided
        assert i == 0


@pytest.mark.parametrize("seed", [20, 134])
def test_the_bare_ratio_rule_decides_a_wrong_order_that_the_noise_rule_does_not(
    seed: int,
) -> None:
    # Noise 3e-3 (seeds found by search; 150 seeds: these two, and no others, fool the bare
    # ratio): the best order is not the true one, yet the runner-up misses by over 10 x
    # it. The noise-aware rule sees that the groups' noise could move the link by more than
    # that and leaves it undecided (a refusal after a failed fit then names it).
    lt, r, s, link, p, noise, own = _two_groups(seed, 3e-3)
    orders, miss = link_orders(lt, link, r[0], s[0, 0], r[1], s[1, 0])
    assert not (orders[0] == p).all()
    assert miss[1] > 10 * miss[0]  # the wrong variant: decided, for a wrong order
    assert not link_decided(miss, link_noise(lt, r, s, 1, orders[0], noise) + own)


def test_the_link_rule_on_measured_float32_misses() -> None:
    # E = 8, H = 4 float32: misses 2e-3 and 8e-3 with a noise bound of 2.4e-4 - decided
    # (the bare ratio 4 < 10 refused it); a runner-up within 3 x the best: not; two misses
    # 1000 x apart but both within a noise of 1e-9: not.
    assert link_decided(np.array([2e-3, 8e-3]), 2.4e-4)
    assert not link_decided(np.array([2e-3, 5e-3]), 2.4e-4)
    assert not link_decided(np.array([1e-12, 1e-9]), 1e-9)
