"""The first-order parameter error per parameter group: the float multi-head learner's
refined figure per head's W, v, c and beta (``parameter_error_estimate_groups``,
re-checked by the multi-head float certificate), and the float multi-head Transformer's
unscaling of each group by its own scale (W_h's through 1/t^2, c_h's through 1/t, v_h's as
is), re-checked from the cell's inner record by the ``transformer-heads-float`` checker.

Each figure and check has a wrong variant that fails: a group stated under half its
recomputed figure, W's group unscaled by 1/t, one figure for every group.
"""

from __future__ import annotations

import copy
import dataclasses
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import verified_attn as va
from verified_attn.errors import CertificateError, PrecisionExhausted
from verified_attn.multi_head.pipeline.refine import refined_error_groups
from verified_attn.multi_head.sequence_fit import group_figures, group_max
from verified_attn.serialize import dump_number, load_number
from verified_attn.transformer import multi_head_float_values as mhv

sys.path.insert(0, str(Path(__file__).parent))
from test_transformer_multi_head_float import T2

_CACHE: dict[str, Any] = {}


def _refined() -> Any:
    """Float multi-head, d = 4, H = 3, affine, seed 0: refined (its groups stated)."""
    if "mh" not in _CACHE:
        rng = np.random.default_rng(0)
        heads = [
            (rng.normal(size=(4, 4)) / 2, rng.normal(size=4), rng.normal(size=4)) for _ in range(3)
        ]
        model = va.MultiHeadAttention([tuple(x.tolist() for x in h) for h in heads], beta=0.3)
        _CACHE["mh"] = va.learn_multi_head(va.Oracle(model, "float"), heads=3, affine=True, seed=0)
    return _CACHE["mh"]


def test_group_figures_follow_the_parameter_order() -> None:
    # d = 2, H = 2, affine: per head W (4), v (2), c (2); beta last.
    per = np.arange(17.0)
    assert group_figures(per, 2, 2, True) == {
        "W": [3.0, 11.0],
        "v": [5.0, 13.0],
        "c": [7.0, 15.0],
        "beta": 16.0,
    }
    assert group_max(group_figures(per, 2, 2, True)) == 16.0
    # The wrong variant: the bias-free layout on affine parameters misplaces every group.
    assert group_figures(per, 2, 2, False)["v"] != [5.0, 13.0]


def test_the_refined_result_states_its_figure_per_group_and_the_checker_recomputes_it() -> None:
    rec = _refined()
    assert (rec.queries, rec.queries_by_phase["refinement"]) == (186, 10)  # golden, counted
    groups = rec.parameter_error_estimate_groups
    assert set(groups) == {"W", "v", "c", "beta"} and len(groups["W"]) == 3
    # The one figure is the largest group's; some group's own figure is below it.
    assert group_max(groups) == rec.parameter_error_estimate
    assert min(groups["W"] + groups["v"]) < rec.parameter_error_estimate / 2
    data = rec.certificate()
    assert data["result"]["parameter_error_estimate_kind"] == "refinement"
    check = va.verify_certificate(data)
    assert check.ok and "and per parameter group" in " ".join(check.summary)
    stated = data["result"]["parameter_error_estimate_groups"]
    assert [load_number(x) for x in stated["W"]] == groups["W"]


@pytest.mark.parametrize(
    "tamper, message",
    [
        (lambda g, e: g["W"].__setitem__(0, dump_number(load_number(g["W"][0]) / 4)), r"W\[0\]"),
        (lambda g, e: g.__setitem__("beta", dump_number(2 * e)), r"beta\[0\] .* stated estimate"),
        (lambda g, e: g.pop("c"), "must name the groups"),
        (lambda g, e: g["v"].pop(), "v must hold 3 figures"),
    ],
)
def test_a_tampered_group_figure_is_rejected(tamper: Any, message: str) -> None:
    rec = _refined()
    data = copy.deepcopy(rec.certificate())
    tamper(data["result"]["parameter_error_estimate_groups"], rec.parameter_error_estimate)
    with pytest.raises(CertificateError, match=message):
        va.verify_certificate(data)


def test_the_groups_are_recomputed_from_the_answers_not_copied() -> None:
    """At other heads the recomputed groups differ: the checker's are not the stated ones."""
    from verified_attn.multi_head.pipeline.refine import extended_values
    from verified_attn.multi_head.sequence_fit import compress, polish_sequences

    heads = [(np.eye(2) * 0.5, np.array([1.0, -1.0]), np.array([0.5, 0.0]))]
    seqs = polish_sequences(2, 40, seed=0)
    rows = compress(seqs, extended_values(heads, 0.2, compress(seqs, [0.0] * 40), True))
    noisy = compress(seqs, rows.answers + 1e-9 * np.sin(np.arange(len(rows))))
    clean, rough = (refined_error_groups(heads, 0.2, r, True, 2.0**-53) for r in (rows, noisy))
    assert group_max(rough) > 1e3 * group_max(clean)


def test_head_errors_scale_each_group_by_its_own_power_of_t() -> None:
    """W_h = W_in / t^2, c_h = c_in / t - W_h c, v_h as is: a small W group keeps e_Wc far
    under the one-figure unscaling (every group at the largest), and W over t (the wrong
    variant) is a different figure."""
    groups = {"W": [1e-12], "c": [1e-12], "v": [1e-9], "beta": 1e-9}
    center, t, scale = np.array([1.0, -2.0]), 2.0**-6, 10.0
    (e_wc, e_v), = mhv.head_errors(groups, scale, t, center)
    one = {k: ([1e-9] if isinstance(v, list) else 1e-9) for k, v in groups.items()}
    (e_wc1, e_v1), = mhv.head_errors(one, scale, t, center)
    assert e_v == e_v1 == pytest.approx(1e-8) and e_wc1 == pytest.approx(1000 * e_wc)
    assert e_wc == pytest.approx(1e-11 * 4 * 4096 + 1e-11 * 64)
    wrong = {**groups, "W": [groups["W"][0] * t]}  # W's group over t instead of t^2
    assert mhv.head_errors(wrong, scale, t, center)[0][0] != e_wc


def _t2_certificate() -> dict[str, Any]:
    if "t2" not in _CACHE:
        _CACHE["t2"] = va.learn_transformer(va.Oracle(T2, "float"), max_heads=2).certificate()
    return copy.deepcopy(_CACHE["t2"])


def test_the_transformer_certificate_states_the_inner_groups_and_rechecks_them() -> None:
    data = _t2_certificate()
    inner = data["cells"][0]["inner"]
    assert load_number(inner["t"]) == 0.5 and set(inner["groups"]) == {"W", "v", "c", "beta"}
    assert "inner" not in data["cells"][1]  # a values cell has no inner learner
    assert va.verify_certificate(data).ok
    bad = _t2_certificate()
    W = bad["cells"][0]["inner"]["groups"]["W"]
    W[0] = dump_number(load_number(W[0]) / 2)
    with pytest.raises(CertificateError, match="not the inner group figures unscaled"):
        va.verify_certificate(bad)
    bad = _t2_certificate()
    bad["cells"][0]["inner"]["scale"] = dump_number(1.0)
    with pytest.raises(CertificateError, match="below the inner heads'"):
        va.verify_certificate(bad)


def test_w_unscaled_by_one_over_t_fails_the_certificate(monkeypatch: Any) -> None:
    """The wrong variant of :func:`head_errors`: W's group over t, not t^2; the learner
    states it, the checker's own unscaling refuses it."""

    def wrong(groups: Any, scale: float, t: float, center: np.ndarray) -> Any:
        spread = 1 + float(np.abs(center).sum())
        return [
            (e_w * scale / t * spread + e_c * scale / t, e_v * scale)
            for e_w, e_v, e_c in zip(groups["W"], groups["v"], groups["c"], strict=True)
        ]

    monkeypatch.setattr(mhv, "head_errors", wrong)
    data = va.learn_transformer(va.Oracle(T2, "float"), max_heads=2).certificate()
    with pytest.raises(CertificateError, match="not the inner group figures unscaled"):
        va.verify_certificate(data)


@pytest.mark.slow
def test_random_d16_h2_heads_figure_per_group(monkeypatch: Any) -> None:
    """The benchmark's random float64 box d = 16, H = 2, m = 32 (seed 0; about 15 s a
    run): its cell is learned at t = 2^-9, where one figure for every group (7.2e-3
    unscaled) is far over the W and c groups' (1.4e-5: c_h's error carried from W_h
    through the centre, |c|_1 = 28.25); both are above parameter_rtol 1e-6, so the box is
    refused. The shares' part alone (the pattern matrix's pseudo-inverse row sums, up to
    1053, times the values cells' errors) is 1.16e-5: a (W_h, c_h) figure at the true
    error would leave the box refused too."""
    sys.path.insert(0, str(Path(__file__).parents[2] / "benchmarks"))
    from _transformer_heads_float import _box

    from verified_attn.transformer import multi_head_float as mhf

    seen: list[Any] = []
    shares = mhf._shares

    def spy(net: Any, cells: Any, table: Any) -> Any:
        out = shares(net, cells, table)
        seen.append((cells, table, out[0]))
        return out

    monkeypatch.setattr(mhf, "_shares", spy)
    oracle, _ = _box("random", 16, 2, 0)
    with pytest.raises(PrecisionExhausted, match=r"estimate 1\.36e-05"):
        va.learn_transformer(oracle, max_heads=2, seed=0)
    cells, table, heads = seen[0]
    row_sum = float(np.abs(np.linalg.pinv(mhf.float_pattern_matrix(cells))).sum(axis=1).max())
    scale = max(float(np.abs(np.concatenate([W.ravel(), c, s.ravel()])).max()) for W, c, s in heads)
    values = max(row_sum * max(h[4] for h in row if h is not None) for row in table) / scale
    assert f"{row_sum:.0f} {values:.3g}" == "1053 1.16e-05"
    real = mhv.unscale

    def one_figure(rec: Any, cell: Any, t: float) -> Any:
        return real(dataclasses.replace(rec, parameter_error_estimate_groups=None), cell, t)

    monkeypatch.setattr(mhf, "unscale", one_figure)
    oracle, _ = _box("random", 16, 2, 0)
    with pytest.raises(PrecisionExhausted, match=r"estimate 0\.00722"):
        va.learn_transformer(oracle, max_heads=2, seed=0)
