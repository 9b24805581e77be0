"""A learned single- or multi-head result as a PyTorch module: :meth:`Recovery.to_torch`.

>>> import numpy as np, torch
>>> import verified_attn as va
>>> from verified_attn.adapters.torch import attention_parameters
>>> model = va.SingleHeadAttention([[1, -2], [3, 0]], [2, -1], c=[1, 0], beta=3)
>>> rec = va.learn_single_head(va.Oracle(model, "exact"), affine=True)
>>> mha, readout = rec.to_torch()
>>> X = torch.tensor([[[0.5, -1.0], [1.0, 2.0]]], dtype=torch.float64)
>>> y = readout(mha(X, X, X, need_weights=False)[0][:, -1]).item()
>>> abs(y - float(model.evaluate(X[0].numpy(), "exact"))) < 1e-12
True
>>> p = attention_parameters(mha, readout)        # the mapping back gives the parameters
>>> bool(np.allclose(p.W[0], [[1, -2], [3, 0]]) and np.isclose(p.beta, 3))
True

The module is ``nn.MultiheadAttention(E, H, batch_first=True)`` in float64 (E = d), used
as self-attention and read out at the last position by ``readout``, an ``nn.Linear(E, 1)``
(as :func:`verified_attn.adapters.torch.attention_oracle` reads a module). Exact results
are rounded to float64, certified balls give their midpoints. Each head of an
``nn.MultiheadAttention`` has head size E / H, so its W_h has rank at most E / H: a result
whose heads need more (e.g. two full-rank 2 x 2 heads) has no such module and raises
:class:`~verified_attn.errors.InvalidArgument`. Torch is imported here, on use: without it
an :class:`ImportError` names the extra ``pip install 'verified-attn[torch]'``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from verified_attn.errors import InvalidArgument

__all__ = ["to_torch"]

#: A head whose singular values past E / H exceed this fraction of its largest has a rank
#: that no head of the module can hold.
RANK_RTOL = 1e-9


def _torch() -> Any:
    try:
        import torch
    except ImportError as exc:  # the optional extra is not installed
        raise ImportError(
            "Recovery.to_torch needs PyTorch; install the extra with "
            "pip install 'verified-attn[torch]'"
        ) from exc
    return torch


def _heads(rec: Any) -> tuple[list[tuple[np.ndarray, np.ndarray, np.ndarray]], float]:
    """The result's heads as float64 (W, v, c) and its output bias."""
    from verified_attn.recovery import MultiHeadRecovery, SingleHeadRecovery, as_float

    p = {k: as_float(v) for k, v in rec.parameters.items()}
    if isinstance(rec, MultiHeadRecovery):
        raw = p["heads"]
    elif isinstance(rec, SingleHeadRecovery):
        raw = [(p["W"], p["v"], p["c"]) if "c" in p else (p["W"], p["v"])]
    else:
        raise InvalidArgument(
            f"to_torch needs a single- or multi-head result, got a {rec.kind} result"
        )
    heads = []
    for h in raw:
        W = np.atleast_2d(np.asarray(h[0], dtype=np.float64))
        v = np.asarray(h[1], dtype=np.float64).reshape(-1)
        c = np.asarray(h[2], dtype=np.float64).reshape(-1) if len(h) > 2 else np.zeros(len(v))
        heads.append((W, v, c))
    beta = p.get("beta")
    return heads, 0.0 if beta is None else float(beta)


def _factor(W: np.ndarray, c: np.ndarray, hd: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    """``(K, Q)`` with ``K^T Q = [W | c]``, K of ``hd`` rows (orthonormal: the key rows)."""
    E = W.shape[0]
    M = np.hstack([W, c[:, None]])
    if hd == E:
        return np.eye(E), M
    U, s, _ = np.linalg.svd(M)
    if s.size > hd and s[hd] > RANK_RTOL * max(s[0], 1e-300):
        raise InvalidArgument(
            f"head {k} has rank {int((s > RANK_RTOL * s[0]).sum())} > E / H = {hd}: no "
            f"nn.MultiheadAttention({E}, {E // hd}) computes it (each head's W has rank at "
            "most E / H)"
        )
    K = U[:, :hd].T
    return K, K @ M


def to_torch(rec: Any) -> tuple[Any, Any]:
    """``(nn.MultiheadAttention, nn.Linear(E, 1))`` computing the learned model (float64).

    For the sequence X (N x E) the learned model's output is
    ``readout(mha(X, X, X)[0][-1])``; :func:`verified_attn.adapters.torch.attention_parameters`
    maps the pair back to the parameters. Raises
    :class:`~verified_attn.errors.InvalidArgument` for other kinds, and for heads whose
    rank exceeds E / H. The caller's torch random state is left as it was.
    """
    torch = _torch()
    heads, beta = _heads(rec)
    H, E = len(heads), heads[0][0].shape[0]
    if E % H:
        raise InvalidArgument(
            f"{H} heads in d = {E}: nn.MultiheadAttention needs H to divide E = d"
        )
    hd = E // H
    scale = math.sqrt(hd)
    Wq, bq, Wk, Wv = (np.zeros((E, E)), np.zeros(E), np.zeros((E, E)), np.zeros((E, E)))
    r = np.zeros(E)
    for k, (W, v, c) in enumerate(heads):
        rows = slice(k * hd, (k + 1) * hd)
        K, Q = _factor(W, c, hd, k)
        # score = x_i^T Wk^T (Wq x_N + bq) / sqrt(hd) = x_i^T (W x_N + c)
        Wk[rows], Wq[rows], bq[rows] = K, scale * Q[:, :E], scale * Q[:, E]
        # the head's value output read by r: r_block^T Wv_block x = v^T x
        r[k * hd] = 1.0
        Wv[k * hd] = v
    # Every weight is overwritten below; fork_rng keeps the caller's torch RNG where it was
    # (the modules' random initialisation would otherwise shift every later seeded draw).
    with torch.random.fork_rng(devices=[]):
        mha = torch.nn.MultiheadAttention(E, H, batch_first=True, dtype=torch.float64)
        readout = torch.nn.Linear(E, 1, dtype=torch.float64)
    with torch.no_grad():
        mha.in_proj_weight.copy_(torch.from_numpy(np.vstack([Wq, Wk, Wv])))
        mha.in_proj_bias.copy_(torch.from_numpy(np.concatenate([bq, np.zeros(2 * E)])))
        mha.out_proj.weight.copy_(torch.eye(E, dtype=torch.float64))
        mha.out_proj.bias.zero_()
        readout.weight.copy_(torch.from_numpy(r)[None])
        readout.bias.fill_(beta)
    mha.eval()
    return mha, readout
