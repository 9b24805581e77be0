"""Re-check a Theorem 4.1 certificate from its stored answers alone: no learner, no oracle.

>>> import verified_attn as va
>>> from verified_attn.exact_recovery.certificate import verify
>>> model = va.SingleHeadAttention([[1, -2], [3, 0]], [0, 5])
>>> data = va.learn_single_head(va.Oracle(model, "exact")).certificate()
>>> print(verify(data).summary[-1])
verification: 8 fresh queries (those seed 0 determines) agree with the claimed model
>>> data["result"]["parameters"]["W"][0][0] = {"rational": "2/1"}
>>> verify(data)
Traceback (most recent call last):
...
verified_attn.errors.CertificateError: result W[0][0]: claimed 2, the stored answers give 1

What is re-checked, in order (THEORY §3):

1. structure and counts: every field present with the right shape; the number of stored
   answers is d^2 + d (affine d^2 + 2d + 1) and, with the re-asked probes, equals the
   claimed learning count; every probe scale is 16^-n and the n add up to the re-asks;
2. the design: U is invertible and every u_k^T v is nonzero for v from the stored answers
   (certainly nonzero, in certified mode);
3. decoding: :func:`~verified_attn.exact_recovery.learner.decode_single_head` re-run on
   the stored answers in the stored arithmetic and precision, compared with the claim:

   - ``exact``: ``==``;
   - ``certified``: a claimed rational must lie in its recomputed ball *and* be the only
     rational there with denominator at most D (D from the ball's width), so any rational
     head with such denominators that gave these answers is the claimed one; a claimed ball
     must contain the recomputed ball (exact endpoint comparison), which proves the claim;
   - ``float``: agreement to :data:`FLOAT_RTOL` relative to the parameter's largest entry
     (for W and c, which come out of logits with absolute rounding noise, at least 1).
     The same operations run in the same order, but the final product U^{-T} M may go
     through another BLAS (summation order, fused multiply-add) and ``log`` through
     another libm, each a few ulps; 1e-12 leaves room for that, and no more;
4. verification: the stored fresh queries are the ones the seed determines, and every
   stored answer agrees with the claimed model (exact ``==``, certified overlap, float
   relative 1e-6 as in the learner).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import flint
import numpy as np
import sympy

from verified_attn.arithmetic import (
    Arithmetic,
    arb_bounds,
    fmpq_matrix,
    get_arithmetic,
)
from verified_attn.certificate import CertificateCheck
from verified_attn.errors import CertificateError, VerifiedAttnError
from verified_attn.exact_recovery.learner import (
    THEOREM,
    SingleHeadDesign,
    decode_single_head,
    query_bound,
)
from verified_attn.models import SingleHeadAttention, attention_output
from verified_attn.probing import RESCALE_FACTOR, answers_agree, verification_queries
from verified_attn.serialize import load_number, load_rational

__all__ = ["FLOAT_RTOL", "verify"]

#: Relative agreement required between claimed and re-decoded float parameters.
FLOAT_RTOL = 1e-12

_KINDS = {"exact": ("rational", "sympy"), "certified": ("arb",), "float": ("float",)}
_PHASES = ("beta", "v", "W", "rescale", "verify")


@dataclass
class _Parsed:
    d: int
    affine: bool
    arith: Arithmetic
    seed: int
    design: SingleHeadDesign
    exact: bool
    queries: dict[str, Any]


def verify(data: dict[str, Any]) -> CertificateCheck:
    """Re-check a ``thm-4.1`` certificate dict; CertificateError naming what fails."""
    cert = _parse_header(data)
    lines = [
        f"Thm 4.1 single head, d = {cert.d}{' (affine)' if cert.affine else ''}, "
        f"arithmetic {cert.arith.name}"
        + (f" at {cert.arith.precision} bits" if cert.arith.precision else "")
        + f", seed {cert.seed}",
    ]
    lines.append(_check_counts(data, cert))
    with cert.arith.context():
        answers = _load_answers(data, cert)
        lines.append(_check_design(cert, answers))
        try:
            decoded = decode_single_head(cert.arith, cert.design, answers)
        except VerifiedAttnError as exc:
            raise CertificateError(f"re-decoding the stored answers failed: {exc}") from exc
        claimed = _load_claimed(data, cert)
        lines.append(_compare(cert, claimed, decoded))
        lines.append(_check_verification(data, cert, claimed))
    versions = data.get("versions")
    if isinstance(versions, dict):
        lines.append("written with " + ", ".join(f"{k} {v}" for k, v in sorted(versions.items())))
        # Keep the verification line last: it is the headline result.
        lines[-1], lines[-2] = lines[-2], lines[-1]
    return CertificateCheck(ok=True, theorem=THEOREM, summary=lines)


# ---------------------------------------------------------------------------------------
# Structure.
# ---------------------------------------------------------------------------------------


def _get(obj: Any, key: str, path: str) -> Any:
    if not isinstance(obj, dict):
        raise CertificateError(f"{path} must be a JSON object, got {type(obj).__name__}")
    if key not in obj:
        raise CertificateError(f"missing field {path}.{key}" if path else f"missing field {key}")
    return obj[key]


def _int(x: Any, path: str, *, minimum: int = 0) -> int:
    if isinstance(x, bool) or not isinstance(x, int) or x < minimum:
        raise CertificateError(f"{path} must be an int >= {minimum}, got {x!r}")
    return x


def _list(x: Any, path: str, length: int) -> list[Any]:
    if not isinstance(x, list):
        raise CertificateError(f"{path} must be a list, got {type(x).__name__}")
    if len(x) != length:
        raise CertificateError(f"{path} has {len(x)} entries, expected {length}")
    return x


def _matrix(x: Any, path: str, rows: int, cols: int) -> list[list[Any]]:
    return [_list(row, f"{path}[{i}]", cols) for i, row in enumerate(_list(x, path, rows))]


def _rational(s: Any, path: str) -> Fraction:
    if not isinstance(s, str):
        raise CertificateError(f"{path} must be a rational 'p/q', got {s!r}")
    try:
        return load_rational(s)
    except CertificateError as exc:
        raise CertificateError(f"{path}: {exc}") from exc


def _number(obj: Any, path: str, kinds: tuple[str, ...], arith: Arithmetic) -> Any:
    """One stored number, of a kind this arithmetic produces, as that arithmetic's number."""
    if not isinstance(obj, dict) or len(obj) != 1:
        raise CertificateError(f"{path}: malformed number {obj!r}")
    (kind,) = obj
    if kind not in kinds:
        raise CertificateError(
            f"{path}: a {kind!r} number in a {arith.name} certificate (expected "
            + " or ".join(repr(k) for k in kinds)
            + ")"
        )
    try:
        x = load_number(obj)
    except CertificateError as exc:
        raise CertificateError(f"{path}: {exc}") from exc
    except Exception as exc:  # an srepr naming something outside the whitelist, etc.
        raise CertificateError(f"{path}: malformed number {obj!r}: {exc}") from exc
    if isinstance(x, Fraction) and arith.name == "exact":
        return sympy.Rational(x.numerator, x.denominator)
    if isinstance(x, flint.arb) and not x.is_finite():
        raise CertificateError(f"{path}: ball {x} is not finite")
    if isinstance(x, float) and not math.isfinite(x):
        raise CertificateError(f"{path}: {x} is not finite")
    return x


def _parse_header(data: dict[str, Any]) -> _Parsed:
    d = _int(_get(data, "d", ""), "d", minimum=1)
    affine = _get(data, "affine", "")
    if not isinstance(affine, bool):
        raise CertificateError(f"affine must be true or false, got {affine!r}")
    name = _get(data, "arithmetic", "")
    if name not in _KINDS:
        raise CertificateError(f"arithmetic must be exact, certified or float, got {name!r}")
    precision = _get(data, "precision", "")
    if name == "certified":
        precision = _int(precision, "precision", minimum=32)
    elif precision is not None:
        raise CertificateError(f"precision must be null in {name} arithmetic, got {precision!r}")
    try:
        arith = get_arithmetic(name, precision)
    except VerifiedAttnError as exc:
        raise CertificateError(f"precision: {exc}") from exc
    seed = _get(data, "seed", "")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise CertificateError(f"seed must be an int, got {seed!r}")
    raw = _get(data, "design", "")
    U = [
        [_rational(q, f"design.U[{i}][{k}]") for k, q in enumerate(row)]
        for i, row in enumerate(_matrix(_get(raw, "U", "design"), "design.U", d, d))
    ]
    scales = [
        [_rational(q, f"design.scales[{k}][{j}]") for j, q in enumerate(row)]
        for k, row in enumerate(_matrix(_get(raw, "scales", "design"), "design.scales", d, d))
    ]
    c_raw = _get(raw, "c_scales", "design")
    c_scales = None
    if affine:
        c_scales = [
            _rational(q, f"design.c_scales[{k}]")
            for k, q in enumerate(_list(c_raw, "design.c_scales", d))
        ]
    elif c_raw is not None:
        raise CertificateError("design.c_scales must be null for the non-affine model")
    result = _get(data, "result", "")
    exact = _get(result, "exact", "result")
    if not isinstance(exact, bool):
        raise CertificateError(f"result.exact must be true or false, got {exact!r}")
    if name == "exact" and not exact:
        raise CertificateError("result.exact is false in exact arithmetic, which is always exact")
    if name == "float" and exact:
        raise CertificateError("result.exact is true in float arithmetic, which cannot be exact")
    queries = _get(data, "queries", "")
    if not isinstance(queries, dict):
        raise CertificateError(f"queries must be a JSON object, got {type(queries).__name__}")
    design = SingleHeadDesign(d, affine, U, scales, c_scales)
    return _Parsed(d, affine, arith, seed, design, exact, queries)


# ---------------------------------------------------------------------------------------
# 1. Counts.
# ---------------------------------------------------------------------------------------


def _rescales(t: Fraction, path: str) -> int:
    """n with t = 16^-n: the learner starts every probe at t = 1 and re-asks at t / 16."""
    n, q = 0, t
    while q < 1:
        q /= RESCALE_FACTOR
        n += 1
    if q != 1:
        raise CertificateError(
            f"{path} = {t} is not 16^-n: the learner starts every probe at t = 1 and divides "
            "t by 16 at each re-ask"
        )
    return n


def _check_counts(data: dict[str, Any], cert: _Parsed) -> str:
    d, affine, q = cert.d, cert.affine, cert.queries
    learning = _int(_get(q, "learning", "queries"), "queries.learning")
    verification = _int(_get(q, "verification", "queries"), "queries.verification")
    bound = _int(_get(q, "bound", "queries"), "queries.bound")
    by_phase = _get(q, "by_phase", "queries")
    if not isinstance(by_phase, dict):
        raise CertificateError("queries.by_phase must be a JSON object")
    for phase, n in by_phase.items():
        if phase not in _PHASES:
            raise CertificateError(f"queries.by_phase has an unknown phase {phase!r}")
        _int(n, f"queries.by_phase.{phase}")
    if bound != query_bound(d, affine=affine):
        raise CertificateError(
            f"queries.bound is {bound}, but Thm 4.1 at d = {d} "
            f"{'(affine) ' if affine else ''}needs exactly {query_bound(d, affine=affine)}"
        )
    expected = {"v": d, "W": d * d + (d if affine else 0), "beta": 1 if affine else 0}
    for phase, n in expected.items():
        if by_phase.get(phase, 0) != n:
            raise CertificateError(
                f"queries.by_phase.{phase} is {by_phase.get(phase, 0)}, expected {n} at d = {d}"
            )
    scales = [
        (f"design.scales[{k}][{j}]", t)
        for k, row in enumerate(cert.design.scales)
        for j, t in enumerate(row)
    ]
    scales += [(f"design.c_scales[{k}]", t) for k, t in enumerate(cert.design.c_scales or [])]
    implied = sum(_rescales(t, path) for path, t in scales)
    rescale = by_phase.get("rescale", 0)
    if rescale != implied:
        raise CertificateError(
            f"queries.by_phase.rescale is {rescale}, but the probe scales imply {implied} re-asks"
        )
    if learning != sum(n for p, n in by_phase.items() if p != "verify"):
        raise CertificateError(
            f"queries.learning is {learning}, but the learning phases add up to "
            f"{sum(n for p, n in by_phase.items() if p != 'verify')}"
        )
    if learning != bound + rescale:
        raise CertificateError(
            f"queries.learning is {learning}, expected the bound {bound} plus {rescale} re-asks"
        )
    stored = _get(data, "verification", "")
    if not isinstance(stored, list):
        raise CertificateError("verification must be a list")
    if not verification == by_phase.get("verify", 0) == len(stored):
        raise CertificateError(
            f"queries.verification is {verification}, by_phase.verify "
            f"{by_phase.get('verify', 0)}, but {len(stored)} verification answers are stored"
        )
    return (
        f"queries: {learning} learning = bound {bound} (d^2 + {'2d + 1' if affine else 'd'})"
        f" + {rescale} re-asked probes; {verification} verification"
    )


def _load_answers(data: dict[str, Any], cert: _Parsed) -> dict[str, Any]:
    d, arith = cert.d, cert.arith
    kinds = _KINDS[arith.name]
    raw = _get(data, "answers", "")
    out: dict[str, Any] = {
        "v": [
            _number(a, f"answers.v[{i}]", kinds, arith)
            for i, a in enumerate(_list(_get(raw, "v", "answers"), "answers.v", d))
        ],
        "W": [
            [_number(a, f"answers.W[{k}][{j}]", kinds, arith) for j, a in enumerate(row)]
            for k, row in enumerate(_matrix(_get(raw, "W", "answers"), "answers.W", d, d))
        ],
    }
    if cert.affine:
        out["beta"] = _number(_get(raw, "beta", "answers"), "answers.beta", kinds, arith)
        out["c"] = [
            _number(a, f"answers.c[{k}]", kinds, arith)
            for k, a in enumerate(_list(_get(raw, "c", "answers"), "answers.c", d))
        ]
    else:
        for key in ("beta", "c"):
            if raw.get(key) is not None:
                raise CertificateError(f"answers.{key} must be null for the non-affine model")
    return out


# ---------------------------------------------------------------------------------------
# 2. The design.
# ---------------------------------------------------------------------------------------


def _check_design(cert: _Parsed, answers: dict[str, Any]) -> str:
    d, arith, design = cert.d, cert.arith, cert.design
    det = fmpq_matrix(design.U).det()
    if det == 0:
        raise CertificateError("design.U is singular; Thm 4.1 needs an invertible design")
    for path, t in [
        (f"design.scales[{k}][{j}]", t)
        for k, r in enumerate(design.scales)
        for j, t in enumerate(r)
    ]:
        if t <= 0:
            raise CertificateError(f"{path} = {t} must be positive")
    beta = answers["beta"] if cert.affine else arith.rational(Fraction(0))
    v = [a - beta for a in answers["v"]]
    smallest = math.inf
    for k in range(d):
        uv: Any = arith.rational(Fraction(0))
        for i in range(d):
            if design.U[i][k]:
                uv = uv + arith.rational(design.U[i][k]) * v[i]
        sign = arith.sign(uv)
        if sign != -1 and sign != 1:
            what = "is zero" if sign == 0 else "cannot be shown nonzero at this precision"
            raise CertificateError(
                f"design column {k}: u_{k}^T v = {uv} {what}, so the probes of column {k} "
                "carry no information about W"
            )
        smallest = min(smallest, arith.magnitude(uv))
    return (
        f"design: U invertible (det {det}), every u_k^T v != 0 (smallest |u_k^T v| ~ "
        f"{smallest:.4g})"
    )


# ---------------------------------------------------------------------------------------
# 3. Decoding and comparison with the claim.
# ---------------------------------------------------------------------------------------


def _names(affine: bool) -> tuple[str, ...]:
    return ("W", "v", "c", "beta") if affine else ("W", "v")


def _load_claimed(data: dict[str, Any], cert: _Parsed) -> dict[str, list[tuple[str, Any]]]:
    """Claimed parameters as flat lists of (label, number), e.g. ("W[0][1]", 3)."""
    d, arith = cert.d, cert.arith
    kinds: tuple[str, ...]
    if arith.name == "float":
        kinds = ("float",)
    elif cert.exact:
        kinds = ("rational",)
    else:
        kinds = ("arb",)
    params = _get(_get(data, "result", ""), "parameters", "result")
    if not isinstance(params, dict):
        raise CertificateError("result.parameters must be a JSON object")
    extra = set(params) - set(_names(cert.affine))
    if extra:
        raise CertificateError(f"result.parameters has unexpected entries {sorted(extra)}")
    out: dict[str, list[tuple[str, Any]]] = {}
    for name in _names(cert.affine):
        raw = _get(params, name, "result.parameters")
        path = f"result.parameters.{name}"
        if name == "W":
            labels = [
                (f"W[{i}][{j}]", x)
                for i, row in enumerate(_matrix(raw, path, d, d))
                for j, x in enumerate(row)
            ]
        elif name == "beta":
            labels = [("beta", raw)]
        else:
            labels = [(f"{name}[{i}]", x) for i, x in enumerate(_list(raw, path, d))]
        out[name] = [(lab, _claimed_number(x, f"result {lab}", kinds, arith)) for lab, x in labels]
    return out


def _claimed_number(obj: Any, path: str, kinds: tuple[str, ...], arith: Arithmetic) -> Any:
    x = _number(obj, path, kinds, arith)
    if isinstance(x, sympy.Rational):  # exact mode: keep claims as Fractions
        return Fraction(int(x.p), int(x.q))
    return x


def _decoded_flat(decoded: dict[str, Any], name: str) -> list[Any]:
    return list(np.asarray(decoded[name], dtype=object).reshape(-1))


def _compare(
    cert: _Parsed, claimed: dict[str, list[tuple[str, Any]]], decoded: dict[str, Any]
) -> str:
    if cert.arith.name == "exact":
        return _compare_exact(claimed, decoded)
    if cert.arith.name == "float":
        return _compare_float(claimed, decoded)
    if cert.exact:
        return _compare_rationals_in_balls(claimed, decoded)
    widest = Fraction(0)
    for name, entries in claimed.items():
        for (label, ball), again in zip(entries, _decoded_flat(decoded, name), strict=True):
            lo, hi = arb_bounds(ball)
            lo2, hi2 = arb_bounds(again)
            if not (lo <= lo2 and hi2 <= hi):
                raise CertificateError(
                    f"result {label}: the claimed ball {ball} does not contain the ball "
                    f"{again} re-decoded from the stored answers"
                )
            widest = max(widest, (hi - lo) / 2)
    return (
        "decoding: every claimed ball contains the ball re-decoded from the stored answers "
        f"(largest claimed radius {float(widest):.3g})"
    )


def _compare_exact(claimed: dict[str, list[tuple[str, Any]]], decoded: dict[str, Any]) -> str:
    for name, entries in claimed.items():
        for (label, q), again in zip(entries, _decoded_flat(decoded, name), strict=True):
            if sympy.Rational(q.numerator, q.denominator) != again:
                raise CertificateError(
                    f"result {label}: claimed {_show(q)}, the stored answers give {again}"
                )
    return "decoding: the claimed parameters == those re-decoded exactly from the stored answers"


def _largest_unique_denominator(lo: Fraction, hi: Fraction) -> int | None:
    """The largest D with (hi - lo) D^2 < 1 (None: a point, any D works).

    Two rationals with denominators <= D differ by at least 1/D^2, so [lo, hi] holds at
    most one of them.
    """
    width = hi - lo
    if width == 0:
        return None
    r = 1 / width
    return math.isqrt(math.ceil(r) - 1)


def _compare_rationals_in_balls(
    claimed: dict[str, list[tuple[str, Any]]], decoded: dict[str, Any]
) -> str:
    bound: int | None = None
    for name, entries in claimed.items():
        for (label, q), ball in zip(entries, _decoded_flat(decoded, name), strict=True):
            lo, hi = arb_bounds(ball)
            if not lo <= q <= hi:
                raise CertificateError(
                    f"result {label}: claimed {_show(q)} lies outside the ball {ball} "
                    "re-decoded from the stored answers"
                )
            D = _largest_unique_denominator(lo, hi)
            if D is not None and q.denominator > D:
                raise CertificateError(
                    f"result {label}: claimed {_show(q)} is not the only rational of its "
                    f"denominator in the ball {ball} (unique only up to denominator {D})"
                )
            if D is not None:
                bound = D if bound is None else min(bound, D)
    where = "any denominators" if bound is None else f"denominators <= {bound}"
    return (
        "decoding: every claimed rational lies in its certified ball, and is the only "
        f"rational there with {where}"
    )


def _compare_float(claimed: dict[str, list[tuple[str, Any]]], decoded: dict[str, Any]) -> str:
    worst = 0.0
    for name, entries in claimed.items():
        again = [float(x) for x in _decoded_flat(decoded, name)]
        scale = max((abs(x) for x in again), default=0.0)
        if name in ("W", "c"):
            # Logit-derived: their rounding noise is absolute (~eps), not relative, so an
            # all-zero W would otherwise demand bit-equality across BLAS/libm builds.
            scale = max(scale, 1.0)
        for (label, x), y in zip(entries, again, strict=True):
            if not math.isfinite(y):
                raise CertificateError(f"result {label}: the stored answers give {y}")
            err = abs(x - y)
            if err > FLOAT_RTOL * max(scale, abs(x), abs(y)):
                raise CertificateError(
                    f"result {label}: claimed {x!r}, the stored answers give {y!r} "
                    f"(differ by {err:.3e}, more than {FLOAT_RTOL:g} relative)"
                )
            if scale:
                worst = max(worst, err / max(scale, abs(x)))
    return (
        f"decoding: the claimed parameters agree with the re-decoded ones to {worst:.2e} "
        f"relative (allowed {FLOAT_RTOL:g})"
    )


def _show(q: Fraction) -> str:
    return str(q.numerator) if q.denominator == 1 else f"{q.numerator}/{q.denominator}"


# ---------------------------------------------------------------------------------------
# 4. Verification answers.
# ---------------------------------------------------------------------------------------


def _check_verification(
    data: dict[str, Any], cert: _Parsed, claimed: dict[str, list[tuple[str, Any]]]
) -> str:
    d, arith = cert.d, cert.arith
    stored = data["verification"]  # a list: checked with the counts
    expected_queries = verification_queries(d, len(stored), cert.seed)
    values = {name: [x for _, x in entries] for name, entries in claimed.items()}
    predict = _predictor(cert, values)
    params = {"v": values["v"], **({"beta": values["beta"][0]} if "beta" in values else {})}
    kinds = _KINDS[arith.name]
    for n, (entry, X) in enumerate(zip(stored, expected_queries, strict=True)):
        path = f"verification[{n}]"
        raw = _get(entry, "sequence", path)
        rows = len(raw) if isinstance(raw, list) else -1
        seq = [
            [_rational(x, f"{path}.sequence[{i}][{j}]") for j, x in enumerate(row)]
            for i, row in enumerate(_matrix(raw, f"{path}.sequence", max(rows, 1), d))
        ]
        if seq != [[Fraction(float(x)) for x in row] for row in X]:
            raise CertificateError(
                f"{path}.sequence is not the fresh query that seed {cert.seed} determines"
            )
        observed = _number(_get(entry, "answer", path), f"{path}.answer", kinds, arith)
        expected = predict(seq)
        X = np.array([[float(x) for x in row] for row in seq], dtype=np.float64)
        if not answers_agree(arith, params, X, observed, expected)[0]:
            raise CertificateError(
                f"{path}: the stored answer {observed} disagrees with the claimed model's "
                f"{expected} on the query {[[_show(x) for x in row] for row in seq]}"
            )
    return (
        f"verification: {len(stored)} fresh queries (those seed {cert.seed} determines) agree "
        "with the claimed model"
    )


def _predictor(cert: _Parsed, values: dict[str, list[Any]]) -> Any:
    """f(X) of the claimed model in the certificate's arithmetic, with the float scale."""
    d, arith = cert.d, cert.arith
    W = [values["W"][i * d : (i + 1) * d] for i in range(d)]
    v = values["v"]
    c = values.get("c")
    beta = values["beta"][0] if "beta" in values else None
    if arith.name == "certified" and not cert.exact:
        # Balls that did not reconstruct: evaluate the model's definition in ball arithmetic.
        def balls(seq: list[list[Fraction]]) -> Any:
            rows = [[flint.arb(flint.fmpq(x.numerator, x.denominator)) for x in r] for r in seq]
            return attention_output(
                rows, W, v, c, beta if beta is not None else flint.arb(0), exp=lambda s: s.exp()
            )

        return balls
    try:
        model = SingleHeadAttention(W, v, c=c, beta=beta)
    except VerifiedAttnError as exc:
        raise CertificateError(f"the claimed parameters are not a model: {exc}") from exc

    def rational(seq: list[list[Fraction]]) -> Any:
        if arith.name == "float":
            X = np.array([[float(x) for x in row] for row in seq], dtype=np.float64)
            return float(model.evaluate_batch(X[None])[0])
        return model.evaluate(seq, arith)

    return rational
