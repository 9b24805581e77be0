"""Rendering claim results and recoveries: tables, Markdown, lossless JSON."""

from __future__ import annotations

import datetime
import json
from fractions import Fraction

import flint
import numpy as np
import pytest
import sympy

from verified_attn import Oracle, SingleHeadAttention, learn_single_head
from verified_attn.checks import Claim, ClaimResult
from verified_attn.recovery_report import recovery_json, recovery_text
from verified_attn.report import (
    claim_list_markdown,
    claim_list_text,
    claims_json,
    claims_markdown,
    claims_table,
    format_number,
    jsonable,
)
from verified_attn.serialize import load_number

LONG = "A statement that goes on " + "and on " * 20 + "until it is cut."
RESULTS = [
    ClaimResult("a/pass", "Thm 1", "Short.", True, "fine", 30, 30, 0.5),
    ClaimResult("b/fail", "Prop 7.1", LONG, False, "counterexample at d = 2", None, None, 1.25),
    ClaimResult("c/data", "App. A", "Has data | pipes.", True, data={"q": Fraction(2, 3)}),
]
MODEL = SingleHeadAttention([[Fraction(1, 2), -2], [3, 0]], [0, 5])


def _words_in_order(sentence: str, text: str) -> bool:
    """Every word of ``sentence`` in ``text``, in order (wrapping and columns undone)."""
    flat, at = " ".join(text.split()), 0
    for word in sentence.split():
        at = flat.find(word, at)
        if at < 0:
            return False
        at += len(word)
    return True


def test_table_rows_and_counts() -> None:
    lines = claims_table(RESULTS, width=120).splitlines()
    assert lines[0].split() == [
        "id",
        "paper",
        "ref",
        "statement",
        "queries",
        "(bound)",
        "result",
        "seconds",
    ]
    assert set(lines[1]) <= {"-", " "}
    row = lines[2]
    assert row.startswith("a/pass") and "30 (30)" in row and "PASS" in row and row.endswith("0.50")
    fail = lines[3]
    assert "FAIL" in fail and fail.endswith("1.25")
    body = "\n".join(lines[3 : lines.index("2 passed, 1 failed")])
    assert _words_in_order(LONG, body) and "..." not in body  # wrapped, not cut
    assert lines[-2:] == ["2 passed, 1 failed", "FAIL b/fail: counterexample at d = 2"]
    assert max(len(line) for line in lines) <= 120


def test_table_columns_align() -> None:
    rows = claims_table(RESULTS, width=120).splitlines()
    lines = [line for line in rows if line.split()[0] in ("a/pass", "b/fail", "c/data")]
    starts = {line.index("PASS") if "PASS" in line else line.index("FAIL") for line in lines}
    assert len(lines) == 3 and len(starts) == 1


@pytest.mark.parametrize("width", [30, 50, 80, 120])
def test_table_fits_the_width(width: int) -> None:
    text = claims_table(RESULTS, width=width)
    assert max(len(line) for line in text.splitlines()) <= width
    assert _words_in_order(LONG, text)  # the statement whole


def test_markdown_has_full_statements_and_escapes_pipes() -> None:
    md = claims_markdown(RESULTS)
    assert md.startswith("| id | paper ref | statement | queries (bound) | result | seconds |\n")
    assert "until it is cut." in md
    assert "Has data \\| pipes." in md
    assert "| `b/fail` | Prop 7.1 |" in md and "**FAIL**" in md
    assert "- **b/fail** failed: counterexample at d = 2" in md


def test_json_header_and_every_field() -> None:
    data = json.loads(json.dumps(claims_json(RESULTS, seed=11)))
    assert data["seed"] == 11 and data["passed"] == 2 and data["failed"] == 1
    assert data["versions"]["python-flint"] == flint.__version__
    assert datetime.datetime.fromisoformat(data["date"]).tzinfo is not None
    assert set(data["claims"][0]) == {
        "id", "paper_ref", "statement", "passed", "detail", "queries", "bound", "seconds", "data",
        "skipped",
    }  # fmt: skip
    assert data["claims"][1]["statement"] == LONG
    assert load_number(data["claims"][2]["data"]["q"]) == Fraction(2, 3)


def test_claim_lists() -> None:
    claims = [Claim("x/y", "Thm 1", LONG, lambda seed: RESULTS[0])]
    text = claim_list_text(claims, width=100)
    assert text.splitlines()[2].startswith("x/y  Thm 1") and text.splitlines()[2].endswith(
        "  checked on instances"
    )
    assert _words_in_order(LONG, text)
    assert text.splitlines()[0].split() == ["id", "paper", "ref", "statement", "level"]
    narrow = claim_list_text(claims, width=40).splitlines()
    assert narrow[0] == "x/y (Thm 1), checked on instances"
    assert max(map(len, narrow)) <= 40 and narrow[1].startswith("  A statement")
    assert claim_list_markdown(claims).splitlines()[2] == f"| `x/y` | Thm 1 | {LONG} |"


@pytest.mark.parametrize(
    ("x", "want"),
    [
        (Fraction(-2, 3), {"rational": "-2/3"}),
        (sympy.Rational(1, 2), {"rational": "1/2"}),
        (np.int64(3), 3),
        (np.array([1.5, 2.0]), [1.5, 2.0]),
        (float("nan"), "nan"),
        (sympy.Matrix([[1, 2]]), [[{"rational": "1/1"}, {"rational": "2/1"}]]),
        ((True, None), [True, None]),
    ],
)
def test_jsonable(x, want) -> None:
    assert jsonable(x) == want


def test_jsonable_ball_is_exact() -> None:
    ball = flint.arb(1) / 3
    out = jsonable(ball)
    mid, rad = (Fraction(s) for s in out["arb"])
    assert mid - rad <= Fraction(1, 3) <= mid + rad


def test_format_number() -> None:
    assert format_number(Fraction(7, 1)) == "7"
    assert format_number(np.float64(0.1)) == "0.1"
    assert "+/-" in format_number(flint.arb(1) / 3)


def test_recovery_text_exact() -> None:
    rec = learn_single_head(Oracle(MODEL, "exact"))
    text = recovery_text(rec)
    assert "queries: 6 learning (bound 6; = the bound), 8 verification" in text
    assert "by phase: v 2, W 4, verify 8" in text
    assert "parameters are exact rationals, equal (==) to the truth" in text
    assert "verification: 8 fresh sequences (seed 0, lengths 1, 2, 3, 4, 6, 8, 16)" in text
    assert "==: PASSED" in text
    assert "  v = [0, 5]" in text
    assert "    [ 1/2  -2 ]" in text and "    [   3   0 ]" in text


def test_recovery_text_balls_and_floats() -> None:
    rec = learn_single_head(Oracle(MODEL, "certified", precision=64), denominator_bound=1)
    text = recovery_text(rec)
    assert "certified at 64 bits; parameters are certified balls" in text
    assert "+/-" in text
    rec = learn_single_head(Oracle(MODEL, "float"))
    text = recovery_text(rec)
    assert "parameters are float64 approximations" in text
    assert "|answer - prediction| <= rtol * max(|answer - beta|, floor) + allowance, with rtol 1e-06" in text
    assert "allowance 0 (no output bias); max relative gap" in text
    assert repr(float(rec.W[0, 0])) in text  # floats printed in full


def test_recovery_text_counts_rescales() -> None:
    rec = learn_single_head(Oracle(SingleHeadAttention([[40, -2], [3, 0]], [0, 5]), "float"))
    text = recovery_text(rec)
    assert "queries: 7 learning (bound 6; the bound + 1 extra, see the phases)" in text
    assert "rescale 1" in text


def test_recovery_json_is_lossless() -> None:
    rec = learn_single_head(Oracle(MODEL, "certified"))
    data = json.loads(json.dumps(recovery_json(rec)))
    assert data["queries"]["learning"] == 6 and data["queries"]["bound"] == 6
    assert data["exact"] is True and data["assumptions"]  # reconstructed: D is assumed
    W = [[Fraction(x) for x in row] for row in data["parameters"]["W"]]
    assert W == [[Fraction(1, 2), -2], [3, 0]]
    assert "numpy" in data["versions"]
