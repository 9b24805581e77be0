"""The ``transformer-heads-float`` certificate of va.learn_transformer(float oracle,
max_heads=H): a genuine one re-checks (dict, file, CLI) with golden counts, and each tamper
is refused with a CertificateError naming what fails."""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import verified_attn as va
from verified_attn.certificates.transformer_heads_float import verify
from verified_attn.cli import main
from verified_attn.errors import CertificateError

sys.path.insert(0, str(Path(__file__).parent))
from test_transformer_multi_head_float import T2, random_float

_CACHE: dict[str, dict[str, Any]] = {}


def _cert(name: str = "T2") -> dict[str, Any]:
    """A genuine certificate (learned once per box), deep-copied for tampering."""
    if name not in _CACHE:
        T, seed = (T2, 0) if name == "T2" else (random_float(0, 2, 2), 0)
        rec = va.learn_transformer(va.Oracle(T, "float"), max_heads=2, seed=seed)
        _CACHE[name] = rec.certificate()
    return copy.deepcopy(_CACHE[name])


def test_a_genuine_certificate_passes_with_golden_counts() -> None:
    data = _cert()
    check = va.verify_certificate(data)
    assert check.ok and check.kind == "transformer-heads-float"
    assert check.theorem == "transformer/multi-head-cells"
    text = str(check)
    # golden, counted on the oracle: the float FFN's 13, 3 centres, the scores learned on
    # one cell (81: head count 40 and the float design) and two cells of values (2Hd = 8
    # each); the bound 13 + (1 + 82) + (1 + 8) + (1 + 8)
    assert "queries: 113 learning = 13 FFN + cells; bound 114 = 13 (FFN) + 83 + 9 + 9" in text
    assert "2 heads, A = I" in text and "parameters within parameter_rtol 1e-06" in text
    assert "figures in bits (recomputed): parameters" in text
    assert data["arithmetic"] == "float" and data["result"]["exact"] is False
    assert [c["label"] for c in data["cells"]] == ["cell1", "cell2", "cell3"]
    assert [(c["fit"], c["runs"]) for c in data["cells"]] == [
        ("scores", 1),
        ("values", 0),
        ("values", 0),
    ]
    assert data["skipped"] == [] and data["matching"]["table"] == [[0, 0, 0], [1, 1, 1]]
    assert len(data["answers"]) == 108  # every cell-stage query: 1 + 81 + 8, 9, 9
    assert {"seed", "versions", "parameter_rtol", "tolerances", "ffn", "shares_residual"} <= set(
        data
    )


def test_a_random_box_with_five_cells_and_through_a_file_and_the_cli(
    tmp_path: Any, capsys: Any
) -> None:
    data = _cert("random")
    path = tmp_path / "heads_float.json"
    path.write_text(json.dumps(data))
    assert va.verify_certificate(path).ok
    assert main(["verify-certificate", str(path)]) == 0
    out = capsys.readouterr().out
    assert "certificate OK (transformer-heads-float, transformer/multi-head-cells)" in out
    # golden (159 learning): the scores on the second run (t halved), four cells of values
    assert "159 learning = 40 FFN + cells; bound 241 = 40 (FFN) + 165 + 9 + 9 + 9 + 9" in out
    data["result"]["heads"][0]["W"][0][0] = {"float": (0.5).hex()}
    path.write_text(json.dumps(data))
    assert main(["verify-certificate", str(path)]) == 1
    assert "not its most accurate cell's" in capsys.readouterr().err


def _f(x: float) -> dict[str, str]:
    return {"float": float(x).hex()}


def _value(entry: dict[str, str]) -> float:
    return float.fromhex(entry["float"])


def _head_W(data: dict[str, Any]) -> None:
    w = data["result"]["heads"][1]["W"][0][1]
    data["result"]["heads"][1]["W"][0][1] = _f(_value(w) * (1 + 1e-6))


def _head_V(data: dict[str, Any]) -> None:
    v = data["result"]["heads"][0]["V"][1][0]
    data["result"]["heads"][0]["V"][1][0] = _f(_value(v) + 1e-6)


def _cell_head(data: dict[str, Any]) -> None:
    """A cell's stated head moved far: its row's matching no longer holds."""
    data["cells"][1]["heads"][0]["W"][0][1] = _f(5.0)


def _ffn_gamma(data: dict[str, Any]) -> None:
    g = data["ffn"]["neurons"][0]["gamma"]
    data["ffn"]["neurons"][0]["gamma"] = _f(_value(g) * 1.001)


def _result_w_o(data: dict[str, Any]) -> None:
    data["result"]["w_o"][0] = _f(_value(data["result"]["w_o"][0]) * 1.001)


def _result_b(data: dict[str, Any]) -> None:
    data["result"]["b"] = _f(_value(data["result"]["b"]) + 2**-40)


def _answer(data: dict[str, Any]) -> None:
    y = data["verification"]["answers"][3]
    data["verification"]["answers"][3] = _f(_value(y) * (1 + 1e-4))


def _centre_answer(data: dict[str, Any]) -> None:
    data["cells"][0]["center_answer"] = _f(_value(data["cells"][0]["center_answer"]) + 0.01)


def _ffn_answer(data: dict[str, Any]) -> None:
    data["ffn"]["verification"]["answers"][1] = _f(7.0)


def _learning_count(data: dict[str, Any]) -> None:
    data["queries"]["learning"] += 1


def _head_count(data: dict[str, Any]) -> None:
    data["queries"]["by_phase"]["cell1/head-count"] += 1
    data["queries"]["learning"] += 1


def _head_count_and_answer(data: dict[str, Any]) -> None:
    """One more head-count query, with a stored answer for it: the head count's formula."""
    _head_count(data)
    extra = next(a for a in data["answers"] if a["phase"] == "cell1/head-count")
    data["answers"].append(copy.deepcopy(extra))


def _phase_count(data: dict[str, Any]) -> None:
    """A phase count and the learning count changed together (the sums still agree)."""
    data["queries"]["by_phase"]["cell1/F(t)"] += 1
    data["queries"]["learning"] += 1


def _cell_answer(data: dict[str, Any]) -> None:
    y = data["answers"][10]["y"]
    data["answers"][10]["y"] = _f(_value(y) * (1 + 1e-4) + 1e-4)


def _drop_cell_answer(data: dict[str, Any]) -> None:
    del data["answers"][20]


def _centre_query(data: dict[str, Any]) -> None:
    """A cell's centre moved (still inside its cell): the stored centre query differs."""
    centre = data["cells"][1]["center"]
    centre[0] = _f(_value(centre[0]) + 2**-30)


def _values_count(data: dict[str, Any]) -> None:
    """One more values probe, stored and counted: the values fit's 2 H d."""
    extra = next(a for a in data["answers"] if a["phase"] == "cell2/values")
    data["answers"].append(copy.deepcopy(extra))
    data["queries"]["by_phase"]["cell2/values"] += 1
    data["queries"]["learning"] += 1


def _bound(data: dict[str, Any]) -> None:
    data["queries"]["bound"] -= 1


def _ffn_count(data: dict[str, Any]) -> None:
    data["ffn"]["queries"]["learning"] -= 1


def _drop_fresh(data: dict[str, Any]) -> None:
    del data["verification"]["answers"][5]


def _drop_fresh_and_count(data: dict[str, Any]) -> None:
    """Dropped with the counts made to agree: the seed's sequences no longer line up."""
    del data["verification"]["answers"][5]
    data["verification"]["count"] -= 1
    data["queries"]["verification"] -= 1
    data["queries"]["by_phase"]["verify"] -= 1


def _tighter_parameter_rtol(data: dict[str, Any]) -> None:
    data["parameter_rtol"] = _f(1e-12)


def _smaller_estimate(data: dict[str, Any]) -> None:
    est = data["result"]["parameter_error_estimate"]
    data["result"]["parameter_error_estimate"] = _f(_value(est) / 10)


def _tighter_cell_rtol(data: dict[str, Any]) -> None:
    """The centre check claimed at 1e-20: the centre answers are g's only to ~1e-12."""
    data["tolerances"]["cell_rtol"] = _f(1e-20)


def _bits(data: dict[str, Any]) -> None:
    data["result"]["error_figures"]["parameter_bits"] = _f(60.0)


def _cell_margin(data: dict[str, Any]) -> None:
    data["cells"][0]["margin"] = _f(_value(data["cells"][0]["margin"]) * 2)


def _cell_pattern(data: dict[str, Any]) -> None:
    data["cells"][0]["pattern"] = [not p for p in data["cells"][0]["pattern"]]


def _max_heads(data: dict[str, Any]) -> None:
    data["max_heads"] = 1


def _exact(data: dict[str, Any]) -> None:
    data["result"]["exact"] = True


TAMPERS = [
    (_head_W, "W and c are not its most accurate cell's"),
    (_head_V, "V is not the heads' shares"),
    (_cell_head, "beyond the matching tolerance"),
    (_ffn_gamma, "ffn: verification.answers[1]"),  # g's own fresh answers refute it
    (_result_w_o, "result.w_o is not the FFN's"),
    (_result_b, "result.b is not the FFN's constant"),
    (_answer, "verification.answers[3]"),
    (_centre_answer, "center_answer"),
    (_ffn_answer, "ffn: verification.answers[1]"),
    (_learning_count, "queries.learning is 114, but the learning phases add up to 113"),
    (_head_count, "cell1/head-count is 41, but 40 answers of that phase are stored"),
    (_head_count_and_answer, "cell1/head-count is 41; the head count at max_heads = 2 asks 40"),
    (_values_count, "cell2/values is 9, the values fit asks 2 H d = 8"),
    (_phase_count, "queries.by_phase.cell1/F(t) is 21, but 20 answers of that phase are stored"),
    (_cell_answer, "answers[10]: the stored answer"),
    (_drop_cell_answer, "answers of that phase are stored"),
    (_centre_query, "cells[1].center is not its stored centre query's"),
    (_bound, "queries.bound is 113, the theorem's bound is 114"),
    (_ffn_count, "queries.by_phase.ffn is 13, the stored design implies 12"),
    (_drop_fresh, "verification.answers has 7 entries, expected 8"),
    (_drop_fresh_and_count, "verification.answers["),
    (_tighter_parameter_rtol, "parameter_rtol 1e-12 is tighter than the heads' estimate"),
    (_smaller_estimate, "result.parameter_error_estimate is"),
    (_tighter_cell_rtol, "is not g's value"),
    (_bits, "parameter_bits 60 is not -log2"),
    (_cell_margin, "is not the centre's least distance"),
    (_cell_pattern, "not strictly inside the cell of its pattern"),
    (_max_heads, "expected 1 to max_heads = 1"),
    (_exact, "result.exact must be false"),
]


@pytest.mark.parametrize(("tamper", "message"), TAMPERS, ids=[t.__name__ for t, _ in TAMPERS])
def test_each_tamper_is_refused_naming_what_fails(tamper: Any, message: str) -> None:
    data = _cert()
    tamper(data)
    with pytest.raises(CertificateError) as info:
        verify(data)
    assert message in str(info.value)
    with pytest.raises(CertificateError):  # the dispatcher too
        va.verify_certificate(data)


def test_a_cell_where_no_head_shows_and_scores_on_a_third_run() -> None:
    """Random d = 2, seed 12: the widest cell shows no head (its head count only, 1 + 40),
    the scores are learned on the next cell's third run (t halved twice), three cells of
    values (golden, counted on the oracle); a changed run count is refused: its scale t
    is not the inner record's (and its bound term not the count)."""
    rec = va.learn_transformer(va.Oracle(random_float(12, 2, 2), "float"), max_heads=2, seed=12)
    data = rec.certificate()
    assert [(c["fit"], c["runs"]) for c in data["cells"]] == [
        ("none", 0),
        ("scores", 3),
        ("values", 0),
        ("values", 0),
        ("values", 0),
    ]
    assert (rec.queries, rec.bound) == (228, 352)
    assert "+ 41 + " in str(va.verify_certificate(data))
    assert data["cells"][1]["inner"]["t"] == {"float": (0.125).hex()}  # 1/2 halved twice
    data["cells"][1]["runs"] = 2
    with pytest.raises(CertificateError, match=r"inner\.t 0\.125 is not the run's scale 0\.25"):
        verify(data)


def test_the_checker_imports_no_transformer_learner() -> None:
    """Run in a fresh interpreter: checking a stored certificate loads no module of
    verified_attn.transformer."""
    import subprocess

    data = _cert()
    code = (
        "import json, sys; import verified_attn as va\n"
        "va.verify_certificate(json.loads(sys.stdin.read()))\n"
        "print(sorted(m for m in sys.modules if m.startswith('verified_attn.transformer')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        input=json.dumps(data),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert out.strip() == "[]"


def test_a_run_not_recorded_is_refused_a_certificate_at_writing() -> None:
    oracle = va.Oracle(T2, "float", record=False)
    rec = va.learn_transformer(oracle, max_heads=2)
    with pytest.raises(CertificateError, match=r"every query of the cells.*record=True"):
        rec.certificate()
    assert np.isfinite(rec.parameters["error_estimate"])


def _leaves(node: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path to a leaf (and to each list and object) of a certificate."""
    items = (
        list(node.items())
        if isinstance(node, dict)
        else (list(enumerate(node)) if isinstance(node, list) else [])
    )
    out = [path] if path else []
    for key, val in items:
        out += _leaves(val, (*path, key))
    return out


def _set(data: dict[str, Any], path: tuple[Any, ...], value: Any) -> None:
    node: Any = data
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value


@pytest.mark.parametrize("value", ["x", None, [], {}, -1, True, {"float": "nan"}])
def test_a_hostile_value_anywhere_is_our_error_or_harmless(value: Any) -> None:
    """A wrong type or value at any of 80 places (seeded sample of every field): the
    checker raises CertificateError or, for an informational field, still passes; never
    another exception."""
    genuine = _cert()
    paths = _leaves(genuine)
    rng = np.random.default_rng(5)
    for k in rng.choice(len(paths), size=80, replace=False):
        data = copy.deepcopy(genuine)
        _set(data, paths[int(k)], value)
        try:
            va.verify_certificate(data)
        except CertificateError:
            continue
        assert paths[int(k)][0] in ("versions", "assumptions", "tolerances", "skipped") or (
            data == genuine
        ), f"accepted {value!r} at {paths[int(k)]}"


def test_a_four_head_certificate() -> None:
    """Random d = 2, H = 4, seed 1: four heads, their certificate re-checks (golden count
    238 against the bound 242) and a changed V entry of the fourth head is refused."""
    rec = va.learn_transformer(va.Oracle(random_float(1, 2, 4), "float"), max_heads=4, seed=1)
    data = rec.certificate()
    assert rec.model.H == 4 and (rec.queries, rec.bound) == (238, 242)
    assert "4 heads, A = I" in str(verify(data))
    data["result"]["heads"][3]["V"][0][0] = _f(_value(data["result"]["heads"][3]["V"][0][0]) + 1e-6)
    with pytest.raises(CertificateError, match="V is not the heads' shares"):
        verify(data)
