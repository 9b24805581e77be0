"""Noisy-oracle test instances: random heads, every adversary's oracle, the error ratio.

The claims, tests and benchmarks of Theorem 6.1 draw their heads and adversaries here.

>>> m = random_instance(2, 0)
>>> sorted(adversarial_oracles(m, 1e-6, 0))
['rounding', 'uniform', 'worst-grow', 'worst-shrink']
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from verified_attn.models import SingleHeadAttention
from verified_attn.oracle import Oracle
from verified_attn.oracle_wrappers import NoisyOracle, worst_case_oracle
from verified_attn.recovery import NoisyRecovery

__all__ = ["adversarial_oracles", "random_instance", "worst_ratio"]


def random_instance(
    d: int, seed: int, *, w_bound: float = 1.0, margin: float = 1.0, tiny: bool = False
) -> SingleHeadAttention:
    """A head with ||W||_F <= w_bound (dyadic entries) and |v_i| >= margin.

    ``tiny``: one coordinate of v is margin / 1000 instead (only ||v||_2 >= margin holds).

    >>> m = random_instance(3, 0)
    >>> float(np.linalg.norm(m.float_parameters()["W"])) <= 1
    True
    """
    rng = np.random.default_rng(seed)
    W = rng.normal(size=(d, d))
    W = np.round(W / np.linalg.norm(W) * w_bound * 0.999 * 2**20) / 2**20
    v = rng.choice([-1.0, 1.0], d) * margin * rng.uniform(1, 2, d)
    if tiny:
        v[rng.integers(d)] = margin / 1024
        v[int(np.argmax(np.abs(v)))] = math.copysign(2 * margin, v[int(np.argmax(np.abs(v)))])
    return SingleHeadAttention(W, v)


def adversarial_oracles(
    model: SingleHeadAttention, tolerance: float, seed: int
) -> dict[str, Callable[[], Oracle]]:
    """Fresh oracles for every adversary: uniform, rounding, worst-case (both v pushes)."""
    return {
        "uniform": lambda: NoisyOracle(Oracle(model, "certified"), tolerance, seed=seed),
        "rounding": lambda: NoisyOracle(Oracle(model, "certified"), tolerance, "rounding"),
        "worst-shrink": lambda: worst_case_oracle(model, tolerance, v_push="shrink"),
        "worst-grow": lambda: worst_case_oracle(model, tolerance, v_push="grow"),
    }


def worst_ratio(rec: NoisyRecovery, model: SingleHeadAttention, part: str = "both") -> float:
    """max over entries of actual error / guaranteed bound (``"W"``, ``"v"`` or both).

    At most 1 when the bounds are sound (the worst-case adversary makes the v ratio 1).
    """
    p = model.float_parameters()
    enclosures = rec.enclosures
    assert enclosures is not None  # a NoisyRecovery always carries its intervals
    rw = float((np.abs(rec.W - p["W"]) / enclosures["W_error"]).max())
    rv = float((np.abs(rec.v - p["v"]) / enclosures["v_error"]).max())
    return {"W": rw, "v": rv, "both": max(rw, rv)}[part]
