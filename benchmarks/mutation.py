"""Mutation testing of the core modules with mutmut: do the tests and the claims catch wrong code?

Not part of the default test run or CI (it takes an hour or more). Install the extra and run
from the repository root::

    pip install -e ".[mutation]"
    nice -n 10 python benchmarks/mutation.py --per-module 40 --seed 0 --max-children 1

mutmut 3 (configured in ``[tool.mutmut]`` of pyproject.toml: the modules to mutate and the
fast tests to run) copies ``verified_attn/`` and ``tests/`` into ``mutants/`` (git-ignored)
and rewrites every function of the core modules into a *trampoline* that dispatches on the
environment variable ``MUTANT_UNDER_TEST`` to the original or to one mutated copy (operator,
comparison, constant, string, argument and return swaps). It records which tests reach which
function, so each mutant runs only the tests that can see it.

This script drives it in these steps (each a separate invocation after the first):

1. *generate*: ``mutmut run`` with a filter that names no mutant, which makes mutmut write
   ``mutants/`` and collect its coverage statistics, then stop (mutmut 3 has no
   generate-only command);
2. *sample*: ``--per-module N`` mutants of each core module, drawn with
   ``random.Random(seed).sample`` from that module's sorted mutant names (``--per-module 0``:
   every mutant; the five modules have about 3200, 20 CPU-hours worst case here);
3. *run*: ``mutmut run --max-children K NAME...`` on the sample, then every result is read
   back from mutmut's ``.meta`` files;
4. *claims* (``--claims N``): for N mutants of the functions a theorem's result rests on
   (``CLAIM_FUNCTIONS``), ``verified-attn check thm-4.1/`` (``CLAIM_IDS``) is run in
   ``mutants/`` with ``MUTANT_UNDER_TEST`` set, to measure what the main job alone catches
   (after two controls: the original code passes, mutmut's "fail" mutant fails);
5. *recheck* (``--recheck``): survivors are triaged by hand: ``EQUIVALENT`` lists those that
   change no behaviour (with the reason); every other survivor gets a test that kills it
   (``tests/test_mutation_kills_s3.py``, naming the mutant), and this step re-runs the
   recorded survivors, and the mutants the claims missed, to prove it; ``--triage``
   recomputes the triage section without running anything (after ``EQUIVALENT`` changed).

``--collect`` reads the sample's results after a stopped run. The JSON
(``benchmarks/results/mutation.json``) has the runner and its version, the counts per module,
the survival rate before and after triage, every survivor with its diff, and the seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
import tomllib
from importlib.metadata import version
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import metadata, output_dir, progress  # noqa: E402  (the benchmarks' shared helpers, by path)

#: mutmut's exit codes (``mutmut.stats.status_by_exit_code``), as counted here.
STATUS = {
    1: "killed",
    3: "killed",
    0: "survived",
    5: "no tests",
    33: "no tests",
    34: "skipped",
    36: "timeout",
    24: "timeout",
    -24: "timeout",
    152: "timeout",
    255: "timeout",
    -9: "segfault",
    -11: "segfault",
}

#: Functions whose mutants step 4 runs ``verified-attn check`` against: the agreement rule,
#: the rational reconstruction, the certificate kernel's checks, the oracle's counting.
CLAIM_FUNCTIONS = [
    "verified_attn.verification.x_agree",
    "verified_attn.verification.x_check_record",
    "verified_attn.arithmetic.x_reconstruct_rational",
    "verified_attn.arithmetic.x_simplest_rational_between",
    "verified_attn.certificates.kernel.x_largest_unique_denominator",
    "verified_attn.certificates.kernel.x_check_verification",
    "verified_attn.certificates.kernel.x_check_counts",
    "verified_attn.oracle.xǁOracleǁ_account",
]

#: The claim ids step 4 runs (prefixes; the single-head theorem's claims and the certificate
#: claims of every room read these core functions).
CLAIM_IDS = ["thm-4.1/"]

#: Survivors that change no behaviour, with the reason (mutant name -> why it is equivalent).
EQUIVALENT: dict[str, str] = {
    "verified_attn.arithmetic.xǁArithmeticǁagree__mutmut_1": (
        "the default of scale on the abstract Arithmetic.agree, which only raises "
        "NotImplementedError; every subclass overrides agree with its own default"
    ),
    "verified_attn.arithmetic.xǁFloatArithmeticǁapply__mutmut_6": (
        "den < 2**900 -> <=: a denominator of exactly 2^900 takes the fast path, whose "
        "numerators (< 2^900) are rounded to float64 once and divided by the power of two "
        "2^900, exactly (no underflow: |p / 2^900| >= 2^-900); that is the correctly rounded "
        "double the entry-by-entry path gives"
    ),
    "verified_attn.certificates.kernel.x_check_verification__mutmut_190": (
        "the quick exact pre-check (disjoint enclosures: certainly different) disabled: agree "
        "then decides the same pair symbolically, with the same verdict (only slower)"
    ),
    "verified_attn.oracle.xǁOracleǁ_answer_batch_fn__mutmut_19": (
        '"fiu" -> "XXfiuXX": dtype.kind is one character and never "X", so the membership '
        "test is unchanged"
    ),
    "verified_attn.oracle.xǁOracleǁ_query_array__mutmut_16": (
        "after the fix it revealed (the transcript kept the caller's array, see "
        "tests/test_mutation_kills_s3.py), this name is the regenerated mutant that drops "
        "copy=: the batch is then always copied, also when nothing keeps it or the caller "
        "handed it over; an extra copy changes memory and time only, no answer, count or "
        "record"
    ),
    "verified_attn.probing.x_measured_array__mutmut_5": (
        "dtype=np.float64 dropped in float mode: every caller passes Python floats or float64 "
        "values (the oracle's answers, floats parsed from a certificate, "
        "FloatArithmetic.rational), or an empty list, for which numpy infers float64"
    ),
    "verified_attn.probing.x_scalar__mutmut_6": (
        "np.asarray(x, dtype=object).item() -> np.asarray(x).item(): .item() returns the same "
        "Python object or scalar from an object array and from a numeric one"
    ),
    "verified_attn.probing.x_flat__mutmut_5": (
        "dtype=object dropped: every caller passes object arrays (sympy numbers, Fractions, "
        "arb balls: numpy infers dtype=object, the same array) or float64 arrays (np.float64 "
        "entries instead of float: equal values, and both callers, the isinstance(float | "
        "np.floating) test and SingleHeadAttention, treat them alike)"
    ),
    "verified_attn.probing.x_ball_predictor__mutmut_10": (
        "dtype=object dropped: the parameters here are arb balls, for which numpy infers "
        "dtype=object anyway"
    ),
    "verified_attn.probing.x_public_params__mutmut_30": (
        "dtype=np.float64 dropped in float mode: both callers' float parameters (the "
        "single-head and low-rank learners) are float64 arrays already, so np.asarray "
        "returns the same array"
    ),
    "verified_attn.probing.x_public_params__mutmut_43": (
        "dtype=object dropped in certified mode: the parameters are arb balls, for which "
        "numpy infers dtype=object anyway"
    ),
    "verified_attn.verification.x_verify_candidate__mutmut_7": (
        "or -> and: the two differ only for a certified oracle that cannot raise its "
        "precision (a black box, a replay), which then takes the raised-precision branch; "
        "there ask_fresh drops the precision it cannot use, so the same sequences are asked "
        "at the same precision and checked with the same rule, and a disagreement re-checked "
        "at the learning precision raises the same ModelClassMismatch"
    ),
}

#: Mutants that ``verified-attn check`` missed, and why none changes a theorem's result
#: (so no claim is added for them; the tests must kill them, and --recheck runs them).
CLAIMS_MISSED: dict[str, str] = {
    "verified_attn.certificates.kernel.x_check_verification__mutmut_4": (
        "the bound on verification.count dropped: only a hostile file notices (the size "
        "limits of the certificate kernel), no learner's or checker's result on an honest "
        "certificate changes"
    ),
    "verified_attn.certificates.kernel.x_check_verification__mutmut_58": (
        "the text of the error for empty verification.lengths"
    ),
    "verified_attn.verification.x_check_record__mutmut_64": (
        "the text of the ModelClassMismatch raised on a disagreeing fresh sequence (the "
        "claims check that it is raised, not its wording)"
    ),
    "verified_attn.certificates.kernel.x_check_verification__mutmut_122": (
        "the length check of verification.answers dropped: a file with the wrong number of "
        "answers then fails in zip(strict=True) with a ValueError instead of a "
        "CertificateError; honest certificates check the same"
    ),
}

_NO_MATCH = "__verified_attn_no_such_mutant__*"
#: The statuses that count as killed (a timeout or a crash is a caught mutant too).
_KILLED = ("killed", "timeout", "segfault")


def mutmut_config() -> dict:
    """``[tool.mutmut]`` of pyproject.toml: the one place the modules and tests are listed."""
    with open(ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["tool"]["mutmut"]


def _mutmut(args: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    exe = Path(sys.executable).with_name("mutmut")
    cmd = [str(exe) if exe.exists() else "mutmut", *args]
    environment = dict(os.environ, HYPOTHESIS_PROFILE="ci", **(env or {}))
    return subprocess.run(
        cmd, cwd=ROOT, env=environment, capture_output=True, text=True, check=False
    )


def generate() -> float:
    """Write ``mutants/`` and mutmut's coverage statistics; the seconds it took."""
    t0 = time.monotonic()
    proc = _mutmut(["run", "--max-children", "1", _NO_MATCH])
    # The filter names no mutant, so mutmut stops right after generation and the stats with
    # this assertion; anything else is a real failure.
    if "nothing matches" not in proc.stdout + proc.stderr:
        sys.stderr.write(proc.stdout[-4000:] + proc.stderr[-4000:])
        raise SystemExit("mutmut could not generate the mutants (output above)")
    return time.monotonic() - t0


def _meta(module: str) -> dict:
    return json.loads((ROOT / "mutants" / f"{module}.meta").read_text())


def mutants_by_module() -> dict[str, list[str]]:
    """Every mutant name of every core module, sorted."""
    return {m: sorted(_meta(m)["exit_code_by_key"]) for m in mutmut_config()["only_mutate"]}


def draw(names: dict[str, list[str]], per_module: int, seed: int) -> list[str]:
    """The sample: ``per_module`` names of each module (all if 0), seeded, module by module.

    >>> draw({"a.py": ["a.x_f__mutmut_1", "a.x_f__mutmut_2"], "b.py": ["b.x_g__mutmut_1"]}, 1, 0)
    ['a.x_f__mutmut_2', 'b.x_g__mutmut_1']
    """
    rng = random.Random(seed)
    out: list[str] = []
    for module in names:
        pool = names[module]
        out += pool if per_module <= 0 else rng.sample(pool, min(per_module, len(pool)))
    return out


def run_mutants(names: list[str], max_children: int) -> float:
    """``mutmut run`` on these mutants; the seconds it took."""
    t0 = time.monotonic()
    proc = _mutmut(["run", "--max-children", str(max_children), *names])
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout[-4000:] + proc.stderr[-4000:])
        raise SystemExit("mutmut run failed (output above)")
    return time.monotonic() - t0


def results(names: list[str]) -> dict[str, dict]:
    """Status and duration of each named mutant, from mutmut's ``.meta`` files."""
    metas = {m: _meta(m) for m in mutmut_config()["only_mutate"]}
    out = {}
    for name in names:
        module = _module_of(name)
        code = metas[module]["exit_code_by_key"].get(name)
        out[name] = {
            "module": module,
            "exit_code": code,
            "status": STATUS.get(code, "suspicious") if code is not None else "not checked",
            "seconds": round(metas[module]["durations_by_key"].get(name, 0.0), 1),
        }
    return out


def _module_of(name: str) -> str:
    for module in mutmut_config()["only_mutate"]:
        if name.startswith(module[: -len(".py")].replace("/", ".") + "."):
            return module
    raise ValueError(f"name: {name!r} is not a mutant of a core module")


def diff(name: str) -> str:
    """The mutant's change, as ``mutmut show`` prints it (a unified diff)."""
    return _mutmut(["show", name]).stdout.strip()


def check_claims(name: str, ids: list[str], timeout: float) -> str:
    """``verified-attn check`` in ``mutants/`` with this mutant active: killed / survived."""
    env = dict(
        os.environ,
        MUTANT_UNDER_TEST=name,
        PYTHONPATH=str(ROOT / "mutants"),
        HYPOTHESIS_PROFILE="ci",
    )
    cmd = [sys.executable, "-m", "verified_attn", "check", *ids]
    try:
        proc = subprocess.run(
            cmd, cwd=ROOT / "mutants", env=env, capture_output=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired:
        return "timeout"
    return "survived" if proc.returncode == 0 else "killed"


def summarize(records: dict[str, dict]) -> dict:
    """Counts per module and in total (``no tests`` and ``suspicious`` count as survived)."""

    def counts(rs: list[dict]) -> dict:
        c = {s: sum(r["status"] == s for r in rs) for s in ("killed", "timeout", "segfault")}
        run = len(rs)
        survived = run - sum(c.values())
        return {
            "run": run,
            **c,
            "survived": survived,
            "survival_rate": round(survived / run, 4) if run else None,
        }

    modules = mutmut_config()["only_mutate"]
    per = {m: counts([r for r in records.values() if r["module"] == m]) for m in modules}
    return {"total": counts(list(records.values())), "per_module": per}


def table(result: dict) -> str:
    """Survival per module as a Markdown table (written next to the JSON)."""
    after = result.get("triage", {}).get("per_module", {})
    lines = [
        "| module | mutants | run | killed | survived | equivalent | surviving non-equivalent"
        " after triage |",
        "|---|---|---|---|---|---|---|",
    ]
    per = result["before_triage"]["per_module"]
    for module, c in per.items():
        a = after.get(module, {})
        killed = c["killed"] + c["timeout"] + c["segfault"]
        lines.append(
            f"| `{module}` | {result['mutants_total'][module]} | {c['run']} | {killed} | "
            f"{c['survived']} | {a.get('equivalent', '-')} | {a.get('still_surviving', '-')} |"
        )
    return "\n".join(lines) + "\n"


def write(result: dict, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n")
    if "before_triage" in result:
        path.with_suffix(".md").write_text(
            f"# Mutation testing ({result['runner']})\n\n{table(result)}"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-module", type=int, default=40, help="mutants per module (0: all)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-children", type=int, default=1, help="mutmut's worker count")
    parser.add_argument(
        "--claims",
        type=int,
        default=0,
        help="run verified-attn check against this many mutants of CLAIM_FUNCTIONS and add "
        "the figures to the recorded JSON (no mutmut run)",
    )
    parser.add_argument("--claims-timeout", type=float, default=900)
    parser.add_argument(
        "--recheck",
        action="store_true",
        help="re-run the survivors recorded in the JSON (after new tests)",
    )
    parser.add_argument(
        "--triage",
        action="store_true",
        help="recompute the triage from the JSON and mutmut's results (no run)",
    )
    parser.add_argument(
        "--collect",
        action="store_true",
        help="only read the sample's results from mutants/ (after a stopped run)",
    )
    parser.add_argument("--out", type=Path, default=None, help="output folder")
    parser.add_argument("--quick", action="store_true", help="one mutant per module")
    args = parser.parse_args(argv)
    if args.quick:
        args.per_module = 1
    args.out = output_dir(args.out, args.quick, "mutation") / "mutation.json"

    if args.recheck:
        return _recheck(args)
    if args.triage:
        return _triage(json.loads(args.out.read_text()), args.out)
    if args.claims:
        result = json.loads(args.out.read_text()) if args.out.exists() else {}
        result["claims"] = _claims_side(mutants_by_module(), args)
        write(result, args.out)
        print(f"claims: {result['claims']['killed']} of {result['claims']['run']} killed")
        return 0
    seconds_generate = 0.0 if args.collect else generate()
    names = mutants_by_module()
    sample = draw(names, args.per_module, args.seed)
    t0 = time.monotonic()
    if not args.collect:
        run_mutants(sample, args.max_children)
    seconds_run = time.monotonic() - t0
    records = results(sample)
    for name, r in records.items():
        if r["status"] not in _KILLED:
            r["diff"] = diff(name)
    result = {
        "runner": f"mutmut {version('mutmut')} (benchmarks/mutation.py drives it)",
        **metadata(args.seed, per_module=args.per_module, max_children=args.max_children),
        "modules": mutmut_config()["only_mutate"],
        "tests": mutmut_config()["pytest_add_cli_args_test_selection"],
        "mutants_total": {m: len(v) for m, v in names.items()},
        "sample_rule": (
            f"random.Random({args.seed}).sample of {args.per_module} names per module, "
            "from each module's sorted mutant names, modules in [tool.mutmut] order"
            if args.per_module > 0
            else "every mutant"
        ),
        "seconds_generate_and_stats": round(seconds_generate, 1),
        "seconds_run": round(seconds_run, 1),
        "before_triage": summarize(records),
        "mutants": records,
    }
    if args.collect and args.out.exists():
        # After a stopped run: keep the recorded timings (the stop lost the run's own).
        previous = json.loads(args.out.read_text())
        for key in ("seconds_generate_and_stats", "seconds_run"):
            result[key] = previous.get(key, result[key])
    write(result, args.out)
    total = result["before_triage"]["total"]
    print(f"{total['run']} mutants run, {total['survived']} survived; wrote {args.out}")
    return 0


def _claims_side(names: dict[str, list[str]], args: argparse.Namespace) -> dict:
    pool = sorted(
        n
        for ns in names.values()
        for n in ns
        if any(n.startswith(f + "__mutmut_") for f in CLAIM_FUNCTIONS)
    )
    chosen = random.Random(args.seed).sample(pool, min(args.claims, len(pool)))
    t0 = time.monotonic()
    # Controls: the claims pass on the original code ("" selects it in every trampoline)
    # and fail when every trampoline raises (mutmut's "fail"), so the mutants are active.
    controls = {
        "original": check_claims("", CLAIM_IDS, args.claims_timeout),
        "fail": check_claims("fail", CLAIM_IDS, args.claims_timeout),
    }
    if controls != {"original": "survived", "fail": "killed"}:
        raise SystemExit(f"verified-attn check in mutants/ is not usable: {controls}")
    outcome = {
        n: check_claims(n, CLAIM_IDS, args.claims_timeout)
        for n in progress(chosen, "claims on mutants", unit="mutant")
    }
    return {
        "controls": controls,
        "ids": CLAIM_IDS,
        "functions": CLAIM_FUNCTIONS,
        "sample_rule": f"random.Random({args.seed}).sample of {args.claims} of the "
        f"{len(pool)} mutants of CLAIM_FUNCTIONS",
        "killed": sum(v != "survived" for v in outcome.values()),
        "run": len(outcome),
        "seconds": round(time.monotonic() - t0, 1),
        "mutants": outcome,
    }


def _recheck(args: argparse.Namespace) -> int:
    """Re-run the recorded survivors (and the claims side's) against the tests, then triage."""
    result = json.loads(args.out.read_text())
    rerun = [n for n in _survivors(result) if n not in EQUIVALENT]
    # The mutants verified-attn check missed (--claims) are re-run against the tests too.
    missed = _claims_missed(result)
    names = rerun + [n for n in missed if n not in rerun]
    seconds = run_mutants(names, args.max_children) if names else 0.0
    # A fix in a mutated function regenerates its mutants: the same name may now be another
    # change (recorded, so the kill is not credited to the wrong diff).
    changed = {
        n: now
        for n in _survivors(result)
        if _change(now := diff(n)) != _change(result["mutants"][n].get("diff", now))
    }
    result["recheck"] = {"seconds": round(seconds, 1), "regenerated_after_a_fix": changed}
    return _triage(result, args.out)


def _change(diff_text: str) -> list[str]:
    r"""The changed lines of a ``mutmut show`` diff (its header names the status, which moves).

    >>> _change("# m: killed\n--- a.py\n+++ a.py\n@@ -1 +1 @@\n-x = 1\n+x = 2\n y = 3")
    ['-x = 1', '+x = 2']
    """
    return [
        line
        for line in diff_text.splitlines()
        if line[:1] in "+-" and not line.startswith(("+++", "---"))
    ]


def _survivors(result: dict) -> list[str]:
    return [n for n, r in result["mutants"].items() if r["status"] not in _KILLED]


def _claims_missed(result: dict) -> list[str]:
    return [n for n, v in result.get("claims", {}).get("mutants", {}).items() if v == "survived"]


def _triage(result: dict, out: Path) -> int:
    """The triage section, from the recorded run, ``EQUIVALENT`` and mutmut's latest results
    (``--triage`` recomputes it after ``EQUIVALENT`` changed, without running anything)."""
    survivors = _survivors(result)
    equivalent = {n: EQUIVALENT[n] for n in survivors if n in EQUIVALENT}
    rerun = [n for n in survivors if n not in equivalent]
    after = results(rerun)
    still = [n for n, r in after.items() if r["status"] not in _KILLED]
    missed = _claims_missed(result)
    if missed:
        claims = result["claims"]
        claims["tests_on_the_survivors"] = {n: r["status"] for n, r in results(missed).items()}
        claims["why_missed"] = {n: CLAIMS_MISSED.get(n, "not triaged") for n in missed}
    run = result["before_triage"]["total"]["run"]
    non_equivalent = run - len(equivalent)
    per_module = {
        m: {
            "equivalent": sum(_module_of(n) == m for n in equivalent),
            "still_surviving": sum(_module_of(n) == m for n in still),
        }
        for m in mutmut_config()["only_mutate"]
    }
    result["triage"] = {
        "per_module": per_module,
        "equivalent": equivalent,
        "killed_by_new_tests": sorted(n for n in rerun if n not in still),
        "still_surviving": {n: result["mutants"][n].get("diff", "") for n in still},
        "survival_rate_non_equivalent_after": round(len(still) / non_equivalent, 4)
        if non_equivalent
        else None,
        "goal": "<= 10 % surviving non-equivalent mutants",
    }
    write(result, out)
    print(f"{len(rerun)} non-equivalent survivors, {len(still)} still survive; wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


__all__ = [
    "CLAIMS_MISSED",
    "CLAIM_FUNCTIONS",
    "EQUIVALENT",
    "draw",
    "main",
    "mutmut_config",
    "results",
]
