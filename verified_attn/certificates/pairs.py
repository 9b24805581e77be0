"""Re-check a hypothesis counterexample certificate (single heads, Transformers, failures).

>>> import verified_attn as va
>>> from verified_attn.certificates.pairs import verify_pair
>>> data = va.counterexample("app-b", kind="positive-scale", d=2).certificate()
>>> verify_pair(data).ok
True
>>> data["second"]["v"][0] = "-1/1"
>>> verify_pair(data)
Traceback (most recent call last):
...
verified_attn.errors.CertificateError: ...

What is re-checked, with the core models (:mod:`verified_attn.models`), the core design
(:mod:`verified_attn.design`) and the core arithmetic only, never the room that built it:

1. the stored models (exact rationals) parse, and differ as parameter lists;
2. the relation at every recorded sequence: ``equal`` decided exactly (SymPy closed
   forms, ``==``), ``within`` as ``|f1 - f2| <= tolerance`` and ``same-sign`` as equal
   signs, both decided in ball arithmetic at :data:`PRECISION` bits (a rigorous decision:
   an undecided ball fails the check);
3. the structural proof, re-run by its ``rule``:

   - ``zero-value``: both heads have v = 0, so f = sum_i alpha_i x_i^T v = 0 on every
     sequence whatever W is;
   - ``positive-scale``: equal W and ``v2 = c v1`` with c > 0 exactly, so f2 = c f1 and the
     signs agree on every sequence;
   - ``cancelling-neurons``: in both Transformers the FFN's neurons, grouped by the ray of
     their column of V A, have output weights summing to 0 per ray (scaled), so the FFN
     is the zero function and T = 0 on every sequence whatever W is;
   - ``design-queries``: the sequences are regenerated from the stored design U (the
     length-1 queries [e_i] and the probes [e_j + u_k; e_j]), minus the stated left-out
     query, and must be the stored ones; with a left-out query the pair must differ
     there (exactly); an ``orthogonal`` column must have u_k^T v = 0 in both models;
   - ``recorded-queries``: the sequences are a learner's queries as it asked them
     (not regenerated); the ranks stated are checked exactly and the pair must differ at
     the stated ``differ`` sequence;
   - ``paper-design``: the sequences are regenerated from the probe scales a, b (the
     paper's noisy design); both ||W||_F <= Wbar exactly, some |v_i| < mu, and the W
     differ in some entry by more than twice the derived bound (recomputed in balls): an
     oracle answering the first head's values is valid for both, so every estimator from
     these probes errs by more than the bound on one of them;
   - ``adversary``: the stored answers are within tau of ``first`` at every sequence, and
     ``second`` (the estimate the learner made from them) errs at the stated entry by at
     least the stated fraction of the derived bound (recomputed in balls), and at most it;
   - ``nuclear-gap``: first's W has rank 1 (so ||W||_* = ||W||_F); the stored rational
     rank-one terms P_i Q_i^T of second's W' leave a remainder R, and
     ``sum ||P_i|| ||Q_i|| + sqrt(d) ||R||_F`` (an upper bound on ||W'||_*) is below
     ||W||_F in balls: with the pair equal on the recorded measurement queries, W is not
     the nuclear-norm minimiser;
   - ``not-odd-linear`` (a failure): for the stored biased FFN g, the antisymmetrised
     length-1 map D(x) = g(x) - g(-x) is computed exactly at x and 2x and must violate
     D(2x) = 2 D(x), which every single-head regressor satisfies (D(x) = 2 x^T v);
   - ``never-active-neuron``, ``always-on-neuron``, ``killed-head``, ``colliding-heads``
     (multi-head Transformers): the pair differs only in constant neurons, heads with
     V_h A = 0, or how heads sharing (W, c) split their V
     (:mod:`verified_attn.certificates.pairs_heads`), and is equal at ``proof.checked``.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from verified_attn.arithmetic import get_arithmetic
from verified_attn.certificates import CertificateCheck, kernel
from verified_attn.certificates.pairs_bounds import (
    rule_adversary,
    rule_nuclear_gap,
    rule_paper_design,
)
from verified_attn.certificates.pairs_heads import RULES as HEAD_RULES
from verified_attn.certificates.pairs_models import (
    MAX_D,
    MAX_LENGTH,
    MAX_SEQUENCES,
    PRECISION,
    RELATIONS,
    arb,
    ball_value,
    check_counterexample_header,
    differ,
    exact_rank,
    exact_value,
    mat,
    need,
    read_model,
    read_sequence,
    sequence_key,
    with_prec,
)
from verified_attn.design import design_queries
from verified_attn.errors import CertificateError

__all__ = ["MAX_D", "MAX_LENGTH", "MAX_SEQUENCES", "PRECISION", "verify_pair"]


def verify_pair(data: dict[str, Any]) -> CertificateCheck:
    """Re-check a single-head / Transformer / failure counterexample certificate."""
    check_counterexample_header(data)
    theorem = kernel.get(data, "theorem")
    cx_kind = kernel.get(data, "counterexample_kind")
    for name, val in (("theorem", theorem), ("counterexample_kind", cx_kind)):
        if not isinstance(val, str) or len(val) > 64:
            raise CertificateError(f"{name} must be a short string")
    d = kernel.as_int(kernel.get(data, "d"), "d", low=1, high=MAX_D)
    relation = kernel.get(data, "relation")
    if relation not in RELATIONS:
        raise CertificateError(f"relation must be one of {RELATIONS}, got {relation!r:.40}")
    tol_raw = kernel.get(data, "tolerance")
    tol = None if tol_raw is None else kernel.rational(tol_raw, "tolerance")
    if relation == "within" and (tol is None or tol <= 0):
        raise CertificateError("a 'within' relation needs a positive tolerance")
    cls1, p1, m1 = read_model(kernel.get(data, "first"), "first", d)
    second_raw = kernel.get(data, "second")
    failure = kernel.get(data, "failure")
    if second_raw is None:
        if not isinstance(failure, str) or not failure:
            raise CertificateError("second is null but no failure is stated")
        p2 = m2 = None
    else:
        cls2, p2, m2 = read_model(second_raw, "second", d)
        if cls2 != cls1:
            raise CertificateError(f"first is a {cls1}, second a {cls2}: not a pair of one class")
        if p1 == p2:
            raise CertificateError("first and second are the same parameters: not a counterexample")
    seq_raw = kernel.get(data, "sequences")
    seqs = None
    if seq_raw is not None:
        entries = kernel.as_list(seq_raw, "sequences")
        if not 1 <= len(entries) <= MAX_SEQUENCES:
            raise CertificateError(f"sequences must have 1..{MAX_SEQUENCES} entries")
        seqs = [read_sequence(X, f"sequences[{i}]", d) for i, X in enumerate(entries)]
    proof = kernel.get(data, "proof")
    if not isinstance(proof, dict):
        raise CertificateError("proof must be a JSON object")
    if not kernel.as_bool(kernel.get(proof, "holds"), "proof.holds"):
        raise CertificateError("proof.holds is false")
    rule = kernel.get(proof, "rule")
    what = (
        f"first and second are {cls1} models"
        if m2 is not None or p2 is not None
        else f"a {cls1} model and a learner's failure"
    )
    lines = [f"{theorem} counterexample ({cx_kind}), d = {d}: {what}"]
    checker = _RULES.get(rule) if isinstance(rule, str) else None
    if checker is None:
        raise CertificateError(f"proof.rule {rule!r:.40} is not a rule this checker re-runs")
    lines.append(checker(proof, d, p1, p2, m1, m2, seqs, tol))
    if seqs is not None and m2 is not None:
        lines.append(_relation(relation, tol, m1, m2, seqs))
    elif seqs is None and m2 is None:
        raise CertificateError("a failure must record its witness sequences")
    return CertificateCheck(ok=True, kind="counterexample", theorem=theorem, summary=lines)


def _relation(relation: str, tol: Fraction | None, m1: Any, m2: Any, seqs: list[Any]) -> str:
    lengths = sorted({len(X) for X in seqs})
    for i, X in enumerate(seqs):
        if relation == "equal":
            if with_prec(lambda X=X: bool(abs(ball_value(m1, X) - ball_value(m2, X)) > 0)):
                raise CertificateError(f"sequences[{i}]: the pair differs there (disjoint balls)")
            a, b = exact_value(m1, X), exact_value(m2, X)
            if not get_arithmetic("exact").agree(a, b):
                raise CertificateError(f"sequences[{i}]: the pair differs there ({a} vs {b})")
            continue

        def decide(X: Any = X) -> bool:
            a, b = ball_value(m1, X), ball_value(m2, X)
            if relation == "within":
                assert tol is not None
                return bool(abs(a - b) <= arb(tol))
            return bool((a > 0 and b > 0) or (a < 0 and b < 0))

        if not with_prec(decide):
            if relation == "same-sign" and exact_value(m1, X) == 0 == exact_value(m2, X):
                continue
            raise CertificateError(
                f"sequences[{i}]: the relation {relation!r} is not shown there at {PRECISION} bits"
            )
    how = {
        "equal": "equal (==, exact)",
        "within": f"within {tol} (balls at {PRECISION} bits)",
        "same-sign": f"of the same sign (balls at {PRECISION} bits)",
    }[relation]
    return (
        f"relation: the pair is {how} at the {len(seqs)} recorded sequences "
        f"(lengths {', '.join(map(str, lengths))})"
    )


# ---------------------------------------------------------------------------------------
# The structural rules.
# ---------------------------------------------------------------------------------------


def _rule_zero_value(proof: Any, d: int, p1: Any, p2: Any, *_: Any) -> str:
    need(p2 is not None and "v" in p1 and "V" not in p1, "zero-value")
    if any(p1["v"]) or any(p2["v"]):
        raise CertificateError("zero-value: a model has v != 0, the structural proof fails")
    if _seqs_of(*_) is not None:
        raise CertificateError("zero-value holds on every sequence: sequences must be null")
    return "structure: both heads have v = 0, so f = 0 on every sequence whatever W is"


def _seqs_of(m1: Any, m2: Any, seqs: Any, tol: Any) -> Any:
    return seqs


def _rule_positive_scale(proof: Any, d: int, p1: Any, p2: Any, *rest: Any) -> str:
    need(p2 is not None and "v" in p1 and "V" not in p1, "positive-scale")
    if p1["W"] != p2["W"]:
        raise CertificateError("positive-scale: the heads have different W")
    i = next((k for k, x in enumerate(p1["v"]) if x != 0), None)
    if i is None:
        raise CertificateError("positive-scale: first has v = 0")
    c = p2["v"][i] / p1["v"][i]
    if c <= 0 or [c * x for x in p1["v"]] != p2["v"]:
        raise CertificateError("positive-scale: second's v is not a positive multiple of first's")
    if _seqs_of(*rest) is not None:
        raise CertificateError("positive-scale holds on every sequence: sequences must be null")
    return (
        f"structure: equal W and v2 = {c} v1 with {c} > 0, so f2 = {c} f1 and sign f2 = "
        "sign f1 on every sequence"
    )


def _ffn_is_zero(p: dict[str, Any]) -> bool:
    V, A, w = p["V"], p["A"], p["w_o"]
    d, e, m = len(V), len(A), len(w)
    cols = [
        [sum((V[i][t] * A[t][k] for t in range(e)), Fraction(0)) for i in range(d)]
        for k in range(m)
    ]
    rays: dict[tuple[Fraction, ...], Fraction] = {}
    for col, wk in zip(cols, w, strict=True):
        lead = next((abs(x) for x in col if x != 0), None)
        if lead is None:
            continue  # ReLU(0) = 0: a dead neuron contributes nothing
        key = tuple(x / lead for x in col)
        rays[key] = rays.get(key, Fraction(0)) + wk * lead
    return all(total == 0 for total in rays.values())


def _rule_cancelling(proof: Any, d: int, p1: Any, p2: Any, *rest: Any) -> str:
    need(p2 is not None and "V" in p1, "cancelling-neurons")
    for name, p in (("first", p1), ("second", p2)):
        if not _ffn_is_zero(p):
            raise CertificateError(
                f"cancelling-neurons: {name}'s FFN neurons do not cancel ray by ray"
            )
    if _seqs_of(*rest) is not None:
        raise CertificateError("cancelling-neurons holds on every sequence: sequences must be null")
    return (
        "structure: in both models g(z) = w_o^T ReLU(A^T V^T z) is a sum over rays r of "
        "(sum of scaled weights) ReLU(r^T z) with every sum 0, so g = 0 and T = 0 on every "
        "sequence whatever W is (and v_eff = V A w_o = 0)"
    )


def _rule_design(
    proof: Any, d: int, p1: Any, p2: Any, m1: Any, m2: Any, seqs: Any, tol: Any
) -> str:
    need(p2 is not None and "v" in p1 and "V" not in p1 and seqs is not None, "design-queries")
    U = mat(kernel.get(proof, "U"), "proof.U", d, d)
    if exact_rank(U) < d:
        raise CertificateError("proof.U is not invertible")
    left = kernel.get(proof, "left_out")
    design = design_queries(U, d)
    keys = [k for k, _ in design]
    if left is not None:
        left = tuple(left)
        if left not in [tuple(k) for k in keys]:
            raise CertificateError(f"proof.left_out {left!r:.40} is not a query of the design")
    kept = [X for k, X in design if k != left]
    if sorted(map(sequence_key, kept)) != sorted(map(sequence_key, seqs)):
        raise CertificateError(
            "the sequences are not the design's queries"
            + (f" without {left}" if left is not None else "")
        )
    parts = [f"design: the {len(seqs)} sequences are U's design queries"]
    if left is not None:
        X_left = dict(design)[left]
        if not differ(m1, m2, X_left):
            raise CertificateError("the pair agrees at the left-out query too")
        parts.append(
            f"without {left[0]} query {list(left[1:])}, at which the pair differs (exactly)"
        )
    orth = kernel.get(proof, "orthogonal")
    if orth is not None:
        k = kernel.as_int(orth, "proof.orthogonal", high=d - 1)
        for name, p in (("first", p1), ("second", p2)):
            if sum((U[i][k] * p["v"][i] for i in range(d)), Fraction(0)) != 0:
                raise CertificateError(f"u_{k}^T v != 0 in {name}: column {k} is not orthogonal")
        parts.append(f"with u_{k}^T v = 0 in both models")
    return "; ".join(parts)


def _rule_recorded(
    proof: Any, d: int, p1: Any, p2: Any, m1: Any, m2: Any, seqs: Any, tol: Any
) -> str:
    need(p2 is not None and seqs is not None, "recorded-queries")
    parts = [f"recorded: the {len(seqs)} sequences are the learner's queries as it asked them"]
    ranks = proof.get("ranks")
    if ranks is not None:
        r1, r2 = (
            kernel.as_int(x, f"proof.ranks[{i}]")
            for i, x in enumerate(kernel.as_list(ranks, "proof.ranks", 2))
        )
        if (exact_rank(p1["W"]), exact_rank(p2["W"])) != (r1, r2):
            raise CertificateError(
                f"proof.ranks says {r1}, {r2}; the stored W have ranks "
                f"{exact_rank(p1['W'])}, {exact_rank(p2['W'])}"
            )
        parts.append(f"rank W1 = {r1}, rank W2 = {r2} (exact)")
    witness = proof.get("differ")
    if witness is not None:
        X = read_sequence(witness, "proof.differ", d)
        if not differ(m1, m2, X):
            raise CertificateError("the pair agrees at proof.differ: it should tell them apart")
        parts.append("they differ (exactly) at the stated test query")
    return "; ".join(parts)


def _biased_value(p: dict[str, Any], x: list[Fraction]) -> Fraction:
    A, c, w = p["A"], p["c"], p["w_o"]
    out = Fraction(0)
    for k in range(len(w)):
        z = sum((A[i][k] * x[i] for i in range(len(x))), Fraction(0)) + c[k]
        if z > 0:
            out += w[k] * z
    return out


def _rule_not_odd_linear(
    proof: Any, d: int, p1: Any, p2: Any, m1: Any, m2: Any, seqs: Any, tol: Any
) -> str:
    need(p2 is None and "c" in p1 and seqs is not None, "not-odd-linear")
    if len(seqs) != 4 or any(len(X) != 1 for X in seqs):
        raise CertificateError("not-odd-linear needs the four length-1 sequences x, -x, 2x, -2x")
    x = seqs[0][0]
    want = [x, [-t for t in x], [2 * t for t in x], [-2 * t for t in x]]
    if [X[0] for X in seqs] != want:
        raise CertificateError("the sequences must be [x], [-x], [2x], [-2x]")
    D1 = _biased_value(p1, want[0]) - _biased_value(p1, want[1])
    D2 = _biased_value(p1, want[2]) - _biased_value(p1, want[3])
    if D2 == 2 * D1:
        raise CertificateError(f"D(2x) = 2 D(x) = {D2}: no witness against linearity")
    return (
        f"witness: D(x) = g(x) - g(-x) = {D1} and D(2x) = {D2} != 2 D(x) = {2 * D1} (exact): "
        "the antisymmetrised map of the biased FFN is not a single-head regressor's "
        "(there D(x) = 2 x^T v is linear)"
    )


_RULES = {
    "nuclear-gap": rule_nuclear_gap,
    "zero-value": _rule_zero_value,
    "positive-scale": _rule_positive_scale,
    "cancelling-neurons": _rule_cancelling,
    "design-queries": _rule_design,
    "recorded-queries": _rule_recorded,
    "paper-design": rule_paper_design,
    "adversary": rule_adversary,
    "not-odd-linear": _rule_not_odd_linear,
    **HEAD_RULES,
}
