"""Learn a one-layer Transformer whose FFN has biases: the FFN first, then W in one cell.

>>> from fractions import Fraction
>>> import verified_attn as va
>>> from verified_attn.models import OneLayerTransformer
>>> T = OneLayerTransformer([[1, -1], [0, 2]], [[1, 0], [1, 1]], [[1, 0], [1, -1]], [2, -1],
...                         a=[1, -2], b=3)
>>> rec = learn_biased_transformer(va.Oracle(T, "exact"))
>>> rec.W == T.W, rec.exact, rec.verified, rec.attention_queries      # d^2 = 4
(True, True, True, 4)
>>> rec.queries == rec.ffn_queries + 4, rec.parameter_count            # 4 + (m' + 1)(d + 1)
(True, 13)
>>> X = [[1, 0], [Fraction(1, 2), -3], [2, 1]]                          # never asked
>>> rec.model.evaluate(X, "exact") == T.evaluate(X, "exact")
True

With FFN biases ``T(X) = g(X^T alpha(X))`` still holds, with
``g(x) = T([x]) = w_o^T ReLU(A^T V^T x + a) + b`` a ReLU network with biases. But g is no
longer positively homogeneous, so ``T(X) - T(-X) = g(p) - g(-p)`` (p the pooled token) is
not linear in p, and the paper's antisymmetrisation does not give a single head. So:

1. g is learned exactly in canonical form from length-1 queries
   (:func:`~verified_attn.transformer.relu_biased_learner.learn_biased_relu_ffn`, count
   ``2 S + S_half + 2 C + (d - 1)(K + 1)``).
2. In one open cell of g (gradient G != 0, offset beta: g = G^T x + beta there), the
   two-token query ``[b_j + t u_k; b_j]`` pools to ``b_j + alpha_1 t u_k`` inside the cell
   (cells are convex), so ``alpha_1 = (T - G^T b_j - beta) / (t G^T u_k)`` and
   ``logit(alpha_1) = t u_k^T W b_j``: d^2 queries give ``W = U^{-T} M B^{-1}`` with exact
   U, B. The design is checked exactly to lie in the cell before any query.

The count is ``d^2 + (the FFN's)`` against ``d^2 + (m' + 1)(d + 1)`` parameters (W and the
canonical FFN; V is absorbed into the FFN's first layer, so ``rec.model`` is
``OneLayerTransformer(W, I, A', w_o', a=a', b=b')``, equal to T as a function). The learned
Transformer is verified on fresh sequences of every length in ``lengths``.
"""

from __future__ import annotations

import functools
from typing import Any, Unpack

import sympy

from verified_attn.certificates.writer import RunRecord
from verified_attn.learner_options import ExactOptions
from verified_attn.models import OneLayerTransformer
from verified_attn.oracle import Oracle
from verified_attn.progress import reporting
from verified_attn.recovery import TransformerRecovery
from verified_attn.serialize import dump_number, dump_rational
from verified_attn.transformer.cell import cell_attention, cell_of
from verified_attn.transformer.common import learner_arguments, length_one_ffn, verify_learned
from verified_attn.transformer.relu_biased import BiasedReluNetwork
from verified_attn.transformer.relu_biased_learner import learn_biased_relu_ffn

__all__ = ["cell_of", "learn_biased_transformer"]


def learn_biased_transformer(
    oracle: Oracle,
    **options: Unpack[ExactOptions],
) -> TransformerRecovery:
    """Learn ``T(X) = w_o^T ReLU(A^T V^T X^T softmax(X W x_N) + a) + b`` exactly.

    The FFN from length-1 queries (phases ``ffn``, ``ffn-verify``), then W from d^2
    two-token queries inside one cell of the learned g (phase ``attention-direct``), then
    ``verify`` fresh sequences of each length in ``lengths`` against the learned
    Transformer (phase ``verify``). The result's parameters are ``W`` and the canonical
    FFN's ``A``, ``w_o``, ``a``, ``b``; ``method`` is "biased-direct"; ``bound`` is d^2
    plus the FFN's derived count.

    Raises :class:`NotIdentifiable` if g is constant (then T is constant and W unseen),
    :class:`ModelClassMismatch` if the oracle is no such Transformer (LayerNorm, a residual
    connection, GELU, a causal mask: the fresh sequences refute the learned model),
    :class:`InvalidArgument` for float oracles or bad arguments.
    """
    opts = learner_arguments(oracle, "learn_biased_transformer", options)
    verify, seed, lengths, denominator_bound, progress = opts
    arith = oracle.arithmetic
    d = oracle.d
    D = denominator_bound or 2 ** ((arith.precision or 256) // 4)
    with reporting(oracle, progress, "learn_biased_transformer"), oracle.run() as run:
        ffn = length_one_ffn(learn_biased_relu_ffn, oracle, opts)
        net: BiasedReluNetwork = ffn.network
        with arith.context(), oracle.phase("attention-direct"):
            W, design = cell_attention(oracle, net, seed, D)
        g = net.model()
        model = OneLayerTransformer(W, sympy.eye(d), g.A, g.w_o, a=g.a, b=g.b)
        checked = verify_learned(
            oracle, model, count=verify, seed=seed, lengths=lengths, what="the learned Transformer"
        )
    counts = run.counts
    return TransformerRecovery.from_run(
        counts,
        theorem="transformer/biased-direct",
        parameters={"W": W, "A": g.A, "w_o": g.w_o, "a": g.a, "b": g.b},
        learned_model=model,
        arithmetic=arith.name,
        precision=arith.precision,
        exact=True,
        bound=d * d + ffn.bound,
        parameter_count=d * d + net.parameter_count,
        seed=seed,
        verification=checked,
        assumptions=list(ffn.assumptions),
        notes=list(ffn.notes),
        certificate_data=functools.partial(
            _certificate,
            RunRecord(arith, seed, counts, d * d + ffn.bound, checked, list(ffn.assumptions)),
            ffn,
            design,
            W,
            D,
        ),
        method="biased-direct",
        attention_queries=counts.by_phase.get("attention-direct", 0),
        ffn_queries=ffn.queries,
        attention_bound=d * d,
        network=net,
    )


def _certificate(
    run: RunRecord, ffn: Any, design: dict[str, Any], W: sympy.Matrix, D: int
) -> dict[str, Any]:
    """The ``transformer-biased`` certificate: the FFN stage's whole ``relu-ffn-biased``
    certificate (``ffn``), the design and answers (``attention``: ``base``,
    ``directions``, ``t``, ``answers`` d x d, row k direction u_k), the denominator bound
    and the result; checker :mod:`verified_attn.certificates.transformer_biased`."""
    d = W.rows
    data = run.header("transformer-biased", "transformer/biased-direct", d)
    sub = dict(ffn.certificate())
    sub.pop("versions", None)
    g = ffn.network.model()
    ans = design["answers"]
    data.update(
        {
            "denominator_bound": D,
            "ffn": sub,
            "attention": {
                "base": [[dump_rational(q) for q in b] for b in design["base"]],
                "directions": [[dump_rational(q) for q in u] for u in design["directions"]],
                "t": dump_rational(design["t"]),
                "answers": [[dump_number(y) for y in ans[k * d : (k + 1) * d]] for k in range(d)],
            },
            "result": {
                "exact": True,
                "parameters": {
                    "W": [[dump_rational(x) for x in row] for row in W.tolist()],
                    "A": [[dump_rational(x) for x in row] for row in g.A.tolist()],
                    "w_o": [dump_rational(x) for x in g.w_o],
                    "a": [dump_rational(x) for x in g.a],
                    "b": dump_rational(g.b),
                },
            },
        }
    )
    return data
