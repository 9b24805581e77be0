"""The coarse float design: a float32 box takes d redundant probe columns from two heads on.

A box whose unit roundoff is at least ``COARSE_UNIT`` (float32's 2^-24) is decoded with the
redundant design at every H >= 2, past the follow-up's count, and with all three pilot
rounds; the certificate checker derives the columns from the recorded unit roundoff.
"""

from __future__ import annotations

import copy
import re
from typing import Any

import numpy as np
import pytest

import verified_attn as va
from verified_attn.errors import CertificateError, PrecisionExhausted
from verified_attn.multi_head.canonical_learner import follow_up_query_bound, learn_multi_head
from verified_attn.multi_head.float_pilot import pilot_rounds
from verified_attn.multi_head.pipeline.budget import (
    extra_columns,
    float_query_bound,
    float_query_limit,
    probe_columns,
)
from verified_attn.verification import DEFAULT_VERIFY

torch = pytest.importorskip("torch")

from tests.adapters.test_torch_multi_head import _one_thread  # noqa: E402, F401 (autouse)
from tests.multi_head.polish_pin import no_polish  # noqa: E402, F401 (autouse: u-group figures)
from tests.multi_head.test_float32_s5 import (  # noqa: E402
    _module,
    _parameter_error,
    learned32,
)
from tests.multi_head.test_float_extraction_s3 import REFUSALS  # noqa: E402
from verified_attn.adapters.torch import attention_oracle  # noqa: E402

pytestmark = pytest.mark.torch

F32 = 2.0**-24


@pytest.mark.parametrize(
    ("d", "H", "affine", "extra", "columns", "bound"),
    [
        (8, 2, True, 8, 17, 732),  # 17 + (8 x 17 + 7) pairs x 5
        (8, 4, True, 8, 17, 17 + 143 * 9),
        (16, 2, True, 16, 33, 33 + (16 * 33 + 15) * 5),
        (8, 1, True, 0, 9, 9 + 79 * 2),  # one head: the square design
    ],
)
def test_coarse_golden_columns_and_counts(
    d: int, H: int, affine: bool, extra: int, columns: int, bound: int
) -> None:
    assert extra_columns(d, H, affine, unit=F32) == extra
    assert probe_columns(d, H, affine, unit=F32) == columns
    assert float_query_bound(d, H, affine=affine, unit=F32) == bound
    # float64 takes what the room under the follow-up's count holds (the wrong variant
    # for float32: fewer columns, none at d = 8, H = 2).
    assert extra_columns(d, H, affine) < max(extra, 1)


def test_coarse_pilot_and_limit() -> None:
    # All three pilot rounds (two discarded at most) and eight conditioning groups.
    assert pilot_rounds(8, 2, True, unit=F32) == 3
    assert pilot_rounds(8, 2, True) == 2  # float64: what the follow-up's room holds
    per_pair = 5
    most = 2 * 8 * per_pair + 8 * (17 + 7) * per_pair
    assert float_query_limit(8, 2, affine=True, unit=F32) == 732 + most
    assert float_query_limit(8, 2, affine=True, unit=F32) > follow_up_query_bound(8, 2)


@pytest.fixture(scope="module")
def learned() -> tuple[Any, Any, np.ndarray]:
    # Module seed 3 (the float32 tests' modules): refused with the square design (below).
    return learned32(8, 2, 3)


def test_a_float32_module_is_learned_with_the_coarse_design(learned: Any) -> None:
    rec, mha, r = learned
    # Measured: 772 queries (732 + one discarded pilot round of 8 pairs x 5), estimate
    # 4.3e-6, parameter error 1.4e-6.
    assert rec.queries == 772 and rec.queries_by_phase["pilot"] == 2 * 8 * 5
    assert rec.queries <= rec.bound == float_query_limit(8, 2, affine=True, unit=F32)
    assert "the coarse design's 8 redundant probe columns" in rec.notes[0]
    assert _parameter_error(rec, mha, r) <= rec.parameter_error_estimate <= rec.parameter_rtol
    data = rec.certificate()
    assert len(data["design"]["B"]) == 17
    assert va.verify_certificate(data).ok


def test_the_checker_derives_the_columns_from_the_unit_roundoff(learned: Any) -> None:
    rec, _, _ = learned
    data = rec.certificate()
    # Recorded as a float64 box: the checker expects the square design's 9 columns.
    bad = copy.deepcopy(data)
    bad["unit_roundoff"] = 2.0**-53
    with pytest.raises(CertificateError, match="imply 444"):
        va.verify_certificate(bad)
    # Columns cut to the square design's: rejected too.
    bad = copy.deepcopy(data)
    bad["design"]["B"] = bad["design"]["B"][:9]
    with pytest.raises(CertificateError, match=re.escape("design.B has 9 entries, expected 17")):
        va.verify_certificate(bad)


def test_the_square_design_refuses_the_module(monkeypatch: pytest.MonkeyPatch) -> None:
    # The wrong variant: float32 not coarse (the threshold moved past it): the square design
    # with the same estimate refuses this module (estimate 1.7e-3 > the tolerance 1e-3).
    monkeypatch.setattr("verified_attn.multi_head.pipeline.design.COARSE_UNIT", 2.0**-20)
    mha, r = _module(8, 2, 3)
    with pytest.raises(PrecisionExhausted, match=re.escape("parameter tolerance 0.001 ")):
        learn_multi_head(attention_oracle(mha, r, dtype="float32"), heads=2, seed=3)


@pytest.mark.slow  # minutes of float multi-head learning: `pytest -m slow`
def test_a_coarse_box_outside_the_class_is_refused() -> None:
    # Four heads given as two (E = 8, float32): no two-head fit reproduces the answers.
    mha, r = _module(8, 4, 1)
    box = attention_oracle(mha, r, dtype="float32")
    with pytest.raises(REFUSALS):
        learn_multi_head(box, heads=2, seed=1)
    assert box.queries <= float_query_limit(8, 2, affine=True, unit=F32) + DEFAULT_VERIFY
