"""A counterexample's text shows a multi-head Transformer's exact parameters (it has no
``parameters()``): each head's W_h, V_h (and c_h), then the FFN's A, w_o, a, b."""

from __future__ import annotations

import pytest

import verified_attn as va
from verified_attn.ffn_heads import MultiHeadTransformer

KINDS = ["dead-neuron", "always-on-neuron", "killed-head", "colliding-heads"]


@pytest.mark.parametrize("kind", KINDS)
def test_each_pair_shows_both_models_parameters(kind: str) -> None:
    cx = va.counterexample("transformer", kind=kind)
    text = cx.text()
    first, second = text.split("\nfirst: ")[1].split("\nsecond: ")
    second = second.split("\nrelation: ")[0]
    for shown, model in ((first, cx.first), (second, cx.second)):
        assert shown.startswith(repr(model))
        assert shown.count("FFN: A = ") == 1 and ", b = " in shown
        heads = [line for line in shown.splitlines() if "W = " in line]
        assert len(heads) == model.H  # one line per head, never the bare repr alone
    assert first != second  # the pair's parameters differ, and the text shows where


def test_golden_lines_of_the_killed_head_and_colliding_pairs() -> None:
    text = va.counterexample("transformer", kind="killed-head").text()
    # the killed head's W_2 differs between the two (V_2 A = 0, so it is never seen)
    assert "  head 2: W = [[1, 1/2, 0], [0, 3/2, -1], [1, 1/2, -3/2]], V = [[-4, 2], " in text
    assert "  head 2: W = [[2, 3/2, 1], [1, 5/2, 0], [2, 3/2, -1/2]], V = [[-4, 2], " in text
    text = va.counterexample("transformer", kind="colliding-heads").text()
    # one head holding V_1 + V_2: no "head h:" label on a single head
    assert "\n  W = [[1, 1/2, 0], [-1, -1/2, -3/2], [-3/2, -3/2, -1]], V = [[1/2, 2], " in text
    text = va.counterexample("transformer", kind="dead-neuron").text()
    assert (
        "FFN: A = [[1, -1, 0], [-3/2, 3/2, 0]], w_o = [1, -2, 7], a = [1/2, -1/3, -1], b = 1"
        in text
    )


def test_score_biases_and_the_markdown_cell_stay_on_one_line() -> None:
    T = MultiHeadTransformer([([[1]], [[2]], [1]), ([[-1]], [[3]])], [[1]], [1], a=[0], b=2)
    cx = va.counterexample("transformer", kind="killed-head")
    md = cx._repr_markdown_()
    row = next(line for line in md.splitlines() if line.startswith("| first |"))
    assert "head 1: W = " in row and "; FFN: A = " in row  # one table row, parts by "; "
    from verified_attn.counterexample import _describe

    assert _describe(T, sep=" | ").endswith(
        "head 1: W = [[1]], V = [[2]], c = [1] | head 2: W = [[-1]], V = [[3]], c = [0] | "
        "FFN: A = [[1]], w_o = [1], a = [0], b = 2"
    )


def test_the_biased_ffn_counterexample_shows_its_parameters_not_a_bare_repr() -> None:
    # The FFN-bias pair's first model is the one-head Transformer with a hidden bias: its text
    # shows W, V and the FFN with the bias (named a, as the biased models name it), b = 0.
    cx = va.counterexample("transformer", kind="ffn-bias", d=2, seed=0)
    first = cx.text().split("\nfirst: ")[1].split("\nfailure: ")[0]
    assert " object at 0x" not in first
    model = cx.first
    assert first.startswith(f"BiasedTransformer(d=2, e=2, m={model._inner.m})")
    c = ", ".join(str(x) for x in model._c)
    assert first.endswith(f", a = [{c}], b = 0")
    assert first.count("W = ") == 1 and "FFN: A = " in first
