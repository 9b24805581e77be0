"""Adapters that turn other libraries' models into :class:`~verified_attn.Oracle` objects.

>>> import verified_attn.adapters
>>> verified_attn.adapters.__all__     # nothing re-exported: import the adapter module itself
[]

Each adapter lives in its own module and imports its library only when that module is
imported, so ``import verified_attn`` (and this package) never pulls in an optional extra:

- :mod:`verified_attn.adapters.torch` — ``torch.nn.MultiheadAttention`` and other PyTorch
  sequence modules as float-mode oracles (extra ``verified-attn[torch]``).
- :mod:`verified_attn.adapters.torch_block` — an attention block (one-head
  ``nn.MultiheadAttention``, ``nn.Linear``, ReLU, ``nn.Linear``) as a float oracle of the
  biased one-layer Transformer class, and its weights as a ``OneLayerTransformer``.
- :mod:`verified_attn.adapters.hf` — HuggingFace ``transformers`` attention modules
  (``GPT2Attention``, ``BertSelfAttention``, ``LlamaAttention``) and their blocks (extra
  ``verified-attn[hf]``).
"""

from __future__ import annotations

__all__: list[str] = []
