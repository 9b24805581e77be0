"""The float learner's head range (up to 8) is the float certificate checker's range;
exact and certified certificates stay at 6 (their re-decoding enumerates H! orders)."""

from __future__ import annotations

import copy

import pytest

import verified_attn as va
from verified_attn.certificates.multi_head import MAX_FLOAT_HEADS, MAX_HEADS
from verified_attn.errors import CertificateError
from verified_attn.multi_head.canonical_learner import learn_multi_head
from verified_attn.multi_head.pipeline.design import random_float_box


def test_a_seven_head_float_certificate_rechecks() -> None:
    # d = 3, H = 7, seed 1: learned (168 queries); the checker used to refuse H0 = 7.
    rec = learn_multi_head(va.Oracle(random_float_box(3, 7, 1), "float"), heads=7, seed=1)
    cert = rec.certificate()
    assert cert["H0"] == 7 > MAX_HEADS
    assert va.verify_certificate(cert).ok
    bad = copy.deepcopy(cert)
    bad["H0"] = MAX_FLOAT_HEADS + 1
    with pytest.raises(CertificateError, match=f"1..{MAX_FLOAT_HEADS}"):
        va.verify_certificate(bad)


def test_an_exact_certificate_keeps_its_head_limit() -> None:
    model = va.MultiHeadAttention([([[1, 0], [0, 2]], [1, 1]), ([[0, 1], [1, 0]], [2, -1])])
    cert = learn_multi_head(va.Oracle(model, "exact"), heads=2).certificate()
    assert va.verify_certificate(cert).ok
    bad = copy.deepcopy(cert)
    bad["H0"] = MAX_HEADS + 1
    with pytest.raises(CertificateError, match=f"1..{MAX_HEADS}"):
        va.verify_certificate(bad)
