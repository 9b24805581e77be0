"""The float multi-head rows of ``benchmarks/transformer.py``: va.learn_transformer(max_heads=H)
on float64 boxes (random Gaussian multi-head Transformers with affine heads, and PyTorch
blocks nn.MultiheadAttention(E, H) + Linear, ReLU, Linear), each in its own subprocess.

Per row: the learning queries (FFN + centers + cells) against the learned form's free
parameters, the bound, the verification queries, the stated parameter error estimate,
the true error of (W_h, c_h) after canonical matching (:mod:`verified_attn.precision`),
the largest relative prediction gap on 24 fresh sequences of lengths 1 to 40 against the
box (the float rule's ratio too), each in bits, the wall time and the child's peak RSS.
A refusal is a row with ``refused``. Run from the repository root::

    python benchmarks/transformer.py --multi-head-float-only   # merged into transformer.json
"""

from __future__ import annotations

import resource
import subprocess
import time
from typing import Any

import numpy as np
from _transformer_heads import child_row, count_fields

#: (source, d, H, seed): "random" boxes (FFN width 2d) and "torch" blocks (E = d, width 2E).
FLOAT_SIZES = [
    ("random", 2, 2, 0),
    ("random", 4, 2, 2),
    ("random", 8, 2, 0),
    ("random", 2, 4, 0),
    ("random", 4, 4, 0),
    ("random", 4, 4, 1),
    ("torch", 4, 2, 0),
    ("torch", 4, 4, 0),
    ("torch", 8, 2, 0),
    ("torch", 8, 4, 0),
    ("random", 16, 2, 0),
    ("torch", 16, 2, 0),
    ("random", 16, 4, 0),
    ("torch", 16, 4, 0),
]
#: Seconds a row may take before it is recorded as timed out.
TIMEOUT = 1500


def _box(source: str, d: int, H: int, seed: int) -> tuple[Any, Any]:
    """(oracle, the truth as a MultiHeadTransformer)."""
    import verified_attn as va
    from verified_attn.ffn_heads import MultiHeadTransformer

    if source == "torch":
        import torch

        from verified_attn.adapters.torch_block import block_oracle, block_parameters

        torch.manual_seed(seed)
        mha = torch.nn.MultiheadAttention(d, H, batch_first=True)
        with torch.no_grad():
            mha.in_proj_bias.uniform_(-1, 1)
            mha.out_proj.bias.uniform_(-1, 1)
        lin1, lin2 = torch.nn.Linear(d, 2 * d), torch.nn.Linear(2 * d, 1)
        return block_oracle(mha, lin1, lin2), block_parameters(mha, lin1, lin2)
    rng = np.random.default_rng(seed)
    heads = [
        (rng.normal(size=(d, d)) / np.sqrt(d), rng.normal(size=(d, d)), rng.normal(size=d))
        for _ in range(H)
    ]
    m = 2 * d
    T = MultiHeadTransformer(
        heads, rng.normal(size=(d, m)), rng.normal(size=m), a=rng.normal(size=m), b=rng.normal()
    )
    return va.Oracle(T, "float"), T


def run_multi_head_float(source: str, d: int, H: int, seed: int) -> dict[str, Any]:
    """One float row, in this process (see the module doc)."""
    import verified_attn as va
    from verified_attn.errors import VerifiedAttnError
    from verified_attn.precision import bits, relative_parameter_error
    from verified_attn.verification import verify_model

    oracle, T = _box(source, d, H, seed)
    row: dict[str, Any] = {
        "source": source,
        "d": d,
        "H": H,
        "m": 2 * d,
        "seed": seed,
        "arithmetic": "float",
        "kind": "multi-head-float",
    }
    t0 = time.perf_counter()
    try:
        rec = va.learn_transformer(oracle, max_heads=H, seed=seed)
    except VerifiedAttnError as exc:
        # What the refusal cost: every query asked before it, counted on the oracle.
        return {
            **row,
            "refused": f"{type(exc).__name__}: {str(exc)[:300]}",
            "queries": oracle.queries,
            "seconds": time.perf_counter() - t0,
            "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        }
    seconds = time.perf_counter() - t0
    got = [(np.asarray(W), np.asarray(c)) for W, _, c in rec.parameters["heads"]]
    truth = [(T._W_float[h], T._c_float[h]) for h in range(T.H)]
    err = relative_parameter_error(got, truth) if len(got) == len(truth) else None
    try:
        fresh = verify_model(oracle, rec.model, count=24, seed=99, lengths=(1, 2, 3, 7, 16, 40))
        checked: dict[str, Any] = {
            "fresh_max_ratio": fresh.max_ratio,
            "fresh_max_gap": fresh.max_gap,
        }
    except VerifiedAttnError as exc:  # a learned model the extra fresh sequences refute
        checked = {"fresh_refuted": f"{type(exc).__name__}: {str(exc)[:300]}"}
    return {
        **row,
        "width": rec.network.width,
        "heads_found": rec.model.H,
        **count_fields(rec),
        "parameter_error_estimate": rec.parameters["error_estimate"],
        "parameter_error_W_c": err,
        "parameter_bits_W_c": bits(err),
        "prediction_error": rec.verification_error,
        "prediction_bits": bits(rec.verification_error),
        **checked,
        "seconds": seconds,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def in_child_float(source: str, d: int, H: int, seed: int) -> dict[str, Any]:
    """:func:`run_multi_head_float` in a fresh process (its peak RSS that row's alone); a
    row not finished within TIMEOUT seconds is a refusal row."""
    try:
        return child_row(
            "_transformer_heads_float", "run_multi_head_float", [source, d, H, seed], TIMEOUT
        )
    except subprocess.TimeoutExpired:
        return {
            "source": source,
            "d": d,
            "H": H,
            "seed": seed,
            "kind": "multi-head-float",
            "arithmetic": "float",
            "refused": f"not finished within {TIMEOUT} s",
        }
