"""HuggingFace ``transformers`` attention modules as black-box oracles (extra ``verified-attn[hf]``).

>>> import numpy as np
>>> import torch
>>> import verified_attn as va
>>> from transformers import GPT2Config
>>> from transformers.models.gpt2.modeling_gpt2 import GPT2Attention
>>> from verified_attn.adapters.hf import attention_oracle, attention_parameters
>>> _ = torch.manual_seed(0)
>>> attn = GPT2Attention(GPT2Config(n_embd=4, n_head=1), layer_idx=0)
>>> with torch.no_grad():                  # GPT-2 starts its biases at 0: give them values
...     for p in attn.parameters():
...         _ = p.normal_(0.0, 0.5)
>>> readout = torch.nn.Linear(4, 1)
>>> rec = va.learn_single_head(attention_oracle(attn, readout))
>>> rec.queries, rec.verification_queries          # d^2 + 2d + 1 learning queries, d = 4
(25, 8)
>>> truth = attention_parameters(attn, readout)
>>> bool(np.abs(rec.W - truth.W[0]).max() <= 1e-9 * np.abs(truth.W[0]).max())
True

An attention module of ``transformers`` (built from a config, or taken out of a loaded
model, e.g. ``model.transformer.h[0].attn``), read out at the last position N by a vector
``r`` (and a bias ``b``, if the readout is an ``nn.Linear(E, 1)``), computes
``y(X) = r^T o_N + b``. Supported, with the weight mapping of :func:`attention_parameters`:

- ``GPT2Attention`` (self-attention): ``Conv1D`` weights (``y = x W + b``, transposed
  against ``nn.Linear``), the module's own score scale (``1/sqrt(head_dim)``, and
  ``1/(layer_idx + 1)`` with ``scale_attn_by_inverse_layer_idx``), output projection
  ``c_proj``. GPT-2 is causal, but the last position attends to all N positions with or
  without the causal mask, so its last output is one affine head per attention head: in
  the model class.
- ``BertSelfAttention``: ``query``/``key``/``value`` ``nn.Linear``; it returns the context
  itself (BERT's output projection, residual and LayerNorm are in ``BertSelfOutput``), so
  the readout applies to the concatenated heads. BERT's absolute position embeddings are
  added in ``BertEmbeddings``, before the layer: the module sees tokens that already carry
  them and is in the class. A box that adds positions itself is not (the tests wrap
  ``x -> attention(x + P[:N])`` and it is rejected).
- ``LlamaAttention``: grouped-query heads (query head k reads key/value head
  ``k // (num_attention_heads // num_key_value_heads)``) and rotary position embeddings,
  which the oracle computes from the module's config for positions ``0 .. N-1``. Rotary
  embeddings rotate queries and keys by their positions, so a score depends on
  ``i - N`` and not only on the tokens: **outside the model class**. The learners say so
  (``ModelClassMismatch``), and :func:`attention_parameters` refuses unless asked for
  ``ignore_rotary=True`` (the weights mapped as if every rotation were the identity).

Whole blocks (``GPT2Block``, ``BertAttention``, ``BertLayer``, ``LlamaDecoderLayer``) are
accepted by :func:`attention_oracle` so that they can be tested: their norms, residual
connections and MLPs put them outside the class, and the learners reject them.

The adapter passes no attention mask and no cache. Modules built from a bare config have no
attention implementation set (``config._attn_implementation`` is None); the oracle's private
copy then uses ``"sdpa"``, the default of models loaded by transformers. A module set to
``"eager"`` is evaluated that way: Llama's eager path rounds the softmax to float32 (GPT-2's,
with ``reorder_and_upcast_attn``, the scores) whatever the module's dtype, so such an oracle
declares the float32 tolerance. Arithmetic as in :mod:`verified_attn.adapters.torch`:
``dtype="float64"`` evaluates a float64 copy of the module, ``"float32"`` a float32 copy,
and the readout is applied in float64.

This module imports torch and transformers when it is imported and raises an
:class:`ImportError` naming the extra if either is missing.
"""

from __future__ import annotations

import copy
from typing import Any, Unpack

import numpy as np

try:
    import torch
    from transformers.models.bert.modeling_bert import (
        BertAttention,
        BertLayer,
        BertSelfAttention,
    )
    from transformers.models.gpt2.modeling_gpt2 import GPT2Attention, GPT2Block
    from transformers.models.llama.modeling_llama import (
        LlamaAttention,
        LlamaDecoderLayer,
        LlamaRotaryEmbedding,
    )
except ImportError as _exc:  # the optional extra is not installed
    raise ImportError(
        "verified_attn.adapters.hf needs transformers and PyTorch; install the extra with "
        "pip install 'verified-attn[hf]' (transformers >= 5, torch >= 2.4)"
    ) from _exc

from verified_attn.adapters.torch import (
    BoxOptions,
    HeadParameters,
    box_settings,
    head_parameters,
    module_oracle,
    readout_vector,
    tensor_array,
)
from verified_attn.errors import InvalidArgument, ModelClassMismatch
from verified_attn.oracle import Oracle

__all__ = ["HeadParameters", "attention_oracle", "attention_parameters"]

_ATTENTION = (GPT2Attention, BertSelfAttention, LlamaAttention)
# Blocks, and where their attention module is, for the message that refuses to map them.
_BLOCKS: dict[type, str] = {
    GPT2Block: "block.attn",
    BertAttention: "block.self",
    BertLayer: "block.attention.self",
    LlamaDecoderLayer: "block.self_attn",
}
_ROTARY = (LlamaAttention, LlamaDecoderLayer)


def _check_module(module: Any) -> int:
    """The hidden size E of a module this adapter can query; else InvalidArgument."""
    if not isinstance(module, (*_ATTENTION, *_BLOCKS)):
        names = ", ".join(c.__name__ for c in (*_ATTENTION, *_BLOCKS))
        raise InvalidArgument(
            f"module must be a transformers attention module or block ({names}), got "
            f"{type(module).__name__}; for torch.nn.MultiheadAttention use "
            "verified_attn.adapters.torch.attention_oracle, for other sequence modules "
            "verified_attn.adapters.torch.sequence_oracle"
        )
    if isinstance(module, GPT2Attention) and module.is_cross_attention:
        raise InvalidArgument(
            "module is a cross-attention GPT2Attention (it attends to encoder states, not to "
            "the query sequence); only self-attention is a single sequence's function"
        )
    if isinstance(module, BertAttention) and module.is_cross_attention:
        raise InvalidArgument(
            "module is a cross-attention BertAttention (it attends to encoder states, not to "
            "the query sequence); only self-attention is a single sequence's function"
        )
    if isinstance(module, BertSelfAttention) and module.all_head_size != module.config.hidden_size:
        raise InvalidArgument(
            f"module has all_head_size = {module.all_head_size} != hidden_size = "
            f"{module.config.hidden_size}: its output is not a sequence of the input's width"
        )
    return int(_config(module).hidden_size)


def _config(module: Any) -> Any:
    if isinstance(module, GPT2Block):
        return module.attn.config
    if isinstance(module, BertAttention):
        return module.self.config
    if isinstance(module, BertLayer):
        return module.attention.self.config
    if isinstance(module, LlamaDecoderLayer):
        return module.self_attn.config
    return module.config


def _sdpa_if_unset(box: torch.nn.Module) -> None:
    """A module built from a bare config has no attention implementation (it would fall back
    to eager, with a warning). Its private copy uses "sdpa", what a model loaded by
    transformers uses by default, and float64-accurate in float64 (Llama's eager path rounds
    the softmax to float32 whatever the module's dtype)."""
    for m in box.modules():
        config = getattr(m, "config", None)
        if config is not None and getattr(config, "_attn_implementation", "") is None:
            config._attn_implementation = "sdpa"


def _float32_softmax(module: Any) -> bool:
    """Whether the module's attention computes scores or softmax in float32 whatever its
    dtype: GPT-2's eager path with reorder_and_upcast_attn, Llama's eager path."""
    impl = _config(module)._attn_implementation
    if impl != "eager":
        return False
    if isinstance(module, (GPT2Attention, GPT2Block)):
        attn = module if isinstance(module, GPT2Attention) else module.attn
        return bool(attn.reorder_and_upcast_attn)
    return isinstance(module, _ROTARY)


# ---------------------------------------------------------------------------------------
# The weight mapping.
# ---------------------------------------------------------------------------------------


def attention_parameters(
    module: Any, readout: Any, *, ignore_rotary: bool = False
) -> HeadParameters:
    """Per-head ``(W, c, v)`` and ``beta`` of a transformers attention module read out by
    ``readout``, in float64 from the stored weights.

    For head k with query rows ``W_q, b_q``, the rows ``W_k``, ``W_v, b_v`` of the key/value
    head it reads, the columns ``W_o`` of the output projection (``nn.Linear`` form; GPT-2's
    ``Conv1D`` weights are transposed first; BERT has none: ``W_o = I``) and the module's
    score scale ``s``: ``W = s W_k^T W_q``, ``c = s W_k^T b_q``, ``v = W_v^T W_o^T r`` and
    ``beta = r^T (sum_k W_o b_v + b_o) + b``, so that the score of token i is
    ``x_i^T (W x_N + c)`` as in :func:`verified_attn.models.attention_output`. The key bias
    adds the same ``s b_k^T q_N`` to every score, which the softmax cancels.

    ``LlamaAttention``: rotary embeddings make the scores depend on positions, which no
    ``(W, c)`` captures, so this raises :class:`ModelClassMismatch`; with
    ``ignore_rotary=True`` it maps the weights as if every rotation were the identity (the
    module's answer when it is given ``cos = 1, sin = 0``). Other modules have no rotary
    embeddings and ignore the flag.

    >>> from transformers import LlamaConfig
    >>> config = LlamaConfig(hidden_size=8, num_attention_heads=4, num_key_value_heads=2,
    ...                      intermediate_size=16, num_hidden_layers=1)
    >>> llama = LlamaAttention(config, layer_idx=0)
    >>> attention_parameters(llama, np.ones(8))
    Traceback (most recent call last):
    ...
    verified_attn.errors.ModelClassMismatch: LlamaAttention applies rotary position embeddings: ...
    >>> p = attention_parameters(llama, np.ones(8), ignore_rotary=True)
    >>> p.heads, p.W.shape, p.beta
    (4, (4, 8, 8), 0.0)
    """
    E = _check_module(module)
    if not isinstance(ignore_rotary, bool):
        raise InvalidArgument(f"ignore_rotary must be True or False, got {ignore_rotary!r}")
    for block, where in _BLOCKS.items():
        if isinstance(module, block):
            raise ModelClassMismatch(
                f"{type(module).__name__} is a whole block: its normalisation, residual "
                "connection and feed-forward layers around the attention are outside the "
                f"single-head model class (docs/theory.md); map its attention ({where}) "
                "instead"
            )
    if isinstance(module, LlamaAttention) and not ignore_rotary:
        raise ModelClassMismatch(
            "LlamaAttention applies rotary position embeddings: the score of token i "
            "depends on its position relative to N, not only on the tokens, so no (W, c) of "
            "the model class reproduces it (docs/theory.md); "
            "attention_parameters(..., ignore_rotary=True) maps the weights as if every "
            "rotation were the identity"
        )
    r, b = readout_vector(readout, E)
    proj: dict[str, Any]
    if isinstance(module, GPT2Attention):
        H = Hkv = int(module.num_heads)
        hd = int(module.head_dim)
        # Conv1D stores (in, out) and computes x @ weight + bias: transpose to y = W x + b.
        Wc = tensor_array(module.c_attn.weight, (E, 3 * E)).T
        bc = tensor_array(module.c_attn.bias, (3 * E,))
        proj = {
            "Wq": Wc[:E],
            "bq": bc[:E],
            "Wk": Wc[E : 2 * E],
            "Wv": Wc[2 * E :],
            "bv": bc[2 * E :],
            "Wo": tensor_array(module.c_proj.weight, (E, E)).T,
            "bo": tensor_array(module.c_proj.bias, (E,)),
        }
    elif isinstance(module, BertSelfAttention):
        H = Hkv = int(module.num_attention_heads)
        hd = int(module.attention_head_size)
        proj = {
            "Wq": tensor_array(module.query.weight, (E, E)),
            "bq": tensor_array(module.query.bias, (E,)),
            "Wk": tensor_array(module.key.weight, (E, E)),
            "Wv": tensor_array(module.value.weight, (E, E)),
            "bv": tensor_array(module.value.bias, (E,)),
            "Wo": np.eye(E),  # the context is the output: no projection in this module
            "bo": np.zeros(E),
        }
    else:
        config = module.config
        H, Hkv, hd = (
            int(config.num_attention_heads),
            int(config.num_key_value_heads),
            int(module.head_dim),
        )
        proj = {
            "Wq": tensor_array(module.q_proj.weight, (H * hd, E)),
            "bq": tensor_array(module.q_proj.bias, (H * hd,)),
            "Wk": tensor_array(module.k_proj.weight, (Hkv * hd, E)),
            "Wv": tensor_array(module.v_proj.weight, (Hkv * hd, E)),
            "bv": tensor_array(module.v_proj.bias, (Hkv * hd,)),
            "Wo": tensor_array(module.o_proj.weight, (E, H * hd)),
            "bo": tensor_array(module.o_proj.bias, (E,)),
        }
    scale = float(module.scaling)
    return head_parameters(**proj, heads=H, kv_heads=Hkv, head_dim=hd, scale=scale, r=r, b=b)


# ---------------------------------------------------------------------------------------
# Oracles.
# ---------------------------------------------------------------------------------------


def attention_oracle(module: Any, readout: Any, **options: Unpack[BoxOptions]) -> Oracle:
    """A float-mode :class:`Oracle` answering ``r^T module(X)_N + b`` for (N, E) queries.

    ``module``: a ``GPT2Attention``, ``BertSelfAttention`` or ``LlamaAttention`` (any head
    count), or one of the blocks ``GPT2Block``, ``BertAttention``, ``BertLayer``,
    ``LlamaDecoderLayer``. The adapter calls it the way its model would: a (B, N, E) batch,
    no mask, no cache, and for Llama the rotary ``position_embeddings`` of positions
    ``0 .. N-1`` from a ``LlamaRotaryEmbedding`` of the module's config. ``readout``: a
    vector of length E or an ``nn.Linear(E, 1)`` (its bias goes into beta).

    The oracle declares ``model_class="single-head-affine"`` (these modules have biases);
    :func:`verified_attn.learn_single_head` learns a one-head attention module and raises
    ModelClassMismatch on everything else (several heads: use
    :func:`verified_attn.learn_multi_head` with ``heads=``; rotary embeddings and blocks
    are outside the class). ``rtol`` (the agreement asked by verification) defaults to 1e-6
    in float64 and 1e-4 in float32, as in :mod:`verified_attn.adapters.torch`; also 1e-4
    for a module whose ``"eager"`` attention rounds to float32 whatever its dtype (Llama;
    GPT-2 with ``reorder_and_upcast_attn``). ``parameter_rtol`` (the loosest tolerance a
    learner may state for the parameters it decodes) defaults to rtol in float64 and to
    1e-3 wherever rtol defaults to 1e-4, by the same rule as
    :func:`verified_attn.adapters.torch.attention_oracle` (``float_tolerances``).

    >>> from transformers import BertConfig
    >>> _ = torch.manual_seed(0)
    >>> bert = BertSelfAttention(BertConfig(hidden_size=3, num_attention_heads=1))
    >>> oracle = attention_oracle(bert, [1.0, 0.0, 0.0])
    >>> oracle.query(np.zeros((2, 3))) == float(bert.value.bias[0].detach()), oracle.model_class
    (True, 'single-head-affine')
    """
    E = _check_module(module)
    settings = box_settings("attention_oracle", options, single=_float32_softmax(module))
    rotary = (
        LlamaRotaryEmbedding(config=copy.deepcopy(_config(module)))
        if isinstance(module, _ROTARY)
        else None
    )

    def forward(m: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
        if rotary is None:
            out = m(x)
        else:
            positions = torch.arange(x.shape[1])[None, :]
            out = m(x, position_embeddings=rotary(x, positions))
        # Attention modules return (output, weights); blocks return the output.
        return out[0] if isinstance(out, tuple) else out

    batch_first = True  # transformers modules are batch-first
    return module_oracle(
        module,
        forward,
        E,
        batch_first,
        readout,
        settings,
        model_class="single-head-affine",
        prepare=_sdpa_if_unset,
    )
