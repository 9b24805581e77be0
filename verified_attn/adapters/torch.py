"""PyTorch attention modules as black-box oracles (optional extra ``verified-attn[torch]``).

>>> import torch
>>> import numpy as np
>>> import verified_attn as va
>>> from verified_attn.adapters.torch import attention_oracle, attention_parameters
>>> _ = torch.manual_seed(0)
>>> mha = torch.nn.MultiheadAttention(4, num_heads=1, batch_first=True)
>>> readout = torch.nn.Linear(4, 1)
>>> rec = va.learn_single_head(attention_oracle(mha, readout))
>>> rec.queries, rec.verification_queries          # d^2 + 2d + 1 learning queries, d = 4
(25, 8)
>>> truth = attention_parameters(mha, readout)
>>> bool(np.abs(rec.W - truth.W[0]).max() <= 1e-9 * np.abs(truth.W[0]).max())
True
>>> attention_oracle(torch.nn.Linear(4, 4), readout)
Traceback (most recent call last):
...
verified_attn.errors.InvalidArgument: module must be a torch.nn.MultiheadAttention, got Linear; wrap other sequence modules with sequence_oracle

A ``torch.nn.MultiheadAttention`` with ``H`` heads, used as self-attention
(query = key = value = X) and read out at the last position by a vector ``r`` (and a bias
``b``, if the readout is an ``nn.Linear(E, 1)``), computes ``y(X) = r^T out_N + b``. Each
head is one affine single head (docs/theory.md, The models); :func:`attention_parameters` gives the
per-head ``(W, c, v)`` and the shared ``beta`` from the module's weights, for checking.

Arithmetic: ``dtype="float64"`` evaluates a float64 copy of the module (the weights are
widened exactly; the module passed in is never changed), ``dtype="float32"`` a float32
copy. The readout is applied in float64 to the module's output in both modes, so the
float32 figures measure the module's own float32 arithmetic.

This module imports torch when it is imported and raises an :class:`ImportError` naming
the extra if torch is missing; ``import verified_attn`` never imports it.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple, TypedDict, Unpack

import numpy as np

try:
    import torch
except ImportError as _exc:  # the optional extra is not installed
    raise ImportError(
        "verified_attn.adapters.torch needs PyTorch; install the extra with "
        "pip install 'verified-attn[torch]' (torch >= 2.4)"
    ) from _exc

from verified_attn.errors import InvalidArgument
from verified_attn.models import SingleHeadAttention
from verified_attn.oracle import Oracle

__all__ = [
    "Box",
    "BoxOptions",
    "HeadParameters",
    "attention_oracle",
    "attention_parameters",
    "batch_oracle",
    "box_settings",
    "float_tolerances",
    "head_parameters",
    "module_oracle",
    "readout_vector",
    "sequence_oracle",
    "tensor_array",
    "torch_dtype",
]

# The parameter tolerance a float32 box declares by default (attention_oracle's docstring).
_FLOAT32_PARAMETER_RTOL = 1e-3
_DTYPES = {"float64": torch.float64, "float32": torch.float32}


@dataclass(frozen=True)
class HeadParameters:
    """The per-head parameters of an attention module read out by ``r`` (docs/theory.md, The models).

    ``W`` has shape (H, E, E), ``c`` and ``v`` (H, E); ``beta`` is the one output bias of
    the whole module (only the sum over heads is identifiable, so it is not split).

    >>> p = HeadParameters(np.zeros((1, 2, 2)), np.zeros((1, 2)), np.ones((1, 2)), 0.5)
    >>> p.heads, p.evaluate_batch(np.ones((1, 3, 2))).tolist()
    (1, [2.5])
    """

    W: np.ndarray
    c: np.ndarray
    v: np.ndarray
    beta: float

    @property
    def heads(self) -> int:
        return int(self.W.shape[0])

    def model(self) -> SingleHeadAttention:
        """The single head as an affine :class:`SingleHeadAttention` (H = 1 only).

        Floats become the binary rationals they are, so the model evaluates exactly these
        parameters.
        """
        if self.heads != 1:
            raise InvalidArgument(
                f"model() needs a single head; these parameters have {self.heads} heads "
                "(use W, c, v per head, or evaluate_batch)"
            )
        return SingleHeadAttention(self.W[0], self.v[0], c=self.c[0], beta=self.beta)

    def evaluate_batch(self, Xs: np.ndarray) -> np.ndarray:
        """``sum_h softmax(X (W_h x_N + c_h))^T X v_h + beta`` in float64, (B, N, E) -> (B,)."""
        Xs = np.asarray(Xs, dtype=np.float64)
        if Xs.ndim != 3 or Xs.shape[1] < 1 or Xs.shape[2] != self.W.shape[1]:
            raise InvalidArgument(
                f"Xs must have shape (B, N >= 1, E = {self.W.shape[1]}); got {Xs.shape}"
            )
        total = np.full(Xs.shape[0], float(self.beta))
        for W, c, v in zip(self.W, self.c, self.v, strict=True):
            shift = Xs[:, -1, :] @ W.T + c
            scores = np.einsum("bnd,bd->bn", Xs, shift)
            scores -= scores.max(axis=1, keepdims=True)
            weights = np.exp(scores)
            total += (weights * (Xs @ v)).sum(axis=1) / weights.sum(axis=1)
        return total


# ---------------------------------------------------------------------------------------
# Argument checks.
# ---------------------------------------------------------------------------------------


def _check_mha(module: Any) -> int:
    """The embedding size E of a MultiheadAttention we can read; else InvalidArgument."""
    if not isinstance(module, torch.nn.MultiheadAttention):
        raise InvalidArgument(
            f"module must be a torch.nn.MultiheadAttention, got {type(module).__name__}; "
            "wrap other sequence modules with sequence_oracle"
        )
    E = int(module.embed_dim)
    if module.kdim != E or module.vdim != E:
        raise InvalidArgument(
            f"module must have kdim = vdim = embed_dim = {E} (self-attention on one "
            f"sequence); got kdim = {module.kdim}, vdim = {module.vdim}"
        )
    return E


def float_tolerances(
    single: bool, rtol: float | None, parameter_rtol: float | None
) -> tuple[float, float | None]:
    """The tolerances a module's box declares (the PyTorch and HuggingFace adapters' one
    rule): ``rtol`` default 1e-6, or 1e-4 where the module computes in float32 (``single``);
    ``parameter_rtol`` default None (the box's rtol), or 1e-3 (at least rtol) in float32.
    Given values are kept.

    >>> float_tolerances(False, None, None), float_tolerances(True, None, None)
    ((1e-06, None), (0.0001, 0.001))
    >>> float_tolerances(True, 1e-2, None), float_tolerances(True, None, 2e-4)
    ((0.01, 0.01), (0.0001, 0.0002))
    """
    if rtol is None:
        rtol = 1e-4 if single else 1e-6
    if parameter_rtol is None and single:
        parameter_rtol = max(_FLOAT32_PARAMETER_RTOL, rtol)
    return rtol, parameter_rtol


def torch_dtype(dtype: Any) -> torch.dtype:
    """``torch.float64`` or ``torch.float32`` from a name or a dtype (InvalidArgument else)."""
    if isinstance(dtype, torch.dtype) and dtype in _DTYPES.values():
        return dtype
    if isinstance(dtype, str) and dtype in _DTYPES:
        return _DTYPES[dtype]
    raise InvalidArgument(f"dtype must be 'float64' or 'float32', got {dtype!r}")


class BoxOptions(TypedDict, total=False):
    """The keywords every module adapter takes for its box: ``dtype`` ("float64", the
    default, or "float32"), the oracle's ``budget`` and ``record``, and the tolerances
    ``rtol`` and ``parameter_rtol`` it declares (:func:`attention_oracle`)."""

    dtype: str | torch.dtype
    budget: int | None
    record: bool | None
    rtol: float | None
    parameter_rtol: float | None


class Box(NamedTuple):
    """:class:`BoxOptions` read: the torch dtype and the tolerances in force."""

    dtype: torch.dtype
    budget: int | None
    record: bool | None
    rtol: float
    parameter_rtol: float | None


def box_settings(adapter: str, options: Mapping[str, Any], *, single: bool = False) -> Box:
    """``options`` (:class:`BoxOptions` of ``adapter``) read: the dtype checked, the
    tolerances by :func:`float_tolerances` (``single``: the module computes in float32
    whatever its dtype); a keyword the adapter does not take is refused as Python would.

    >>> box_settings("f", {"dtype": "float32", "budget": 9})
    Box(dtype=torch.float32, budget=9, record=None, rtol=0.0001, parameter_rtol=0.001)
    >>> box_settings("f", {"rtl": 1e-3})
    Traceback (most recent call last):
    ...
    TypeError: f() got an unexpected keyword argument 'rtl'
    """
    for key in options:
        if key not in BoxOptions.__optional_keys__:
            raise TypeError(f"{adapter}() got an unexpected keyword argument {key!r}")
    dt = torch_dtype(options.get("dtype", "float64"))
    rtol, parameter_rtol = float_tolerances(
        dt == torch.float32 or single, options.get("rtol"), options.get("parameter_rtol")
    )
    return Box(dt, options.get("budget"), options.get("record"), rtol, parameter_rtol)


def readout_vector(readout: Any, E: int) -> tuple[np.ndarray, float]:
    """(r, b) in float64 from a vector of length E or an ``nn.Linear(E, 1)``."""
    if isinstance(readout, torch.nn.Linear):
        if readout.in_features != E or readout.out_features != 1:
            raise InvalidArgument(
                f"readout must be an nn.Linear({E}, 1); got nn.Linear({readout.in_features}, "
                f"{readout.out_features})"
            )
        r = readout.weight.detach().to("cpu", torch.float64).numpy().reshape(E).copy()
        b = 0.0 if readout.bias is None else float(readout.bias.detach().double().item())
    else:
        if isinstance(readout, torch.nn.Module):
            raise InvalidArgument(
                f"readout must be a vector of length {E} or an nn.Linear({E}, 1); got "
                f"{type(readout).__name__}"
            )
        if torch.is_tensor(readout):
            readout = readout.detach().to("cpu", torch.float64).numpy()
        try:
            r = np.array(readout, dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise InvalidArgument(
                f"readout must be a real vector of length {E}, got {type(readout).__name__}"
            ) from exc
        if r.shape != (E,):
            raise InvalidArgument(f"readout must have shape ({E},); got shape {r.shape}")
        b = 0.0
    if not (np.all(np.isfinite(r)) and math.isfinite(b)):
        raise InvalidArgument("readout has a non-finite entry (NaN or inf)")
    return r, b


def tensor_array(t: torch.Tensor | None, shape: tuple[int, ...]) -> np.ndarray:
    """A weight as a float64 array of ``shape`` (zeros for an absent bias)."""
    if t is None:  # bias=False: the bias is zero
        return np.zeros(shape)
    return t.detach().to("cpu", torch.float64).numpy().reshape(shape).copy()


# ---------------------------------------------------------------------------------------
# The weight mapping.
# ---------------------------------------------------------------------------------------


def attention_parameters(module: Any, readout: Any) -> HeadParameters:
    """Per-head ``(W, c, v)`` and ``beta`` of a MultiheadAttention read out by ``readout``.

    With head size ``h = E / H`` and head ``k``'s slices ``W_q, W_k, W_v`` (rows) and
    ``W_o`` (columns), in float64 from the stored weights:
    ``W = W_k^T W_q / sqrt(h)``, ``c = W_k^T b_q / sqrt(h)``, ``v = W_v^T W_o^T r`` and
    ``beta = r^T (W_o b_v + b_o) + b``. The key bias b_k adds ``b_k^T q_N / sqrt(h)`` to
    every score alike, which the softmax cancels.

    >>> _ = torch.manual_seed(1)
    >>> mha = torch.nn.MultiheadAttention(6, num_heads=2, bias=False)
    >>> p = attention_parameters(mha, np.ones(6))
    >>> p.W.shape, p.c.shape, p.v.shape, p.beta
    ((2, 6, 6), (2, 6), (2, 6), 0.0)
    """
    E = _check_mha(module)
    if module.bias_k is not None or module.bias_v is not None or module.add_zero_attn:
        raise InvalidArgument(
            "module has add_bias_kv or add_zero_attn: it attends to an extra learned or zero "
            "token as well, which is outside the single-head model class (docs/theory.md, The models)"
        )
    r, b = readout_vector(readout, E)
    H = int(module.num_heads)
    hd = E // H
    Win = tensor_array(module.in_proj_weight, (3 * E, E))
    bin_ = tensor_array(module.in_proj_bias, (3 * E,))
    Wo = tensor_array(module.out_proj.weight, (E, E))
    bo = tensor_array(module.out_proj.bias, (E,))
    return head_parameters(
        Wq=Win[:E],
        bq=bin_[:E],
        Wk=Win[E : 2 * E],
        Wv=Win[2 * E :],
        bv=bin_[2 * E :],
        Wo=Wo,
        bo=bo,
        heads=H,
        kv_heads=H,
        head_dim=hd,
        scale=1.0 / math.sqrt(hd),
        r=r,
        b=b,
    )


def head_parameters(
    *,
    Wq: np.ndarray,
    bq: np.ndarray,
    Wk: np.ndarray,
    Wv: np.ndarray,
    bv: np.ndarray,
    Wo: np.ndarray,
    bo: np.ndarray,
    heads: int,
    kv_heads: int,
    head_dim: int,
    scale: float,
    r: np.ndarray,
    b: float,
) -> HeadParameters:
    """The mapping shared by every adapter, from weights in ``nn.Linear`` form (``y = W x + b``).

    ``Wq`` has ``heads * head_dim`` rows, ``Wk`` and ``Wv`` ``kv_heads * head_dim``; query
    head k reads key/value head ``k // (heads // kv_heads)`` (grouped-query attention, as
    ``repeat_kv`` in transformers; ``kv_heads = heads`` is ordinary multi-head attention).
    ``scale`` multiplies the scores (1/sqrt(head_dim) usually). ``Wo`` maps the concatenated
    heads to the output; the key bias is not needed (it cancels in the softmax).
    """
    group = heads // kv_heads
    Ws, cs, vs, bvs = [], [], [], []
    for k in range(heads):
        q_rows = slice(k * head_dim, (k + 1) * head_dim)
        g = k // group
        kv_rows = slice(g * head_dim, (g + 1) * head_dim)
        Ws.append(scale * (Wk[kv_rows].T @ Wq[q_rows]))
        cs.append(scale * (Wk[kv_rows].T @ bq[q_rows]))
        vs.append(Wv[kv_rows].T @ (Wo[:, q_rows].T @ r))
        bvs.append(bv[kv_rows])
    # Softmax weights sum to 1, so each head passes its value bias through unchanged.
    beta = float(r @ (Wo @ np.concatenate(bvs) + bo) + b)
    return HeadParameters(np.stack(Ws), np.stack(cs), np.stack(vs), beta)


# ---------------------------------------------------------------------------------------
# Oracles.
# ---------------------------------------------------------------------------------------


def attention_oracle(module: Any, readout: Any, **options: Unpack[BoxOptions]) -> Oracle:
    """A float-mode :class:`Oracle` answering ``r^T MHA(X, X, X)_N + b`` for (N, E) queries.

    ``rtol`` is the relative agreement the learner's verification asks of this box. Default:
    1e-6 in float64; 1e-4 in float32, whose answers carry ~6e-8 relative rounding that the
    decoding amplifies by 1/(t^2 |u^T v| y(1 - y)) (measured verification gaps 1e-6 to 1e-5
    at d <= 32 with PyTorch's default initialisation; a two-head module misses by ~1e-2).
    ``parameter_rtol`` is the loosest tolerance a learner may state for the parameters it
    decodes (relative to max(1, largest parameter)). Default: rtol in float64; 1e-3 in
    float32, where the multi-head decoding amplifies the answers' rounding by the design's
    conditioning: first-order parameter error estimates 8e-5 to 4e-3 measured at E = 8,
    H = 2 (the actual errors 3 to 100 x smaller). 10 x rtol, not more. The predictions are
    held to rtol on their own: by the fresh sequences, and off them by the multi-head
    learner's first-order prediction bound on 64 more (docs/multi_head.md, The prediction
    bound), since parameters to 2.1e-4 were measured to give predictions off by 2.0e-4.

    ``module``: a ``torch.nn.MultiheadAttention`` (any head count, bias on or off,
    ``batch_first`` either way, kdim = vdim = embed_dim). ``readout``: a vector of length E
    or an ``nn.Linear(E, 1)`` (its bias goes into beta). The oracle declares
    ``model_class="single-head-affine"``; a module with more than one head is not in that
    class, and :func:`verified_attn.learn_single_head` says so with ModelClassMismatch.

    >>> _ = torch.manual_seed(0)
    >>> mha = torch.nn.MultiheadAttention(3, 1, bias=False)
    >>> oracle = attention_oracle(mha, [1.0, 0.0, 0.0])
    >>> oracle.query(np.zeros((2, 3))), oracle.queries, oracle.model_class
    (0.0, 1, 'single-head-affine')
    """
    E = _check_mha(module)
    settings = box_settings("attention_oracle", options)

    first = bool(module.batch_first)

    def forward(m: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
        # Only token N's row is read: one query row, not N (the float design's sequences
        # reach 257 tokens, where the N x N attention does N times the work); the same
        # function, to a unit of rounding.
        q = x[:, -1:] if first else x[-1:]
        return m(q, x, x, need_weights=False)[0]

    return module_oracle(
        module,
        forward,
        E,
        bool(module.batch_first),
        readout,
        settings,
        model_class="single-head-affine",
    )


def sequence_oracle(
    module: Any,
    readout: Any,
    *,
    d: int,
    batch_first: bool | None = None,
    dtype: str | torch.dtype = "float64",
    budget: int | None = None,
    record: bool | None = None,
    model_class: str | None = "single-head-affine",
) -> Oracle:
    """An oracle for any sequence-to-sequence module ``module(x)``, read out at the last
    position: for checking whether a module is in a model class at all.

    ``module(x)`` must map a (B, N, d) tensor (or (N, B, d) if not ``batch_first``; the
    default is the module's own ``batch_first`` attribute) to one of the same shape, e.g.
    ``nn.TransformerEncoderLayer``. ``model_class`` is what the oracle declares to learners
    (default: the affine single head).

    >>> _ = torch.manual_seed(0)
    >>> layer = torch.nn.TransformerEncoderLayer(4, 1, dim_feedforward=8, batch_first=True)
    >>> oracle = sequence_oracle(layer, np.ones(4), d=4, batch_first=True)
    >>> import verified_attn as va
    >>> va.learn_single_head(oracle)
    Traceback (most recent call last):
    ...
    verified_attn.errors.ModelClassMismatch: ...
    """
    if not isinstance(module, torch.nn.Module):
        raise InvalidArgument(f"module must be a torch.nn.Module, got {type(module).__name__}")
    if isinstance(d, bool) or not isinstance(d, int) or d < 1:
        raise InvalidArgument(f"d must be an int >= 1, got {d!r}")
    if batch_first is None:
        batch_first = getattr(module, "batch_first", None)
        if not isinstance(batch_first, bool):
            raise InvalidArgument(
                f"batch_first must be given: {type(module).__name__} has no batch_first attribute"
            )
    if not isinstance(batch_first, bool):
        raise InvalidArgument(f"batch_first must be True or False, got {batch_first!r}")

    def forward(m: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
        return m(x)

    # The box declares rtol 1e-6 in either dtype and no parameter tolerance of its own.
    settings = Box(torch_dtype(dtype), budget, record, 1e-6, None)
    return module_oracle(
        module, forward, d, batch_first, readout, settings, model_class=model_class
    )


def module_oracle(
    module: torch.nn.Module,
    forward: Callable[[torch.nn.Module, torch.Tensor], torch.Tensor],
    E: int,
    batch_first: bool,
    readout: Any,
    settings: Box,
    *,
    model_class: str | None,
    prepare: Callable[[torch.nn.Module], None] | None = None,
) -> Oracle:
    """A float oracle over a private eval-mode copy of ``module`` read out at the last
    position (shared by the PyTorch and HuggingFace adapters), with ``settings``."""
    dtype = settings.dtype
    r, b = readout_vector(readout, E)
    # A private copy in eval mode: dropout off, the caller's module (and its dtype) untouched,
    # and later edits to it do not change the oracle's answers mid-run.
    box = copy.deepcopy(module).to(device="cpu", dtype=dtype).eval()
    if prepare is not None:  # an adapter's settings on the private copy (never the caller's)
        prepare(box)

    def batch_fn(Xs: np.ndarray) -> np.ndarray:
        x = torch.from_numpy(np.ascontiguousarray(Xs)).to(dtype)
        if not batch_first:
            x = x.transpose(0, 1)
        with torch.no_grad():
            out = forward(box, x)
        if not batch_first:
            out = out.transpose(0, 1)
        # Every position, or only the last (a forward that asks for token N's row alone).
        if tuple(out.shape) not in (Xs.shape, (Xs.shape[0], 1, Xs.shape[2])):
            raise ValueError(f"module output has shape {tuple(out.shape)}, expected {Xs.shape}")
        last = out[:, -1, :].to(torch.float64).numpy()
        return last @ r + b

    limits = (settings.budget, settings.record)
    rtol, parameter_rtol = settings.rtol, settings.parameter_rtol
    return batch_oracle(batch_fn, E, dtype, limits, model_class, rtol, parameter_rtol)


def batch_oracle(
    batch_fn: Callable[[np.ndarray], np.ndarray],
    E: int,
    dtype: torch.dtype,
    limits: tuple[int | None, bool | None],
    model_class: str | None,
    rtol: float,
    parameter_rtol: float | None,
) -> Oracle:
    """A float :class:`Oracle` over ``batch_fn`` ((B, N, E) -> (B,)), a torch computation
    in ``dtype``; ``limits`` are the oracle's budget and record setting.

    >>> o = batch_oracle(lambda Xs: Xs[:, -1, 0], 2, torch.float32, (None, None), None, 1e-4, None)
    >>> o.query(np.array([[3.0, 1.0]])), o.arithmetic.unit_roundoff == 2.0**-24
    (3.0, True)
    """
    budget, record = limits

    def fn(X: np.ndarray) -> float:
        return float(batch_fn(X[None])[0])

    return Oracle.from_callable(
        fn,
        d=E,
        batch_fn=batch_fn,
        budget=budget,
        record=record,
        model_class=model_class,
        rtol=rtol,
        parameter_rtol=parameter_rtol,
        # The module's own arithmetic: its answers' rounding on a large bias is in its ulps.
        unit_roundoff=min(rtol, float(torch.finfo(dtype).eps) / 2),
    )
