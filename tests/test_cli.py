"""The verified-attn command: exit statuses, output, files, and no tracebacks on bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from fractions import Fraction

import pytest

import verified_attn.claims
from verified_attn.checks import Claim, ClaimResult
from verified_attn.cli import LEARN_KINDS, main, random_single_head


def _claim(claim_id: str, passed: bool) -> Claim:
    def check(seed: int) -> ClaimResult:
        return ClaimResult(
            claim_id, "Thm 0", f"statement of {claim_id}", passed, f"seed was {seed}", 3, 4
        )

    return Claim(claim_id, "Thm 0", f"statement of {claim_id}", check)


@pytest.fixture
def fake_claims(monkeypatch):
    """Two fast claims in place of the real registry; tests append failing ones."""
    registry = [_claim("fake/one", True), _claim("fake/two", True)]
    monkeypatch.setattr(verified_attn.claims, "all_claims", lambda: list(registry))
    return registry


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, out, err


# ---------------------------------------------------------------------------------------
# check / claims
# ---------------------------------------------------------------------------------------


def test_check_all_pass(capsys, fake_claims) -> None:
    code, out, _ = run(capsys, "check")
    assert code == 0
    assert "fake/one" in out and "fake/two" in out
    assert "2 passed, 0 failed" in out
    assert "3 (4)" in out  # queries used (bound)


def test_check_exit_1_when_a_claim_fails(capsys, fake_claims) -> None:
    fake_claims.append(_claim("fake/broken", False))
    code, out, _ = run(capsys, "check")
    assert code == 1
    assert "2 passed, 1 failed" in out
    assert "FAIL fake/broken: seed was 0" in out


def test_check_selected_ids_and_seed(capsys, fake_claims) -> None:
    fake_claims.append(_claim("fake/broken", False))
    code, out, _ = run(capsys, "check", "fake/one", "--seed", "7")
    assert code == 0  # the failing claim was not selected
    assert "fake/broken" not in out and "1 passed, 0 failed" in out


def test_check_unknown_id_is_a_usage_error(capsys, fake_claims) -> None:
    code, _, err = run(capsys, "check", "no/such-claim")
    assert code == 2
    assert "unknown claim id 'no/such-claim'" in err and "lists the 2 claim ids" in err
    assert "did you mean" not in err


def test_check_unknown_id_suggests_the_close_one(capsys, fake_claims) -> None:
    code, _, err = run(capsys, "check", "fake/tow")
    assert code == 2
    assert err.splitlines()[0].startswith("usage: verified-attn check")
    assert err.splitlines()[-1] == (
        "verified-attn: error: unknown claim id 'fake/tow'; did you mean 'fake/two'?"
    )


def test_check_writes_json_and_markdown(capsys, fake_claims, tmp_path) -> None:
    fake_claims.append(_claim("fake/broken", False))
    j, m = tmp_path / "r.json", tmp_path / "r.md"
    code, _, _ = run(capsys, "check", "--seed", "5", "--json", str(j), "--markdown", str(m))
    assert code == 1
    data = json.loads(j.read_text())
    assert data["seed"] == 5 and data["passed"] == 2 and data["failed"] == 1
    assert {"numpy", "sympy", "python-flint", "verified_attn"} <= set(data["versions"])
    assert data["claims"][2]["id"] == "fake/broken" and data["claims"][2]["passed"] is False
    assert data["claims"][0]["detail"] == "seed was 5"
    assert "| `fake/broken` |" in m.read_text()


def test_claims_lists_the_registry(capsys) -> None:
    code, out, _ = run(capsys, "claims")
    assert code == 0
    assert "thm-4.1/query-count" in out and "Thm 4.1" in out


def test_claims_markdown(capsys, fake_claims) -> None:
    code, out, _ = run(capsys, "claims", "--markdown")
    assert code == 0
    assert out.splitlines()[:4] == [
        "| id | paper | statement |",
        "|---|---|---|",
        "| `fake/one` | Thm 0 | statement of fake/one |",
        "| `fake/two` | Thm 0 | statement of fake/two |",
    ]


def test_python_dash_m(tmp_path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "verified_attn", "claims"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert "thm-4.1/query-count" in proc.stdout


# ---------------------------------------------------------------------------------------
# learn / verify-certificate
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("arithmetic", "verdict"),
    [
        ("exact", "equals the truth exactly (==): yes"),
        ("certified", "equals the truth exactly (==): yes"),
        ("float", "float64, not exact: max |recovered - truth| ="),
    ],
)
def test_learn_single_head_writes_a_certificate_that_verifies(
    capsys, tmp_path, monkeypatch, arithmetic, verdict
) -> None:
    monkeypatch.chdir(tmp_path)
    code, out, _ = run(capsys, "learn", "single-head", "--d", "3", "--arithmetic", arithmetic)
    assert code == 0
    assert "queries: 12 learning (bound 12; = the bound), 8 verification" in out
    assert verdict in out
    cert = tmp_path / "certificate-single-head-d3.json"
    assert f"certificate written to {cert.name}" in out
    code, out, _ = run(capsys, "verify-certificate", str(cert))
    assert code == 0 and "certificate OK (single-head, thm-4.1)" in out


def test_learn_affine_with_paths(capsys, tmp_path) -> None:
    cert, rec = tmp_path / "c.json", tmp_path / "rec.json"
    code, out, _ = run(
        capsys,
        "learn",
        "single-head",
        "--d",
        "2",
        "--affine",
        "--seed",
        "4",
        "--precision",
        "128",
        "--certificate",
        str(cert),
        "--json",
        str(rec),
    )
    assert code == 0
    assert "queries: 9 learning (bound 9; = the bound)" in out  # d^2 + 2d + 1
    assert "certified at 128 bits" in out
    data = json.loads(rec.read_text())
    truth = random_single_head(2, seed=4, affine=True)
    got = [[Fraction(x) for x in row] for row in data["parameters"]["W"]]
    assert got == [[Fraction(int(q.p), int(q.q)) for q in row] for row in truth.W.tolist()]
    assert json.loads(cert.read_text())["affine"] is True


def test_learn_instance_has_a_zero_in_v_and_is_seeded() -> None:
    for seed in range(20):
        m = random_single_head(4, seed=seed)
        assert 0 in list(m.v) and any(m.v)
    assert random_single_head(3, seed=1).W == random_single_head(3, seed=1).W
    assert random_single_head(3, seed=1).W != random_single_head(3, seed=2).W
    assert any(random_single_head(1, seed=s).v[0] != 0 for s in range(5))


def test_learn_kinds_table() -> None:
    assert list(LEARN_KINDS)[:5] == [
        "single-head",
        "low-rank",
        "multi-head",
        "transformer",
        "noisy",
    ]
    assert LEARN_KINDS["single-head"].help.startswith("Thm 4.1")


def test_verify_certificate_tampered(capsys, tmp_path) -> None:
    path = tmp_path / "c.json"
    assert main(["learn", "single-head", "--d", "2", "--certificate", str(path)]) == 0
    data = json.loads(path.read_text())
    data["result"]["parameters"]["v"][0] = {"rational": "1/1"}
    path.write_text(json.dumps(data))
    capsys.readouterr()
    code, _, err = run(capsys, "verify-certificate", str(path))
    assert code == 1
    assert "certificate FAILED" in err and "result v[0]" in err


def test_verify_certificate_not_json(capsys, tmp_path) -> None:
    path = tmp_path / "c.json"
    path.write_text("no")
    code, _, err = run(capsys, "verify-certificate", str(path))
    assert code == 1 and "is not valid JSON" in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["learn", "single-head", "--d", "0"], "--d: expected an integer >= 1, got 0"),
        (["learn", "single-head", "--d", "two"], "expected an integer, got 'two'"),
        (["learn", "single-head"], "the following arguments are required: --d"),
        (["learn", "single-head", "--d", "2", "--arithmetic", "fuzzy"], "invalid choice"),
        (["learn", "single-head", "--d", "2", "--precision", "8"], "expected an integer >= 32"),
        (
            ["learn", "single-head", "--d", "2", "--arithmetic", "float", "--precision", "64"],
            "--precision applies to --arithmetic certified only",
        ),
        (["learn", "single-head", "--d", "2", "--seed", "-1"], "expected an integer >= 0"),
        (["learn"], "learn needs a model kind: single-head"),
        (["learn", "multi-head", "--d", "2"], "the following arguments are required: --heads"),
        (["learn", "frobnicate", "--d", "2"], "invalid choice"),
        (["learn", "noisy", "--d", "2", "--tolerance", "-1e-3"], "argument --tolerance"),
        (["learn", "low-rank", "--d", "4"], "needs --rank R (or --find-rank"),
        (["check", "--seed", "x"], "expected an integer"),
        (["frobnicate"], "invalid choice"),
    ],
)
def test_bad_usage_exits_2_with_a_message(capsys, argv, message) -> None:
    code, _, err = run(capsys, *argv)
    assert code == 2
    assert message in err


def test_no_command_prints_help(capsys) -> None:
    code, out, _ = run(capsys)
    assert code == 2 and "verify-certificate" in out


def test_help_exits_0(capsys) -> None:
    code, out, _ = run(capsys, "--help")
    assert code == 0 and "usage: verified-attn" in out


def test_learner_refusal_exits_1(capsys, tmp_path, monkeypatch) -> None:
    # A kind whose run raises a VerifiedAttnError (as v = 0 would): message, exit 1.
    from verified_attn.errors import NotIdentifiable

    def refuse(args):
        raise NotIdentifiable("v = 0: W is not identifiable")

    kind = LEARN_KINDS["single-head"]
    monkeypatch.setitem(
        LEARN_KINDS,
        "single-head",
        type(kind)(kind.name, kind.help, kind.add_arguments, refuse, kind.arithmetics),
    )
    code, _, err = run(capsys, "learn", "single-head", "--d", "2")
    assert code == 1 and "NotIdentifiable: v = 0" in err


def test_unwritable_output_is_an_error_not_a_traceback(capsys, tmp_path) -> None:
    target = tmp_path / "missing-dir" / "c.json"
    code, _, err = run(capsys, "learn", "single-head", "--d", "1", "--certificate", str(target))
    assert code == 2 and "cannot write the certificate" in err and "No such file" in err


def test_comparison_with_the_truth_can_say_no() -> None:
    from verified_attn import Oracle, learn_single_head
    from verified_attn.cli.kinds import compare_with_truth

    truth, other = random_single_head(3, seed=2), random_single_head(3, seed=3)
    for arithmetic, kw in [("exact", {}), ("certified", {"denominator_bound": 1})]:
        oracle = Oracle(truth, arithmetic, precision=128 if arithmetic == "certified" else None)
        rec = learn_single_head(oracle, **kw)
        assert compare_with_truth(rec, truth.parameters())[0] is True
        assert compare_with_truth(rec, other.parameters())[0] is False


@pytest.mark.parametrize(("adversary", "kind"), [("worst-case", "noisy"), ("labels", "labels")])
def test_learn_noisy_reports_the_truth_within_the_bound(capsys, tmp_path, adversary, kind) -> None:
    cert = tmp_path / "noisy.json"
    argv = ["learn", "noisy", "--d", "2", "--adversary", adversary, "--seed", "1"]
    assert main([*argv, "--certificate", str(cert)]) == 0
    out = capsys.readouterr().out
    assert "truth within the guarantee: yes" in out
    assert f"certificate written to {cert}" in out
    code, out, _ = run(capsys, "verify-certificate", str(cert))
    assert code == 0 and f"({kind}," in out


def test_learn_noisy_offers_no_arithmetic(capsys) -> None:
    # Its answers are floats: --arithmetic is neither listed in --help nor accepted.
    assert main(["learn", "noisy", "--d", "2", "--arithmetic", "exact"]) == 2
    assert "unrecognized arguments: --arithmetic" in capsys.readouterr().err
    assert main(["learn", "noisy", "--help"]) == 0
    assert "--arithmetic" not in capsys.readouterr().out


def test_learn_low_rank_exact_in_certified_mode(capsys) -> None:
    assert main(["learn", "low-rank", "--d", "6", "--rank", "2", "--find-rank"]) == 0
    out = capsys.readouterr().out
    assert "equals the truth exactly (==): yes" in out
    assert "bound 27" in out  # d + 2dr - r^2 + 1 rank test = 6 + 24 - 4 + 1


def test_learn_low_rank_rank_above_d_is_a_usage_error(capsys) -> None:
    assert main(["learn", "low-rank", "--d", "3", "--rank", "4"]) == 2
    assert "--rank must be <= --d" in capsys.readouterr().err


@pytest.mark.parametrize("method", ["paper", "direct"])
def test_learn_transformer_exact(capsys, method) -> None:
    argv = ["learn", "transformer", "--d", "3", "--width", "4", "--method", method]
    assert main(argv) == 0
    assert "equal the truth exactly (==): yes" in capsys.readouterr().out


def test_learn_transformer_rejects_float(capsys) -> None:
    assert main(["learn", "transformer", "--d", "3", "--width", "4", "--arithmetic", "float"]) == 2
    assert "invalid choice: 'float'" in capsys.readouterr().err


def test_learn_prints_a_summary_and_parameters_on_request(capsys, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    code, out, _ = run(capsys, "learn", "single-head", "--d", "3")
    assert code == 0 and "parameters:" not in out and "verification:" in out
    code, out, _ = run(capsys, "learn", "single-head", "--d", "3", "--show-parameters")
    assert code == 0 and "parameters:" in out and "  W =" in out


def test_learn_json_to_stdout_is_pure_json(capsys, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    code, out, err = run(capsys, "learn", "single-head", "--d", "2", "--json", "-")
    assert code == 0 and json.loads(out)["queries"]["learning"] == 6
    assert "queries: 6 learning" in err
    assert not (tmp_path / "-").exists()


def test_learn_multi_head_exact(capsys, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    code, out, _ = run(capsys, "learn", "multi-head", "--d", "2", "--heads", "2")
    assert code == 0 and "equals the canonical form exactly (==): yes" in out
    code, out, _ = run(capsys, "verify-certificate", "certificate-multi-head-d2.json")
    assert code == 0 and "certificate OK (multi-head" in out


def test_version(capsys) -> None:
    from verified_attn import __version__

    code, out, _ = run(capsys, "--version")
    assert code == 0 and out.strip() == f"verified-attn {__version__}"


def test_check_verbose_and_total_time(capsys, fake_claims) -> None:
    _, out, _ = run(capsys, "check", "--verbose")
    assert "total " in out.splitlines()[-1]
    assert "detail:" in out


@pytest.mark.parametrize(
    "kind", ["permutation", "shared-score-split", "dead-head", "cancelling-values"]
)
def test_counterexample_multi_head(capsys, tmp_path, kind) -> None:
    out_json = tmp_path / "pair.json"
    argv = ["counterexample", "multi-head", "--d", "2", "--heads", "2", "--kind", kind]
    assert main([*argv, "--json", str(out_json)]) == 0
    out = capsys.readouterr().out
    assert "holds: True" in out and "first model" in out and "second model" in out
    assert json.loads(out_json.read_text())


def test_counterexample_bad_heads_is_a_usage_error(capsys) -> None:
    argv = ["counterexample", "multi-head", "--d", "3", "--heads", "1", "--kind", "permutation"]
    assert main(argv) == 2
    assert "heads must be >= 2" in capsys.readouterr().err
