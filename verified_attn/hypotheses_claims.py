"""One claim per registered hypothesis: its counterexample checks, and a perturbed one does not.

>>> from verified_attn.hypotheses_claims import CLAIMS
>>> CLAIMS[0].id
'thm-4.1/hypothesis/v-zero'
>>> from verified_attn import check_claims
>>> [r.passed for r in check_claims(["app-b/hypothesis/positive-scale"])]
[True]

Each claim builds the counterexample of :func:`verified_attn.counterexample` at its seed,
re-checks its certificate with the counterexample checker (exact ``==`` where the
relation is "equal"), and then re-checks a *perturbed* certificate (one parameter of the
second model, or the failure's witness, changed) and one whose second model is a copy of
the first: both must be refused, so the claim can fail. The registry is :mod:`verified_attn.hypotheses`.
"""

from __future__ import annotations

import copy
from typing import Any

from verified_attn import soundness
from verified_attn.checks import LEVEL_INSTANCES, Claim, ClaimResult
from verified_attn.errors import CertificateError
from verified_attn.hypotheses import HYPOTHESES, Hypothesis, counterexample

__all__ = ["CLAIMS", "perturb_certificate"]

_REFS = {
    "thm-4.1": "Thm 4.1",
    "thm-5.1": "Thm 5.1",
    "thm-6.1": "Thm 6.1",
    "app-b": "App. B",
    "transformer": "one-layer reduction",
    "prop-7.1": "Prop 7.1",
}
#: Where a kind's reference is not its theorem's (the multi-head Transformer's pairs).
_KIND_REFS = dict.fromkeys(
    ("dead-neuron", "always-on-neuron", "killed-head", "colliding-heads"),
    "ours (docs/transformer.md, Several heads before the FFN)",
)
#: The dimension each claim is checked at (small: the checks are exact).
CLAIM_D = {"tolerance": 2, "nuclear-below-constant": 4}


def _bump(x: str) -> str:
    num, _, den = x.partition("/")
    return f"{int(num) + int(den or 1)}/{den or 1}"


def perturb_certificate(data: dict[str, Any]) -> dict[str, Any]:
    """A copy with one parameter of the pair (or the failure's witness) changed by +1.

    >>> import verified_attn as va
    >>> data = va.counterexample("thm-4.1", kind="v-zero", d=2).certificate()
    >>> perturb_certificate(data)["second"]["v"], data["second"]["v"]
    (['1/1', '0/1'], ['0/1', '0/1'])
    """
    out = copy.deepcopy(data)
    if out.get("model_class") == "multi-head":
        out["second"][0]["v"][0] = _bump(out["second"][0]["v"][0])
        return out
    rule = out["proof"]["rule"]
    second = out.get("second")
    if second is None:  # a failure: remove the bias that makes the witness work
        out["first"]["c"] = ["0/1"] * len(out["first"]["c"])
    elif rule == "adversary":
        second["W"][0][-1] = _bump(second["W"][0][-1])
    elif second["class"] == "one-layer-transformer-multi-head":
        _remove_reason(out)
    elif second["class"] == "one-layer-transformer":
        second["w_o"][0] = _bump(second["w_o"][0])
    else:
        second["v"][0] = _bump(second["v"][0])
    return out


def _remove_reason(out: dict[str, Any]) -> None:
    """A multi-head Transformer pair with its reason removed (so it is two maps): the
    extra neuron switched on, the constant not moved into b, the killed head's value
    made visible to the FFN (in both models), or the colliding heads' W made distinct."""
    first, second, kind = out["first"], out["second"], out["counterexample_kind"]
    if kind == "dead-neuron":
        second["a"][-1] = "1/1"
    elif kind == "always-on-neuron":
        second["b"] = first["b"]
    elif kind == "killed-head":
        for model in (first, second):
            model["heads"][-1]["V"][0][0] = _bump(model["heads"][-1]["V"][0][0])
    elif kind == "colliding-heads":
        first["heads"][-1]["W"][0][0] = _bump(first["heads"][-1]["W"][0][0])
    else:
        second["w_o"][0] = _bump(second["w_o"][0])


def _claim(h: Hypothesis) -> Claim:
    ref = _KIND_REFS.get(h.kind, _REFS[h.theorem])

    def check(seed: int) -> ClaimResult:
        from verified_attn.certificates import verify_certificate

        d = CLAIM_D.get(h.kind, 3)
        cx = counterexample(h.theorem, kind=h.kind, d=d, seed=seed)
        data = cx.certificate()
        summary = verify_certificate(data).summary
        try:
            verify_certificate(perturb_certificate(data))
            refused = ""
        except CertificateError as exc:
            refused = str(exc)
        # And a "pair" of one model twice: never a counterexample, whatever the kind.
        copied = ""
        if data.get("second") is not None:
            try:
                verify_certificate(soundness.replace_second(data))
            except CertificateError as exc:
                copied = str(exc)
        else:
            copied = "no second model (a failure witness)"
        ok = bool(refused) and bool(copied) and cx.check()
        detail = f"d = {d}: " + " | ".join(summary[1:])
        detail += (
            f"; the perturbed pair is refused ({refused[:120]})"
            if refused
            else "; the PERTURBED pair was accepted"
        )
        detail += (
            f"; second := first refused ({copied[:80]})"
            if copied
            else "; second := first was ACCEPTED"
        )
        if cx.failure:
            detail += f"; failure: {cx.failure[:160]}"
        return ClaimResult(h.claim_id, ref, _statement(h), ok, detail)

    return Claim(h.claim_id, ref, _statement(h), check, level=LEVEL_INSTANCES)


def _statement(h: Hypothesis) -> str:
    return f"Hypothesis '{h.statement}' is needed: {h.fails}"


CLAIMS: list[Claim] = [_claim(h) for h in HYPOTHESES]
