"""A float multi-head certificate's figures in bits (result.error_figures) are recomputed,
and every tampered figure is refused."""

from __future__ import annotations

import copy
import math
from typing import Any

import numpy as np
import pytest

import verified_attn as va
from verified_attn.errors import CertificateError
from verified_attn.serialize import dump_number, load_number


@pytest.fixture(scope="module")
def certificates() -> dict[str, dict[str, Any]]:
    """A non-affine float box (random heads, d = 4, H = 2) and an affine one (float64 module
    form: c and beta)."""
    rng = np.random.default_rng(1100)
    heads = [(rng.normal(0, 0.5, (4, 4)).tolist(), rng.normal(0, 1, 4).tolist()) for _ in range(2)]
    plain = va.learn_multi_head(va.Oracle(va.MultiHeadAttention(heads), "float"), heads=2, seed=7)
    affine_heads = [(W, v, rng.normal(0, 1, 4).tolist()) for W, v in heads]
    model = va.MultiHeadAttention(affine_heads, beta=0.75)
    affine = va.learn_multi_head(va.Oracle(model, "float"), heads=2, seed=8)
    return {"plain": plain.certificate(), "affine": affine.certificate()}


def _figure(data: dict[str, Any], name: str) -> float:
    return float(load_number(data["result"]["error_figures"][name]))


@pytest.mark.parametrize("which", ["plain", "affine"])
def test_the_figures_are_stated_and_recomputed(
    certificates: dict[str, dict[str, Any]], which: str
) -> None:
    data = certificates[which]
    check = va.verify_certificate(copy.deepcopy(data))
    line = next(s for s in check.summary if s.startswith("figures in bits"))
    for what in ("parameter", "prediction"):
        error, b = _figure(data, f"{what}_error"), _figure(data, f"{what}_bits")
        assert b == pytest.approx(-math.log2(error), abs=1e-9)
        assert f"({b:.1f} bits)" in line
    assert _figure(data, "prediction_error") > 0


@pytest.mark.parametrize(
    ("name", "factor", "match"),
    [
        ("parameter_bits", 1.25, "parameter_bits .* is not -log2"),
        ("prediction_bits", 1.25, "prediction_bits .* is not -log2"),
        ("parameter_bits", 1 + 1e-6, "parameter_bits .* is not -log2"),
        ("parameter_error", 1 / 16, "parameter_error .* is not the stated estimate"),
        ("prediction_error", 1 / 4, "prediction_error .* not within a factor 2"),
    ],
)
def test_a_tampered_figure_is_refused(
    certificates: dict[str, dict[str, Any]], name: str, factor: float, match: str
) -> None:
    data = copy.deepcopy(certificates["plain"])
    figures = data["result"]["error_figures"]
    figures[name] = dump_number(_figure(data, name) * factor)
    if name.endswith("_error"):  # the bits made consistent: the error itself is the lie
        what = name.removesuffix("_error")
        figures[f"{what}_bits"] = dump_number(-math.log2(_figure(data, name)))
    with pytest.raises(CertificateError, match=match):
        va.verify_certificate(data)


def test_a_bits_figure_for_a_missing_error_is_refused(
    certificates: dict[str, dict[str, Any]],
) -> None:
    data = copy.deepcopy(certificates["plain"])
    data["result"]["error_figures"]["prediction_error"] = None
    with pytest.raises(CertificateError, match="prediction_error None"):
        va.verify_certificate(data)


def test_a_certificate_without_figures_states_none(
    certificates: dict[str, dict[str, Any]],
) -> None:
    data = copy.deepcopy(certificates["plain"])
    del data["result"]["error_figures"]
    assert "figures in bits: none stated" in va.verify_certificate(data).summary
