"""The learners' shared keywords (verify, seed, lengths, progress, denominator_bound).

They are declared once (:mod:`verified_attn.learner_options`) and read by one function;
each learner must still take exactly the keywords it took when they were spelled out in
its signature: the defaults, the checks and the refusal of a keyword it does not take.
"""

from __future__ import annotations

from typing import Any

import pytest

import verified_attn as va
from verified_attn.errors import InvalidArgument
from verified_attn.learner_options import CheckOptions, ExactOptions, learner_options
from verified_attn.multi_head import learn_orthogonal_heads
from verified_attn.noisy import learn_from_labels, learn_stochastic
from verified_attn.noisy.labels import DEFAULT_LABEL_VERIFY
from verified_attn.verification import DEFAULT_LENGTHS, DEFAULT_VERIFY

HEAD = va.SingleHeadAttention([[1, 0], [2, -1]], [1, 3])


def test_defaults_are_the_signatures_defaults() -> None:
    opts = learner_options("learn_x", {})
    assert opts == (DEFAULT_VERIFY, 0, DEFAULT_LENGTHS, None, False)
    assert learner_options("learn_x", {}, CheckOptions, verify=DEFAULT_LABEL_VERIFY).verify == 16
    # None is the documented spelling of "no progress report".
    assert learner_options("learn_x", {"progress": None}).progress is False


def test_the_keyword_sets() -> None:
    assert CheckOptions.__optional_keys__ == {"verify", "seed", "lengths", "progress"}
    assert ExactOptions.__optional_keys__ == CheckOptions.__optional_keys__ | {"denominator_bound"}


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"verify": -1}, "verify must be an int >= 0"),
        ({"seed": 1.5}, "seed must be an int"),
        ({"lengths": []}, "lengths must not be empty"),
        ({"denominator_bound": 0}, "denominator_bound must be an int >= 1"),
        ({"progress": 1}, "progress must be True, False, None"),
    ],
)
def test_each_value_is_checked(options: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidArgument, match=message):
        learner_options("learn_x", options)


def _exact() -> va.Oracle:
    return va.Oracle(HEAD, "exact")


def _float() -> va.Oracle:
    return va.Oracle(HEAD, "float")


# (name the error gives, call with the extra keywords); each learner's own arguments fixed.
LEARNERS = [
    ("learn_single_head", lambda **kw: va.learn_single_head(_exact(), **kw)),
    ("learn_low_rank", lambda **kw: va.learn_low_rank(_exact(), **kw)),
    (
        "learn_noisy",
        lambda **kw: va.learn_noisy(_float(), tolerance=1e-6, w_bound=3, margin=1, **kw),
    ),
    (
        "learn_stochastic",
        lambda **kw: learn_stochastic(
            _float(), noise_scale=1e-3, target_error=0.1, w_bound=3, margin=1, **kw
        ),
    ),
    ("learn_from_labels", lambda **kw: learn_from_labels(_exact(), w_bound=3, **kw)),
    ("learn_multi_head", lambda **kw: va.learn_multi_head(_exact(), heads=1, **kw)),
    ("learn_orthogonal_heads", lambda **kw: learn_orthogonal_heads(_exact(), [[[1], [0]]], **kw)),
    ("learn_transformer", lambda **kw: va.learn_transformer(_exact(), **kw)),
    ("learn_relu_ffn", lambda **kw: va.learn_relu_ffn(_exact(), biases=False, **kw)),
    # The entries pass their keywords on to another learner: still refused under their name.
    ("learn_relu_ffn", lambda **kw: va.learn_relu_ffn(_float(), **kw)),
    ("learn_transformer", lambda **kw: va.learn_transformer(_float(), biases=True, **kw)),
]


@pytest.mark.parametrize(("name", "call"), LEARNERS, ids=[n for n, _ in LEARNERS])
def test_an_unknown_keyword_is_refused_as_python_would(name: str, call: Any) -> None:
    with pytest.raises(
        TypeError, match=rf"^{name}\(\) got an unexpected keyword argument 'verfy'$"
    ):
        call(verfy=3)


# The learners without rational reconstruction never took denominator_bound.
@pytest.mark.parametrize(
    ("name", "call"),
    [(n, c) for n, c in LEARNERS if n in ("learn_low_rank", "learn_noisy", "learn_from_labels")],
)
def test_denominator_bound_only_where_it_was_taken(name: str, call: Any) -> None:
    if name == "learn_low_rank":  # its own keyword (checked against method=), not the block's
        with pytest.raises(InvalidArgument, match="denominator_bound applies to method='skeleton'"):
            va.learn_low_rank(_float(), method="nuclear", denominator_bound=8)
        return
    with pytest.raises(TypeError, match="unexpected keyword argument 'denominator_bound'"):
        call(denominator_bound=8)


def test_the_keywords_reach_the_learner() -> None:
    rec = va.learn_single_head(_exact(), verify=3, seed=5, lengths=(2,))
    assert rec.verification is not None
    assert (rec.verification.count, rec.verification.seed, rec.verification.lengths) == (3, 5, (2,))
    assert rec.verification_queries == 3
    assert va.learn_single_head(_exact(), verify=0).verified is False
