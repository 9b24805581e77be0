"""Extract a PyTorch attention head from black-box queries, and check it against its weights.

Run from the repository root (needs the extra: ``pip install 'verified-attn[torch]'``)::

    python examples/extract_pytorch_head.py [--d 16] [--seed 0]

It builds a one-head ``torch.nn.MultiheadAttention`` with biases, reads it out at the last
position with an ``nn.Linear(d, 1)``, learns the affine single head (W, c, v, beta) with
exactly d^2 + 2d + 1 queries, compares it with the weight mapping of docs/theory.md (The models), and shows
what happens with a float32 box and with modules that are not a single head.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

import numpy as np
import torch

import verified_attn as va
from verified_attn.adapters.torch import attention_oracle, attention_parameters, sequence_oracle


def _rel(a: object, b: object) -> float:
    b = np.asarray(b, dtype=np.float64)
    return float(np.abs(np.asarray(a, dtype=np.float64) - b).max() / np.abs(b).max())


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--d", type=int, default=16)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    d = args.d
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)

    # The module as a practitioner has it (PyTorch starts biases at 0: give them values).
    mha = torch.nn.MultiheadAttention(d, num_heads=1, batch_first=True)
    with torch.no_grad():
        mha.in_proj_bias.normal_()
        mha.out_proj.bias.normal_()
    readout = torch.nn.Linear(d, 1)

    # 1. Learn it as a black box, in float64.
    oracle = attention_oracle(mha, readout, dtype="float64")
    rec = va.learn_single_head(oracle)
    print(rec.summary())
    print(f"oracle counted {oracle.queries} queries: {oracle.queries_by_phase}")

    # 2. Compare with the weights, mapped as in docs/theory.md (The models).
    truth = attention_parameters(mha, readout)
    print("relative error against the weight mapping (float64 box):")
    for name, want in (("W", truth.W[0]), ("c", truth.c[0]), ("v", truth.v[0])):
        print(f"  {name}: {_rel(rec.parameters[name], want):.1e}")
    print(f"  beta: {abs(rec.beta - truth.beta) / abs(truth.beta):.1e}")

    # 3. The same module evaluated in float32: answers carry ~1e-7 relative rounding.
    try:
        rec32 = va.learn_single_head(attention_oracle(mha, readout, dtype="float32"))
        print(f"float32 box: verified, discrepancy {rec32.verification_error:.1e}")
    except va.ModelClassMismatch as exc:
        print(f"float32 box: verification rejected it ({str(exc)[:90]}...)")
        rec32 = va.learn_single_head(attention_oracle(mha, readout, dtype="float32"), verify=0)
        print(f"  unverified (verify=0): W relative error {_rel(rec32.W, truth.W[0]):.1e}")

    # 4. Outside the model class: detected, not mis-learned.
    two_heads = torch.nn.MultiheadAttention(d, num_heads=2, batch_first=True)
    layer = torch.nn.TransformerEncoderLayer(d, 1, dim_feedforward=2 * d, batch_first=True)
    for label, box in (
        ("2-head MultiheadAttention", attention_oracle(two_heads, readout)),
        ("TransformerEncoderLayer", sequence_oracle(layer, readout, d=d, batch_first=True)),
    ):
        try:
            va.learn_single_head(box)
            print(f"{label}: learned as a single head (unexpected)")
            return 1
        except va.ModelClassMismatch as exc:
            print(f"{label}: ModelClassMismatch after {box.queries} queries ({str(exc)[:60]}...)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
