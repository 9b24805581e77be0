"""The ``transformer-heads`` certificate of va.learn_transformer(oracle, max_heads=H): a
genuine one re-checks (dict, file, CLI), and each tamper is refused with a CertificateError
naming what fails."""

from __future__ import annotations

import copy
import json
from fractions import Fraction
from typing import Any

import pytest

import verified_attn as va
from verified_attn.certificates.transformer_heads import verify
from verified_attn.cli import main
from verified_attn.errors import CertificateError, VerifiedAttnError
from verified_attn.ffn_heads import MultiHeadTransformer

T2 = MultiHeadTransformer(
    [([[1, 0], [0, -1]], [[1, 0], [0, 1]]), ([[0, 1], [1, 0]], [[1, 1], [-1, 0]])],
    [[1, 0], [0, 1]],
    [1, -1],
    a=[1, 1],
    b=2,
)
#: d = 1 with score biases (affine heads), for the c field.
T1C = MultiHeadTransformer([([[1]], [[1]], [1]), ([[-1]], [[2]], [0])], [[1]], [1], a=[1], b=3)

_CACHE: dict[str, dict[str, Any]] = {}


def _cert(arithmetic: str) -> dict[str, Any]:
    """A genuine certificate (learned once per arithmetic), deep-copied for tampering."""
    if arithmetic not in _CACHE:
        rec = va.learn_transformer(va.Oracle(T2, arithmetic), max_heads=2)
        _CACHE[arithmetic] = rec.certificate()
    return copy.deepcopy(_CACHE[arithmetic])


@pytest.mark.parametrize("arithmetic", ["exact", "certified"])
def test_a_genuine_certificate_passes(arithmetic: str) -> None:
    data = _cert(arithmetic)
    check = va.verify_certificate(data)
    assert check.ok and check.kind == "transformer-heads"
    assert check.theorem == "transformer/multi-head-cells"
    text = str(check)
    # golden: the FFN's 14 and three cells' 31 learning queries; 3 cells of 35 at most each
    assert "queries: 107 learning = 14 FFN + 93 cells; bound 119 = 14 (FFN) + 3 x 35" in text
    assert "2 heads in canonical order" in text
    assert len(data["answers"]) == 93 + 16  # every cell query, learning and cell verify
    assert data["max_heads"] == 2 and data["ffn"]["kind"] == "relu-ffn-biased"


def test_a_certificate_with_score_biases_and_through_a_file_and_the_cli(
    tmp_path: Any, capsys: Any
) -> None:
    rec = va.learn_transformer(va.Oracle(T1C, "exact"), max_heads=2)
    path = tmp_path / "heads.json"
    data = rec.certificate(path)
    assert all(h["c"] is not None for h in data["result"]["heads"])
    assert va.verify_certificate(path).ok
    assert main(["verify-certificate", str(path)]) == 0
    assert (
        "certificate OK (transformer-heads, transformer/multi-head-cells)"
        in capsys.readouterr().out
    )
    data["result"]["heads"][0]["c"] = ["5/1"]
    path.write_text(json.dumps(data))
    assert main(["verify-certificate", str(path)]) == 1
    assert "is not the claimed Transformer's value" in capsys.readouterr().err


def _head_W(data: dict[str, Any]) -> None:
    data["result"]["heads"][1]["W"][0][0] = "3/2"  # heads stay sorted (the first W starts 0)


def _head_V(data: dict[str, Any]) -> None:
    data["result"]["heads"][0]["V"][0][0] = "1/3"


def _ffn_gamma(data: dict[str, Any]) -> None:
    data["ffn"]["result"]["neurons"][0]["gamma"] = "7/1"


def _result_w_o(data: dict[str, Any]) -> None:
    data["result"]["w_o"][0] = "3/1"


def _drop_query(data: dict[str, Any]) -> None:
    del data["answers"][5]


def _learning_count(data: dict[str, Any]) -> None:
    data["queries"]["learning"] += 1


def _phase_count(data: dict[str, Any]) -> None:
    data["queries"]["learning"] += 1
    data["queries"]["by_phase"]["cell1/F(k)"] += 1


def _bound(data: dict[str, Any]) -> None:
    data["queries"]["bound"] -= 1


def _max_heads(data: dict[str, Any]) -> None:
    data["max_heads"] = 1


def _answer(data: dict[str, Any]) -> None:
    """Exact: another closed form; certified: the ball moved off the value by 1e-9."""
    y = data["answers"][7]["y"]
    if "arb" in y:
        mid, rad = y["arb"]
        q = Fraction(mid) + 4 * Fraction(rad) + Fraction(1, 10**9)
        y["arb"] = [f"{q.numerator}/{q.denominator}", rad]
    else:
        data["answers"][7]["y"] = {"rational": "1/7"}


def _swap_heads(data: dict[str, Any]) -> None:
    heads = data["result"]["heads"]
    heads[0], heads[1] = heads[1], heads[0]


def _cell_centre(data: dict[str, Any]) -> None:
    data["cells"][0]["center"] = data["cells"][1]["center"]


def _cell_phase(data: dict[str, Any]) -> None:
    data["answers"][0]["phase"] = "cell9/F(0)"


TAMPERS = [
    (_head_W, "is not the claimed Transformer's value"),
    (_head_V, "sum_h V_h is not g's first layer"),
    (_ffn_gamma, "ffn: result: A, w_o, a, b are not the ReluFFN"),
    (_result_w_o, "result.w_o is not the FFN's"),
    (_drop_query, "queries.by_phase.cell1/F(k) is 28, but 27 answers of that phase are stored"),
    (_learning_count, "queries.learning is 108, but the learning phases add up to 107"),
    (_phase_count, "queries.by_phase.cell1/F(k) is 29, but 28 answers of that phase are stored"),
    (_bound, "queries.bound is 118, the theorem's bound is 119"),
    (_max_heads, "expected 1 to max_heads = 1"),
    (_answer, "answers[7]: the stored answer"),
    (_swap_heads, "distinct and sorted by (W, c)"),
    (_cell_centre, "cells[0].center is not strictly inside the cell of its pattern"),
    (_cell_phase, "names a cell past the 3"),
]


@pytest.mark.parametrize("arithmetic", ["exact", "certified"])
@pytest.mark.parametrize(("tamper", "message"), TAMPERS, ids=[t.__name__ for t, _ in TAMPERS])
def test_a_tampered_certificate_is_refused(arithmetic: str, tamper: Any, message: str) -> None:
    data = _cert(arithmetic)
    tamper(data)
    with pytest.raises(CertificateError) as info:
        va.verify_certificate(data)
    assert message in str(info.value)
    assert isinstance(info.value, VerifiedAttnError)


def test_the_checker_reads_only_its_kind() -> None:
    data = _cert("certified")
    data["kind"] = "transformer-biased"
    with pytest.raises(CertificateError, match="transformer/multi-head-cells"):
        va.verify_certificate(data)
    with pytest.raises(CertificateError, match="this checker reads 'transformer-heads'"):
        verify(data)


def test_a_sequence_too_costly_to_evaluate_is_refused_fast() -> None:
    """A hostile file: many heads and a long stored sequence (up to N^H exponent sums)."""
    data = _cert("certified")
    heads = data["result"]["heads"]
    data["max_heads"] = 40
    for k in range(3, 41):  # distinct sorted heads whose values cancel in pairs: the
        sign = "" if k % 2 else "-"  # canonical form holds, the sequences cost up to 16^40
        V = [[f"{sign}1/1", "0/1"], ["0/1", "0/1"]]
        heads.append({"W": [[f"{k}/1", "0/1"], ["0/1", "0/1"]], "V": V, "c": None})
    with pytest.raises(CertificateError, match="more work than a checker does"):
        va.verify_certificate(data)


def test_each_cell_attempt_is_held_to_the_affine_limit() -> None:
    """d = 2, max_heads = 2: 35 per cell attempt; a retried attempt (t / 4) is counted
    beyond the bound, so the learning count may then pass it, never an attempt's limit."""
    from verified_attn.certificates.transformer_heads import _within_limit

    assert _within_limit({"cell1/F(0)": 3, "cell1/F(k)": 32, "cell1/verify": 8}, 35) == 0
    assert _within_limit({"cell1/F(k)": 20, "cell1.1/F(0)": 3, "cell1.1/F(k)": 32}, 35) == 1
    with pytest.raises(CertificateError, match="cell1 has 36 learning queries, above"):
        _within_limit({"cell1/F(0)": 3, "cell1/F(k)": 33}, 35)
