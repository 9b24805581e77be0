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

from verified_attn.arithmetic import Arithmetic
from verified_attn.certificates import CertificateCheck, kernel
from verified_attn.certificates.common_checks import (
    MAX_WORK,
    check_phases,
    matrix,
    passed,
    vector,
)
from verified_attn.certificates.relu_ffn import (
    Network,
    ffn_bound,
    relu_ffn,
    verify_relu_ffn,
)
from verified_attn.certificates.transformer_direct import check_direct, short_text
from verified_attn.errors import CertificateError, VerifiedAttnError
from verified_attn.models import OneLayerTransformer, as_rational_sequence
from verified_attn.serialize import dump_number

__all__ = ["MAX_WORK", "ffn_bound", "verify", "verify_relu_ffn"]


def verify(data: dict[str, Any]) -> CertificateCheck:
    """Re-check a ``transformer`` certificate dict; CertificateError naming what fails."""
    head = kernel.parse_header(data, "transformer")
    arith, d = head.arith, head.d
    if arith.name == "float":
        raise CertificateError(
            "arithmetic must be exact or certified for a transformer certificate"
        )
    method = kernel.get(data, "method")
    if method not in ("paper", "direct"):
        raise CertificateError(f"method must be 'paper' or 'direct', got {method!r:.80}")
    if head.theorem != f"transformer/{method}":
        raise CertificateError(f"theorem is {head.theorem!r}, expected 'transformer/{method}'")
    if kernel.get(data, "result.exact") is not True:
        raise CertificateError("result.exact must be true (the Transformer learner is exact)")
    lines = [head.describe() + f", method {method}"]

    net, ffn_lines = _ffn_stage(data, head)
    lines.extend(ffn_lines)

    params = kernel.get(data, "result.parameters")
    W = matrix(kernel.get(params, "W"), "result.parameters.W", d, d)
    v_eff = list(vector(kernel.get(params, "v_eff"), "result.parameters.v_eff", d))
    m = len(net.w)
    A = matrix(kernel.get(params, "A"), "result.parameters.A", d, m)
    w_o = list(vector(kernel.get(params, "w_o"), "result.parameters.w_o", m))
    if A != net.A or w_o != net.w:
        raise CertificateError("result: A and w_o are not the learned g's (ffn.result)")
    if v_eff != net.v_eff():
        raise CertificateError(
            f"result v_eff: claimed {[str(q) for q in v_eff]}, but g implies "
            f"{[str(q) for q in net.v_eff()]} (g(x) - g(-x) = v_eff^T x)"
        )

    attention = kernel.get(data, "attention")
    if not isinstance(attention, dict):
        raise CertificateError("attention must be a JSON object")
    if method == "paper":
        phases, att_learning, line = _paper(attention, head, W, v_eff)
    else:
        phases, att_learning, line = check_direct(attention, head, net, W)
    lines.append(line)

    ffn_q = kernel.get(data, "ffn.queries")
    for name in ("ffn", "ffn-verify"):
        phases[name] = kernel.get(ffn_q, "by_phase").get(name, 0)
    attention_bound = 2 * (d * d + d) if method == "paper" else d * d
    bound = attention_bound + kernel.as_int(kernel.get(ffn_q, "bound"), "ffn.queries.bound")
    verification_phases = ("ffn-verify", "attention-verify", "verify")
    q = kernel.check_counts(
        data,
        learning=kernel.as_int(kernel.get(ffn_q, "learning"), "ffn.queries.learning")
        + att_learning,
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

    lines.append(kernel.check_verification(data, head, predict, expected_queries=expected_final))
    return passed(head, lines)


def _ffn_stage(data: dict[str, Any], head: kernel.Header) -> tuple[Network, list[str]]:
    """The FFN stage: a whole ``relu-ffn`` certificate in the same setting and seed."""
    ffn = kernel.get(data, "ffn")
    _same_setting(ffn, head, "ffn")
    lengths = kernel.get(ffn, "verification.lengths")
    if kernel.get(ffn, "verification.count") and lengths != [1]:
        raise CertificateError("ffn.verification.lengths must be [1]: g is T on length 1")
    try:
        _, net, ffn_lines = relu_ffn(ffn)
    except CertificateError as exc:
        raise CertificateError(f"ffn: {exc}") from exc
    lines = [f"ffn {line}" for line in ffn_lines[1:] if not line.startswith("assumption")]
    _assumptions_carried(ffn, head, "ffn")
    if kernel.get(ffn, "seed") != head.seed:
        raise CertificateError(f"ffn.seed must be the certificate's seed {head.seed}")
    if (
        kernel.get(data, "verification.count")
        and kernel.get(data, "verification.seed") != head.seed
    ):
        raise CertificateError(f"verification.seed must be the certificate's seed {head.seed}")
    return net, lines


def _same_setting(sub: Any, head: kernel.Header, path: str) -> None:
    if not isinstance(sub, dict):
        raise CertificateError(f"{path} must be a JSON object")
    for key, want in (
        ("d", head.d),
        ("arithmetic", head.arith.name),
        ("precision", head.arith.precision),
    ):
        if kernel.get(sub, key) != want:
            raise CertificateError(
                f"{path}.{key} is {sub[key]!r:.80}, the certificate's is {want!r}"
            )


def _assumptions_carried(sub: dict[str, Any], head: kernel.Header, path: str) -> None:
    """What a stage's result rests on is stated for the whole result too."""
    missing = [
        a
        for a in kernel.as_list(kernel.get(sub, "assumptions"), f"{path}.assumptions")
        if a not in head.assumptions
    ]
    if missing:
        raise CertificateError(f"assumptions omit {path}'s assumption {short_text(missing[0])}")


def _transformer(
    W: list[list[Fraction]], A: list[list[Fraction]], w_o: list[Fraction], d: int
) -> Any:
    eye = [[Fraction(int(i == j)) for j in range(d)] for i in range(d)]
    try:
        return OneLayerTransformer(W, eye, A, w_o)
    except VerifiedAttnError as exc:
        raise CertificateError(f"the claimed parameters are not a model: {exc}") from exc


def _paper(
    attention: dict[str, Any], head: kernel.Header, W: list[list[Fraction]], v_eff: list[Fraction]
) -> tuple[dict[str, int], int, str]:
    """The head re-checked from T(X) - T(-X) recomputed from the stored pairs."""
    from verified_attn.certificates.single_head import verify as verify_single_head

    arith, d = head.arith, head.d
    sub = kernel.get(attention, "head")
    _same_setting(sub, head, "attention.head")
    if kernel.get(sub, "affine") is not False:
        raise CertificateError("attention.head.affine must be false (T(X) - T(-X) has no bias)")
    pairs = kernel.get(attention, "pairs")
    count = kernel.as_int(
        kernel.get(sub, "verification.count"), "attention.head.verification.count"
    )
    with arith.context():
        v = [
            _difference(p, f"attention.pairs.v[{i}]", arith)
            for i, p in enumerate(kernel.as_list(kernel.get(pairs, "v"), "attention.pairs.v", d))
        ]
        Wa = [
            [_difference(p, f"attention.pairs.W[{k}][{j}]", arith) for j, p in enumerate(row)]
            for k, row in enumerate(
                kernel.as_matrix(kernel.get(pairs, "W"), "attention.pairs.W", d, d)
            )
        ]
        ver = [
            _difference(p, f"attention.pairs.verify[{i}]", arith)
            for i, p in enumerate(
                kernel.as_list(kernel.get(pairs, "verify"), "attention.pairs.verify", count)
            )
        ]
    filled = dict(sub)
    filled["answers"] = {"beta": None, "v": v, "W": Wa, "c": None}
    filled["verification"] = dict(kernel.get(sub, "verification"), answers=ver)
    _assumptions_carried(sub, head, "attention.head")
    if kernel.get(sub, "seed") != head.seed:
        raise CertificateError(f"attention.head.seed must be the certificate's seed {head.seed}")
    try:
        check = verify_single_head(filled)
    except CertificateError as exc:
        raise CertificateError(f"attention.head: {exc}") from exc
    claimed = kernel.get(sub, "result.parameters")
    head_W = [
        [
            _stored_rational(x, f"attention.head.result.parameters.W[{i}][{j}]")
            for j, x in enumerate(row)
        ]
        for i, row in enumerate(
            kernel.as_matrix(kernel.get(claimed, "W"), "attention.head.result.parameters.W", d, d)
        )
    ]
    head_v = [
        _stored_rational(x, f"attention.head.result.parameters.v[{i}]")
        for i, x in enumerate(
            kernel.as_list(kernel.get(claimed, "v"), "attention.head.result.parameters.v", d)
        )
    ]
    if head_W != W:
        raise CertificateError("result W is not the head's W (attention.head.result)")
    if head_v != v_eff:
        raise CertificateError("result v_eff is not the head's v (attention.head.result)")
    by_phase = kernel.get(sub, "queries.by_phase")
    if not isinstance(by_phase, dict):
        raise CertificateError("attention.head.queries.by_phase must be a JSON object")
    phases = {
        f"attention-{name}": 2
        * kernel.as_int(by_phase.get(name, 0), f"attention.head.queries.by_phase.{name}")
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
    plus, minus = kernel.numbers(pair, path, arith, 2)
    return dump_number(plus - minus)


def _stored_rational(x: Any, path: str) -> Fraction:
    if not (isinstance(x, dict) and set(x) == {"rational"}):
        raise CertificateError(f"{path}: an exact result stores rationals")
    return kernel.rational(x["rational"], path)
