"""The room's public learners: bias-free or biased, chosen from the oracle or by ``biases``.

>>> import verified_attn as va
>>> from verified_attn.models import ReluFFN
>>> type(va.learn_relu_ffn(va.Oracle(ReluFFN([[1, -1]], [2, 1]), "exact"))).__name__
'ReluFFNRecovery'
>>> g = ReluFFN([[1, -1]], [2, 1], a=[1, 0], b=-1)                   # biased: its own class
>>> type(va.learn_relu_ffn(va.Oracle(g, "exact"))).__name__
'BiasedReluFFNRecovery'

``biases=None`` (the default) picks the biased learner when the oracle's model class is
a biased one (``relu-ffn-biased``, ``one-layer-transformer-biased``) and, for the FFN, in
float arithmetic (the bias-free FFN learner is exact only); ``biases=True`` or ``False``
forces the choice (a black box from :meth:`~verified_attn.Oracle.from_callable` has no
model class: pass ``biases=True`` for one with biases). The bias-free learners are
:func:`verified_attn.transformer.relu.learn_relu_ffn` and
:func:`verified_attn.transformer.learner.learn_transformer`; the biased ones
:func:`~verified_attn.transformer.relu_biased_learner.learn_biased_relu_ffn` and
:func:`~verified_attn.transformer.biased_learner.learn_biased_transformer`.
"""

from __future__ import annotations

from typing import Any, Unpack

from verified_attn.errors import InvalidArgument
from verified_attn.learner_options import ExactOptions, refuse_unknown
from verified_attn.oracle import Oracle
from verified_attn.recovery import ReluFFNRecovery, TransformerRecovery
from verified_attn.transformer import learner, relu
from verified_attn.transformer.biased_float import learn_biased_transformer_float
from verified_attn.transformer.biased_learner import learn_biased_transformer
from verified_attn.transformer.multi_head_float import learn_multi_head_transformer_float
from verified_attn.transformer.multi_head_learner import learn_multi_head_transformer
from verified_attn.transformer.relu_biased_learner import learn_biased_relu_ffn
from verified_attn.validation import check_oracle, require_size

__all__ = ["BIASED_CLASSES", "learn_relu_ffn", "learn_transformer"]

BIASED_CLASSES = ("relu-ffn-biased", "one-layer-transformer-biased")
MULTI_HEAD_CLASS = "one-layer-transformer-multi-head"


def _biases(oracle: Oracle, biases: Any, *, float_too: bool) -> bool:
    if biases is None:
        return oracle.model_class in BIASED_CLASSES or (
            float_too and oracle.arithmetic.name == "float"
        )
    if not isinstance(biases, bool):
        raise InvalidArgument(f"biases must be True, False or None, got {biases!r}")
    return biases


def _max_heads(max_heads: int | None, method: str | None) -> int:
    """The multi-head learner's ``max_heads``, required; ``method`` does not apply."""
    if max_heads is None:
        raise InvalidArgument(
            f"the oracle declares model class {MULTI_HEAD_CLASS!r}: pass max_heads= (an upper "
            "bound on the number of heads)"
        )
    if method is not None:
        raise InvalidArgument(
            f"method={method!r} is for one head; the multi-head learner has one method"
        )
    return max_heads


def _require_size(oracle: Oracle, what: str, *, numbers: int, queries: int) -> None:
    """Refuse a size the run could not hold, before any query (the learners build d x d
    designs; the CLI's random models are capped where they are built)."""
    arith = oracle.arithmetic
    require_size(
        f"{what} at d = {oracle.d}",
        numbers=numbers,
        arithmetic=arith.name,
        precision=arith.precision,
        queries=queries,
    )


def learn_relu_ffn(
    oracle: Oracle,
    *,
    biases: bool | None = None,
    attempts: int = 3,
    grid: int = 4,
    **options: Unpack[ExactOptions],
) -> ReluFFNRecovery:
    """Learn g(x) = f([x]) as a canonical ReLU network, with biases or without.

    The biased learner (exact, certified, float) returns a
    :class:`~verified_attn.transformer.relu_biased_learner.BiasedReluFFNRecovery`
    (``grid`` is the bias-free learner's only); the bias-free one (exact, certified) a
    :class:`~verified_attn.ReluFFNRecovery`. See the module docstring for the choice.
    """
    refuse_unknown("learn_relu_ffn", options)
    check_oracle(oracle)
    d = oracle.d
    # Every learner probes d - 1 directions per piece of at least one line: >= d queries, d^2 numbers.
    _require_size(oracle, "learn_relu_ffn", numbers=d * d, queries=d)
    if _biases(oracle, biases, float_too=True):
        return learn_biased_relu_ffn(oracle, attempts=attempts, **options)
    return relu.learn_relu_ffn(oracle, grid=grid, attempts=attempts, **options)


def learn_transformer(
    oracle: Oracle,
    *,
    biases: bool | None = None,
    method: str | None = None,
    max_heads: int | None = None,
    **options: Unpack[ExactOptions],
) -> TransformerRecovery:
    """Learn a one-layer Transformer, its FFN with biases or without (exactly; float oracles
    of the biased class in float, verified with the float rule).

    Bias-free: ``method`` "paper" (the default) or "direct"
    (:func:`verified_attn.transformer.learner.learn_transformer`). With biases the paper's
    antisymmetrisation does not apply (T(X) - T(-X) is not linear in the pooled token):
    the FFN first, then W in one cell of it
    (:func:`~verified_attn.transformer.biased_learner.learn_biased_transformer`; float
    oracles: :func:`~verified_attn.transformer.biased_float.learn_biased_transformer_float`;
    ``method`` must be None or "direct").

    Multi-head (``max_heads`` given, an upper bound on the heads; required for an oracle of
    class ``one-layer-transformer-multi-head``): the FFN first, then the heads cell by cell
    of it (:func:`~verified_attn.transformer.multi_head_learner.learn_multi_head_transformer`;
    exact or certified oracles; ``biases`` and ``method`` do not apply).
    """
    refuse_unknown("learn_transformer", options)
    check_oracle(oracle)
    d = oracle.d
    # W alone takes d^2 queries from two d x d designs.
    _require_size(oracle, "learn_transformer", numbers=2 * d * d, queries=d * d)
    if max_heads is not None or oracle.model_class == MULTI_HEAD_CLASS:
        if oracle.arithmetic.name == "float":  # denominator_bound: certified reconstruction only
            kw = {k: v for k, v in options.items() if k != "denominator_bound"}
            return learn_multi_head_transformer_float(
                oracle,
                max_heads=_max_heads(max_heads, method),
                **kw,  # type: ignore[arg-type]
            )
        return learn_multi_head_transformer(
            oracle, max_heads=_max_heads(max_heads, method), **options
        )
    if _biases(oracle, biases, float_too=False):
        if method not in (None, "direct"):
            raise InvalidArgument(
                f"method={method!r} needs a bias-free FFN (the paper's antisymmetrisation); "
                "with biases W is learned inside one cell of the FFN: use method=None"
            )
        if oracle.arithmetic.name == "float":  # denominator_bound: certified reconstruction only
            kw = {k: v for k, v in options.items() if k != "denominator_bound"}
            return learn_biased_transformer_float(oracle, **kw)  # type: ignore[arg-type]
        return learn_biased_transformer(oracle, **options)
    return learner.learn_transformer(oracle, method=method or "paper", **options)
