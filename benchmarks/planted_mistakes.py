"""Planted mistakes: which deliberate errors in the code do the main job and the tests catch?

Run ``python benchmarks/planted_mistakes.py`` (every mistake against ``verified-attn check``,
then the room's tests for each one the main job lets through) or ``--list``. Writes
``benchmarks/results/planted_mistakes.json``; ``--only ID... --update`` measures those
mistakes again (after a fix) and replaces their entries there, each entry naming the commit
it was measured at.

Each mistake is one textual change to one source file, the kind a tired author or a careless
refactoring makes: a dropped check, a loosened comparison, a transposed weight, a miscounted
query. It is applied to a fresh copy of the checkout (``verified_attn/`` and ``tests/``),
never to the checkout itself, and the copy is what runs: ``python -m verified_attn check``
from the copy's root (the root is first on ``sys.path``; the controls confirm it). The
anchor text must occur exactly once in its file, so a mistake never lands somewhere else
unnoticed (a test keeps the anchors current).

"Caught by the main job": ``verified-attn check`` exits non-zero (a claim fails, or the job
itself breaks). "Caught by the tests": the room's default test files (``ROOM_TESTS``) fail.
Two controls come first: the unchanged copy passes the main job, and a mistake that breaks
every claim (``control``) is caught. Mutation testing of whole modules is
``benchmarks/mutation.py``; this is a targeted, hand-written set across every room.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import metadata, output_dir, progress, write_json  # noqa: E402


@dataclass(frozen=True)
class Mistake:
    """One planted mistake: in ``path`` (under ``verified_attn/``) ``old`` becomes ``new``."""

    id: str
    room: str
    path: str
    old: str
    new: str
    what: str


MISTAKES = [
    Mistake(
        "duplicate-keys",
        "certificates",
        "certificates/kernel.py",
        "        if key in out:\n",
        "        if False and key in out:\n",
        "certificates with a key twice are read",
    ),
    Mistake(
        "seed-unchecked",
        "certificates",
        "certificates/common_checks.py",
        "    if stored != seed:\n",
        "    if False:\n",
        "a certificate's verification seed is not checked",
    ),
    Mistake(
        "rescale-not-16",
        "certificates",
        "certificates/common_checks.py",
        "    if (most is not None and n > most) or Fraction(1, 16**n) != t:",
        "    if most is not None and n > most:",
        "a re-ask scale need not be 16^-n",
    ),
    Mistake(
        "float-claim-1000x",
        "certificates",
        "certificates/common_checks.py",
        "if not err <= rtol * max(scale, abs(x)):",
        "if not err <= 1e3 * rtol * max(scale, abs(x)):",
        "a float certificate's claimed parameters may be 1000x further off",
    ),
    Mistake(
        "ball-unchecked",
        "certificates",
        "certificates/common_checks.py",
        "            if not lo <= q <= hi:\n",
        "            if False:\n",
        "a certified claim need not lie in its ball",
    ),
    Mistake(
        "exact-by-closeness",
        "certificates",
        "certificates/common_checks.py",
        "return bool(y == sympy.Rational(want.numerator, want.denominator))",
        "return bool(abs(y - sympy.Rational(want.numerator, want.denominator)) < sympy.Rational(1, 2**100))",
        "an exact stored answer is compared by closeness, not ==",
    ),
    Mistake(
        "repeated-point",
        "certificates",
        "certificates/common_checks.py",
        "        if x in seen:\n",
        "        if False:\n",
        "a stored FFN answer may repeat a point",
    ),
    Mistake(
        "structure-skipped",
        "certificates",
        "certificates/counterexample.py",
        "        if a != b:\n",
        "        if False:\n",
        "a counterexample's structural proof (equal summed v) is not checked",
    ),
    Mistake(
        "same-pair",
        "certificates",
        "certificates/counterexample.py",
        "    if first == second:\n",
        "    if False:\n",
        "a counterexample's two models may be equal",
    ),
    Mistake(
        "int-low-unchecked",
        "validation",
        "validation.py",
        "    if low is not None and value < low:\n",
        "    if False:\n",
        "ints below their minimum pass",
    ),
    Mistake(
        "nan-passes",
        "validation",
        "validation.py",
        "    if isinstance(x, float | np.floating) and not math.isfinite(float(x)):\n",
        "    if False:\n",
        "non-finite reals pass validation",
    ),
    Mistake(
        "no-query-cap",
        "validation",
        "validation.py",
        "    if queries > MAX_QUERIES:\n",
        "    if False:\n",
        "jobs past the query cap are not refused",
    ),
    Mistake(
        "empty-lengths",
        "validation",
        "validation.py",
        "    if not out:\n",
        "    if False:\n",
        "an empty list of lengths passes",
    ),
    Mistake(
        "row-guard-off",
        "boxes",
        "boxes.py",
        "        self._W_row_l1 = max(sum(abs(x) for x in W_ints[j * d : (j + 1) * d]) for j in range(d))",
        "        self._W_row_l1 = 0",
        "the fast head's float path ignores partial sums past 2^53",
    ),
    Mistake(
        "box-value-sign",
        "boxes",
        "boxes.py",
        "        num = sum((wi * flint.arb(pi) for wi, pi in zip(w, p, strict=True)), flint.arb(0))",
        "        num = sum((wi * flint.arb(-pi) for wi, pi in zip(w, p, strict=True)), flint.arb(0))",
        "the fast certified head negates its values",
    ),
    Mistake(
        "torch-scale",
        "adapters",
        "adapters/torch.py",
        "        scale=1.0 / math.sqrt(hd),",
        "        scale=1.0 / hd,",
        "the PyTorch mapping scales scores by 1/h, not 1/sqrt(h)",
    ),
    Mistake(
        "torch-query-bias",
        "adapters",
        "adapters/torch.py",
        "        cs.append(scale * (Wk[kv_rows].T @ bq[q_rows]))",
        "        cs.append(0 * scale * (Wk[kv_rows].T @ bq[q_rows]))",
        "the PyTorch mapping drops the query bias",
    ),
    Mistake(
        "block-value-transposed",
        "adapters",
        "adapters/torch_block.py",
        "    V = (Wo @ Wv).T\n",
        "    V = Wo @ Wv\n",
        "the block mapping transposes the value matrix",
    ),
    Mistake(
        "block-out-bias",
        "adapters",
        "adapters/torch_block.py",
        "    a = L1 @ (Wo @ bin_[2 * E :] + bo) + b1",
        "    a = L1 @ (Wo @ bin_[2 * E :]) + b1",
        "the block mapping drops the attention output bias",
    ),
    Mistake(
        "sweep-all-pass",
        "sweeps",
        "sweep.py",
        '    passed = sum(bool(c["passed"]) for c in cells)',
        "    passed = len(cells)",
        "a sweep counts every cell as passed",
    ),
    Mistake(
        "sweep-lost-worker",
        "sweeps",
        "sweep.py",
        "                outcomes.append(entry.result())\n            except (Exception, CancelledError) as exc:  # a lost worker: a failed cell\n                outcomes.append(exc)",
        "                outcomes.append(entry.result())\n            except (Exception, CancelledError):  # a lost worker: a failed cell\n                continue",
        "a lost worker's cell vanishes instead of failing",
    ),
    Mistake(
        "count-batch-as-one",
        "oracle",
        "oracle.py",
        "        self._counts[self._phase] += n_queries",
        "        self._counts[self._phase] += 1",
        "a batch of queries is counted as one",
    ),
    Mistake(
        "tokens-uncounted",
        "oracle",
        "oracle.py",
        "        self.tokens_sent += int(sum(lengths))",
        "        self.tokens_sent += 0",
        "the tokens sent are not counted",
    ),
    Mistake(
        "float-rule-10x",
        "verification",
        "agreement.py",
        "    return gap <= tolerance(arith, a, bias=bias, floor=floor), gap / size",
        "    return gap <= 10 * tolerance(arith, a, bias=bias, floor=floor), gap / size",
        "the float rule accepts 10x its tolerance",
    ),
    Mistake(
        "bias-in-float64",
        "verification",
        "agreement.py",
        "    return BIAS_ULPS * 2 * unit * abs(float(bias))",
        "    return BIAS_ULPS * 2 * 2.0**-53 * abs(float(bias))",
        "the bias allowance uses float64's unit roundoff for every box",
    ),
    Mistake(
        "simplest-rational",
        "exact",
        "arithmetic.py",
        "            a = a if Fraction(a) == lo else a + 1",
        "            a = a + 1",
        "the simplest rational skips an integer lower end",
    ),
    Mistake(
        "refine-scale",
        "exact",
        "exact_recovery/learner.py",
        "            n = int(np.floor(np.log2(min(want, REFINE_MAX_SCALE))))",
        "            n = int(np.ceil(np.log2(min(want, REFINE_MAX_SCALE))))",
        "the single-head learner's refinement scale rounds the wrong way",
    ),
    Mistake(
        "interval-clip",
        "noisy",
        "noisy/intervals.py",
        "                if alpha_hat <= s_lo:",
        "                if alpha_hat < s_lo:",
        "the noisy interval's clip misses its edge",
    ),
    Mistake(
        "relu-sign",
        "transformer",
        "transformer/relu_network.py",
        "        out = dot(self.linear, x)\n",
        "        out = -dot(self.linear, x)\n",
        "a canonical ReLU network negates its linear term",
    ),
    Mistake(
        "hypothesis-minimum",
        "multi_head",
        "multi_head/counterexamples.py",
        "    if H < _MIN_HEADS[kind]:",
        "    if H < _MIN_HEADS[kind] - 1:",
        "a counterexample family accepts one head fewer than it needs",
    ),
    Mistake(
        "distinct-heads",
        "multi_head",
        "multi_head/counterexamples.py",
        "        if all(W != other for other, _ in heads):",
        "        if True:",
        "a permutation counterexample may repeat a head",
    ),
]

#: A control: every claim's result runs through the package's claim table.
CONTROL = Mistake(
    "control", "control", "claims.py", "", "", "the control: breaks the claims module"
)

#: The default test files of each room (what "caught by the tests" runs).
ROOM_TESTS = {
    "certificates": [
        "tests/test_certificate.py",
        "tests/test_certificate_common.py",
        "tests/test_certificate_hostile.py",
        "tests/test_soundness_round2.py",
        "tests/test_soundness_planted.py",
    ],
    "validation": [
        "tests/test_core_contract.py",
        "tests/test_soundness_round2.py",
        "tests/test_cli.py",
    ],
    "boxes": [
        "tests/test_soundness_round2.py",
        "tests/test_soundness_planted.py",
        "tests/test_oracle_wrappers.py",
        "tests/exact_recovery",
    ],
    "adapters": ["tests/adapters"],
    "sweeps": ["tests/test_sweep.py", "tests/test_sweep_hostile.py"],
    "oracle": ["tests/test_oracle.py", "tests/test_executor_batches.py"],
    "verification": ["tests/test_soundness_round2.py", "tests/exact_recovery"],
    "exact": [
        "tests/test_arithmetic.py",
        "tests/test_soundness_planted.py",
        "tests/exact_recovery",
    ],
    "noisy": ["tests/noisy"],
    "transformer": ["tests/transformer", "tests/test_soundness_planted.py"],
    "multi_head": [
        "tests/multi_head/test_multi_head_counterexamples.py",
        "tests/test_hypotheses.py",
        "tests/test_soundness_round2.py",
    ],
}


def apply(mistake: Mistake, package: Path) -> None:
    """Plant ``mistake`` in the copy ``package`` (its ``verified_attn/``); the anchor must be unique."""
    target = package / mistake.path
    text = target.read_text()
    if mistake is CONTROL:
        target.write_text(text + "\nraise RuntimeError('planted control')\n")
        return
    found = text.count(mistake.old)
    if found != 1:
        raise SystemExit(
            f"{mistake.id}: its anchor occurs {found} times in {mistake.path}, not once"
        )
    target.write_text(text.replace(mistake.old, mistake.new))


def copy_checkout(where: Path) -> Path:
    """verified_attn/, tests/ and pyproject.toml of the checkout, copied under ``where``."""
    root = where / "checkout"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(ROOT / "verified_attn", root / "verified_attn", ignore=ignore)
    shutil.copytree(ROOT / "tests", root / "tests", ignore=ignore)
    shutil.copy(ROOT / "pyproject.toml", root / "pyproject.toml")
    return root


def run(cmd: list[str], cwd: Path, timeout: float) -> tuple[int, str]:
    """Exit code and the tail of the output of ``cmd`` run from ``cwd`` (its root first on sys.path)."""
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", HYPOTHESIS_PROFILE="ci")
    env.pop("PYTHONPATH", None)
    try:
        done = subprocess.run(
            cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        return -1, f"timed out after {timeout:g} s"
    return done.returncode, (done.stdout + done.stderr)[-600:]


def trial(mistake: Mistake | None, *, tests: bool, timeout: float) -> dict[str, object]:
    """Plant one mistake (None: the unchanged copy) and run the main job, then perhaps the tests."""
    with tempfile.TemporaryDirectory(prefix="planted-") as tmp:
        root = copy_checkout(Path(tmp))
        if mistake is not None:
            apply(mistake, root / "verified_attn")
        where = run(
            [sys.executable, "-c", "import verified_attn; print(verified_attn.__file__)"], root, 60
        )
        if not where[1].strip().startswith(str(root)):
            raise SystemExit(f"the copy is not what runs: {where[1]!r}")
        start = time.perf_counter()
        code, tail = run([sys.executable, "-m", "verified_attn", "check"], root, timeout)
        out: dict[str, object] = {
            "main_job": "caught" if code != 0 else "missed",
            "main_job_exit": code,
            "main_job_seconds": round(time.perf_counter() - start, 1),
            "main_job_tail": tail if code != 0 else "",
        }
        if tests and code == 0 and mistake is not None and mistake.room in ROOM_TESTS:
            cmd = [
                sys.executable,
                "-m",
                "pytest",
                "-q",
                "-x",
                "-p",
                "no:cacheprovider",
                *ROOM_TESTS[mistake.room],
            ]
            tcode, ttail = run(cmd, root, timeout)
            # pytest exits 1 when a test failed; 2-5 (interrupted, usage, no tests) catch nothing.
            out["tests"] = "caught" if tcode == 1 else "missed"
            out["tests_tail"] = ttail
        return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--list", action="store_true", help="list the mistakes and check their anchors"
    )
    parser.add_argument("--only", nargs="*", help="mistake ids to run (default all)")
    parser.add_argument("--no-tests", action="store_true", help="run the main job only")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds per run")
    parser.add_argument(
        "--out",
        type=Path,
        help="directory for the JSON (default: results/; a fresh temporary one with --only)",
    )
    parser.add_argument(
        "--update",
        action="store_true",
        help="with --only: replace those mistakes' entries in results/planted_mistakes.json "
        "(each entry records the commit it was measured at) and recompute the summary",
    )
    args = parser.parse_args(argv)
    chosen = [m for m in MISTAKES if not args.only or m.id in args.only]
    for m in chosen:
        apply_check = (ROOT / "verified_attn" / m.path).read_text().count(m.old)
        if apply_check != 1:
            raise SystemExit(f"{m.id}: its anchor occurs {apply_check} times in {m.path}, not once")
    if args.list:
        for m in chosen:
            print(f"{m.id:24} {m.room:13} {m.path}: {m.what}")
        return 0
    start = time.perf_counter()
    controls = {
        "unchanged": trial(None, tests=False, timeout=args.timeout),
        "control": trial(CONTROL, tests=False, timeout=args.timeout),
    }
    if controls["unchanged"]["main_job"] != "missed" or controls["control"]["main_job"] != "caught":
        raise SystemExit(f"the controls failed: {controls}")
    commit = run(["git", "rev-parse", "HEAD"], ROOT, 60)[1].strip()
    out = output_dir(args.out, bool(args.only) and not args.update, "planted")
    # --update keeps the recorded run's other entries; each entry records its commit.
    results = _earlier(out) if args.update else {}
    wanted = [m.id for m in (MISTAKES if args.update else chosen)]
    for m in progress(chosen, "planted mistakes", unit="mistake"):
        found = trial(m, tests=not args.no_tests, timeout=args.timeout)
        results[m.id] = {**asdict(m), **found, "commit": commit}
        results = {i: results[i] for i in wanted if i in results}
        # Written after every mistake, so a stopped run keeps what it measured ("complete").
        summary = summarise(results)
        payload = {
            **metadata(0, main_job="verified-attn check (seed 0, default size)", commit=commit),
            "benchmark": "planted_mistakes",
            "complete": len(results) == len(wanted),
            "controls": controls,
            "summary": summary,
            "mistakes": results,
            "seconds": round(time.perf_counter() - start, 1),
        }
        path = write_json("planted_mistakes", payload, out)
    print(json.dumps(summary, indent=2))
    print(f"wrote {path}")
    return 0


def _earlier(out: Path) -> dict[str, dict[str, object]]:
    """The recorded run's entries (``--update``); those of mistakes no longer listed go."""
    data = json.loads((out / "planted_mistakes.json").read_text())
    listed = {m.id for m in MISTAKES}
    commit = data["settings"]["commit"]
    return {i: {"commit": commit, **e} for i, e in data["mistakes"].items() if i in listed}


def summarise(results: dict[str, dict[str, object]]) -> dict[str, object]:
    """Per room and overall: mistakes, caught by the main job, caught by the tests, by neither."""
    rooms: dict[str, dict[str, int]] = {}
    for r in results.values():
        row = rooms.setdefault(
            str(r["room"]), {"mistakes": 0, "main_job": 0, "tests_only": 0, "neither": 0}
        )
        row["mistakes"] += 1
        if r["main_job"] == "caught":
            row["main_job"] += 1
        elif r.get("tests") == "caught":
            row["tests_only"] += 1
        else:
            row["neither"] += 1
    total = {
        k: sum(row[k] for row in rooms.values())
        for k in ("mistakes", "main_job", "tests_only", "neither")
    }
    return {
        "rooms": rooms,
        "total": total,
        "neither": sorted(
            i
            for i, r in results.items()
            if r["main_job"] != "caught" and r.get("tests") != "caught"
        ),
    }


if __name__ == "__main__":
    sys.exit(main())
