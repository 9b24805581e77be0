"""One call for ``verified-attn learn noisy``: a random head, an adversary, the learner.

>>> out = run(2, tolerance=1e-3, adversary="worst-case", seed=0)
>>> out["queries"], out["bound"], out["within_bound"]
(6, 6, True)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from verified_attn.noisy.claims import random_instance
from verified_attn.noisy.labels import learn_from_labels
from verified_attn.noisy.learner import learn_noisy, learn_stochastic
from verified_attn.oracle import Oracle
from verified_attn.oracle_wrappers import (
    LabelOracle,
    NoisyOracle,
    StochasticOracle,
    worst_case_oracle,
)
from verified_attn.validation import check_choice, check_int, check_seed, require_size

__all__ = ["ADVERSARY_CHOICES", "run"]

ADVERSARY_CHOICES = ("uniform", "rounding", "worst-case", "gaussian", "labels")


def run(
    d: int,
    *,
    tolerance: float = 1e-3,
    adversary: str = "uniform",
    design: str = "paper",
    w_bound: float = 1.0,
    margin: float = 1.0,
    target_error: float = 0.05,
    bits: int = 30,
    seed: int = 0,
    progress: Any = False,
) -> dict[str, Any]:
    """Learn a random head (||W||_F <= w_bound, |v_i| >= margin) behind ``adversary``.

    ``adversary``: uniform / rounding / worst-case (tolerance ``tolerance``), ``gaussian``
    (noise scale ``tolerance``, averaged until ``target_error``), ``labels`` (App. B,
    ``bits`` per unknown). Returns the Recovery and the figures a report prints: queries,
    bound, max actual error, max guaranteed bound (for labels: the max enclosure width),
    whether the truth is within the guarantee, and ``lines`` for a report. ``progress``: as
    for the learners (:mod:`verified_attn.progress`).
    """
    d = check_int(d, "d", low=1)
    # The box, the design (d^2 + d probes of d + 1 tokens) and the answers.
    require_size(f"a noisy run at d = {d}", numbers=4 * d * d, queries=d * d + d)
    adversary = check_choice(adversary, "adversary", ADVERSARY_CHOICES)
    seed = check_seed(seed)
    model = random_instance(
        d, seed, w_bound=float(w_bound), margin=float(margin), tiny=design == "norm" and d > 1
    )
    truth = model.float_parameters()
    if adversary == "labels":
        rec = learn_from_labels(
            LabelOracle(Oracle(model, "certified")),
            w_bound=w_bound,
            bits=bits,
            seed=seed,
            progress=progress,
        )
        lo, hi = rec.enclosures["W"]["lower"], rec.enclosures["W"]["upper"]
        bound = float((hi - lo).max())
        inside = bool(((lo <= truth["W"]) & (truth["W"] <= hi)).all())
    else:
        if adversary == "worst-case":
            oracle: Oracle = worst_case_oracle(model, tolerance)
        elif adversary == "gaussian":
            oracle = StochasticOracle(Oracle(model, "certified"), tolerance, seed=seed)
        else:
            oracle = NoisyOracle(Oracle(model, "certified"), tolerance, adversary, seed=seed)
        if adversary == "gaussian":
            rec = learn_stochastic(
                oracle,
                noise_scale=tolerance,
                target_error=target_error,
                w_bound=w_bound,
                margin=margin,
                design=design,
                seed=seed,
                progress=progress,
            )
        else:
            rec = learn_noisy(
                oracle,
                tolerance=tolerance,
                w_bound=w_bound,
                margin=margin,
                design=design,
                seed=seed,
                progress=progress,
            )
        bound = float(rec.enclosures["W_error"].max())
        inside = bool((np.abs(rec.W - truth["W"]) <= rec.enclosures["W_error"]).all())
    err = float(np.abs(rec.W - truth["W"]).max())
    kind = "enclosure width" if adversary == "labels" else "guaranteed bound"
    lines = [
        f"max |W_hat - W| = {err:.3e}; max {kind} {bound:.3e}; truth within the guarantee: "
        + ("yes" if inside else "NO")
    ]
    return {
        "recovery": rec,
        "lines": lines,
        "queries": rec.queries,
        "bound": rec.bound,
        "max_W_error": err,
        "max_W_bound": bound,
        "within_bound": inside,
        "summary": rec.summary(),
    }
