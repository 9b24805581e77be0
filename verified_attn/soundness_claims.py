"""Claims of the main job that exercise the checkers themselves: tampered certificates of
every kind are refused, and the PyTorch adapter maps a module's weights to the model.

>>> from verified_attn.soundness_claims import CLAIMS
>>> [c.id for c in CLAIMS]
['certificates/tampered-refused', 'adapters/torch-weight-mapping', 'validation/bad-input-refused']

Each genuine certificate must check, and each tampered copy (a claimed parameter moved,
the learning count off by one, an exact verification answer moved by 2^-200, a stored FFN
answer moved by 2^-200 or a stored point repeated, a forged ``result`` parsed before the
real one, the single-head header seed changed) must be
refused with :class:`~verified_attn.errors.CertificateError`: a checker that accepts one
fails the claim. The adapter claim needs PyTorch (``pip install 'verified-attn[torch]'``)
and is skipped, saying so, without it.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from fractions import Fraction
from functools import partial
from typing import Any

import numpy as np

from verified_attn.checks import LEVEL_INSTANCES, Claim, ClaimResult
from verified_attn.errors import CertificateError

__all__ = ["CLAIMS", "bump_first_number", "genuine_certificates", "tampered"]

_TAMPER_ID = "certificates/tampered-refused"
_ADAPTER_ID = "adapters/torch-weight-mapping"
_INPUT_ID = "validation/bad-input-refused"


def genuine_certificates(seed: int) -> dict[str, dict[str, Any]]:
    """Small genuine certificates of several kinds and arithmetics, as JSON round trips."""
    import verified_attn as va
    from verified_attn.low_rank.claims import random_low_rank_head
    from verified_attn.multi_head.counterexamples import random_multi_head
    from verified_attn.transformer.claims import random_transformer

    head = va.SingleHeadAttention([[Fraction(1, 2), -2], [3, 1]], [1, 5])
    affine = va.SingleHeadAttention([[1, -2], [3, 0]], [2, 5], c=[1, -1], beta=Fraction(2, 7))
    out: dict[str, Any] = {
        "single-head exact": va.learn_single_head(va.Oracle(head, "exact"), seed=seed),
        "single-head float": va.learn_single_head(va.Oracle(head, "float"), seed=seed),
        "single-head certified affine": va.learn_single_head(
            va.Oracle(affine, "certified"), seed=seed
        ),
        "low-rank exact": va.learn_low_rank(
            va.Oracle(random_low_rank_head(4, 1, seed), "exact"), rank=1, seed=seed
        ),
        "multi-head exact": va.learn_multi_head(
            va.Oracle(random_multi_head(2, 2, seed), "exact"), heads=2, seed=seed
        ),
        "transformer exact": va.learn_transformer(
            va.Oracle(random_transformer(2, 2, np.random.default_rng(seed)), "exact"), seed=seed
        ),
        "relu-ffn exact": va.learn_relu_ffn(
            va.Oracle(va.ReluFFN([[1, -2, Fraction(1, 3)], [2, 1, -1]], [1, -3, 2]), "exact"),
            seed=seed,
        ),
        "counterexample": va.counterexample("prop-7.1", kind="shared-score-split", d=2, seed=seed),
    }
    return {name: json.loads(json.dumps(r.certificate())) for name, r in out.items()}


def bump_first_number(obj: Any) -> bool:
    """Add 1 to the first rational string ("p/q") or float hex in ``obj``, in place.

    >>> x = {"a": ["0x1.8p+1", "2/3"]}
    >>> bump_first_number(x), x
    (True, {'a': ['0x1.0000000000000p+2', '2/3']})
    """
    items = (
        obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, list) else ()
    )
    for key, value in list(items):
        if isinstance(value, str) and value.startswith(("0x", "-0x")):
            obj[key] = (float.fromhex(value) + 1.0).hex()
            return True
        if isinstance(value, str) and "/" in value and value.replace("/", "").lstrip("-").isdigit():
            q = Fraction(value) + 1
            obj[key] = f"{q.numerator}/{q.denominator}"
            return True
        if isinstance(value, dict | list) and bump_first_number(value):
            return True
    return False


def _moved_answer(data: dict[str, Any]) -> dict[str, Any] | None:
    """An exact certificate with a closed-form verification answer moved by 2^-200."""
    answers = (data.get("verification") or {}).get("answers") or []
    for i, a in enumerate(answers):
        if isinstance(a, dict) and "sympy" in a:
            out = copy.deepcopy(data)
            out["verification"]["answers"][i] = {
                "sympy": f"Add({a['sympy']}, Rational(1, {2**200}))"
            }
            return out
    return None


def _stored_answer_copies(data: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """An FFN certificate's stored answers tampered: one moved by 2^-200, one point repeated."""
    answers = data.get("answers")
    if not isinstance(answers, list) or len(answers) < 2:
        return []
    moved = copy.deepcopy(data)
    y = Fraction(moved["answers"][0]["y"]["rational"]) + Fraction(1, 2**200)
    moved["answers"][0]["y"] = {"rational": f"{y.numerator}/{y.denominator}"}
    repeated = copy.deepcopy(data)
    repeated["answers"][1] = copy.deepcopy(repeated["answers"][0])
    return [("a stored answer + 2^-200", moved), ("a stored point repeated", repeated)]


def tampered(name: str, data: dict[str, Any]) -> list[tuple[str, Callable[[], Any]]]:
    """The tampered copies of one certificate, each as (what, a check that must refuse)."""
    from verified_attn.certificates import verify_certificate
    from verified_attn.certificates.kernel import loads

    out: list[tuple[str, Callable[[], Any]]] = []
    section = "first" if name == "counterexample" else "result"
    moved = copy.deepcopy(data)
    if bump_first_number(moved[section]):
        out.append((f"a number of {section} + 1", partial(verify_certificate, moved)))
    if "queries" in data:
        count = copy.deepcopy(data)
        count["queries"]["learning"] += 1
        out.append(("queries.learning + 1", partial(verify_certificate, count)))
    answer = _moved_answer(data)
    if answer is not None:
        out.append(("a verification answer + 2^-200", partial(verify_certificate, answer)))
    for what, copied in _stored_answer_copies(data):
        out.append((what, partial(verify_certificate, copied)))
    if name.startswith("single-head"):
        seeded = copy.deepcopy(data)
        seeded["seed"] += 1
        out.append(("the header seed + 1", partial(verify_certificate, seeded)))
    text = json.dumps(data)
    forged = text.replace(f'"{section}": ', f'"{section}": {{}}, "{section}": ', 1)
    out.append((f"a forged {section} before the real one", partial(loads, forged)))
    return out


def _check_tampered(seed: int) -> ClaimResult:
    from verified_attn.certificates import verify_certificate

    certs = genuine_certificates(seed)
    accepted: list[str] = []
    refused = 0
    for name, data in certs.items():
        if not verify_certificate(data).ok:
            accepted.append(f"{name}: the GENUINE certificate failed")
        for what, check in tampered(name, data):
            try:
                check()
                accepted.append(f"{name}: {what} was ACCEPTED")
            except CertificateError:
                refused += 1
    detail = (
        f"{len(certs)} genuine certificates ({', '.join(certs)}) check; "
        f"{refused} tampered copies refused"
    )
    if accepted:
        detail += "; " + "; ".join(accepted)
    return ClaimResult(_TAMPER_ID, "certificates", _TAMPER_STATEMENT, not accepted, detail)


def _check_adapter(seed: int) -> ClaimResult:
    try:
        import torch

        from verified_attn.adapters.torch import attention_oracle, attention_parameters
    except ImportError:
        return ClaimResult(
            _ADAPTER_ID,
            "adapters",
            _ADAPTER_STATEMENT,
            passed=False,
            detail="skipped: needs PyTorch (pip install 'verified-attn[torch]')",
            skipped=True,
        )
    import verified_attn as va

    torch.manual_seed(seed)
    worst = 0.0
    lines = []
    for E, H in ((4, 1), (6, 2)):
        mha = torch.nn.MultiheadAttention(E, H, batch_first=True).double()
        with torch.no_grad():
            mha.in_proj_bias.normal_()
            mha.out_proj.bias.normal_()
        readout = torch.nn.Linear(E, 1).double()
        params = attention_parameters(mha, readout)
        oracle = attention_oracle(mha, readout)
        rng = np.random.default_rng(seed)
        for n in (1, 2, 5):
            X = rng.standard_normal((n, E))
            got, want = float(params.evaluate_batch(X[None])[0]), oracle.query(X)
            worst = max(worst, abs(got - want) / max(1.0, abs(want)))
        lines.append(f"E = {E}, H = {H}: the mapped parameters reproduce the module")
        if H == 1:
            rec = va.learn_single_head(attention_oracle(mha, readout), seed=seed)
            err = float(np.max(np.abs(rec.to_numpy()["W"] - params.W[0])))
            scale = max(1.0, float(np.abs(params.W[0]).max()))
            worst = max(worst, err / scale)
            lines.append(f"learned W within {err / scale:.1e} of the mapped W_k^T W_q / sqrt(h)")
    ok = worst <= 1e-6
    detail = "; ".join(lines) + f"; worst relative gap {worst:.2e} (allowed 1e-6)"
    return ClaimResult(_ADAPTER_ID, "adapters", _ADAPTER_STATEMENT, ok, detail)


def _bad_inputs() -> list[tuple[str, str, Callable[[], Any]]]:
    """(what, a fragment the refusal must name, the call) for each bad argument."""
    import verified_attn as va

    head = va.SingleHeadAttention([[1, -2], [3, 1]], [1, 5])

    def learn(**kwargs: Any) -> Callable[[], Any]:
        return lambda: va.learn_single_head(va.Oracle(head, "exact"), **kwargs)

    return [
        ("a negative seed", "seed must be an int >= 0", learn(seed=-1)),
        ("no verification lengths", "lengths must not be empty", learn(lengths=[])),
        ("a length of 0", "in 1..", learn(lengths=[0])),
        ("verify = -1", "verify must be an int", learn(verify=-1)),
        (
            "a NaN rank tolerance",
            "rank_tol must be finite",
            lambda: va.learn_low_rank(va.Oracle(head, "float"), rank=1, rank_tol=float("nan")),
        ),
        (
            "a low-rank head at d = 10^9",
            "queries",
            lambda: va.learn_low_rank(va.Oracle.from_callable(sum, d=10**9), rank=1),
        ),
    ]


def _check_bad_inputs(seed: int) -> ClaimResult:
    from verified_attn.errors import InvalidArgument

    wrong: list[str] = []
    cases = _bad_inputs()
    for what, fragment, call in cases:
        try:
            call()
            wrong.append(f"{what} was ACCEPTED")
        except InvalidArgument as exc:
            if fragment not in str(exc):
                wrong.append(f"{what}: refused as {str(exc)[:80]!r}, not naming {fragment!r}")
        except Exception as exc:  # a raw error from deep inside is a failure too
            wrong.append(f"{what}: raised {type(exc).__name__}, not InvalidArgument")
    detail = f"{len(cases) - len(wrong)} of {len(cases)} bad arguments refused, each named"
    if wrong:
        detail += "; " + "; ".join(wrong)
    return ClaimResult(_INPUT_ID, "validation", _INPUT_STATEMENT, not wrong, detail)


_TAMPER_STATEMENT = (
    "Every certificate checker accepts its genuine certificates and refuses tampered "
    "copies: a claimed number moved, a count off by one, an exact answer moved by 2^-200, "
    "a stored FFN point repeated, a forged duplicate key, a changed seed"
)
_ADAPTER_STATEMENT = (
    "The PyTorch adapter maps nn.MultiheadAttention's weights to the model's (W, c, v, "
    "beta) exactly as the module computes, and a learned head equals the mapped one"
)

_INPUT_STATEMENT = (
    "Bad arguments (a negative seed, empty or zero lengths, a negative verify count, a NaN "
    "tolerance, a size past the query cap) are refused with InvalidArgument naming the "
    "problem, before any query"
)

CLAIMS: list[Claim] = [
    Claim(_TAMPER_ID, "certificates", _TAMPER_STATEMENT, _check_tampered, level=LEVEL_INSTANCES),
    Claim(_ADAPTER_ID, "adapters", _ADAPTER_STATEMENT, _check_adapter, level=LEVEL_INSTANCES),
    Claim(_INPUT_ID, "validation", _INPUT_STATEMENT, _check_bad_inputs, level=LEVEL_INSTANCES),
]
