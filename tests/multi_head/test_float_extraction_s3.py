"""The pooled float decoder of the canonical multi-head learner (issue 12).

Random float64 boxes with W ~ N(0, 1/d), v ~ N(0, 1) (the benchmark's instances): golden
counts on fixed seeds, parameter errors against the truth, the certificate re-checked and
tampered copies refused, and out-of-class boxes refused (too few heads, an affine box given
as bias-free, a tiny extra head).
"""

from __future__ import annotations

import copy
import itertools
from typing import Any

import numpy as np
import pytest
from refine_pin import before_refine

import verified_attn as va
from verified_attn.errors import (
    CertificateError,
    ModelClassMismatch,
    NotIdentifiable,
    PrecisionExhausted,
)
from verified_attn.models import MultiHeadAttention
from verified_attn.multi_head.canonical_learner import follow_up_query_bound, learn_multi_head
from verified_attn.multi_head.float_fit import fit_groups, group_model, link_orders
from verified_attn.multi_head.pipeline.budget import float_query_bound, precision_polish_count
from verified_attn.serialize import dump_number, load_number

REFUSALS = (ModelClassMismatch, NotIdentifiable, PrecisionExhausted)


def _box(d: int, H: int, seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [(rng.normal(0, 1 / np.sqrt(d), (d, d)), rng.normal(0, 1, d)) for _ in range(H)]


def _model(heads: list[tuple[np.ndarray, np.ndarray]]) -> MultiHeadAttention:
    return MultiHeadAttention([(W.tolist(), v.tolist()) for W, v in heads])


def _error(rec: va.Recovery, heads: list[tuple[np.ndarray, np.ndarray]]) -> float:
    got = [np.concatenate([np.ravel(x) for x in h]) for h in rec.parameters["heads"]]
    truth = [np.concatenate([np.ravel(x) for x in h]) for h in heads]
    ref = max(float(np.abs(t).max()) for t in truth)
    return (
        min(
            max(float(np.abs(got[p[h]] - truth[h]).max()) for h in range(len(truth)))
            for p in itertools.permutations(range(len(truth)))
        )
        / ref
    )


@pytest.mark.parametrize(
    ("d", "H", "seed", "golden"),
    [
        # d + (2H + 1)(d^2 + d - 1), no tie links (distinct residues): written out.
        (4, 3, 0, 137),
        # the lean design (pipeline.budget.lean_design), d + 1 + 2H (d (d + 1) + d - 1) = 957,
        # and the precision polish's ceil(P / 8) = 54 (its decoded estimate is above 1e-12)
        pytest.param(8, 6, 0, 957 + 54, marks=pytest.mark.slow),  # minutes: `pytest -m slow`
    ],
)
def test_golden_counts_and_parameters(d: int, H: int, seed: int, golden: int) -> None:
    heads = _box(d, H, seed)
    rec = learn_multi_head(va.Oracle(_model(heads), "float"), heads=H, seed=seed)
    polish = rec.queries_by_phase.get("polish", 0)
    assert polish in (0, precision_polish_count(d, H, False))
    assert before_refine(rec, d, H) == golden == float_query_bound(d, H) + polish
    assert rec.queries < follow_up_query_bound(d, H)
    assert rec.verified and not rec.exact
    # Measured ~1e-11 (d = 8, H = 6); the goal of issue 12 is 1e-10.
    assert _error(rec, heads) <= 1e-10
    assert "closest score gap" in rec.notes[-1]


def test_error_measure_fails_a_wrong_answer() -> None:
    heads = _box(4, 2, 1)
    rec = learn_multi_head(va.Oracle(_model(heads), "float"), heads=2, seed=1)
    shifted = [(W + 1e-6, v) for W, v in heads]
    assert _error(rec, heads) <= 1e-10 < _error(rec, shifted)


def test_certificate_rechecks_and_tampering_is_refused() -> None:
    heads = _box(4, 3, 2)
    rec = learn_multi_head(va.Oracle(_model(heads), "float"), heads=3, seed=2)
    cert = rec.certificate()
    assert va.verify_certificate(cert).ok
    bad = copy.deepcopy(cert)
    answer = load_number(bad["answers"]["F"][3][2])
    bad["answers"]["F"][3][2] = dump_number(float(answer) + 1e-3)
    with pytest.raises(CertificateError):
        va.verify_certificate(bad)
    bad = copy.deepcopy(cert)
    v0 = load_number(bad["result"]["heads"][0]["v"][0])
    bad["result"]["heads"][0]["v"][0] = dump_number(float(v0) + 1e-3)
    with pytest.raises(CertificateError):
        va.verify_certificate(bad)


def test_too_few_heads_is_refused() -> None:
    heads = _box(4, 3, 3)
    with pytest.raises(REFUSALS):
        learn_multi_head(va.Oracle(_model(heads), "float"), heads=2, seed=3)


def test_tiny_extra_head_is_refused() -> None:
    # A fourth head with |v| ~ 1e-3: the box is not 3 heads to rtol 1e-6.
    heads = _box(4, 3, 4)
    rng = np.random.default_rng(44)
    extra = (rng.normal(0, 0.5, (4, 4)), 1e-3 * rng.normal(0, 1, 4))
    with pytest.raises(REFUSALS):
        learn_multi_head(va.Oracle(_model([*heads, extra]), "float"), heads=3, seed=4)


def test_affine_box_given_as_bias_free_is_refused() -> None:
    heads = _box(3, 2, 5)
    rng = np.random.default_rng(55)
    c = [rng.normal(0, 1, 3) for _ in heads]
    model = MultiHeadAttention(
        [(W.tolist(), v.tolist(), ch.tolist()) for (W, v), ch in zip(heads, c, strict=True)],
        beta=0.7,
    )
    # Undeclared biases (a callable box): affine=False is the learner's assumption here.
    oracle = va.Oracle.from_callable(model, d=3)
    with pytest.raises(REFUSALS):
        learn_multi_head(oracle, heads=2, affine=False)


def test_pooled_fit_recovers_shared_residues_from_a_far_start() -> None:
    lt = np.log(np.array([1 / 64, 1 / 8, 1 / 2, 1.0, 2.0, 8.0, 64.0]))
    rng = np.random.default_rng(6)
    r = rng.normal(0, 2, (2, 3))
    s = rng.normal(0, 2, (2, 5, 3))
    Y = group_model(lt, r, s)
    fit = fit_groups(lt, Y, r * 1.05, s + 0.05)
    assert np.abs(fit.r - r).max() <= 1e-9
    assert np.abs(fit.s - s).max() <= 1e-8


def test_link_order_is_the_one_that_predicts_the_link() -> None:
    rng = np.random.default_rng(7)
    lt = np.log(np.array([1 / 64, 1 / 8, 1.0, 8.0, 64.0, 2.0, 0.5]))
    r1, rk = rng.normal(0, 2, 3), rng.normal(0, 2, 3)
    s1, sk = rng.normal(0, 2, 3), rng.normal(0, 2, 3)
    p = [2, 0, 1]
    y = group_model(lt, ((r1 + rk[p]) / 2)[None], ((s1 + sk[p]) / 2)[None, None])[0, 0]
    orders, miss = link_orders(lt, y, r1, s1, rk, sk)
    assert orders[0].tolist() == p
    assert miss[0] <= 1e-14 < 1e-6 < miss[1]


@pytest.mark.slow  # minutes of float multi-head learning: `pytest -m slow`
def test_cli_learns_six_float_heads(
    capsys: pytest.CaptureFixture[str], tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from verified_attn.cli import main

    monkeypatch.chdir(tmp_path)  # the CLI writes its certificate to the working folder
    code = main(["learn", "multi-head", "--d", "8", "--heads", "6", "--arithmetic", "float"])
    out = capsys.readouterr().out
    assert code == 0, out
    # 957 of the lean design, then the refinement up to one under the follow-up's count
    assert f"queries: {follow_up_query_bound(8, 6) - 1} learning" in out and "PASSED" in out
    worst = float(out.split("max |recovered - canonical truth| = ")[1].split()[0])
    assert worst <= 1e-10
