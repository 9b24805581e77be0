"""Re-check ``relu-ffn`` and ``transformer`` certificates from their stored answers alone.

>>> import verified_attn as va
>>> from verified_attn.certificates.transformer import verify
>>> T = va.OneLayerTransformer([[1, 0], [1, -1]], [[1, 0], [0, 1]], [[1, -1], [0, 2]], [1, 2])
>>> check = verify(va.learn_transformer(va.Oracle(T, "certified")).certificate())
>>> check.ok, check.theorem
(True, 'transformer/paper')

What is re-checked, with the core arithmetic and models only (never the learners' code):

``relu-ffn`` (:mod:`~verified_attn.certificates.relu_ffn`)

1. header and counts (:mod:`~verified_attn.certificates.kernel`): one stored answer per
   learning query, all at distinct points; the bound is the FFN formula at the stated
   canonical width (written out here as :func:`ffn_bound`) and the learning count is
   within it; the verification phase holds whole verification rounds, one per attempt
   that reached it;
2. the canonical form: every n_j has first nonzero entry 1, the n_j are distinct and
   sorted, every gamma_j != 0, and ``A``, ``w_o`` are exactly the ReluFFN built from it;
3. every recorded answer is reproduced by the learned network: ``==`` in exact mode; in
   certified mode the network's exact value lies in the answer's ball and has a
   denominator within the stated bound (the rational the learner decoded);
4. the verification answers agree with the learned ReluFFN under the one rule.

``transformer``

1. the FFN stage is a whole ``relu-ffn`` certificate, checked as above (its verification
   on length-1 sequences: g is the Transformer's length-1 function);
2. the attention part, re-decoded: "paper": each antisymmetrised answer is recomputed as
   ``T(X) - T(-X)`` from the stored pair, and the head's ``single-head`` certificate with
   those answers is checked by :func:`verified_attn.certificates.single_head.verify`
   (design, decoding, the head's verification); "direct": the design lies in one open
   cell of the claimed g (every base token and probe strictly on the same side of every
   hyperplane), U and B are invertible, every G^T u_k != 0, and ``W = U^{-T} M B^{-1}`` is
   re-decoded from the d^2 answers with ``M[k][j] = logit((y - G^T b_j) / (t G^T u_k)) /
   t``, compared exactly (``==``; certified: the claimed rational in its ball and the only
   one of its denominator there);
3. the claimed W is the head's, ``v_eff`` is the one g implies (``2 l + sum gamma_j
   n_j``) and, for "paper", the head's v; ``A``, ``w_o`` are g's;
4. the counts: every phase is the stages' (antisymmetrised queries counted twice);
5. the verification answers agree with ``OneLayerTransformer(W, I, A, w_o)``.
"""

from fractions import Fraction
from typing import Any

import flint
import sympy

from verified_attn.arithmetic import Arithmetic, OutsideUnitInterval, arb_bounds
from verified_attn.certificates import CertificateCheck
from verified_attn.certificates.common_checks import (
    MAX_WORK,
    Vec,
    check_phases,
    passed,
    vector,
)
from verified_attn.certificates.kernel import (
    Header,
    as_int,
    as_list,
    as_matrix,
    check_counts,
    check_verification,
    get,
    largest_unique_denominator,
    numbers,
    parse_header,
    rational,
)
from verified_attn.certificates.relu_ffn import (
    Network,
    ffn_bound,
    fq,
    relu_ffn,
    verify_relu_ffn,
)
from verified_attn.errors import CertificateError, VerifiedAttnError
from verified_attn.models import OneLayerTransformer, as_rational_sequence
from verified_attn.serialize import dump_number

__all__ = ["MAX_WORK", "ffn_bound", "verify", "verify_relu_ffn"]


def _dot(a: Vec, b: Vec) -> Fraction:
    return sum((x * y for x, y in zip(a, b, strict=True)), Fraction(0))


def verify(data: dict[str, Any]) -> CertificateCheck:
    """Re-check a ``transformer`` certificate dict; CertificateError naming what fails."""
    head = parse_header(data, "transformer")
    arith, d = head.arith, head.d
    if arith.name == "float":
        raise CertificateError(
            "arithmetic must be exact or certified for a transformer certificate"
        )
    method = get(data, "method")
    if method not in ("paper", "direct"):
        raise CertificateError(f"method must be 'paper' or 'direct', got {method!r:.80}")
    if head.theorem != f"transformer/{method}":
        raise CertificateError(f"theorem is {head.theorem!r}, expected 'transformer/{method}'")
    if get(data, "result.exact") is not True:
        raise CertificateError("result.exact must be true (the Transformer learner is exact)")
    lines = [head.describe() + f", method {method}"]

    net, ffn_lines = _ffn_stage(data, head)
    lines.extend(ffn_lines)

    params = get(data, "result.parameters")
    W = _matrix(get(params, "W"), "result.parameters.W", d, d)
    v_eff = list(vector(get(params, "v_eff"), "result.parameters.v_eff", d))
    m = len(net.w)
    A = _matrix(get(params, "A"), "result.parameters.A", d, m)
    w_o = list(vector(get(params, "w_o"), "result.parameters.w_o", m))
    if A != net.A or w_o != net.w:
        raise CertificateError("result: A and w_o are not the learned g's (ffn.result)")
    if v_eff != net.v_eff():
        raise CertificateError(
            f"result v_eff: claimed {[str(q) for q in v_eff]}, but g implies "
            f"{[str(q) for q in net.v_eff()]} (g(x) - g(-x) = v_eff^T x)"
        )

    attention = get(data, "attention")
    if not isinstance(attention, dict):
        raise CertificateError("attention must be a JSON object")
    if method == "paper":
        phases, att_learning, line = _paper(attention, head, W, v_eff)
    else:
        phases, att_learning, line = _direct(attention, head, net, W)
    lines.append(line)

    ffn_q = get(data, "ffn.queries")
    for name in ("ffn", "ffn-verify"):
        phases[name] = get(ffn_q, "by_phase").get(name, 0)
    attention_bound = 2 * (d * d + d) if method == "paper" else d * d
    bound = attention_bound + as_int(get(ffn_q, "bound"), "ffn.queries.bound")
    verification_phases = ("ffn-verify", "attention-verify", "verify")
    q = check_counts(
        data,
        learning=as_int(get(ffn_q, "learning"), "ffn.queries.learning") + att_learning,
        bound=bound,
        phases=phases,
        verification_phases=verification_phases,
    )
    check_phases(q["by_phase"], phases)
    expected_final = q["verification"] - sum(
        q["by_phase"].get(p, 0) for p in ("ffn-verify", "attention-verify")
    )
    lines.append(
        f"queries: {q['learning']} learning = {att_learning} attention + "
        f"{phases['ffn']} FFN; bound {bound} = {attention_bound} "
        f"({'2(d^2 + d)' if method == 'paper' else 'd^2'}) + the FFN bound; "
        f"{q['verification']} verification"
    )

    model = _transformer(W, A, w_o, d)

    def predict(X: Any) -> Any:
        return model.evaluate_rational(as_rational_sequence(X, d), arith)

    lines.append(check_verification(data, head, predict, expected_queries=expected_final))
    return passed(head, lines)


def _ffn_stage(data: dict[str, Any], head: Header) -> tuple[Network, list[str]]:
    """The FFN stage: a whole ``relu-ffn`` certificate in the same setting and seed."""
    ffn = get(data, "ffn")
    _same_setting(ffn, head, "ffn")
    lengths = get(ffn, "verification.lengths")
    if get(ffn, "verification.count") and lengths != [1]:
        raise CertificateError("ffn.verification.lengths must be [1]: g is T on length 1")
    try:
        _, net, ffn_lines = relu_ffn(ffn)
    except CertificateError as exc:
        raise CertificateError(f"ffn: {exc}") from exc
    lines = [f"ffn {line}" for line in ffn_lines[1:] if not line.startswith("assumption")]
    _assumptions_carried(ffn, head, "ffn")
    if get(ffn, "seed") != head.seed:
        raise CertificateError(f"ffn.seed must be the certificate's seed {head.seed}")
    if get(data, "verification.count") and get(data, "verification.seed") != head.seed:
        raise CertificateError(f"verification.seed must be the certificate's seed {head.seed}")
    return net, lines


def _same_setting(sub: Any, head: Header, path: str) -> None:
    if not isinstance(sub, dict):
        raise CertificateError(f"{path} must be a JSON object")
    for key, want in (
        ("d", head.d),
        ("arithmetic", head.arith.name),
        ("precision", head.arith.precision),
    ):
        if get(sub, key) != want:
            raise CertificateError(
                f"{path}.{key} is {sub[key]!r:.80}, the certificate's is {want!r}"
            )


def _assumptions_carried(sub: dict[str, Any], head: Header, path: str) -> None:
    """What a stage's result rests on is stated for the whole result too."""
    missing = [
        a
        for a in as_list(get(sub, "assumptions"), f"{path}.assumptions")
        if a not in head.assumptions
    ]
    if missing:
        raise CertificateError(f"assumptions omit {path}'s assumption {_short(missing[0])}")


def _matrix(raw: Any, path: str, rows: int, cols: int) -> list[list[Fraction]]:
    return [
        [rational(q, f"{path}[{i}][{j}]") for j, q in enumerate(row)]
        for i, row in enumerate(as_matrix(raw, path, rows, cols))
    ]


def _transformer(
    W: list[list[Fraction]], A: list[list[Fraction]], w_o: list[Fraction], d: int
) -> Any:
    eye = [[Fraction(int(i == j)) for j in range(d)] for i in range(d)]
    try:
        return OneLayerTransformer(W, eye, A, w_o)
    except VerifiedAttnError as exc:
        raise CertificateError(f"the claimed parameters are not a model: {exc}") from exc


def _paper(
    attention: dict[str, Any], head: Header, W: list[list[Fraction]], v_eff: list[Fraction]
) -> tuple[dict[str, int], int, str]:
    """The head re-checked from T(X) - T(-X) recomputed from the stored pairs."""
    from verified_attn.certificates.single_head import verify as verify_single_head

    arith, d = head.arith, head.d
    sub = get(attention, "head")
    _same_setting(sub, head, "attention.head")
    if get(sub, "affine") is not False:
        raise CertificateError("attention.head.affine must be false (T(X) - T(-X) has no bias)")
    pairs = get(attention, "pairs")
    count = as_int(get(sub, "verification.count"), "attention.head.verification.count")
    with arith.context():
        v = [
            _difference(p, f"attention.pairs.v[{i}]", arith)
            for i, p in enumerate(as_list(get(pairs, "v"), "attention.pairs.v", d))
        ]
        Wa = [
            [_difference(p, f"attention.pairs.W[{k}][{j}]", arith) for j, p in enumerate(row)]
            for k, row in enumerate(as_matrix(get(pairs, "W"), "attention.pairs.W", d, d))
        ]
        ver = [
            _difference(p, f"attention.pairs.verify[{i}]", arith)
            for i, p in enumerate(as_list(get(pairs, "verify"), "attention.pairs.verify", count))
        ]
    filled = dict(sub)
    filled["answers"] = {"beta": None, "v": v, "W": Wa, "c": None}
    filled["verification"] = dict(get(sub, "verification"), answers=ver)
    _assumptions_carried(sub, head, "attention.head")
    if get(sub, "seed") != head.seed:
        raise CertificateError(f"attention.head.seed must be the certificate's seed {head.seed}")
    try:
        check = verify_single_head(filled)
    except CertificateError as exc:
        raise CertificateError(f"attention.head: {exc}") from exc
    claimed = get(sub, "result.parameters")
    head_W = [
        [
            _stored_rational(x, f"attention.head.result.parameters.W[{i}][{j}]")
            for j, x in enumerate(row)
        ]
        for i, row in enumerate(
            as_matrix(get(claimed, "W"), "attention.head.result.parameters.W", d, d)
        )
    ]
    head_v = [
        _stored_rational(x, f"attention.head.result.parameters.v[{i}]")
        for i, x in enumerate(as_list(get(claimed, "v"), "attention.head.result.parameters.v", d))
    ]
    if head_W != W:
        raise CertificateError("result W is not the head's W (attention.head.result)")
    if head_v != v_eff:
        raise CertificateError("result v_eff is not the head's v (attention.head.result)")
    by_phase = get(sub, "queries.by_phase")
    if not isinstance(by_phase, dict):
        raise CertificateError("attention.head.queries.by_phase must be a JSON object")
    phases = {
        f"attention-{name}": 2
        * as_int(by_phase.get(name, 0), f"attention.head.queries.by_phase.{name}")
        for name in ("v", "W", "rescale", "verify")
    }
    extra = set(by_phase) - {"v", "W", "rescale", "verify"}
    if extra:
        raise CertificateError(
            f"attention.head.queries.by_phase has unknown phases {sorted(extra)}"
        )
    learning = phases["attention-v"] + phases["attention-W"] + phases["attention-rescale"]
    summary = "; ".join(
        line for line in check.summary if line.startswith(("decoding", "verification"))
    )
    line = (
        "attention (paper): T(X) - T(-X) recomputed from every stored pair; the head's "
        f"certificate re-checked ({summary}); W and v_eff are the head's"
    )
    return phases, learning, line


def _difference(pair: Any, path: str, arith: Arithmetic) -> Any:
    plus, minus = numbers(pair, path, arith, 2)
    return dump_number(plus - minus)


def _stored_rational(x: Any, path: str) -> Fraction:
    if not (isinstance(x, dict) and set(x) == {"rational"}):
        raise CertificateError(f"{path}: an exact result stores rationals")
    return rational(x["rational"], path)


def _direct(
    attention: dict[str, Any], head: Header, net: Network, W: list[list[Fraction]]
) -> tuple[dict[str, int], int, str]:
    """W re-decoded from the d^2 two-token answers inside one open cell of g."""
    arith, d = head.arith, head.d
    base = [
        vector(b, f"attention.base[{j}]", d)
        for j, b in enumerate(as_list(get(attention, "base"), "attention.base", d))
    ]
    U = [
        vector(u, f"attention.directions[{k}]", d)
        for k, u in enumerate(as_list(get(attention, "directions"), "attention.directions", d))
    ]
    t = rational(get(attention, "t"), "attention.t")
    if t <= 0:
        raise CertificateError(f"attention.t must be > 0, got {t}")
    Ut = flint.fmpq_mat(d, d, [fq(U[k][i]) for k in range(d) for i in range(d)])
    Bm = flint.fmpq_mat(d, d, [fq(base[j][i]) for i in range(d) for j in range(d)])
    if Ut.rank() < d or Bm.rank() < d:
        raise CertificateError("attention: the directions u_k and base tokens b_j must be bases")
    probes = [tuple(b[i] + t * u[i] for i in range(d)) for u in U for b in base]
    ref = base[0]
    points = base + probes
    _check_cell(net, points)
    G = list(net.linear)
    for n, gamma in net.neurons:
        if _dot(n, ref) > 0:
            G = [a + gamma * b for a, b in zip(G, n, strict=True)]
    gu = [_dot(tuple(G), u) for u in U]
    if any(x == 0 for x in gu):
        raise CertificateError("attention: some G^T u_k = 0 (that probe carries no information)")
    with arith.context():
        answers = [
            numbers(row, f"attention.answers[{k}]", arith, d)
            for k, row in enumerate(as_list(get(attention, "answers"), "attention.answers", d))
        ]
        M = []
        for k in range(d):
            for j in range(d):
                gb = _dot(tuple(G), base[j])
                alpha = (answers[k][j] - arith.rational(gb)) / arith.rational(t * gu[k])
                try:
                    logit = arith.logit(alpha)
                except OutsideUnitInterval as exc:
                    raise CertificateError(
                        f"attention.answers[{k}][{j}]: alpha_1 = {alpha} is not certainly in (0, 1)"
                    ) from exc
                M.append(logit / arith.rational(t))
        left, right = Ut.inv(), Bm.inv()
        if arith.name == "exact":
            Wd = _sym(left) * sympy.Matrix(d, d, M) * _sym(right)
            for i in range(d):
                for j in range(d):
                    want = sympy.Rational(W[i][j].numerator, W[i][j].denominator)
                    got = sympy.sympify(Wd[i, j])
                    # The logits of a Transformer's probes are rational: compare, never simplify.
                    if not got.is_Rational or got != want:
                        raise CertificateError(
                            f"result W[{i}][{j}]: claimed {W[i][j]}, the stored answers give "
                            f"{_short(got)}"
                        )
            rule = "== the claim"
        else:
            Wa = flint.arb_mat(left) * flint.arb_mat(d, d, M) * flint.arb_mat(right)
            bound = None
            for i in range(d):
                for j in range(d):
                    D = _in_ball(W[i][j], Wa[i, j], f"result W[{i}][{j}]")
                    if D is not None:
                        bound = D if bound is None else min(bound, D)
            rule = "every claimed rational in its ball and the only one there with " + (
                "any denominator" if bound is None else f"denominator <= {bound}"
            )
    line = (
        "attention (direct): the design lies in one open cell of g, U and B invertible, "
        f"every G^T u_k != 0; W re-decoded from the {d * d} answers: {rule}"
    )
    return {"attention-direct": d * d}, d * d, line


def _check_cell(net: Network, points: list[Vec]) -> None:
    """Every point strictly on the side of every hyperplane of g that the first one is."""
    Z = net.pre_activations(points)
    for j, (n, _) in enumerate(net.neurons):
        side = Z[j, 0] > 0
        for p in range(len(points)):
            if Z[j, p] == 0 or (Z[j, p] > 0) != side:
                raise CertificateError(
                    "attention: the design is not inside one open cell of g (a base token or "
                    f"probe is on the other side of, or on, the hyperplane n = {[str(q) for q in n]})"
                )


def _in_ball(q: Fraction, ball: Any, path: str) -> int | None:
    """CertificateError unless q is in the ball and unique there for its denominator."""
    lo, hi = arb_bounds(ball)
    if not lo <= q <= hi:
        raise CertificateError(f"{path}: claimed {q} lies outside the re-decoded ball {ball}")
    D = largest_unique_denominator(lo, hi)
    if D is None:
        return None
    if q.denominator > D:
        raise CertificateError(
            f"{path}: claimed {q} is not the only rational of its denominator in the ball "
            f"{ball} (unique only up to denominator {D})"
        )
    return D


def _sym(m: flint.fmpq_mat) -> sympy.Matrix:
    return sympy.Matrix(
        m.nrows(), m.ncols(), [sympy.Rational(int(q.p), int(q.q)) for q in m.entries()]
    )


def _short(x: Any) -> str:
    text = str(x)
    return text if len(text) <= 80 else text[:77] + "..."
