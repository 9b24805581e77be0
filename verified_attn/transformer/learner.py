"""Learn a one-layer Transformer exactly: the paper's reduction plus an exact FFN learner.

>>> import verified_attn as va
>>> from verified_attn.transformer.learner import learn_transformer
>>> from verified_attn.models import OneLayerTransformer
>>> T = OneLayerTransformer([[1, 0], [2, -1]], [[1, 0], [0, 1]], [[1, -1, 0], [1, 2, 1]], [2, 1, -1])
>>> rec = learn_transformer(va.Oracle(T, "certified"))
>>> rec.W == T.W, rec.v_eff == T.v_eff, rec.exact, rec.verified
(True, True, True, True)
>>> rec.queries_by_phase["attention-v"], rec.queries_by_phase["attention-W"]   # 2d, 2d^2
(4, 8)
>>> rec.attention_queries, rec.attention_bound, rec.bound - rec.attention_bound
(12, 12, 1214)
>>> X = [[1, 0], [0, 1], [-1, 1]]
>>> rec.model.evaluate(X, "exact") == T.evaluate(X, "exact")
True
>>> va.verify_certificate(rec.certificate()).ok
True

The reduction (see the documentation's theory page, docs/theory.md, §6). Scores are even
in X, so ``T(X) - T(-X) = alpha(X)^T X v_eff`` with ``v_eff = V A w_o``
(:mod:`verified_attn.transformer.symbolic`): a single head. ``"paper"`` runs Theorem 4.1
(:func:`verified_attn.learn_single_head`, unchanged) on that antisymmetrised oracle, each
of its queries costing two real ones, 2(d^2 + d) in all; the length-1 queries give
``g(x) = T([x])``, learned exactly by :func:`~verified_attn.transformer.relu.learn_relu_ffn`.
Since ``T(X) = g(X^T alpha(X))``, W and g determine T as a function; the learned
Transformer is ``(W, V = I, A', w_o')`` with ``g = w_o'^T ReLU(A'^T x)`` in canonical form,
and it is verified on the core's fresh sequences (lengths 1..16).

Phases on the oracle: ``ffn`` (learning) and ``ffn-verify`` (verification, length-1
sequences) for g; ``attention-v``, ``attention-W`` (and ``attention-rescale``) for the
head, ``attention-verify`` for its verification (each antisymmetrised query costs two real
ones); ``attention-direct`` for the direct method; ``verify`` for the whole Transformer.
Verification phases are declared as such, so ``rec.queries + rec.verification_queries``
is everything the call asked.

``rec.bound`` is the attention formula (:func:`paper_attention_count`, or d^2 for
"direct") plus the FFN learner's worst case at the learned width
(:func:`~verified_attn.transformer.relu.ffn_query_bound`): the FFN part has no closed form
in d and m alone.
"""

from __future__ import annotations

import functools
from fractions import Fraction
from typing import Any, Unpack

import flint
import numpy as np
import sympy

from verified_attn.arithmetic import (
    Arithmetic,
)
from verified_attn.certificates.writer import RunRecord
from verified_attn.errors import (
    ModelClassMismatch,
    NotIdentifiable,
    PrecisionExhausted,
)
from verified_attn.exact_recovery import learn_single_head
from verified_attn.learner_options import ExactOptions
from verified_attn.models import OneLayerTransformer, as_rational_sequence
from verified_attn.oracle import Oracle, QueryCounts
from verified_attn.progress import reporting
from verified_attn.recovery import ReluFFNRecovery, SingleHeadRecovery, TransformerRecovery
from verified_attn.serialize import dump_number, dump_rational
from verified_attn.transformer.common import learner_arguments, length_one_ffn, verify_learned
from verified_attn.transformer.direct import direct_attention as _direct_attention
from verified_attn.transformer.direct import direct_denominator_bound as _direct_denominator_bound
from verified_attn.transformer.relu import ReluNetwork, learn_relu_ffn
from verified_attn.validation import (
    check_choice,
    check_oracle,
)
from verified_attn.verification import (
    Verification,
)

__all__ = [
    "METHODS",
    "antisymmetrised",
    "learn_transformer",
    "paper_attention_count",
]

METHODS = ("paper", "direct")

Key = tuple[tuple[Fraction, ...], ...]


def paper_attention_count(d: int) -> int:
    """Real queries Thm 4.1 costs on the antisymmetrised oracle: 2(d^2 + d).

    >>> paper_attention_count(16)
    544
    """
    return 2 * (d * d + d)


def _key(Xq: flint.fmpq_mat) -> Key:
    return tuple(
        tuple(Fraction(int(Xq[i, j].p), int(Xq[i, j].q)) for j in range(Xq.ncols()))
        for i in range(Xq.nrows())
    )


class _Antisymmetrised:
    """The model ``X -> T(X) - T(-X)``, answered by two queries to the real oracle.

    Its queries are counted on the real oracle under "attention-<phase>", where <phase>
    is the phase of the wrapping oracle (v, W, rescale, verify), and declared verification
    there when the wrapping phase is, so the real count is honest. Every pair of real
    answers is kept (for certificates).
    """

    model_class = "single-head"

    def __init__(self, inner: Oracle) -> None:
        self.inner = inner
        self.d = inner.d
        self.outer: Oracle | None = None
        self.pairs: dict[Key, tuple[Any, Any]] = {}

    def _forward(self) -> Any:
        outer = self.outer
        name = "attention-" + (outer.phase_name if outer is not None else "other")
        return self.inner.phase(
            name, verification=outer.in_verification if outer is not None else False
        )

    def evaluate_rational(self, Xq: flint.fmpq_mat, arith: Any) -> Any:
        with self._forward():
            plus, minus = self.inner.query_many([Xq, -Xq])
        self.pairs[_key(Xq)] = (plus, minus)
        return plus - minus

    def evaluate_batch(self, Xs: np.ndarray) -> np.ndarray:
        Xs = np.asarray(Xs, dtype=np.float64)
        with self._forward():
            answers = self.inner.query_many(list(Xs) + list(-Xs))
        n = len(Xs)
        return np.array(answers[:n], dtype=np.float64) - np.array(answers[n:], dtype=np.float64)


def antisymmetrised(oracle: Oracle) -> Oracle:
    """An oracle for ``T(X) - T(-X)`` whose every query costs two queries to ``oracle``.

    >>> import verified_attn as va
    >>> from verified_attn.models import ReluFFN
    >>> inner = va.Oracle(ReluFFN([[1, 1]], [1, 2]), "exact")     # ReLU(x) + 2 ReLU(x)
    >>> outer = antisymmetrised(inner)
    >>> outer.query([[3]]), outer.queries, inner.queries           # 9 - 0
    (9, 1, 2)
    """
    check_oracle(oracle)
    adapter = _Antisymmetrised(oracle)
    outer = Oracle(adapter, oracle.arithmetic, model_class="single-head")
    adapter.outer = outer
    return outer


def learn_transformer(
    oracle: Oracle,
    *,
    method: str = "paper",
    **options: Unpack[ExactOptions],
) -> TransformerRecovery:
    """Learn ``T(X) = w_o^T ReLU(A^T V^T X^T softmax(X W x_N))`` exactly from queries.

    ``method="paper"``: Thm 4.1 on the antisymmetrised oracle (2(d^2 + d) queries) plus the
    exact FFN learner on length-1 queries; ``"direct"``: the FFN first, then W from d^2
    plain two-token queries inside one linear piece of the learned g (works when v_eff = 0
    too). ``verify``: fresh sequences per stage (the FFN on length 1, the head, and the
    whole Transformer on sequences of the given ``lengths`` in turn); 0: not verified.
    ``denominator_bound``: certified answers and parameters are reconstructed as rationals
    with at most this denominator (the result records the assumption). ``progress``: a bar
    or callback over the queries (:mod:`verified_attn.progress`).

    The result's parameters are ``W``, ``v_eff`` (= V A w_o) and the canonical FFN ``A``,
    ``w_o``; ``rec.model`` is ``OneLayerTransformer(W, I, A, w_o)``, equal to the oracle as
    a function. Counts are real queries on the oracle passed in.

    Raises :class:`NotIdentifiable` if ``v_eff = V A w_o = 0`` (then T(X) = T(-X) and the
    paper's reduction sees no attention) or g = 0, :class:`ModelClassMismatch` if the
    oracle is not such a Transformer, :class:`InvalidArgument` for float oracles (exact
    learning needs rational answers), an unknown method or another bad argument.
    """
    opts = learner_arguments(oracle, "learn_transformer", options)
    verify, seed, lengths, denominator_bound, progress = opts
    method = check_choice(method, "method", METHODS)
    arith = oracle.arithmetic
    d = oracle.d
    with reporting(oracle, progress, "learn_transformer"), oracle.run() as run:
        ffn = length_one_ffn(learn_relu_ffn, oracle, opts)
        net: ReluNetwork = ffn.network
        head: SingleHeadRecovery | None = None
        direct: dict[str, Any] | None = None
        pairs: dict[Key, tuple[Any, Any]] = {}
        if method == "direct":
            v_eff = sympy.Matrix([_sympy_q(q) for q in _v_eff(net)])
            with arith.context(), oracle.phase("attention-direct"):
                W, direct = _direct_attention(oracle, net, seed, denominator_bound)
            head_notes: list[str] = []
        else:
            head, pairs = _paper_attention(oracle, verify, seed, lengths, denominator_bound)
            W, v_eff, head_notes = head.W, head.v, list(head.notes)
            _check_v_eff(net, v_eff)
        g = net.model()
        model = OneLayerTransformer(W, sympy.eye(d), g.A, g.w_o)
        checked = _verify_transformer(oracle, model, verify, seed, lengths)
    counts = run.counts
    attention = _attention_queries(counts)
    attention_bound = paper_attention_count(d) if method == "paper" else d * d
    bound = attention_bound + ffn.bound
    assumptions = _assumptions(arith, method, ffn, head, denominator_bound)
    certificate = functools.partial(
        _certificate_data,
        RunRecord(arith, seed, counts, bound, checked, assumptions),
        method,
        ffn,
        head,
        pairs,
        direct,
        {"W": W, "v_eff": v_eff, "A": g.A, "w_o": g.w_o},
    )
    return TransformerRecovery.from_run(
        counts,
        theorem=f"transformer/{method}",
        parameters={"W": W, "v_eff": v_eff, "A": g.A, "w_o": g.w_o},
        learned_model=model,
        arithmetic=arith.name,
        precision=arith.precision,
        exact=True,
        bound=bound,
        parameter_count=d * d + net.width * (d + 1),
        seed=seed,
        verification=checked,
        assumptions=assumptions,
        notes=list(ffn.notes) + head_notes,
        certificate_data=certificate,
        method=method,
        attention_queries=attention,
        ffn_queries=ffn.queries,
        attention_bound=attention_bound,
        network=net,
    )


def _verify_transformer(
    oracle: Oracle, model: OneLayerTransformer, verify: int, seed: int, lengths: Any
) -> Verification | None:
    """Fresh sequences; rationals reconstructed from balls are checked at a raised precision."""
    return verify_learned(
        oracle, model, count=verify, seed=seed, lengths=lengths, what="the learned Transformer"
    )


def _attention_queries(counts: QueryCounts) -> int:
    """The learning queries of the attention phases."""
    return sum(
        n
        for k, n in counts.by_phase.items()
        if k.startswith("attention-") and k not in counts.verification_phases
    )


def _assumptions(
    arith: Arithmetic,
    method: str,
    ffn: ReluFFNRecovery,
    head: SingleHeadRecovery | None,
    denominator_bound: int | None,
) -> list[str]:
    """The FFN's and the head's assumptions, and the direct method's denominator bound."""
    assumptions = list(dict.fromkeys(ffn.assumptions + (head.assumptions if head else [])))
    if method == "direct" and arith.name == "certified":
        D = _direct_denominator_bound(arith, denominator_bound)
        assumptions.append(
            f"every entry of W is a rational with denominator <= {D} (the denominator bound): "
            f"each ball at {arith.precision} bits holds exactly one such rational"
        )
    return assumptions


def _sympy_q(q: Fraction) -> sympy.Rational:
    return sympy.Rational(q.numerator, q.denominator)


def _paper_attention(
    oracle: Oracle,
    verify: int,
    seed: int,
    lengths: tuple[int, ...],
    denominator_bound: int | None,
) -> tuple[SingleHeadRecovery, dict[Key, tuple[Any, Any]]]:
    """Thm 4.1 on the antisymmetrised oracle: the head's result and the real answer pairs."""
    arith = oracle.arithmetic
    outer = antisymmetrised(oracle)
    try:
        head = learn_single_head(
            outer,
            affine=False,
            verify=verify,
            seed=seed,
            lengths=lengths,
            denominator_bound=denominator_bound,
        )
    except NotIdentifiable as exc:
        raise NotIdentifiable(
            "v_eff = V A w_o = 0: then T(X) = T(-X) for every X, the antisymmetrised oracle "
            "is identically 0 and the paper's reduction cannot see W "
            f"(Thm 4.1 reported: {exc})"
        ) from exc
    if not head.exact:
        raise PrecisionExhausted(
            f"at {arith.precision} bits the head's W, v_eff did not reconstruct to rationals; "
            "raise the oracle's precision or pass denominator_bound"
        )
    return head, outer.model.pairs


def _v_eff(net: ReluNetwork) -> list[Fraction]:
    """g(x) - g(-x) = (2 l + sum_j gamma_j n_j)^T x: the v_eff the network implies."""
    want = [2 * a for a in net.linear]
    for n, gamma in net.neurons:
        want = [w + gamma * b for w, b in zip(want, n, strict=True)]
    return want


def _check_v_eff(net: ReluNetwork, v_eff: sympy.Matrix) -> None:
    """The head's v_eff must be the one g implies (the same oracle, measured twice)."""
    want = _v_eff(net)
    got = [Fraction(int(x.p), int(x.q)) for x in v_eff]
    if got != want:
        raise ModelClassMismatch(
            f"not a one-layer Transformer: the head's v_eff = {got} but the length-1 function "
            f"gives g(x) - g(-x) = {want}^T x",
            observed=got,
            expected=want,
        )


# ---------------------------------------------------------------------------------------
# Certificate data.
# ---------------------------------------------------------------------------------------


def _certificate_data(
    run: RunRecord,
    method: str,
    ffn: ReluFFNRecovery,
    head: SingleHeadRecovery | None,
    pairs: dict[Key, tuple[Any, Any]],
    direct: dict[str, Any] | None,
    params: dict[str, Any],
) -> dict[str, Any]:
    """The ``transformer`` certificate (checker: :mod:`verified_attn.certificates.transformer`).

    Beyond the common sections: ``method``; ``ffn``, the FFN stage's whole ``relu-ffn``
    certificate (its length-1 answers, canonical g and its own verification); ``attention``:
    for "paper" the head's ``single-head`` certificate with its answers left out and
    ``pairs`` in their place, the real answers ``[T(X), T(-X)]`` to every antisymmetrised
    query (``v``, ``W`` in the head's layout, ``verify`` per fresh sequence), from which a
    checker recomputes the head's answers; for "direct" the design (``base`` tokens b_j,
    ``directions`` u_k, scale ``t``) and the d x d ``answers`` to [b_j + t u_k; b_j] (row
    k, column j); ``result``: ``W``, ``v_eff``, ``A``, ``w_o`` as exact rationals.
    """
    d = ffn.network.d
    data = run.header("transformer", f"transformer/{method}", d)
    ffn_data = dict(ffn.certificate())
    ffn_data.pop("versions", None)
    attention: dict[str, Any]
    if method == "paper":
        assert head is not None
        sub = dict(head.certificate())
        sub.pop("versions", None)
        U = _rationals(sub["design"]["U"])
        scales = _rationals(sub["design"]["scales"])

        def pair(rows: list[list[Fraction]]) -> list[Any]:
            plus, minus = pairs[tuple(tuple(r) for r in rows)]
            return [dump_number(plus), dump_number(minus)]

        unit = [[Fraction(int(i == j)) for j in range(d)] for i in range(d)]
        v_pairs = [pair([unit[i]]) for i in range(d)]
        w_pairs = [
            [
                pair(
                    [
                        [unit[j][i] + scales[k][j] * U[i][k] for i in range(d)],
                        unit[j],
                    ]
                )
                for j in range(d)
            ]
            for k in range(d)
        ]
        ver_pairs = (
            []
            if head.verification is None
            else [
                pair([list(r) for r in _key(as_rational_sequence(X, d))])
                for X in head.verification.sequences
            ]
        )
        sub["answers"] = None
        sub["verification"] = dict(sub["verification"], answers=None)
        attention = {"head": sub, "pairs": {"v": v_pairs, "W": w_pairs, "verify": ver_pairs}}
    else:
        assert direct is not None
        attention = {
            "base": [[dump_rational(q) for q in b] for b in direct["base"]],
            "directions": [[dump_rational(q) for q in u] for u in direct["directions"]],
            "t": dump_rational(direct["t"]),
            "answers": [[dump_number(y) for y in row] for row in direct["answers"]],
        }

    def matrix(M: sympy.MatrixBase) -> list[list[str]]:
        return [[dump_rational(x) for x in row] for row in M.tolist()]

    data.update(
        {
            "method": method,
            "ffn": ffn_data,
            "attention": attention,
            "result": {
                "exact": True,
                "parameters": {
                    "W": matrix(params["W"]),
                    "v_eff": [dump_rational(x) for x in params["v_eff"]],
                    "A": matrix(params["A"]),
                    "w_o": [dump_rational(x) for x in params["w_o"]],
                },
            },
        }
    )
    return data


def _rationals(rows: list[list[str]]) -> list[list[Fraction]]:
    return [[Fraction(q) for q in row] for row in rows]
