"""The command line as a new user meets it: tables that fit the terminal, "did you mean",
usage errors as argparse prints them, Ctrl-C, a fast --version, and learn's output paths."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import verified_attn.claims
from verified_attn.checks import Claim, ClaimResult
from verified_attn.cli import LEARN_KINDS, main
from verified_attn.cli.commands import COMMANDS

ROOT = Path(__file__).resolve().parent.parent

LONG = (
    "A statement long enough to need wrapping on any terminal: every word of it must be "
    "printed, none cut at sixty characters, and the last word is ZEBRA."
)
LONG_ID = "fake/a-rather-long-claim-identifier-here"


def _claim(claim_id: str, statement: str = LONG) -> Claim:
    def check(seed: int) -> ClaimResult:
        return ClaimResult(claim_id, "Thm 0", statement, True, "fine", 3, 4)

    return Claim(claim_id, "Thm 0", statement, check)


@pytest.fixture
def long_claims(monkeypatch):
    registry = [_claim(LONG_ID), _claim("fake/short", "Short.")]
    monkeypatch.setattr(verified_attn.claims, "all_claims", lambda: list(registry))
    return registry


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, out, err


# ---------------------------------------------------------------------------------------
# Tables fit the terminal and nothing is cut
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("command", [["claims"], ["check"], ["check", "-v"], ["claims", "-v"]])
@pytest.mark.parametrize("columns", [40, 60, 80, 200])
def test_output_fits_the_terminal_and_keeps_every_word(
    capsys, monkeypatch, long_claims, command, columns
) -> None:
    monkeypatch.setenv("COLUMNS", str(columns))
    code, out, _ = run(capsys, *command)
    assert code == 0
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= columns, out
    # Every word of the statement appears, in order, once the wrapping is undone.
    flat = " ".join(out.split())
    at = 0
    for word in LONG.split():
        found = flat.find(word, at)
        assert found >= 0, f"{word!r} missing at COLUMNS={columns}:\n{out}"
        at = found + len(word)
    if columns >= len(LONG_ID) + 20:
        assert LONG_ID in out  # an id is not split where it fits on a line


def test_wide_terminal_gets_a_table_narrow_one_a_list(capsys, monkeypatch, long_claims) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    _, out, _ = run(capsys, "claims")
    header = out.splitlines()[0].split()
    assert header[:2] == ["id", "paper"] and "statement" in header and "level" in header
    row = next(line for line in out.splitlines() if line.startswith(LONG_ID))
    assert "Thm 0" in row and "checked on instances" in row
    monkeypatch.setenv("COLUMNS", "60")
    _, out, _ = run(capsys, "claims")
    head, cont, first = out.splitlines()[:3]
    assert head.startswith(f"{LONG_ID} (Thm 0),") and cont.startswith("  ")
    assert " ".join(f"{head} {cont}".split()) == f"{LONG_ID} (Thm 0), checked on instances"
    assert first.startswith("  A statement long enough")


def test_real_claims_table_widths(capsys, monkeypatch) -> None:
    for columns in (80, 200):
        monkeypatch.setenv("COLUMNS", str(columns))
        _, out, _ = run(capsys, "claims")
        assert max(len(line) for line in out.splitlines()) <= columns
        assert "thm-4.1/query-count" in out


def test_claims_verbose_says_how_each_is_checked(capsys, monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "100")
    code, out, _ = run(capsys, "claims", "--verbose")
    assert code == 0
    block = out.split("thm-4.1/query-count (Thm 4.1)\n", 1)[1].split("\nthm-4.1/")[0]
    assert "checked: checked on instances, at a chosen size (default d = 8;" in block
    assert "large d = 128" in " ".join(block.split())
    formal = out.split("formal/", 1)[1]
    assert "proved for all d (Coq:" in " ".join(formal.split()[:30])


# ---------------------------------------------------------------------------------------
# Usage errors: the usage line, then the message; "did you mean"
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "usage", "message"),
    [
        (["chek"], "usage: verified-attn [-h]", "invalid choice: 'chek'"),
        (["check", "--sed", "3"], "usage: verified-attn check", "unrecognized arguments: --sed"),
        (["claims", "--markdwn"], "usage: verified-attn claims", "unrecognized arguments"),
        (
            ["learn", "single-head", "--d", "2", "--arithmetc", "exact"],
            "usage: verified-attn learn single-head",
            "unrecognized arguments: --arithmetc",
        ),
        (["learn", "singel-head", "--d", "2"], "usage: verified-attn learn", "invalid choice"),
        (["check", "thm-4.1/query-cont"], "usage: verified-attn check", "unknown claim id"),
    ],
)
def test_usage_line_then_error_with_a_suggestion(capsys, argv, usage, message) -> None:
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    lines = err.splitlines()
    assert lines[0].startswith(usage)
    assert lines[-1].startswith("verified-attn: error: ") and message in lines[-1]
    want = {
        "chek": "check",
        "--sed": "--seed",
        "--markdwn": "--markdown",
        "--arithmetc": "--arithmetic",
        "singel-head": "single-head",
        "thm-4.1/query-cont": "thm-4.1/query-count",
    }
    typo = next(a for a in argv if a in want)
    assert lines[-1].endswith(f"; did you mean {want[typo]!r}?")


def test_unknown_id_without_a_close_match_does_not_list_every_id(capsys) -> None:
    code, _, err = run(capsys, "check", "nonsense")
    assert code == 2
    last = err.splitlines()[-1]
    assert last.startswith("verified-attn: error: unknown claim id 'nonsense'; `verified-attn ")
    assert "claims` lists the" in last and "thm-4.1/query-count" not in err
    assert len(last) < 120


def test_sweep_unknown_claim_suggests(capsys) -> None:
    code, _, err = run(capsys, "sweep", "thm-4.1/query-cont", "--sizes", "4")
    assert code == 2 and err.splitlines()[0].startswith("usage: verified-attn sweep")
    assert err.splitlines()[-1].endswith("; did you mean 'thm-4.1/query-count'?")
    assert "thm-5.1" not in err


def test_no_error_message_is_empty_or_starts_with_a_colon(capsys) -> None:
    code, _, err = run(capsys, "sweep", "thm-4.1/length-one", "--sizes", "4")
    assert code == 2
    last = err.splitlines()[-1]
    assert "error: :" not in last
    assert last == (
        "verified-attn: error: claim 'thm-4.1/length-one' has no size parameter 'd'; "
        "its size parameters: d_max"
    )


# ---------------------------------------------------------------------------------------
# Ctrl-C and --version
# ---------------------------------------------------------------------------------------


def test_ctrl_c_is_one_line_and_exit_130(capsys, monkeypatch) -> None:
    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setitem(COMMANDS, "claims", interrupted)
    code, out, err = run(capsys, "claims")
    assert code == 130 and out == ""
    assert [line for line in err.splitlines() if line] == ["verified-attn: interrupted"]


def test_ctrl_c_in_a_real_process(tmp_path) -> None:
    # SIGINT while a command runs: exit status 130, no traceback.
    import signal
    import time

    # The child takes Python's own SIGINT handler: a shell that starts this suite in the
    # background without job control hands its children SIGINT ignored, and Python then
    # installs none, so the signal would never reach the CLI under test.
    script = (
        "import signal, sys, time\n"
        "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
        "import verified_attn.cli.commands as c\n"
        "def slow(args):\n"
        "    print('ready', flush=True)\n"
        "    time.sleep(60)\n"
        "    return 0\n"
        "c.COMMANDS['claims'] = slow\n"
        "from verified_attn.cli import main\n"
        "raise SystemExit(main(['claims']))\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130
    assert "Traceback" not in err and err.strip() == "verified-attn: interrupted"


def test_version_imports_nothing_heavy() -> None:
    script = (
        "import sys\n"
        "from verified_attn.cli import main\n"
        "code = main(['--version'])\n"
        "heavy = [m for m in ('numpy', 'sympy', 'scipy', 'flint', 'mpmath', 'rich') "
        "if m in sys.modules]\n"
        "print(code, heavy)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    from verified_attn import __version__

    assert proc.stdout.splitlines() == [f"verified-attn {__version__}", "0 []"]


def test_python_dash_m_version(tmp_path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "verified_attn", "--version"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0 and proc.stdout.startswith("verified-attn ")


# ---------------------------------------------------------------------------------------
# learn: output paths checked before any query; --no-certificate; --json - writes no file
# ---------------------------------------------------------------------------------------


@pytest.fixture
def counted_runs(monkeypatch):
    """single-head's run, counting its calls (a call is where the queries are asked)."""
    calls: list[object] = []
    kind = LEARN_KINDS["single-head"]

    def run(args):
        calls.append(args)
        return kind.run(args)

    monkeypatch.setitem(
        LEARN_KINDS,
        "single-head",
        type(kind)(kind.name, kind.help, kind.add_arguments, run, kind.arithmetics),
    )
    return calls


@pytest.mark.parametrize(
    ("option", "target", "reason"),
    [
        ("--certificate", "missing-dir/c.json", "No such file or directory"),
        ("--certificate", ".", "Is a directory"),
        ("--json", "missing-dir/r.json", "No such file or directory"),
    ],
)
def test_unwritable_path_fails_before_any_query(
    capsys, tmp_path, monkeypatch, counted_runs, option, target, reason
) -> None:
    monkeypatch.chdir(tmp_path)
    code, _, err = run(capsys, "learn", "single-head", "--d", "2", option, target)
    assert code == 2 and counted_runs == []
    assert err.splitlines()[0].startswith("usage: verified-attn learn single-head")
    assert "verified-attn: error: cannot write the" in err and reason in err
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_writable_path_check_leaves_no_file_and_keeps_an_existing_one(
    capsys, tmp_path, monkeypatch, counted_runs
) -> None:
    # A refusal after the path check (bad --precision) must not leave an empty file.
    monkeypatch.chdir(tmp_path)
    existing = tmp_path / "old.json"
    existing.write_text("keep me")
    code, _, _ = run(
        capsys, "learn", "single-head", "--d", "2", "--certificate", "new.json", "--json",
        str(existing), "--arithmetic", "float", "--precision", "64",
    )  # fmt: skip
    assert code == 2 and counted_runs == []
    assert existing.read_text() == "keep me" and not (tmp_path / "new.json").exists()


def test_json_to_stdout_writes_nothing_here(capsys, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    code, out, err = run(capsys, "learn", "single-head", "--d", "2", "--json", "-")
    assert code == 0 and json.loads(out)["queries"]["learning"] == 6
    assert list(tmp_path.iterdir()) == []
    assert "no certificate written" in err


def test_json_to_stdout_with_a_certificate_path(capsys, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    cert = tmp_path / "sub" / "c.json"
    cert.parent.mkdir()
    code, out, _ = run(
        capsys, "learn", "single-head", "--d", "2", "--json", "-", "--certificate", str(cert)
    )
    assert code == 0 and json.loads(out)["queries"]["learning"] == 6
    assert [p.name for p in tmp_path.iterdir()] == ["sub"] and cert.exists()


def test_no_certificate(capsys, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    code, out, _ = run(capsys, "learn", "single-head", "--d", "2", "--no-certificate")
    assert code == 0 and "queries: 6 learning" in out and "no certificate written" in out
    assert list(tmp_path.iterdir()) == []
    code, _, err = run(
        capsys, "learn", "single-head", "--d", "2", "--no-certificate", "--certificate", "c.json"
    )
    assert code == 2 and "not allowed with argument" in err
