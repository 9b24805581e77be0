"""Every float32 module docs/pytorch.md names is refused or learned within what it states.

The single-head learner once returned float32 ``nn.MultiheadAttention`` modules with
output biases N(0, 1) verified at rtol 1e-4 while their predictions were off by more on
sequences it had not asked (E = 32, module seeds 2 and 5). Regression over every module
the page measures: the float multi-head benchmark's one-head modules (``torch_box``, E = 4,
8, 16, 32, module seeds 0-5) and ``benchmarks/vs_distillation.py``'s teachers (d = 4, 8, 16,
32, seeds 0-2). Each must be refused (:class:`~verified_attn.errors.PrecisionExhausted`)
or learned with its predictions within the tolerance it states (the agreement rule at the
result's rtol) against the float64 module, on 64 fresh sequences of another generator than
the learner's and on the prediction bound's 64 sequences, and its stated parameter figure
at least the one measured against the module's head (``attention_parameters``, float64).
"""

from __future__ import annotations

import dataclasses
import re
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import verified_attn as va
from verified_attn.arithmetic import FloatArithmetic
from verified_attn.precision import relative_parameter_error
from verified_attn.verification import float_floor, fresh_sequences, tolerance

torch = pytest.importorskip("torch")

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from multi_head_float import torch_box  # type: ignore[import-not-found]  # noqa: E402
from vs_distillation import _teacher  # type: ignore[import-not-found]  # noqa: E402

from verified_attn.adapters.torch import attention_oracle, attention_parameters  # noqa: E402

#: Sequences per check, and the seed of the other generator (the learner draws its own
#: fresh sequences from its seed; these are uniform in [-1.5, 1.5], lengths 1..16).
SEQUENCES = 64
OTHER_SEED = 20_000


def _other_sequences(d: int) -> list[np.ndarray]:
    rng = np.random.default_rng(OTHER_SEED + d)
    return [rng.uniform(-1.5, 1.5, size=(1 + i % 16, d)) for i in range(SEQUENCES)]


def worst_ratio(rec: Any, truth: Any, sequences: list[np.ndarray]) -> float:
    """The largest |prediction - float64 answer| over what the rule allows at the result's
    own rtol (its verification's) and the box's unit roundoff: <= 1 is within what it states."""
    arith = FloatArithmetic(float(rec.verification.rtol), float(rec.verification.unit_roundoff))
    beta = float(rec.parameters["beta"])
    preds = np.array([float(rec.model.evaluate_batch(X[None])[0]) for X in sequences])
    answers = np.array([truth.query(X) for X in sequences])
    floor = float_floor(list(answers), beta)
    allowed = np.array([tolerance(arith, y, bias=beta, floor=floor) for y in answers])
    return float(np.max(np.abs(preds - answers) / allowed))


def refused_or_within(mha: Any, readout: Any, seed: int) -> tuple[str, float | None]:
    """("refused", None), or ("learned", the worst ratio over both sequence sets, and the
    parameter figure stated over the one measured against the module's float64 head:
    each <= 1 is within what the result states)."""
    try:
        rec = va.learn_single_head(attention_oracle(mha, readout, dtype="float32"), seed=seed)
    except va.PrecisionExhausted:
        return "refused", None
    truth = attention_oracle(mha, readout, dtype="float64")
    d = rec.parameters["W"].shape[0]
    own = fresh_sequences(d, SEQUENCES, seed=seed)
    head = attention_parameters(mha, readout)
    measured = relative_parameter_error(
        [(rec.W, rec.v, rec.c)], [(head.W[0], head.v[0], head.c[0])]
    )
    return "learned", max(
        worst_ratio(rec, truth, own),
        worst_ratio(rec, truth, _other_sequences(d)),
        measured / rec.error_figures.parameter_error,
    )


MODULES: list[Any] = [("torch_box", E, s) for E in (4, 8, 16, 32) for s in range(6)]
MODULES += [("teacher", d, s) for d in (4, 8, 16, 32) for s in range(3)]


def _module(kind: str, d: int, seed: int) -> tuple[Any, Any]:
    return torch_box(d, 1, seed) if kind == "torch_box" else _teacher(d, seed)


@pytest.mark.parametrize(("kind", "d", "seed"), MODULES)
def test_each_named_float32_module_is_refused_or_within_its_tolerance(
    kind: str, d: int, seed: int
) -> None:
    mha, readout = _module(kind, d, seed)
    outcome, ratio = refused_or_within(mha, readout, seed)
    assert outcome == "refused" or (ratio is not None and ratio <= 1), (outcome, ratio)


def test_the_issues_modules_are_refused() -> None:
    for seed in (2, 5):  # E = 32: returned off by 1.86 and 1.32 x the allowance before
        assert refused_or_within(*torch_box(32, 1, seed), seed)[0] == "refused"


def test_a_result_off_by_more_than_it_states_fails_the_check() -> None:
    # learned at rtol 1e-4 (tests/exact_recovery/test_float_bound.py)
    mha, readout = torch_box(4, 1, 0)
    rec = va.learn_single_head(attention_oracle(mha, readout, dtype="float32"), seed=0)
    truth = attention_oracle(mha, readout, dtype="float64")
    seqs = fresh_sequences(4, SEQUENCES, seed=0)
    assert worst_ratio(rec, truth, seqs) <= 1
    # The same result with v off by 1e-3 relative: its predictions are past what it states.
    v = np.asarray(rec.parameters["v"], dtype=np.float64) * (1 + 1e-3)
    params = dict(rec.parameters, v=v)
    model = va.SingleHeadAttention(
        rec.parameters["W"], v, c=rec.parameters["c"], beta=rec.parameters["beta"]
    )
    off = dataclasses.replace(rec, parameters=params, learned_model=model)
    assert worst_ratio(off, truth, seqs) > 1


def test_the_docs_teacher_is_refused_for_precision_naming_the_rtol() -> None:
    """docs/pytorch.md's teacher d = 32, seed 0 is refused for precision, naming an rtol that
    fits. Which check refuses it follows the module's float32 last bits, which differ
    between CPUs' kernels: the first-order bound on the decoded head's predictions before
    verification (its 2 sigma 3.1 x the allowance on one machine), or the verification's
    gap, within the first-order worst case of the prediction error (3.7e-5 over an
    allowance of 3.4e-5 on another; that path is tested on a fixed box in
    tests/exact_recovery/test_float_bound.py)."""
    mha, readout = _teacher(32, 0)
    with pytest.raises(va.PrecisionExhausted, match=r"rtol 0\.0001") as info:
        va.learn_single_head(attention_oracle(mha, readout, dtype="float32"), seed=0)
    named = re.search(r"fits at rtol ([0-9.e-]+)", str(info.value))
    assert named and float(named.group(1)) > 1e-4, str(info.value)
    if info.value.__cause__ is not None:  # refuted at verification: the refutation is kept
        assert isinstance(info.value.__cause__, va.ModelClassMismatch)
        assert "within the first-order worst case" in str(info.value)
    else:
        assert "too uncertain for rtol" in str(info.value)
