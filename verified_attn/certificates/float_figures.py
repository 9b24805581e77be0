"""A float certificate's stated figures in bits (``result.error_figures``), recomputed.

>>> import verified_attn as va
>>> from verified_attn.certificates.multi_head import verify
>>> model = va.MultiHeadAttention([([[1, 0], [0, -1]], [1, 2])])
>>> data = va.learn_multi_head(va.Oracle(model, "float"), heads=1).certificate()
>>> sorted(data["result"]["error_figures"])
['parameter_bits', 'parameter_error', 'prediction_bits', 'prediction_error']
>>> data["result"]["error_figures"]["parameter_bits"] = {"float": "0x1.0p+6"}   # 64 bits
>>> verify(data)
Traceback (most recent call last):
...
verified_attn.errors.CertificateError: result.error_figures.parameter_bits 64 is not -log2 of result.error_figures.parameter_error ...

The figures (:class:`verified_attn.precision.ErrorFigures`): ``parameter_error``, the
stated first-order parameter estimate relative to the largest entry of the claimed heads
(:func:`verified_attn.precision.stated_relative_error` of ``result.parameter_error_estimate``,
which the float fit's check has held to the answers), and ``prediction_error``, the
verification's largest relative gap, recomputed here from the stored fresh answers and the
claimed model under the agreement rule. Each stated error must be the recomputed one (the
parameter figure to 1e-12 relative, a function of stored numbers; the gap within a factor
2 either way, since a prediction's last bit may differ between evaluation orders), and
each stated bits figure ``-log2`` of its stated error to 1e-9 bits (None for an error of
0 or none). A certificate without the section states no figures and says so.
"""

from __future__ import annotations

import math
from typing import Any

from verified_attn.arithmetic import Arithmetic
from verified_attn.certificates import kernel
from verified_attn.errors import CertificateError
from verified_attn.precision import bits, stated_relative_error
from verified_attn.verification import agree, float_floor, fresh_sequences

__all__ = ["check_error_figures", "max_gap"]

#: How far a stated bits figure may be from -log2 of its stated error (float rounding only).
BITS_SLACK = 1e-9


def max_gap(data: dict[str, Any], arith: Arithmetic, d: int, predict: Any, bias: float) -> float:
    """The verification's largest relative gap under the agreement rule, from the stored
    fresh answers (the section already checked by :func:`kernel.check_verification`)."""
    count = kernel.as_int(kernel.get(data, "verification.count"), "verification.count")
    seed = kernel.as_int(kernel.get(data, "verification.seed"), "verification.seed")
    lengths = tuple(int(n) for n in kernel.get(data, "verification.lengths"))
    answers = kernel.numbers(
        kernel.get(data, "verification.answers"), "verification.answers", arith, count
    )
    floor = float_floor(answers, bias)
    worst = 0.0
    for X, y in zip(fresh_sequences(d, count, seed, lengths), answers, strict=True):
        worst = max(worst, agree(arith, y, predict(X), bias=bias, floor=floor)[1])
    return worst


def _read(raw: dict[str, Any], name: str, arith: Arithmetic) -> float | None:
    value = raw.get(name)
    if value is None:
        return None
    x = float(kernel.number(value, f"result.error_figures.{name}", arith))
    if not x >= 0:
        raise CertificateError(f"result.error_figures.{name} must be >= 0, got {x!r}")
    return x


def _bits_match(raw: dict[str, Any], what: str, error: float | None, arith: Arithmetic) -> None:
    """The stated bits of ``what`` must be -log2 of its stated error (None for 0 or none)."""
    told = _read(raw, f"{what}_bits", arith)
    want = bits(error)
    if want is None or math.isinf(want):
        if told is not None:
            raise CertificateError(
                f"result.error_figures.{what}_bits is {told:g}, but {what}_error is {error}: "
                "no finite bits figure"
            )
        return
    if told is None or not abs(told - want) <= BITS_SLACK:
        raise CertificateError(
            f"result.error_figures.{what}_bits {'missing' if told is None else f'{told:g}'} "
            "is not -log2 of "
            f"result.error_figures.{what}_error {error:.3e} ({want:.4f} bits)"
        )


def check_error_figures(
    data: dict[str, Any],
    arith: Arithmetic,
    heads: list[tuple[Any, ...]],
    beta: float,
    gap: float | None,
) -> str:
    """Re-check ``result.error_figures`` of a float certificate against ``heads`` (the
    claimed heads as float64 arrays), ``beta`` and ``gap`` (the recomputed verification
    gap, None if not verified); the summary line."""
    result = kernel.get(data, "result")
    if "error_figures" not in result:
        return "figures in bits: none stated"
    raw = result["error_figures"]
    if not isinstance(raw, dict):
        raise CertificateError("result.error_figures must be an object")
    param = _read(raw, "parameter_error", arith)
    est = result.get("parameter_error_estimate")
    want = (
        None
        if est is None
        else stated_relative_error(
            float(kernel.number(est, "result.parameter_error_estimate", arith)), heads, beta
        )
    )
    if (param is None) != (want is None) or (
        param is not None and want is not None and not abs(param - want) <= 1e-12 * want
    ):
        raise CertificateError(
            f"result.error_figures.parameter_error {param!r} is not the stated estimate "
            f"relative to the largest entry of the claimed heads ({want!r})"
        )
    pred = _read(raw, "prediction_error", arith)
    if (pred is None) != (gap is None) or (
        pred is not None and gap is not None and not (gap / 2 <= pred <= 2 * gap)
    ):
        raise CertificateError(
            f"result.error_figures.prediction_error {pred!r} is not within a factor 2 of the "
            f"verification's largest relative gap {gap!r} (recomputed)"
        )
    _bits_match(raw, "parameter", param, arith)
    _bits_match(raw, "prediction", pred, arith)
    pb, qb = bits(param), bits(pred)
    return (
        "figures in bits (recomputed): parameters "
        + (
            "not stated"
            if pb is None
            else f"{param:.2e} relative to the largest entry ({pb:.1f} bits)"
        )
        + ", predictions "
        + ("not verified" if qb is None else f"max relative gap {pred:.2e} ({qb:.1f} bits)")
    )
