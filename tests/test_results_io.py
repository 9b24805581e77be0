"""Results people can keep: to_dict's format, from_dict / load_recovery round trips, the
one-line repr, and summaries that never contradict themselves.

Every kind and arithmetic of the contract table (tests/test_contract_table.py) plus a
certified result left as balls is written with ``to_dict``, sent through JSON, read back
with ``Recovery.from_dict`` and compared: the same ``to_dict``, and a model with the same
outputs (``==``, in exact arithmetic where the result is exact).
"""

from __future__ import annotations

import copy
import json
import re
from fractions import Fraction
from pathlib import Path
from typing import Any

import flint
import numpy as np
import pytest
from test_contract_table import CASES, Case, _fresh, _run

import verified_attn as va
from verified_attn.arithmetic import fraction_from_arb

BALLS = va.SingleHeadAttention(
    [[Fraction(1, 3), 2], [1, 0]], [1, Fraction(1, 7)], c=[1, 2], beta=Fraction(1, 3)
)


def _balls() -> va.Recovery:
    """A certified result left as balls (no denominator-1 rational in 1/3's ball)."""
    rec = va.learn_single_head(
        va.Oracle(BALLS, "certified", precision=64), denominator_bound=1, affine=True
    )
    assert not rec.exact and isinstance(rec.parameters["W"][0, 0], flint.arb)
    return rec


def _same_outputs(a: va.Recovery, b: va.Recovery) -> bool:
    arith = "exact" if a.exact else "float"
    return all(a.model.evaluate(X, arith) == b.model.evaluate(X, arith) for X in _fresh(a.model.d))


def _round_trip(rec: va.Recovery) -> va.Recovery:
    return va.Recovery.from_dict(json.loads(json.dumps(rec.to_dict())))


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_every_kind_round_trips(case: Case) -> None:
    rec, _ = _run(case)
    again = _round_trip(rec)
    assert type(again) is type(rec)
    assert again.to_dict() == rec.to_dict()
    assert _same_outputs(rec, again)
    assert again.summary() == rec.summary()
    # the kind's own class reads it too
    assert type(type(rec).from_dict(rec.to_dict())) is type(rec)


def test_balls_round_trip_exactly_and_soundly() -> None:
    rec = _balls()
    again = _round_trip(rec)
    assert again.to_dict() == rec.to_dict() and _same_outputs(rec, again)
    for name in ("W", "v", "c"):
        for a, b in zip(
            np.ravel(rec.parameters[name]), np.ravel(again.parameters[name]), strict=True
        ):
            assert fraction_from_arb(a.mid()) == fraction_from_arb(b.mid())
            assert fraction_from_arb(a.rad()) == fraction_from_arb(b.rad())
    beta = rec.to_dict()["parameters"]["beta"]
    assert set(beta) == {"mid", "rad"} and Fraction(beta["mid"]) > 0


def test_a_changed_entry_is_seen() -> None:
    # The comparison can fail: one changed entry gives another to_dict and other outputs.
    rec, _ = _run(CASES[0])
    data = copy.deepcopy(rec.to_dict())
    data["parameters"]["W"][0][0] = str(Fraction(data["parameters"]["W"][0][0]) + 1)
    other = va.Recovery.from_dict(data)
    assert other.to_dict() != rec.to_dict() and not _same_outputs(rec, other)


def test_to_dict_format() -> None:
    exact, _ = _run(CASES[0])
    data = exact.to_dict()
    assert data["parameters"] == {"v": ["2", "-1"], "W": [["1", "-2"], ["3", "0"]]}
    floats, _ = _run(CASES[2])
    p = floats.to_dict()["parameters"]
    assert all(isinstance(x, float) for x in p["v"]) and len(p["W"]) == 2
    assert all(isinstance(x, float) and len(row) == 2 for row in p["W"] for x in row)
    one = va.learn_single_head(va.Oracle(va.SingleHeadAttention([[2]], [3]), "exact"))
    assert one.to_dict()["parameters"] == {"v": ["3"], "W": [["2"]]}  # a 1 x 1 W: a matrix
    enc = _run(CASES[1])[0].to_dict()["enclosures"]["W"]  # exact bounds: "p/q" strings
    assert Fraction(enc["lower"][0][0]) <= 1 <= Fraction(enc["upper"][0][0])
    assert Fraction(enc["upper"][0][0]) - Fraction(enc["lower"][0][0]) < Fraction(1, 10**60)
    heads = _run(CASES[10])[0].to_dict()["parameters"]["heads"]
    assert [len(h) for h in heads] == [2, 2] and heads[0][1] in (["-1", "1"], ["1", "2"])


def test_load_recovery_reads_the_cli_json(tmp_path: Path) -> None:
    from verified_attn.recovery_report import recovery_json

    rec = _balls()
    path = tmp_path / "rec.json"
    path.write_text(json.dumps(recovery_json(rec)))  # what learn --json writes
    again = va.load_recovery(path)
    assert again.to_dict() == rec.to_dict() and "load_recovery" in va.__all__
    with pytest.raises(va.CertificateError, match="no certificate data"):
        again.certificate()


def _valid() -> dict[str, Any]:
    return _run(CASES[0])[0].to_dict()


@pytest.mark.parametrize(
    "field", ["format", "kind", "exact", "parameters", "queries", "seed", "notes", "theorem"]
)
def test_a_missing_field_is_named(field: str) -> None:
    data = _valid()
    del data[field]
    with pytest.raises(va.InvalidArgument, match=field if field != "format" else "format"):
        va.Recovery.from_dict(data)


@pytest.mark.parametrize(
    "edit",
    [
        lambda d: d["parameters"].update(W="garbage"),
        lambda d: d["parameters"].update(W=[["1/0", "1"], ["1", "1"]]),
        lambda d: d["parameters"].update(v=[{"mid": "1", "rad": "-1"}, "1"]),
        lambda d: d["parameters"].update(v=[{"mid": "1/3", "rad": "0"}, "1"]),
        lambda d: d["parameters"].pop("W"),
        lambda d: d.update(kind="no-such-kind"),
        lambda d: d["queries"].update(learning="six"),
        lambda d: d["queries"].pop("bound"),
        lambda d: d.update(verification={"count": 8}),
        lambda d: d.update(exact="yes"),
    ],
)
def test_garbage_raises_our_error(edit: Any) -> None:
    data = _valid()
    edit(data)
    with pytest.raises(va.InvalidArgument):
        va.Recovery.from_dict(data)


def test_other_inputs_raise_our_error(tmp_path: Path) -> None:
    for bad in (None, 5, [], "x", {}):
        with pytest.raises(va.InvalidArgument):
            va.Recovery.from_dict(bad)
    multi = _run(CASES[10])[0].to_dict()
    with pytest.raises(va.InvalidArgument, match="a multi-head result, not a single-head"):
        va.SingleHeadRecovery.from_dict(multi)
    with pytest.raises(va.InvalidArgument, match="cannot read"):
        va.load_recovery(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(va.InvalidArgument, match="not JSON"):
        va.load_recovery(tmp_path / "bad.json")
    with pytest.raises(va.InvalidArgument):
        va.load_recovery(3)  # type: ignore[arg-type]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_repr_is_one_line(case: Case) -> None:
    rec, _ = _run(case)
    text = repr(rec)
    assert "\n" not in text and len(text) < 140 and "Matrix" not in text
    assert text.startswith(f"{type(rec).__name__}({rec.kind}, d={rec.model.d}, ")
    assert f"queries {rec.queries}/{rec.bound}" in text and text.endswith("verified)")
    assert rec.arithmetic in text
    if isinstance(rec, va.MultiHeadRecovery):
        assert f"H={rec.H}" in text
    if isinstance(rec, va.LowRankRecovery):
        assert f"rank={rec.rank}" in text


def test_show_parameters_prints_balls_without_nesting() -> None:
    from verified_attn.recovery_report import recovery_text

    text = recovery_text(_balls())
    assert "  v = [1" in text and "[[" not in text and "+/-" in text


# ---------------------------------------------------------------------------------------
# Summaries that never contradict themselves: a checker of the printed figures.
# ---------------------------------------------------------------------------------------

_NUM = r"([-+0-9.e]+)"


def printed_figures_hold(text: str) -> bool:
    """Whether the printed rule holds for the printed figures, read from the text alone.

    The learning count is within the printed bound and the bound is the sum of its printed
    terms; the printed gap of the closest sequence is within the printed rule evaluated at
    its printed size; the max relative gap is within what the printed rule allows for
    any answer at least the printed floor (rtol + allowance / floor; rtol if no
    allowance and floor are printed).
    """
    q = re.search(r"(\d+) learning queries \(bound (\d+)((?: = [^,]*)?),", text)
    assert q, text
    queries, bound = int(q.group(1)), int(q.group(2))
    terms = [int(n) for n in re.findall(r"(?:=|\+) (\d+) \(", q.group(3))]
    if queries > bound or (terms and sum(terms) != bound):
        return False
    rtol = float(re.search(r"rtol " + _NUM, text).group(1))  # type: ignore[union-attr]
    allowance_m = re.search(r"allowance " + _NUM, text)
    floor_m = re.search(r"floor " + _NUM, text)
    allowance = float(allowance_m.group(1)) if allowance_m else 0.0
    worst = float(re.search(r"max relative gap " + _NUM, text).group(1))  # type: ignore[union-attr]
    limit = rtol + allowance / float(floor_m.group(1)) if floor_m and allowance_m else rtol
    if worst > limit:
        return False
    close = re.search(
        rf"\|answer - prediction\| {_NUM} <= {_NUM} \* {_NUM} \+ {_NUM} = {_NUM}", text
    )
    if close:
        gap, r, size, allow, total = (float(x) for x in close.groups())
        if r != rtol or allow != allowance or gap > min(total, rtol * size + allowance):
            return False
    return True


@pytest.fixture(scope="module")
def float32_head() -> va.Recovery:
    torch = pytest.importorskip("torch")
    from verified_attn.adapters.torch import attention_oracle

    # Seed 11: a module the prediction bound returns at rtol 1e-4 (most E = 16 float32
    # modules are refused there, naming a looser rtol) whose fresh gap passes rtol only
    # through the rule's allowance for rounding on the bias: the case this test is about.
    torch.manual_seed(11)
    mha = torch.nn.MultiheadAttention(16, 1, batch_first=True)
    with torch.no_grad():
        mha.in_proj_bias.normal_()
        mha.out_proj.bias.normal_()
    return va.learn_single_head(attention_oracle(mha, torch.nn.Linear(16, 1), dtype="float32"))


def test_a_float32_summary_holds_its_own_rule(float32_head: va.Recovery) -> None:
    from verified_attn.recovery_report import recovery_text

    rec = float32_head
    assert rec.queries == 545 and rec.bound == 289 + 256
    assert rec.bound_terms == {
        "d^2 + 2d + 1": 289,
        "refine round of a low-precision box, at most d^2": 256,
    }
    ver = rec.verification
    assert ver is not None and ver.max_gap is not None and ver.max_gap > ver.rtol  # the case
    assert printed_figures_hold(rec.summary())
    assert printed_figures_hold(
        recovery_text(rec).replace("queries: 545 learning", "545 learning queries")
    )
    assert "allowance" in rec.summary() and "unit roundoff 2^-24" in rec.summary()
    assert va.Recovery.from_dict(rec.to_dict()).summary() == rec.summary()


def test_the_checker_rejects_a_summary_without_the_allowance(float32_head: va.Recovery) -> None:
    rec = float32_head
    ver = rec.verification
    assert ver is not None and ver.allowance is not None and ver.tightest is not None
    old = (
        f"thm-4.1 (single-head): {rec.queries} learning queries (bound 289, parameters 289), "
        f"8 verification\n  verification: relative gap <= rtol {ver.rtol:g}; max relative "
        f"gap {ver.max_gap:.3e}"
    )
    assert not printed_figures_hold(old)
    # the bound right, the rule without its allowance: still a contradiction
    text = rec.summary()
    assert not printed_figures_hold(re.sub(r"allowance [-+0-9.e]+", "allowance 0", text))
    # and a bound the run went past
    assert not printed_figures_hold(text.replace(f"bound {rec.bound} =", "bound 289 ="))
