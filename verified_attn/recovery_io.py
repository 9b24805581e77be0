"""A result as JSON-ready data and back: :meth:`Recovery.to_dict`, :func:`load_recovery`.

>>> import json, verified_attn as va
>>> rec = va.learn_single_head(va.Oracle(va.SingleHeadAttention([[1, 2], [0, -1]], [3, 0]), "exact"))
>>> data = json.loads(json.dumps(rec.to_dict()))
>>> data["parameters"]
{'v': ['3', '0'], 'W': [['1', '2'], ['0', '-1']]}
>>> again = va.Recovery.from_dict(data)
>>> again.to_dict() == rec.to_dict() and again.model.W == rec.model.W
True
>>> again
SingleHeadRecovery(single-head, d=2, exact, queries 6/6, verified)

Numbers: exact rationals as "p/q" strings ("p" for an integer), floats as JSON numbers
(Python's shortest repr, which reads back bit for bit), arb balls as ``{"mid": "p/q",
"rad": "p/q"}`` (both exact dyadic rationals: a reloaded ball contains the stored one),
other SymPy numbers as ``{"sympy": srepr}``. Shapes: vectors (``v``, ``c``, ``v_eff``,
``w_o``) are flat lists, matrices (``W``, ``A``) lists of rows, ``heads`` a list of
``[W, v]`` or ``[W, v, c]``; enclosures keep their arrays' shapes.
"""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path
from typing import Any

import flint
import numpy as np
import sympy

from verified_attn.errors import CertificateError, InvalidArgument, VerifiedAttnError
from verified_attn.recovery import Recovery, as_float
from verified_attn.serialize import load_rational, short_repr
from verified_attn.verification import Verification

__all__ = ["load_recovery", "recovery_from_dict", "recovery_repr", "recovery_to_dict"]

#: The value of the ``"format"`` key of a stored result.
FORMAT = "verified-attn-result/1"
_VECTORS = frozenset({"v", "c", "v_eff", "w_o"})
_MATRICES = frozenset({"W", "A"})


def _rational_text(q: Any) -> str:
    q = Fraction(int(q.p), int(q.q)) if isinstance(q, flint.fmpq | sympy.Rational) else Fraction(q)
    return str(q.numerator) if q.denominator == 1 else f"{q.numerator}/{q.denominator}"


def encode(x: Any) -> Any:
    """One value as JSON-ready data, arrays keeping their shape.

    >>> import flint
    >>> encode([Fraction(1, 2), 0.25, flint.arb(1)])
    ['1/2', 0.25, {'mid': '1', 'rad': '0'}]
    """
    from verified_attn.arithmetic import fraction_from_arb

    if x is None or isinstance(x, bool | str):
        return x
    if isinstance(x, sympy.MatrixBase):
        return [[encode(e) for e in row] for row in x.tolist()]
    if isinstance(x, np.ndarray):
        return encode(x.item()) if x.ndim == 0 else [encode(e) for e in x]
    if isinstance(x, list | tuple):
        return [encode(e) for e in x]
    if isinstance(x, dict):
        return {str(k): encode(v) for k, v in x.items()}
    if isinstance(x, int | np.integer):
        return int(x)
    if isinstance(x, float | np.floating):
        return float(x)
    if isinstance(x, flint.arb):
        mid, rad = fraction_from_arb(x.mid()), fraction_from_arb(x.rad())
        return {"mid": _rational_text(mid), "rad": _rational_text(rad)}
    if isinstance(x, Fraction | flint.fmpq) or (isinstance(x, sympy.Basic) and x.is_Rational):
        return _rational_text(x)
    if isinstance(x, sympy.Basic):
        return {"sympy": sympy.srepr(x)}
    raise InvalidArgument(f"cannot store a {type(x).__name__} in a result: {short_repr(x)}")


def _encode_parameter(name: str, val: Any, part: int | None = None) -> Any:
    """A parameter with the shape its name fixes (a 1 x 1 W is still a matrix)."""
    if name == "heads":
        return [[_encode_parameter("head", x, i) for i, x in enumerate(h)] for h in val]
    # A head's part after W is a vector (v, c), or a d x e matrix V_h (multi-head Transformer).
    wide = isinstance(val, sympy.MatrixBase | np.ndarray) and np.ndim(val) == 2 and val.shape[1] > 1
    vector = name in _VECTORS or (part is not None and part > 0 and not wide)
    if vector and isinstance(val, sympy.MatrixBase):
        return [encode(e) for e in val]
    if vector and isinstance(val, np.ndarray):
        return [encode(e) for e in val.ravel()]
    return encode(val)


def _encode_network(net: Any) -> Any:
    if net is None:
        return None
    out = {
        "linear": encode(list(net.linear)),
        "neurons": [[encode(list(n)), encode(g)] for n, g in net.neurons],
    }
    if hasattr(net, "constant"):  # a biased network: neurons are [[n_j, c_j], gamma_j]
        out["constant"] = encode(net.constant)
    return out


def recovery_to_dict(rec: Recovery) -> dict[str, Any]:
    """:meth:`Recovery.to_dict`: everything but the certificate data, JSON-ready."""
    out: dict[str, Any] = {
        "format": FORMAT,
        "kind": rec.kind,
        "theorem": rec.theorem,
        "arithmetic": rec.arithmetic,
        "precision": rec.precision,
        "exact": rec.exact,
        "verified": rec.verified,
        "parameters": {k: _encode_parameter(k, v) for k, v in rec.parameters.items()},
        "queries": {
            "learning": rec.queries,
            "verification": rec.verification_queries,
            "by_phase": dict(rec.queries_by_phase),
            "verification_phases": list(rec.verification_phases),
            "bound": rec.bound,
            "bound_terms": dict(rec.bound_terms),
        },
        "parameter_count": rec.parameter_count,
        "seed": rec.seed,
        "tokens_sent": rec.tokens_sent,
        "max_length": rec.max_length,
        "rounds": rec.rounds,
        "verification": None if rec.verification is None else encode(rec.verification.to_dict()),
        "enclosures": None if rec.enclosures is None else encode(rec.enclosures),
        "assumptions": list(rec.assumptions),
        "notes": list(rec.notes),
        "error_figures": rec.error_figures.to_dict(),
    }
    for name in rec.extra_fields:
        val = getattr(rec, name)
        out[name] = _encode_network(val) if name == "network" else encode(val)
    return out


def recovery_repr(rec: Recovery) -> str:
    """``Kind(kind, d=.., [H=..|rank=..,] arithmetic, queries q/bound, verified)``."""
    model = rec.learned_model
    parts = [rec.kind, f"d={getattr(model, 'd', '?')}"]
    if "heads" in rec.parameters:
        parts.append(f"H={len(rec.parameters['heads'])}")
    if hasattr(rec, "rank"):
        parts.append(f"rank={rec.rank}")
    if "c" in rec.parameters:
        parts.append("affine")
    arith = rec.arithmetic + (f"@{rec.precision}" if rec.precision else "")
    if rec.arithmetic == "certified":
        arith += " (exact)" if rec.exact else " (balls)"
    parts.append(arith)
    parts.append(f"queries {rec.queries}/{rec.bound}")
    parts.append("verified" if rec.verified else "NOT verified")
    return f"{type(rec).__name__}({', '.join(parts)})"


# ---------------------------------------------------------------------------------------
# Reading back.
# ---------------------------------------------------------------------------------------


class _Bad(Exception):
    """A malformed field (turned into InvalidArgument with the field's path)."""


def _field(data: Any, path: str, types: Any = None) -> Any:
    cur = data
    for key in path.split("."):
        if not isinstance(cur, dict) or key not in cur:
            raise _Bad(f"missing field {path!r}")
        cur = cur[key]
    if types is not None and (
        not isinstance(cur, types) or isinstance(cur, bool) != (types is bool)
    ):
        raise _Bad(f"field {path!r} has the wrong type ({type(cur).__name__})")
    return cur


def _scalar(x: Any) -> Any:
    """A stored number: "p/q" -> Fraction, {"mid", "rad"} -> arb, floats and ints kept."""
    if isinstance(x, str):
        return load_rational(x)
    if isinstance(x, dict) and set(x) == {"mid", "rad"}:
        mid, rad = load_rational(x["mid"]), load_rational(x["rad"])
        return _ball(mid, rad)
    if isinstance(x, dict) and set(x) == {"sympy"}:
        from verified_attn.serialize import load_number

        return load_number(x)
    if (isinstance(x, int | float) and not isinstance(x, bool)) or x is None:
        return x
    raise _Bad(f"not a stored number: {short_repr(x)}")


def _dyadic(q: Fraction) -> Any:
    k = q.denominator.bit_length() - 1
    if q.denominator != 1 << k:
        raise _Bad(f"a ball's midpoint and radius are dyadic rationals, got {q}")
    return flint.arf((q.numerator, -k))


def _ball(mid: Fraction, rad: Fraction) -> Any:
    """The ball mid +/- rad: the midpoint exactly, the radius exactly where flint can hold
    it (30-bit mantissa), else rounded up: never a smaller ball than the stored one."""
    from verified_attn.arithmetic import fraction_from_arb

    if rad < 0:
        raise _Bad(f"negative radius {rad}")
    old = flint.ctx.prec
    try:
        flint.ctx.prec = max(64, mid.numerator.bit_length() + 8)
        m = _dyadic(mid)
        wide = flint.arb(m, _dyadic(rad))
        n, k = rad.numerator, rad.denominator.bit_length() - 1
        shift = n.bit_length() - 30
        if rad and (shift <= 0 or (n >> shift) << shift == n):
            # flint rounds a radius up by one unit of its 30-bit mantissa: ask one unit less
            M = n >> shift if shift > 0 else n << -shift
            for man, exp in ((M - 1, shift - k), (2 * M - 1, shift - k - 1)):
                ball = flint.arb(m, flint.arf((man, exp)))
                got_mid, got_rad = fraction_from_arb(ball.mid()), fraction_from_arb(ball.rad())
                if got_mid == mid and got_rad == rad:
                    return ball
        return wide
    finally:
        flint.ctx.prec = old


def _array(obj: Any) -> Any:
    """Nested lists of stored numbers -> a numpy array (float64 if all floats)."""
    if not isinstance(obj, list):
        return _scalar(obj)
    flat = _nested(obj)
    if all(isinstance(x, float) for x in np.ravel(np.asarray(flat, dtype=object))):
        return np.array(flat, dtype=np.float64)
    out = np.empty(np.shape(np.asarray(flat, dtype=object)), dtype=object)
    for ix in np.ndindex(out.shape):
        item: Any = flat
        for i in ix:
            item = item[i]
        out[ix] = item
    return out


def _nested(obj: Any) -> Any:
    return [_nested(x) for x in obj] if isinstance(obj, list) else _scalar(obj)


def _parameter(obj: Any, exact: bool, vector: bool) -> Any:
    if exact:
        if not isinstance(obj, list):
            return sympy.sympify(_scalar(obj))
        rows = [[x] for x in obj] if vector and not any(isinstance(x, list) for x in obj) else obj
        if not all(isinstance(r, list) for r in rows):
            raise _Bad(f"a matrix must be a list of rows, got {short_repr(obj)}")
        return sympy.Matrix([[sympy.sympify(_scalar(x)) for x in r] for r in rows])
    return _array(obj)


def _parameters(obj: Any, exact: bool) -> dict[str, Any]:
    if not isinstance(obj, dict) or not obj:
        raise _Bad("field 'parameters' must be a non-empty JSON object")
    out: dict[str, Any] = {}
    for name, val in obj.items():
        if name == "heads":
            if not isinstance(val, list) or not all(isinstance(h, list) for h in val):
                raise _Bad("field 'parameters.heads' must be a list of [W, v] or [W, v, c]")
            out[name] = [tuple(_parameter(x, exact, i > 0) for i, x in enumerate(h)) for h in val]
        else:
            out[name] = _parameter(val, exact, name in _VECTORS)
    return out


def _enclosures(obj: Any) -> Any:
    if obj is None:
        return None
    if not isinstance(obj, dict):
        raise _Bad("field 'enclosures' must be a JSON object or null")
    out: dict[str, Any] = {}
    for name, val in obj.items():
        if isinstance(val, dict) and set(val) == {"lower", "upper"}:
            out[name] = {}
            for side, arr in val.items():
                got = _array(arr)
                out[name][side] = (
                    got
                    if isinstance(got, np.ndarray)
                    else np.array(got, dtype=np.float64 if isinstance(got, float) else object)
                )
        else:
            out[name] = _array(val)
    return out


def _verification(obj: Any) -> Verification | None:
    if obj is None:
        return None
    from verified_attn.noisy.verification import LabelVerification, ToleranceVerification

    if not isinstance(obj, dict):
        raise _Bad("field 'verification' must be a JSON object or null")
    common = dict(
        count=_field(obj, "count", int),
        seed=_field(obj, "seed", int),
        lengths=tuple(_field(obj, "lengths", list)),
        precision=obj.get("precision"),
        arithmetic=_field(obj, "arithmetic", str),
        rtol=obj.get("rtol"),
        max_gap=obj.get("max_gap"),
        max_ratio=obj.get("max_ratio"),
        bias=obj.get("bias"),
        floor=obj.get("floor"),
        unit_roundoff=obj.get("unit_roundoff"),
        allowance=obj.get("allowance"),
        tightest=obj.get("tightest"),
        lengths_sent=tuple(_field(obj, "lengths_used", list)),
    )
    rule = obj.get("rule")
    if rule == "within-tolerance":
        return ToleranceVerification(
            **common, tolerance=_field(obj, "tolerance"), repeats=_field(obj, "repeats", int)
        )
    if rule == "certain-signs":
        return LabelVerification(**common, decided=_field(obj, "decided", int))
    return Verification(**common)


def _network(obj: Any) -> Any:
    from verified_attn.transformer.relu import ReluNetwork

    if obj is None:
        return None
    if "constant" in obj:
        return _biased_network(obj, tuple(_exact(x) for x in _field(obj, "linear", list)))
    linear = tuple(load_rational(x) for x in _field(obj, "linear", list))
    neurons = []
    for item in _field(obj, "neurons", list):
        if not isinstance(item, list) or len(item) != 2 or not isinstance(item[0], list):
            raise _Bad(f"a neuron must be [n, gamma], got {short_repr(item)}")
        neurons.append((tuple(load_rational(x) for x in item[0]), load_rational(item[1])))
    return ReluNetwork(linear, tuple(neurons))


def _biased_network(obj: Any, linear: tuple[Any, ...]) -> Any:
    from verified_attn.transformer.relu_biased import BiasedReluNetwork

    neurons = []
    for item in _field(obj, "neurons", list):
        ok = isinstance(item, list) and len(item) == 2 and isinstance(item[0], list)
        if not ok or len(item[0]) != 2 or not isinstance(item[0][0], list):
            raise _Bad(f"a biased neuron must be [[n, c], gamma], got {short_repr(item)}")
        n = tuple(_exact(x) for x in item[0][0])
        neurons.append(((n, _exact(item[0][1])), _exact(item[1])))
    return BiasedReluNetwork(_exact(obj["constant"]), linear, tuple(neurons))


def _exact(x: Any) -> Fraction:
    """A stored exact rational: "p/q" or a JSON integer."""
    return Fraction(x) if isinstance(x, int) and not isinstance(x, bool) else load_rational(x)


def _extra(name: str, val: Any) -> Any:
    if name == "network":
        return _network(val)
    if name == "tolerance" and isinstance(val, str):
        return load_rational(val)
    return val


def _model(cls: type[Recovery], params: dict[str, Any], exact: bool) -> Any:
    """The learned model, rebuilt from the parameters as the learners build it."""
    from verified_attn import models

    p = params if exact else {k: as_float(v) for k, v in params.items()}
    if "heads" in p and cls.kind == "transformer":  # the multi-head Transformer: A = I
        heads = [tuple(h) for h in p["heads"]]
        m = np.shape(p["w_o"])[0]
        return models.OneLayerTransformer.from_heads(
            heads, np.eye(m, dtype=int), p["w_o"], a=p["a"], b=p["b"]
        )
    if "heads" in p:
        heads = [tuple(h) for h in p["heads"]]
        return models.MultiHeadAttention(heads, beta=p.get("beta"))
    if cls.kind == "transformer":
        return models.OneLayerTransformer(
            p["W"], sympy.eye(p["W"].shape[0]), p["A"], p["w_o"], a=p.get("a"), b=p.get("b")
        )
    if cls.kind == "relu-ffn":
        return models.ReluFFN(p["A"], p["w_o"])
    kwargs = {"c": p["c"], "beta": p["beta"]} if "c" in p else {}
    return models.SingleHeadAttention(p["W"], p["v"], **kwargs)


def _kinds() -> dict[str, type[Recovery]]:
    out: dict[str, type[Recovery]] = {}
    todo: list[type[Recovery]] = [Recovery]
    while todo:
        c = todo.pop()
        out[c.kind] = c
        todo.extend(c.__subclasses__())
    return out


def recovery_from_dict(data: Any, cls: type[Recovery] = Recovery) -> Recovery:
    """:meth:`Recovery.from_dict`; bad input raises InvalidArgument naming the problem."""
    if not isinstance(data, dict):
        raise InvalidArgument(f"a stored result must be a JSON object, got {short_repr(data)}")
    try:
        return _from_dict(data, cls)
    except InvalidArgument:
        raise
    except (_Bad, CertificateError) as exc:
        raise InvalidArgument(f"not a stored verified-attn result: {exc}") from exc
    except (VerifiedAttnError, ValueError, TypeError, KeyError, IndexError, AttributeError) as exc:
        raise InvalidArgument(
            f"not a stored verified-attn result: {type(exc).__name__}: {short_repr(str(exc))}"
        ) from exc


def _from_dict(data: dict[str, Any], cls: type[Recovery]) -> Recovery:
    if data.get("format") != FORMAT:
        raise _Bad(f"field 'format' must be {FORMAT!r}, got {short_repr(data.get('format'))}")
    kind = _field(data, "kind", str)
    kinds = _kinds()
    if kind not in kinds or kind == Recovery.kind:
        raise _Bad(f"unknown kind {short_repr(kind)} (known: {sorted(set(kinds) - {'recovery'})})")
    target = kinds[kind]
    if not issubclass(target, cls):
        raise InvalidArgument(f"this is a {kind} result, not a {cls.kind} result")
    exact = _field(data, "exact", bool)
    params = _parameters(_field(data, "parameters", dict), exact)
    q = _field(data, "queries", dict)
    fields: dict[str, Any] = dict(
        theorem=_field(data, "theorem", str),
        parameters=params,
        learned_model=_model(target, params, exact),
        arithmetic=_field(data, "arithmetic", str),
        precision=data.get("precision"),
        exact=exact,
        verified=_field(data, "verified", bool),
        queries=_field(q, "learning", int),
        verification_queries=_field(q, "verification", int),
        queries_by_phase=dict(_field(q, "by_phase", dict)),
        verification_phases=tuple(_field(q, "verification_phases", list)),
        bound=_field(q, "bound", int),
        bound_terms=dict(q.get("bound_terms") or {}),
        parameter_count=_field(data, "parameter_count", int),
        seed=_field(data, "seed", int),
        tokens_sent=_field(data, "tokens_sent", int),
        max_length=_field(data, "max_length", int),
        rounds=_field(data, "rounds", int),
        verification=_verification(data.get("verification")),
        enclosures=_enclosures(data.get("enclosures")),
        assumptions=list(_field(data, "assumptions", list)),
        notes=list(_field(data, "notes", list)),
    )
    for name in target.extra_fields:
        # A single head's estimate is absent from results written without one.
        optional = name.startswith("parameter_error_estimate") and name not in data
        fields[name] = None if optional else _extra(name, _field(data, name))
    return target(**fields)


def load_recovery(path: str | Path) -> Recovery:
    """A result written as JSON (``json.dump(rec.to_dict(), f)`` or ``learn --json``).

    >>> import json, tempfile, verified_attn as va
    >>> rec = va.learn_single_head(va.Oracle(va.SingleHeadAttention([[2]], [3]), "exact"))
    >>> path = tempfile.mkdtemp() + "/rec.json"
    >>> _ = open(path, "w").write(json.dumps(rec.to_dict()))
    >>> va.load_recovery(path).model.evaluate([[1], [2]], "exact") == rec.model.evaluate([[1], [2]], "exact")
    True

    The loaded result has no certificate data (keep the certificate file for that).
    Raises :class:`~verified_attn.errors.InvalidArgument` for a file that cannot be read
    or is not a stored result.
    """
    if not isinstance(path, str | Path):
        raise InvalidArgument(f"path must be a str or Path, got {type(path).__name__}")
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise InvalidArgument(f"cannot read the result {str(path)!r}: {exc}") from exc
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise InvalidArgument(f"{str(path)!r} is not JSON: {short_repr(str(exc))}") from exc
    return recovery_from_dict(data)
