"""Re-check ``transformer-heads`` certificates (a one-layer Transformer with several heads
and a biased ReLU FFN) from their stored queries and answers alone.

>>> import verified_attn as va
>>> from verified_attn.ffn_heads import MultiHeadTransformer
>>> T = MultiHeadTransformer([([[1]], [[1]]), ([[-1]], [[2]])], [[1]], [1], a=[1], b=2)
>>> data = va.learn_transformer(va.Oracle(T, "certified"), max_heads=2).certificate()
>>> verify(data).ok
True
>>> data["result"]["heads"][0]["W"][0][0] = "-2/1"
>>> verify(data)
Traceback (most recent call last):
...
verified_attn.errors.CertificateError: answers[...]: the stored answer ... is not the claimed Transformer's value there (...)

What is re-checked, with the core arithmetic and models only (never the learner's code):

1. the FFN stage is a whole ``relu-ffn-biased`` certificate
   (:func:`verified_attn.certificates.relu_biased.verify`) in the same setting and seed,
   verified on length 1 (g is T on one token), its assumptions carried;
2. the canonical form of the claimed Transformer: ``A`` is the m x m identity and
   ``w_o``, ``a``, ``b`` are g's; the heads (at most ``max_heads``) are in strictly
   increasing order of (W_h, c_h), so distinct; the score biases c_h are all null or not
   all zero; every V_h is d x m and not 0 (one zero head stands for a constant T), with
   its last two columns opposite when g has a linear part; and ``sum_h V_h`` is g's first
   layer, so the claimed model's length-1 function is g;
3. the cells: m' + 1 of them (m' g's canonical width), each centre strictly inside the
   open cell of its stated activation pattern, the patterns' rows ``[1, gamma_j [j in
   S]]`` independent;
4. every stored answer of the cell stages is the claimed Transformer's value at its
   sequence: equal (closed forms, decided exactly) in exact arithmetic; in certified
   arithmetic the stored ball contains a ball of the claimed model's value computed at
   twice the ball's precision or more;
5. the counts: the learning count is the FFN's plus one stored answer per learning query
   of the cells, every cell phase's count is its stored answers', the verification phases
   are ``ffn-verify``, the cells' ``.../verify`` and ``verify``, and the bound is the
   FFN's plus ``(m' + 1)`` times the affine multi-head limit at d and ``max_heads``
   (:func:`~verified_attn.multi_head.canonical_bounds.canonical_query_limit`); every cell
   attempt's learning queries are within that limit, and without retried attempts (t
   quartered, phases ``cell<i>.<k>/...``, counted beyond the bound) the learning count is
   within the bound;
6. the final verification answers agree with the claimed Transformer (the one rule).

The cells' decoding is not re-run: a certificate that checks shows that the claimed
canonical Transformer reproduces every recorded answer, not that no other one does (that
is the learner's result, under the assumptions the certificate states).
"""

from __future__ import annotations

import re
from fractions import Fraction
from typing import Any

import flint

from verified_attn.arithmetic import get_arithmetic
from verified_attn.certificates import CertificateCheck, kernel
from verified_attn.certificates.common_checks import (
    MAX_WORK,
    Vec,
    check_phases,
    exact_header,
    matrix,
    passed,
    vector,
)
from verified_attn.certificates.relu_biased import Neuron, stated_network
from verified_attn.certificates.relu_biased import verify as verify_ffn
from verified_attn.errors import CertificateError, VerifiedAttnError
from verified_attn.ffn_heads import MultiHeadTransformer
from verified_attn.multi_head.canonical_bounds import canonical_query_limit
from verified_attn.sequences import as_rational_sequence
from verified_attn.validation import MAX_LENGTH

__all__ = ["stored_per_phase", "verify"]

THEOREM = "transformer/multi-head-cells"
#: Most heads a certificate may claim (each is d x d + d x m rationals read in full).
MAX_HEADS = 4096
#: Most exponent sums (one score per head: up to N^H on N tokens) the checker's exact
#: evaluation of the claimed model may meet on one sequence: 16^5.
MAX_TERMS = 1 << 20
_PHASE = re.compile(r"cell([1-9][0-9]{0,5})(\.[1-9][0-9]{0,5})?/([A-Za-z0-9()_.-]{1,64})")


def verify(data: dict[str, Any]) -> CertificateCheck:
    """Re-check a ``transformer-heads`` certificate; CertificateError naming what fails."""
    head = exact_header(data, "transformer-heads", THEOREM, "multi-head Transformer")
    d, arith = head.d, head.arith
    H0 = kernel.as_int(kernel.get(data, "max_heads"), "max_heads", low=1, high=MAX_HEADS)
    ffn = kernel.get(data, "ffn")
    ffn_lines = _ffn_stage(ffn, head)
    g, _, linear, neurons = stated_network(ffn, d)
    ncells = _cells(data, neurons, linear, d)
    model, H = _claimed(data, g, any(linear), d, H0)
    lengths = kernel.get(data, "verification.lengths")
    if isinstance(lengths, list) and all(isinstance(n, int) for n in lengths) and lengths:
        _bounded(max(lengths), H, "verification.lengths")
    per_phase = _answers(data, head, model)
    for phase in per_phase:
        cell = int(_PHASE.fullmatch(phase).group(1))  # type: ignore[union-attr]
        if cell > ncells:
            raise CertificateError(f"answers: phase {phase!r} names a cell past the {ncells}")
    stored_per_phase(data, per_phase)
    ffn_q = kernel.as_int(kernel.get(ffn, "queries.learning"), "ffn.queries.learning")
    ffn_v = kernel.as_int(kernel.get(ffn, "queries.verification"), "ffn.queries.verification")
    ffn_bound = kernel.as_int(kernel.get(ffn, "queries.bound"), "ffn.queries.bound")
    cell_verify = {p: n for p, n in per_phase.items() if p.endswith("/verify")}
    cell_learning = sum(per_phase.values()) - sum(cell_verify.values())
    phases = {"ffn": ffn_q, "ffn-verify": ffn_v, **per_phase}
    per_cell = canonical_query_limit(d, H0, affine=True)
    q = kernel.check_counts(
        data,
        learning=ffn_q + cell_learning,
        bound=ffn_bound + ncells * per_cell,
        phases={p: n for p, n in phases.items() if n},
        verification_phases=("ffn-verify", *cell_verify, "verify"),
    )
    check_phases(q["by_phase"], [*phases, "verify"])
    retried = _within_limit(per_phase, per_cell)
    if not retried and q["bound"] < q["learning"]:
        raise CertificateError(f"queries.bound {q['bound']} is below the learning count")
    if (
        kernel.get(data, "verification.count")
        and kernel.get(data, "verification.seed") != head.seed
    ):
        raise CertificateError(f"verification.seed must be the certificate's seed {head.seed}")

    def predict(X: Any) -> Any:
        return model.evaluate_rational(as_rational_sequence(X, d), arith)

    rule = "equal (==)" if arith.name == "exact" else "inside their balls"
    lines = [
        head.describe() + f", method multi-head-cells, max_heads {H0}",
        *ffn_lines,
        f"result: {H} heads in canonical order, sum_h V_h = g's first layer, A = I, w_o, a, b g's",
        f"cells: {ncells} (canonical width {len(neurons)} + 1), centres inside their "
        "patterns' cells, patterns independent",
        f"answers: the claimed Transformer's values at all {sum(per_phase.values())} stored "
        f"cell queries are the stored answers ({rule})",
        f"queries: {q['learning']} learning = {ffn_q} FFN + {cell_learning} cells; bound "
        f"{q['bound']} = {ffn_bound} (FFN) + {ncells} x {per_cell} (affine multi-head limit, "
        f"d = {d}, max_heads = {H0}); every cell attempt within {per_cell}"
        + (f" ({retried} retried with t / 4, beyond the bound)" if retried else "")
        + f"; {q['verification']} verification",
        kernel.check_verification(
            data, head, predict, expected_queries=q["by_phase"].get("verify", 0)
        ),
    ]
    return passed(head, lines)


def _within_limit(per_phase: dict[str, int], per_cell: int) -> int:
    """Each cell attempt's (``cell<i>`` or ``cell<i>.<k>``) learning queries are within the
    affine multi-head limit; returns how many attempts were retries (their queries are
    counted but not in the bound)."""
    attempts: dict[str, int] = {}
    for phase, n in per_phase.items():
        label, _, inner = phase.partition("/")
        if inner != "verify":
            attempts[label] = attempts.get(label, 0) + n
    for label, n in attempts.items():
        if n > per_cell:
            raise CertificateError(
                f"queries: {label} has {n} learning queries, above the affine multi-head "
                f"limit {per_cell}"
            )
    return sum("." in label for label in attempts)


def stored_per_phase(data: dict[str, Any], per_phase: dict[str, int]) -> None:
    """Every cell phase's stated count is the number of its stored answers."""
    stated = kernel.get(data, "queries.by_phase")
    if not isinstance(stated, dict):
        raise CertificateError("queries.by_phase must be a JSON object")
    named = {p for p in stated if isinstance(p, str) and p.startswith("cell")}
    for phase in sorted(named | set(per_phase)):
        if stated.get(phase, 0) != per_phase.get(phase, 0):
            raise CertificateError(
                f"queries.by_phase.{phase} is {stated.get(phase, 0)}, but "
                f"{per_phase.get(phase, 0)} answers of that phase are stored"
            )


def _ffn_stage(ffn: Any, head: kernel.Header) -> list[str]:
    """The FFN stage: a whole ``relu-ffn-biased`` certificate of this run's setting."""
    if not isinstance(ffn, dict):
        raise CertificateError("ffn must be a JSON object")
    try:
        ffn_lines = verify_ffn(ffn).summary
    except CertificateError as exc:
        raise CertificateError(f"ffn: {exc}") from exc
    for key, want in (
        ("d", head.d),
        ("seed", head.seed),
        ("arithmetic", head.arith.name),
        ("precision", head.arith.precision),
    ):
        if ffn.get(key) != want:
            raise CertificateError(f"ffn.{key} must be the certificate's ({want!r})")
    if kernel.get(ffn, "verification.count") and kernel.get(ffn, "verification.lengths") != [1]:
        raise CertificateError("ffn.verification.lengths must be [1]: g is T on length 1")
    missing = [a for a in kernel.get(ffn, "assumptions") if a not in head.assumptions]
    if missing:
        raise CertificateError(f"assumptions omit the FFN stage's assumption {missing[0][:80]!r}")
    return [f"ffn {line}" for line in ffn_lines[1:] if not line.startswith("assumption")]


def _cells(data: dict[str, Any], neurons: list[Neuron], linear: Vec, d: int) -> int:
    """The stated cells: m' + 1, each centre in its pattern's open cell, independent."""
    width = len(neurons)
    raw = kernel.as_list(kernel.get(data, "cells"), "cells", width + 1)
    rows = []
    for path, item in kernel.as_objects(raw, "cells"):
        pattern = kernel.as_list(kernel.get(item, "pattern"), f"{path}.pattern", width)
        if not all(isinstance(p, bool) for p in pattern):
            raise CertificateError(f"{path}.pattern must be a list of booleans")
        center = vector(kernel.get(item, "center"), f"{path}.center", d)
        for j, ((n, c), _) in enumerate(neurons):
            z = sum((a * b for a, b in zip(n, center, strict=True)), c)
            if z == 0 or (z > 0) != pattern[j]:
                raise CertificateError(
                    f"{path}.center is not strictly inside the cell of its pattern (neuron {j})"
                )
        row = [Fraction(1)] + [
            g if on else Fraction(0) for (_, g), on in zip(neurons, pattern, strict=True)
        ]
        rows.append([flint.fmpq(q.numerator, q.denominator) for q in row])
    if flint.fmpq_mat(rows).rank() != width + 1:
        raise CertificateError("cells: the patterns' rows [1, gamma_j [j in S]] are dependent")
    return width + 1


def _claimed(
    data: dict[str, Any], g: Any, linear: bool, d: int, H0: int
) -> tuple[MultiHeadTransformer, int]:
    """The claimed Transformer, its canonical form checked (see the module doc, item 2)."""
    res = kernel.get(data, "result")
    m = g.m
    A = matrix(kernel.get(res, "A"), "result.A", m, m)
    if A != [[Fraction(int(i == j)) for j in range(m)] for i in range(m)]:
        raise CertificateError(f"result.A must be the {m} x {m} identity (the canonical form)")
    for key, want in (("w_o", g.w_o), ("a", g.a)):
        got = vector(kernel.get(res, key), f"result.{key}", m)
        if [sympy_q(x) for x in want] != list(got):
            raise CertificateError(f"result.{key} is not the FFN's (ffn.result)")
    if kernel.rational(kernel.get(res, "b"), "result.b") != sympy_q(g.b):
        raise CertificateError("result.b is not the FFN's (ffn.result)")
    raw = kernel.as_list(kernel.get(res, "heads"), "result.heads")
    if not 1 <= len(raw) <= H0:
        raise CertificateError(f"result.heads: {len(raw)} heads, expected 1 to max_heads = {H0}")
    parts: list[tuple[list[list[Fraction]], list[list[Fraction]], list[Fraction] | None]] = []
    keys: list[tuple[list[Fraction], list[Fraction]]] = []
    for path, item in kernel.as_objects(raw, "result.heads"):
        W = matrix(kernel.get(item, "W"), f"{path}.W", d, d)
        V = matrix(kernel.get(item, "V"), f"{path}.V", d, m)
        c_raw = kernel.get(item, "c")
        c = None if c_raw is None else list(vector(c_raw, f"{path}.c", d))
        if not any(x for row in V for x in row) and len(raw) > 1:
            raise CertificateError(f"{path}.V is 0 (a canonical head has a nonzero value)")
        if linear and any(row[-2] != -row[-1] for row in V):
            raise CertificateError(f"{path}.V: its last two columns (l and -l) are not opposite")
        order = ([x for row in W for x in row], c or [Fraction(0)] * d)
        if keys and not keys[-1] < order:
            raise CertificateError(f"{path}: the heads must be distinct and sorted by (W, c)")
        keys.append(order)
        parts.append((W, V, c))
    biases = [c is not None for _, _, c in parts]
    if any(biases) and not all(biases):
        raise CertificateError("result.heads: the score biases c must be all null or all given")
    if all(biases) and not any(x for _, _, c in parts for x in c or []):
        raise CertificateError("result.heads: every c is 0 (the canonical form gives null)")
    total = [[sum((V[i][k] for _, V, _ in parts), Fraction(0)) for k in range(m)] for i in range(d)]
    if total != [[sympy_q(g.A[i, k]) for k in range(m)] for i in range(d)]:
        raise CertificateError("result.heads: sum_h V_h is not g's first layer (ffn.result.A)")
    try:
        model = MultiHeadTransformer(
            [(W, V) if c is None else (W, V, c) for W, V, c in parts], A, g.w_o, a=g.a, b=g.b
        )
    except VerifiedAttnError as exc:
        raise CertificateError(f"the claimed parameters are not a model: {exc}") from exc
    return model, len(parts)


def sympy_q(x: Any) -> Fraction:
    """A SymPy rational of a stated model as a Fraction."""
    return Fraction(int(x.p), int(x.q))


def _answers(data: dict[str, Any], head: kernel.Header, model: Any) -> dict[str, int]:
    """Every stored cell answer reproduced by the claimed model; the count per phase."""
    arith, d = head.arith, head.d
    raw = kernel.as_list(kernel.get(data, "answers"), "answers")
    if len(raw) * d * (model.H + model.m) > MAX_WORK:
        raise CertificateError("answers: more answers x heads than a checker evaluates")
    bits = kernel.get(data, "cell_precision")
    if bits is not None:
        if arith.name != "certified":
            raise CertificateError("cell_precision is set outside certified arithmetic")
        bits = kernel.as_int(bits, "cell_precision", low=32, high=kernel.MAX_PRECISION)
    load = arith if bits is None else get_arithmetic("certified", bits)
    counts: dict[str, int] = {}
    for path, item in kernel.as_objects(raw, "answers"):
        phase = kernel.get(item, "phase")
        if not isinstance(phase, str) or not _PHASE.fullmatch(phase):
            raise CertificateError(f"{path}.phase must be a cell phase 'cell<i>/<name>'")
        counts[phase] = counts.get(phase, 0) + 1
        rows = kernel.as_list(kernel.get(item, "X"), f"{path}.X")
        if not 1 <= len(rows) <= MAX_LENGTH:
            raise CertificateError(f"{path}.X must have 1 to {MAX_LENGTH} tokens")
        _bounded(len(rows), model.H, f"{path}.X")
        X = matrix(rows, f"{path}.X", len(rows), d)
        Xq = flint.fmpq_mat([[flint.fmpq(q.numerator, q.denominator) for q in r] for r in X])
        with load.context():
            y = kernel.number(
                kernel.get(item, "y"), f"{path}.y", load, max_calls=kernel.answer_calls(len(X))
            )
        _reproduced(y, Xq, model, load, path)
    return counts


def _bounded(tokens: int, heads: int, path: str) -> None:
    """Refuse a sequence on which the claimed model's exact evaluation could meet more
    than :data:`MAX_TERMS` exponent sums (``tokens ** heads``)."""
    if tokens**heads > MAX_TERMS:  # heads <= MAX_HEADS and tokens <= MAX_LENGTH: cheap
        raise CertificateError(
            f"{path}: {tokens} tokens under {heads} heads is more work than a checker does "
            f"(up to {tokens}^{heads} exponent sums, at most {MAX_TERMS})"
        )


def _reproduced(y: Any, Xq: flint.fmpq_mat, model: Any, arith: Any, path: str) -> None:
    """The claimed model's value at Xq is the stored answer y (see item 4)."""
    if arith.name == "exact":
        want = model.evaluate_rational(Xq, arith)
        same = kernel.exact_ball(y).overlaps(kernel.exact_ball(want)) and arith.agree(y, want)
        if same:
            return
        shown = f"{want}"
    else:
        p = arith.precision
        shown = ""
        for bits in sorted({min(2 * p, kernel.MAX_PRECISION), min(8 * p, kernel.MAX_PRECISION)}):
            fine = get_arithmetic("certified", bits)
            with fine.context():
                want = model.evaluate_rational(Xq, fine)
                if flint.arb(y).contains(want):
                    return
                shown = f"{want}"
                if not flint.arb(y).overlaps(want):
                    break
    raise CertificateError(
        f"{path}: the stored answer {str(y)[:80]} is not the claimed Transformer's value there "
        f"({shown[:80]})"
    )
