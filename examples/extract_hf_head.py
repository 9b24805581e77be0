"""Extract HuggingFace transformers attention heads from black-box queries, check them
against their weights, and see rotary attention and whole blocks rejected.

Run from the repository root (needs the extra: ``pip install 'verified-attn[hf]'``)::

    python examples/extract_hf_head.py [--d 8] [--seed 0]

It builds small modules from configs with seeded random weights (nothing is downloaded):
a one-head ``GPT2Attention`` and ``BertSelfAttention``, learned as affine single heads
with exactly d^2 + 2d + 1 queries and compared with the weight mapping; a two-head
``GPT2Attention`` learned with ``learn_multi_head``; the same GPT-2 head as a float32 box;
and a ``LlamaAttention`` (rotary embeddings) and a ``GPT2Block``, which are outside the
model class and are rejected with ModelClassMismatch.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

import numpy as np
import torch
from transformers import BertConfig, GPT2Config, LlamaConfig
from transformers.models.bert.modeling_bert import BertSelfAttention
from transformers.models.gpt2.modeling_gpt2 import GPT2Attention, GPT2Block
from transformers.models.llama.modeling_llama import LlamaAttention

import verified_attn as va
from verified_attn.adapters.hf import attention_oracle, attention_parameters


def _rel(a: object, b: object) -> float:
    b = np.asarray(b, dtype=np.float64)
    return float(np.abs(np.asarray(a, dtype=np.float64) - b).max() / np.abs(b).max())


def _randomize(module: torch.nn.Module, d: int) -> torch.nn.Module:
    # GPT-2 and Llama start their biases at 0 and GPT-2 its weights at N(0, 0.02^2);
    # N(0, 1/d) everywhere gives every parameter (c and beta included) something to learn.
    with torch.no_grad():
        for p in module.parameters():
            p.normal_(0.0, 1.0 / np.sqrt(d))
    return module


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--d", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    d = args.d
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)
    readout = torch.nn.Linear(d, 1)

    # 1. One-head modules, learned as black boxes in float64 and checked against the weights.
    one_head = {
        "GPT2Attention": GPT2Attention(GPT2Config(n_embd=d, n_head=1), layer_idx=0),
        "BertSelfAttention": BertSelfAttention(BertConfig(hidden_size=d, num_attention_heads=1)),
    }
    for name, module in one_head.items():
        _randomize(module, d)
        oracle = attention_oracle(module, readout)
        rec = va.learn_single_head(oracle)
        truth = attention_parameters(module, readout)
        errors = {
            key: _rel(rec.parameters[key], want[0])
            for key, want in (("W", truth.W), ("c", truth.c), ("v", truth.v))
        }
        print(
            f"{name}: {rec.queries} learning + {rec.verification_queries} verification "
            f"queries (bound {rec.bound}), verification gap {rec.verification_error:.1e}, "
            + ", ".join(f"{k} error {e:.1e}" for k, e in errors.items())
        )

    # 2. Two heads: canonical heads from learn_multi_head (a refusal is possible, never a
    #    wrong answer: whatever returns was verified on fresh queries).
    two = _randomize(GPT2Attention(GPT2Config(n_embd=d, n_head=2), layer_idx=0), d)
    try:
        rec2 = va.learn_multi_head(attention_oracle(two, readout), heads=2)
        print(
            f"GPT2Attention, 2 heads: {rec2.queries} learning queries, verification gap "
            f"{rec2.verification_error:.1e}"
        )
    except (va.NotIdentifiable, va.PrecisionExhausted) as exc:
        print(f"GPT2Attention, 2 heads: refused ({type(exc).__name__}: {str(exc)[:70]}...)")

    # 3. The GPT-2 head as a float32 box: verified at the looser rtol it declares (1e-4).
    gpt2 = one_head["GPT2Attention"]
    try:
        rec32 = va.learn_single_head(attention_oracle(gpt2, readout, dtype="float32"))
        truth = attention_parameters(gpt2, readout)
        print(
            f"GPT2Attention float32: verification gap {rec32.verification_error:.1e}, "
            f"W error {_rel(rec32.W, truth.W[0]):.1e}"
        )
    except va.ModelClassMismatch as exc:
        print(f"GPT2Attention float32: rejected at rtol 1e-4 ({str(exc)[:70]}...)")

    # 4. Outside the model class: rotary position embeddings (one head, so that the rotary
    #    embedding is the only reason), and a whole block.
    llama_config = LlamaConfig(
        hidden_size=d,
        num_attention_heads=1,
        num_key_value_heads=1,
        intermediate_size=2 * d,
        num_hidden_layers=1,
        attention_bias=True,
    )
    outside = {
        "LlamaAttention": _randomize(LlamaAttention(llama_config, layer_idx=0), d),
        "GPT2Block": _randomize(GPT2Block(GPT2Config(n_embd=d, n_head=1), layer_idx=0), d),
    }
    for name, module in outside.items():
        box = attention_oracle(module, readout)
        try:
            va.learn_single_head(box)
            print(f"{name}: learned as a single head (unexpected)")
            return 1
        except va.ModelClassMismatch as exc:
            print(f"{name}: ModelClassMismatch after {box.queries} queries ({str(exc)[:60]}...)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
