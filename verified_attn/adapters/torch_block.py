"""A PyTorch attention block with a biased ReLU FFN as a one-layer Transformer oracle.

>>> import torch
>>> import numpy as np
>>> import verified_attn as va
>>> from verified_attn.adapters.torch_block import block_oracle, block_parameters
>>> _ = torch.manual_seed(0)
>>> mha = torch.nn.MultiheadAttention(4, 1, batch_first=True)
>>> lin1, lin2 = torch.nn.Linear(4, 8), torch.nn.Linear(8, 1)
>>> oracle = block_oracle(mha, lin1, lin2)
>>> oracle.model_class, oracle.arithmetic.rtol
('one-layer-transformer-biased', 1e-06)
>>> T = block_parameters(mha, lin1, lin2)           # the module's weights, as it computes
>>> rec = va.learn_transformer(oracle)
>>> rec.verified, bool(np.abs(rec.W - np.array(T.W.tolist(), float)).max() < 1e-6)
(True, True)

The block with one head: ``nn.MultiheadAttention(E, 1)`` as self-attention (query = key = value = X),
read at the last position, then ``nn.Linear(E, m)`` (with bias), ReLU, ``nn.Linear(m, 1)``
(with bias):
``y(X) = L2 ReLU(L1 (W_o (sum_i alpha_i (W_v x_i + b_v)) + b_o) + b_1) + b_2`` with
``alpha = softmax_i((W_k x_i + b_k)^T (W_q x_N + b_q) / sqrt(E))``. That is
``T(X) = w_o^T ReLU(A^T V^T X^T alpha(X) + a) + b`` with (:func:`block_parameters`)

- ``W = W_k^T W_q / sqrt(E)``;
- the key bias adds ``b_k^T (W_q x_N + b_q) / sqrt(E)`` to every score alike, which the
  softmax cancels;
- a *query bias* adds ``x_i^T W_k^T b_q / sqrt(E)`` to score i: an affine score term
  ``c^T x_i`` that this class does not have. A nonzero ``b_q`` is refused
  (:class:`~verified_attn.errors.ModelClassMismatch` naming c) by both functions;
  PyTorch initialises ``in_proj_bias`` to zero, so a fresh module passes;
- ``V = (W_o W_v)^T``, ``A = L1^T``; the softmax weights sum to 1, so the value bias and
  the out_proj bias pass through unchanged and fold into ``a = L1 (W_o b_v + b_o) + b_1``;
- ``w_o = L2``'s row, ``b = b_2``.

H heads (``nn.MultiheadAttention(E, H)``, H >= 2, head width D = E / H): a
:class:`~verified_attn.ffn_heads.MultiHeadTransformer` with head h's
``W_h = W_k^hT W_q^h / sqrt(D)``, ``V_h = (W_o^h W_v^h)^T`` (W_o^h: out_proj's columns of
head h) and, where ``in_proj_bias`` is present, the score bias ``c_h = W_k^hT b_q^h /
sqrt(D)`` (a query bias is in that class); the oracle declares
``"one-layer-transformer-multi-head"``: learn it with ``va.learn_transformer(oracle,
max_heads=H)``.

Arithmetic as in :mod:`verified_attn.adapters.torch`: ``dtype="float64"`` evaluates a
float64 copy (rtol 1e-6, unit roundoff 2^-53), ``"float32"`` a float32 copy at its own
precision (rtol 1e-4, parameter_rtol 1e-3, unit roundoff 2^-24;
:func:`~verified_attn.adapters.torch.float_tolerances`). ``activation`` (default ReLU)
may be any module, e.g. ``nn.GELU()``: the box is then outside the class and the learner
refuses it. Needs the ``verified-attn[torch]`` extra.
"""

from __future__ import annotations

import copy
import math
from typing import Any, Unpack

import numpy as np

from verified_attn.adapters.torch import (
    BoxOptions,
    _check_mha,
    batch_oracle,
    box_settings,
    tensor_array,
    torch,
)
from verified_attn.errors import InvalidArgument, ModelClassMismatch
from verified_attn.ffn_heads import MultiHeadTransformer
from verified_attn.models import OneLayerTransformer
from verified_attn.oracle import Oracle

__all__ = ["AttentionBlock", "block_oracle", "block_parameters"]

MULTI_HEAD = "one-layer-transformer-multi-head"


class AttentionBlock(torch.nn.Module):
    """MHA read at the last position, ``linear1``, ``activation``, ``linear2``: (B, N, E) -> (B,).

    >>> _ = torch.manual_seed(0)
    >>> blk = AttentionBlock(torch.nn.MultiheadAttention(3, 1), torch.nn.Linear(3, 6),
    ...                      torch.nn.Linear(6, 1))
    >>> tuple(blk(torch.zeros(2, 5, 3)).shape)
    (2,)
    """

    def __init__(self, attn: Any, linear1: Any, linear2: Any, activation: Any = None) -> None:
        super().__init__()
        E = _check_block(attn, linear1, linear2)
        if activation is not None and not isinstance(activation, torch.nn.Module):
            raise InvalidArgument(
                f"activation must be a torch.nn.Module, got {type(activation).__name__}"
            )
        self.attn, self.linear1, self.linear2 = attn, linear1, linear2
        self.activation = torch.nn.ReLU() if activation is None else activation
        self.E = E

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` batch-first (B, N, E); only token N's query row is computed."""
        q = x[:, -1:]
        if not self.attn.batch_first:
            out = self.attn(
                q.transpose(0, 1), x.transpose(0, 1), x.transpose(0, 1), need_weights=False
            )[0].transpose(0, 1)
        else:
            out = self.attn(q, x, x, need_weights=False)[0]
        return self.linear2(self.activation(self.linear1(out)))[:, 0, 0]


def _check_block(attn: Any, linear1: Any, linear2: Any) -> int:
    """E after checking shapes: Linear(E, m) and Linear(m, 1) with biases."""
    E = _check_mha(attn)
    if attn.bias_k is not None or attn.bias_v is not None or attn.add_zero_attn:
        raise InvalidArgument(
            "attn has add_bias_kv or add_zero_attn: it attends to an extra learned or zero "
            "token as well, outside the one-layer Transformer class"
        )
    for name, lin in (("linear1", linear1), ("linear2", linear2)):
        if not isinstance(lin, torch.nn.Linear):
            raise InvalidArgument(f"{name} must be a torch.nn.Linear, got {type(lin).__name__}")
    if linear1.in_features != E:
        raise InvalidArgument(
            f"linear1 must be nn.Linear({E}, m); got nn.Linear({linear1.in_features}, "
            f"{linear1.out_features})"
        )
    m = int(linear1.out_features)
    if linear2.in_features != m or linear2.out_features != 1:
        raise InvalidArgument(
            f"linear2 must be nn.Linear({m}, 1); got nn.Linear({linear2.in_features}, "
            f"{linear2.out_features})"
        )
    return E


def _query_bias_score(attn: Any, E: int) -> None:
    """Refuse a nonzero query bias: it adds the score term c^T x_i, c = W_k^T b_q / sqrt(E)."""
    b = tensor_array(attn.in_proj_bias, (3 * E,))
    if np.any(b[:E] != 0):
        Wk = tensor_array(attn.in_proj_weight, (3 * E, E))[E : 2 * E]
        c = Wk.T @ b[:E] / math.sqrt(E)
        raise ModelClassMismatch(
            "the attention has a nonzero query bias b_q: it adds c^T x_i to score i with "
            f"c = W_k^T b_q / sqrt(E) = {c.tolist()}, an affine score term outside the "
            "one-layer Transformer class (score x_i^T W x_N only); zero in_proj_bias[:E]",
            observed=c,
        )


def block_parameters(
    attn: Any, linear1: Any, linear2: Any
) -> OneLayerTransformer | MultiHeadTransformer:
    """``OneLayerTransformer(W, V, A, w_o, a=, b=)`` computing the block (module doc); for
    ``nn.MultiheadAttention(E, H)`` with H >= 2 a
    :class:`~verified_attn.ffn_heads.MultiHeadTransformer` (section "H heads").

    The float64 weights become the binary rationals they are, so the model evaluates
    exactly these numbers (in float64 it agrees with the float64 module to rounding).

    >>> _ = torch.manual_seed(2)
    >>> T = block_parameters(torch.nn.MultiheadAttention(3, 1), torch.nn.Linear(3, 6),
    ...                      torch.nn.Linear(6, 1))
    >>> T.d, T.m, T.model_class
    (3, 6, 'one-layer-transformer-biased')
    """
    E = _check_block(attn, linear1, linear2)
    if int(attn.num_heads) > 1:
        return _multi_head_parameters(attn, linear1, linear2, E)
    _query_bias_score(attn, E)
    Win, _, Wo, L1, L2, a, b = _block_arrays(attn, linear1, linear2, E)
    Wq, Wk, Wv = Win[:E], Win[E : 2 * E], Win[2 * E :]
    W = Wk.T @ Wq / math.sqrt(E)
    V = (Wo @ Wv).T
    return OneLayerTransformer(W, V, L1.T, L2, a=a, b=b)


def _block_arrays(attn: Any, linear1: Any, linear2: Any, E: int) -> tuple[Any, ...]:
    """The block's float64 arrays ``(W_in, b_in, W_o, L1, L2, a, b)``: the attention's
    input and output projections, the FFN's weights, and its hidden bias ``a`` with the
    value and output biases folded in (every head's value is a convex combination of tokens,
    so ``b_v`` passes through ``W_o`` unchanged) and its output bias ``b``."""
    m = int(linear1.out_features)
    Win = tensor_array(attn.in_proj_weight, (3 * E, E))
    bin_ = tensor_array(attn.in_proj_bias, (3 * E,))
    Wo = tensor_array(attn.out_proj.weight, (E, E))
    bo = tensor_array(attn.out_proj.bias, (E,))
    L1, b1 = tensor_array(linear1.weight, (m, E)), tensor_array(linear1.bias, (m,))
    L2, b2 = tensor_array(linear2.weight, (m,)), tensor_array(linear2.bias, (1,))
    a = L1 @ (Wo @ bin_[2 * E :] + bo) + b1
    return Win, bin_, Wo, L1, L2, a, float(b2[0])


def _multi_head_parameters(attn: Any, linear1: Any, linear2: Any, E: int) -> MultiHeadTransformer:
    """H >= 2 heads of width D = E / H: head h's rows of W_q, W_k, W_v and its columns of
    W_o give ``W_h = W_k^hT W_q^h / sqrt(D)``, the query bias ``c_h = W_k^hT b_q^h /
    sqrt(D)`` (heads affine when ``in_proj_bias`` is present), ``V_h = (W_o^h W_v^h)^T``."""
    H = int(attn.num_heads)
    D = E // H
    Win, bin_, Wo, L1, L2, a, b = _block_arrays(attn, linear1, linear2, E)
    heads: list[Any] = []
    for h in range(H):
        rows = slice(h * D, (h + 1) * D)
        Wq, Wk = Win[:E][rows], Win[E : 2 * E][rows]
        Wv, bq = Win[2 * E :][rows], bin_[:E][rows]
        W = Wk.T @ Wq / math.sqrt(D)
        V = (Wo[:, rows] @ Wv).T
        heads.append((W, V) if attn.in_proj_bias is None else (W, V, Wk.T @ bq / math.sqrt(D)))
    return MultiHeadTransformer(heads, L1.T, L2, a=a, b=b)


def block_oracle(
    attn: Any,
    linear1: Any,
    linear2: Any,
    *,
    activation: Any = None,
    **options: Unpack[BoxOptions],
) -> Oracle:
    """A float :class:`Oracle` answering the block's output at the last position.

    Declares ``model_class="one-layer-transformer-biased"`` for one head (so
    :func:`verified_attn.learn_transformer` takes its biased learner),
    ``"one-layer-transformer-multi-head"`` for H >= 2 (pass ``max_heads=H``). The modules are
    copied (eval mode, ``dtype``); the caller's are never changed. ``rtol``,
    ``parameter_rtol``: as :func:`verified_attn.adapters.torch.attention_oracle`.

    >>> _ = torch.manual_seed(0)
    >>> o = block_oracle(torch.nn.MultiheadAttention(3, 1), torch.nn.Linear(3, 6),
    ...                  torch.nn.Linear(6, 1), dtype="float32")
    >>> o.arithmetic.rtol, o.arithmetic.unit_roundoff == 2.0**-24
    (0.0001, True)
    """
    E = _check_block(attn, linear1, linear2)
    multi = int(attn.num_heads) > 1
    if not multi:
        _query_bias_score(attn, E)
    settings = box_settings("block_oracle", options)
    tdtype = settings.dtype
    block = AttentionBlock(attn, linear1, linear2, activation)
    box = copy.deepcopy(block).to(device="cpu", dtype=tdtype).eval()

    def batch_fn(Xs: np.ndarray) -> np.ndarray:
        x = torch.from_numpy(np.ascontiguousarray(Xs)).to(tdtype)
        with torch.no_grad():
            return box(x).to(torch.float64).numpy()

    limits = (settings.budget, settings.record)
    rtol, parameter_rtol = settings.rtol, settings.parameter_rtol
    model_class = MULTI_HEAD if multi else "one-layer-transformer-biased"
    return batch_oracle(batch_fn, E, tdtype, limits, model_class, rtol, parameter_rtol)
