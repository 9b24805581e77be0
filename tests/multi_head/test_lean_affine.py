"""The lean float64 design for affine boxes (pipeline/budget.py ``lean_design``): one
redundant probe column and no t = 1 sample, so that the refinement gets more of the
follow-up's count. Each check runs a deliberately wrong variant that fails: the full design
at the same count, and a checker that reads the run as the full design.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import pytest

import verified_attn as va
from verified_attn.certificates import multi_head_float as checker
from verified_attn.errors import CertificateError
from verified_attn.models import MultiHeadAttention
from verified_attn.multi_head.canonical_learner import follow_up_query_bound, learn_multi_head
from verified_attn.multi_head.pipeline import budget, refine
from verified_attn.multi_head.pipeline.budget import lean_design
from verified_attn.precision import relative_parameter_error

Head = tuple[np.ndarray, np.ndarray, np.ndarray]


def _affine_box(d: int, H: int, seed: int) -> tuple[va.Oracle, list[Head]]:
    """A random affine float64 box: W_h ~ N(0, 1/d), v_h, c_h ~ N(0, 1), beta ~ N(0, 1)."""
    rng = np.random.default_rng(seed)
    heads = [
        (rng.normal(0, 1 / np.sqrt(d), (d, d)), rng.normal(0, 1, d), rng.normal(0, 1, d))
        for _ in range(H)
    ]
    beta = float(rng.normal())
    model = MultiHeadAttention([tuple(x.tolist() for x in h) for h in heads], beta=beta)
    return va.Oracle(model, "float"), heads


def _bits(rec: Any, heads: list[Head]) -> float:
    got = [(W, v) for W, v, _ in rec.parameters["heads"]]
    return -float(np.log2(relative_parameter_error(got, [(W, v) for W, v, _ in heads])))


def _full_design(monkeypatch: pytest.MonkeyPatch) -> None:
    """The wrong variant: every box on the full design (learner and checker)."""
    for module in (budget, refine, checker):
        monkeypatch.setattr(module, "lean_design", lambda *args, **kwargs: False)


def test_an_affine_box_takes_the_lean_design_and_its_picks(monkeypatch: pytest.MonkeyPatch) -> None:
    assert lean_design(8, 4, True)
    box, heads = _affine_box(8, 4, seed=0)
    rec = learn_multi_head(box, heads=4, seed=0)
    # Golden counts: F(0) at the 10 columns (d + 1 and one redundant), then 95 pairs (the
    # pilot's 16 and the u-groups' 79) at 2H = 8 ratios each, no t = 1 sample; the polish's
    # 41 and the refinement's rest, one under the follow-up's 1017.
    phases = dict(rec.queries_by_phase)
    assert phases.pop("verify") == 8
    assert phases == {"F(0)": 10, "pilot": 128, "F(t)": 632, "polish": 41, "refinement": 205}
    assert 128 + 632 == 95 * 8 and rec.queries == follow_up_query_bound(8, 4) - 1 == 1016
    lean_bits = _bits(rec, heads)
    assert lean_bits >= 49.5  # measured 2^-50.1
    # The certificate lists the picks among the stream's first POOL x 205; a moved pick is
    # rejected, and so is the run read as the full design.
    data = rec.certificate()
    assert va.verify_certificate(data).ok
    picks = data["answers"]["refinement_picks"]
    assert len(picks) == 205 and picks == sorted(set(picks)) and picks[-1] < refine.POOL * 205
    bad = copy.deepcopy(data)
    bad["answers"]["refinement_picks"] = sorted(
        [*picks[1:], next(i for i in range(refine.POOL * 205) if i not in picks)]
    )
    with pytest.raises(CertificateError):
        va.verify_certificate(bad)
    _full_design(monkeypatch)
    with pytest.raises(CertificateError):
        va.verify_certificate(data)
    # The full design at the same count: a t = 1 sample on each of the 95 pairs, 95 fewer
    # refinement sequences, and the parameters over a bit further off (measured 2^-48.1).
    box, heads = _affine_box(8, 4, seed=0)
    full = learn_multi_head(box, heads=4, seed=0)
    by = full.queries_by_phase
    assert (by["pilot"], by["redundancy"], by["refinement"]) == (144, 79, 110)
    assert full.queries == 1016 and _bits(full, heads) <= lean_bits - 1


def test_the_transformer_cells_and_float32_keep_their_designs() -> None:
    # The lean affine design is taken at float64's own unit roundoff only: a Transformer
    # cell's unit (the block's over the probe scale t <= 1/2) and float32 keep theirs.
    assert lean_design(8, 4, True, unit=2.0**-53)
    assert not lean_design(8, 4, True, unit=2.0**-52)
    assert not lean_design(8, 4, True, unit=2.0**-24)
    # A plain box keeps its own rule (six heads on) at any unit under the coarse one.
    assert lean_design(8, 6, False, unit=2.0**-52) and not lean_design(8, 4, False)
