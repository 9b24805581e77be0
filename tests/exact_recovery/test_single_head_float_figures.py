"""A float single head states a first-order parameter error estimate; its certificate
carries it, the checker recomputes it from the stored answers and refuses a tampered one."""

from __future__ import annotations

import copy
import math
from typing import Any

import numpy as np
import pytest

import verified_attn as va
from verified_attn.errors import CertificateError
from verified_attn.serialize import dump_number, load_number


@pytest.fixture(scope="module", params=[False, True], ids=["plain", "affine"])
def learned(request: pytest.FixtureRequest) -> tuple[Any, dict[str, Any]]:
    rng = np.random.default_rng(1200)
    W, v = rng.normal(0, 0.5, (5, 5)).tolist(), rng.normal(0, 1, 5).tolist()
    extra: dict[str, Any] = {"c": rng.normal(0, 1, 5).tolist(), "beta": 0.5} if request.param else {}
    rec = va.learn_single_head(va.Oracle(va.SingleHeadAttention(W, v, **extra), "float"))
    return rec, rec.certificate()


def _figure(data: dict[str, Any], name: str) -> float:
    return float(load_number(data["result"]["error_figures"][name]))


def test_the_result_states_both_figures(learned: tuple[Any, dict[str, Any]]) -> None:
    rec, data = learned
    fig = rec.error_figures
    entries = [np.ravel(rec.parameters[k]) for k in ("W", "v", "c") if k in rec.parameters]
    largest = max(float(np.abs(x).max()) for x in entries)
    beta = abs(float(rec.parameters.get("beta", 0.0)))
    assert fig.parameter_error == pytest.approx(
        rec.parameter_error_estimate * max(1.0, beta, largest) / largest, rel=1e-12
    )
    assert 30 < fig.parameter_bits < 53  # a float64 box at d = 5: well short of 53 bits
    assert fig.prediction_error == rec.verification.max_gap
    assert "first-order estimate" in rec.summary()
    assert va.Recovery.from_dict(rec.to_dict()).error_figures == fig
    assert _figure(data, "parameter_error") == fig.parameter_error
    line = f"parameters {fig.parameter_error:.2e} relative to the largest entry"
    assert any(line in s for s in va.verify_certificate(copy.deepcopy(data)).summary)


def test_exact_and_certified_results_state_no_parameter_figure() -> None:
    model = va.SingleHeadAttention([[1, 2], [0, 1]], [1, 2])
    for arith in ("exact", "certified"):
        rec = va.learn_single_head(va.Oracle(model, arith))
        assert rec.parameter_error_estimate is None and rec.error_figures.parameter_error is None


@pytest.mark.parametrize("factor", [1 / 16, 1 - 1e-6, 16.0])
def test_a_tampered_estimate_is_refused(learned: tuple[Any, dict[str, Any]], factor: float) -> None:
    """The estimate and both figures changed consistently: the recomputation refuses it."""
    rec, data = learned
    tampered = copy.deepcopy(data)
    result = tampered["result"]
    result["parameter_error_estimate"] = dump_number(rec.parameter_error_estimate * factor)
    error = rec.error_figures.parameter_error * factor
    result["error_figures"]["parameter_error"] = dump_number(error)
    result["error_figures"]["parameter_bits"] = dump_number(-math.log2(error))
    with pytest.raises(CertificateError, match=r"parameter_error_estimate .* is not the first-order"):
        va.verify_certificate(tampered)


def test_a_tampered_figure_is_refused(learned: tuple[Any, dict[str, Any]]) -> None:
    _, data = learned
    tampered = copy.deepcopy(data)
    figures = tampered["result"]["error_figures"]
    figures["parameter_error"] = dump_number(_figure(data, "parameter_error") / 16)
    figures["parameter_bits"] = dump_number(_figure(data, "parameter_bits") + 4)
    with pytest.raises(CertificateError, match=r"parameter_error .* is not the stated estimate"):
        va.verify_certificate(tampered)
    tampered = copy.deepcopy(data)
    tampered["result"]["error_figures"]["prediction_bits"] = dump_number(60.0)
    with pytest.raises(CertificateError, match="prediction_bits 60 is not -log2"):
        va.verify_certificate(tampered)


def test_a_certificate_without_the_estimate_states_no_parameter_figure(
    learned: tuple[Any, dict[str, Any]],
) -> None:
    _, data = learned
    bare = copy.deepcopy(data)
    del bare["result"]["parameter_error_estimate"]
    with pytest.raises(CertificateError, match=r"parameter_error .* is not the stated estimate"):
        va.verify_certificate(bare)  # the figure without its estimate
    figures = bare["result"]["error_figures"]
    figures["parameter_error"] = figures["parameter_bits"] = None
    assert any("parameters not stated" in s for s in va.verify_certificate(bare).summary)
