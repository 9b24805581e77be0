"""Theorem 6.1 / App. B benchmark: errors against the derived bounds, designs, noise, labels.

>>> import tempfile, json, pathlib
>>> out = pathlib.Path(tempfile.mkdtemp())
>>> data = main(["--quick", "--out", str(out), "--no-plots"])
>>> data["all_checks_passed"], max(r["actual_over_bound"] for r in data["error_vs_tau"]) <= 1
(True, True)

Writes ``<out>/noisy.json`` and, unless ``--no-plots``, ``noisy_error_vs_tau.png``,
``noisy_designs.png``, ``noisy_stochastic.png`` and ``noisy_labels.png``. Run from the
repository root::

    /tmp/venv/bin/python benchmarks/noisy.py            # full size (about a minute)
    /tmp/venv/bin/python benchmarks/noisy.py --quick    # seconds

Sections:

- ``error_vs_tau``: for each adversary (uniform, rounding, worst-case with v pushed
  towards / away from 0) and tau, the actual max W error, the guaranteed (a posteriori)
  bound, the a-priori bound and actual/bound; plus the sharp instance (a score gap of
  exactly 1/2) where the worst case reaches actual/bound -> 1.
- ``designs``: for a fixed target eps and v = (2, 1, 1, delta), the largest tau each design
  survives (certified: the learner's guaranteed bound <= eps; the paper design is refused
  once tau > |v_min| - ... , i.e. the margin condition), by bisection in log tau.
- ``stochastic``: Gaussian noise sigma; queries n (d^2 + d) needed for target eps, and the
  actual error where the run is small enough to do.
- ``labels``: label-only learner; queries and enclosure width against bits of precision.
- ``times``: learn_noisy wall time against d (float black box behind the uniform adversary).

Exit status 1 if a correctness check fails (an error above its bound, a wrong count).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import metadata, output_dir, progress, timed

import verified_attn as va
from verified_attn.errors import NotIdentifiable
from verified_attn.noisy import learn_noisy, query_bound, repeats_for, tolerance_for_error
from verified_attn.noisy.claims import adversarial_oracles, random_instance, worst_ratio
from verified_attn.noisy.labels import label_query_bound, learn_from_labels
from verified_attn.oracle_wrappers import (
    LabelOracle,
    NoisyOracle,
    StochasticOracle,
    worst_case_oracle,
)

NAME = "noisy"

FULL = {
    "d": 4,
    "taus": [10.0**-k for k in (2, 2.5, 3, 3.5, 4, 5, 6)],
    "deltas": [1.0, 0.3, 0.1, 0.03, 0.01, 0.001],
    "eps": 0.05,
    "sto_eps": [0.3, 0.1, 0.05, 0.03, 0.01, 0.003, 0.001],
    "sto_run_max": 2_000_000,
    "bits": [4, 8, 12, 16, 24, 32, 40, 48],
    "times_d": [2, 4, 8, 16, 32],
    "bisection_steps": 14,
}
QUICK = {
    "d": 2,
    "taus": [1e-2, 1e-4],
    "deltas": [1.0, 0.01],
    "eps": 0.05,
    "sto_eps": [0.3, 0.05],
    "sto_run_max": 5000,
    "bits": [4, 12],
    "times_d": [2, 3],
    "bisection_steps": 4,
}


def error_vs_tau(cfg: dict[str, Any], seed: int) -> tuple[list[dict[str, Any]], bool]:
    rows, ok = [], True
    model = random_instance(cfg["d"], seed)
    for tau in progress(cfg["taus"], "error vs tau", unit="tau"):
        for kind, make in adversarial_oracles(model, tau, seed).items():
            rec = learn_noisy(make(), tolerance=tau, w_bound=1, margin=1, seed=seed)
            err = float(np.abs(rec.W - model.float_parameters()["W"]).max())
            ratio = worst_ratio(rec, model, "W")
            ok &= bool(ratio <= 1 and worst_ratio(rec, model, "v") <= 1)
            rows.append(
                {
                    "instance": "random",
                    "adversary": kind,
                    "tau": tau,
                    "max_W_error": err,
                    "max_W_bound": float(rec.enclosures["W_error"].max()),
                    "a_priori": rec.enclosures["W_a_priori"],
                    "actual_over_bound": ratio,
                    "queries": rec.queries,
                }
            )
    W = np.zeros((2, 2))
    W[0, 1] = 1.0
    sharp = va.SingleHeadAttention(W, [1, 1])
    for tau in cfg["taus"]:
        oracle = worst_case_oracle(sharp, tau, v_push="grow")
        rec = learn_noisy(oracle, tolerance=tau, w_bound=1, margin=1)
        err = abs(rec.W[0, 1] - 1.0)
        bound = float(rec.enclosures["W_error"][0, 1])
        ok &= bool(err <= bound)
        rows.append(
            {
                "instance": "sharp",
                "adversary": "worst-grow",
                "tau": tau,
                "max_W_error": err,
                "max_W_bound": bound,
                "a_priori": rec.enclosures["W_a_priori"],
                "actual_over_bound": err / bound,
                "queries": rec.queries,
            }
        )
    return rows, ok


def _survives(
    model: va.SingleHeadAttention, tau: float, margin: float, design: str, eps: float
) -> bool:
    """Certified survival: the learner answers and every guaranteed bound is <= eps."""
    worst = 0.0
    for v_push in ("shrink", "grow"):
        try:
            rec = learn_noisy(
                worst_case_oracle(model, tau, v_push=v_push),
                tolerance=tau,
                w_bound=1,
                margin=margin,
                design=design,
                verify=2,
            )
        except (NotIdentifiable, va.InvalidArgument):
            return False
        worst = max(worst, float(rec.enclosures["W_error"].max()), tau)
    return worst <= eps


def _largest_tau(
    model: va.SingleHeadAttention, margin: float, design: str, eps: float, steps: int
) -> float:
    lo, hi = -9.0, 0.0  # log10 tau
    if not _survives(model, 10**lo, margin, design, eps):
        return 0.0
    for _ in range(steps):
        mid = (lo + hi) / 2
        if _survives(model, 10**mid, margin, design, eps):
            lo = mid
        else:
            hi = mid
    return 10**lo


def designs(cfg: dict[str, Any], seed: int) -> list[dict[str, Any]]:
    rows = []
    # ||W||_F = sqrt(0.265625) < 1 = w_bound.
    W = np.array(
        [[0.25, -0.25, 0, 0], [0.25, 0, 0.125, 0], [0, 0, 0.125, 0.125], [0, -0.125, 0, 0.25]]
    )
    for delta in progress(cfg["deltas"], "designs", unit="delta"):
        v = np.array([2.0, 1.0, -1.0, delta])
        model = va.SingleHeadAttention(W, v)
        steps = cfg["bisection_steps"]
        paper = _largest_tau(model, float(np.abs(v).min()), "paper", cfg["eps"], steps)
        norm = _largest_tau(model, float(np.linalg.norm(v)), "norm", cfg["eps"], steps)
        rows.append(
            {
                "delta": delta,
                "eps": cfg["eps"],
                "largest_tau_paper": paper,
                "largest_tau_norm": norm,
            }
        )
    return rows


def stochastic(cfg: dict[str, Any], seed: int) -> tuple[list[dict[str, Any]], bool]:
    d, sigma, delta = 2, 0.01, 1e-3
    model = random_instance(d, seed)
    rows, ok = [], True
    for eps in progress(cfg["sto_eps"], "stochastic", unit="eps"):
        tau = tolerance_for_error(eps, 1.0, 1.0, d)
        n = repeats_for(sigma, tau, query_bound(d) + 4, delta)
        row: dict[str, Any] = {
            "eps": eps,
            "sigma": sigma,
            "tau": tau,
            "repeats": n,
            "queries": n * query_bound(d),
        }
        if n * (query_bound(d) + 4) <= cfg["sto_run_max"]:
            # A float-mode inner oracle: the truth is the model's float64 value (fast).
            oracle = StochasticOracle(va.Oracle(model, "float"), sigma, seed=seed)
            rec = learn_noisy(oracle, tolerance=tau, w_bound=1, margin=1, repeats=n, verify=4)
            err = float(np.abs(rec.W - model.float_parameters()["W"]).max())
            row["actual_max_W_error"] = err
            ok &= rec.queries == n * query_bound(d) and err <= eps
        rows.append(row)
    return rows, ok


def labels(cfg: dict[str, Any], seed: int) -> tuple[list[dict[str, Any]], bool]:
    W = np.array([[0.25, -0.5, 0], [0.5, 0, 0.25], [0, -0.25, 0.5]])
    v = np.array([3.0, -2.0, 1.0])
    model = va.SingleHeadAttention(W, v)
    rows, ok = [], True
    for bits in progress(cfg["bits"], "labels", unit="bits"):
        oracle = LabelOracle(va.Oracle(model, "certified"))
        rec, t, _ = timed(lambda o=oracle, b=bits: learn_from_labels(o, w_bound=1, bits=b), 1)
        lo, hi = rec.enclosures["W"]["lower"], rec.enclosures["W"]["upper"]
        inside = bool(((lo <= W) & (W <= hi)).all())
        ok &= inside and rec.queries == label_query_bound(3, bits)
        rows.append(
            {
                "bits": bits,
                "queries": rec.queries,
                "bound": label_query_bound(3, bits),
                "max_W_width": float((hi - lo).max()),
                "max_W_error": float(np.abs(rec.W - W).max()),
                "truth_inside": inside,
                "seconds": t,
            }
        )
    return rows, ok


def times(cfg: dict[str, Any], seed: int) -> list[dict[str, Any]]:
    rows = []
    for d in progress(cfg["times_d"], "times", unit="d"):
        model = random_instance(d, seed + d)

        def run(model: va.SingleHeadAttention = model) -> Any:
            oracle = NoisyOracle(va.Oracle(model, "float"), 1e-4, seed=seed)
            return learn_noisy(oracle, tolerance=1e-4, w_bound=1, margin=1)

        rec, med, all_t = timed(run, 3)
        rows.append({"d": d, "queries": rec.queries, "median_s": med, "all_s": all_t})
    return rows


def plot(data: dict[str, Any], out: Path) -> list[str]:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    names = []
    fig, ax = plt.subplots(figsize=(6, 4))
    rows = data["error_vs_tau"]
    for kind in ("uniform", "rounding", "worst-shrink", "worst-grow"):
        sel = [r for r in rows if r["instance"] == "random" and r["adversary"] == kind]
        ax.loglog([r["tau"] for r in sel], [r["max_W_error"] for r in sel], "o-", label=kind)
    sel = [r for r in rows if r["instance"] == "random" and r["adversary"] == "uniform"]
    ax.loglog([r["tau"] for r in sel], [r["a_priori"] for r in sel], "k--", label="derived bound")
    sharp = [r for r in rows if r["instance"] == "sharp"]
    ax.loglog(
        [r["tau"] for r in sharp],
        [r["max_W_error"] for r in sharp],
        "rx",
        label="worst case, sharp instance",
    )
    ax.set_xlabel("tolerance tau")
    ax.set_ylabel("max |W_hat - W| entry")
    ax.set_title(f"Thm 6.1: error vs tolerance (d = {data['settings']['d']})")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "noisy_error_vs_tau.png", dpi=110)
    plt.close(fig)
    names.append("noisy_error_vs_tau.png")

    fig, ax = plt.subplots(figsize=(6, 4))
    rows = data["designs"]
    ax.loglog(
        [r["delta"] for r in rows],
        [max(r["largest_tau_paper"], 1e-10) for r in rows],
        "o-",
        label="paper design (|v_i| >= mu)",
    )
    ax.loglog(
        [r["delta"] for r in rows],
        [r["largest_tau_norm"] for r in rows],
        "s-",
        label="norm design (||v|| >= mu)",
    )
    ax.set_xlabel("smallest |v_i| (delta)")
    ax.set_ylabel("largest tolerance with certified error <= eps")
    ax.set_title(f"Designs at eps = {data['settings']['eps']:g}")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "noisy_designs.png", dpi=110)
    plt.close(fig)
    names.append("noisy_designs.png")

    fig, ax = plt.subplots(figsize=(6, 4))
    rows = data["stochastic"]
    ax.loglog(
        [r["eps"] for r in rows], [r["queries"] for r in rows], "o-", label="queries n (d^2 + d)"
    )
    ran = [r for r in rows if "actual_max_W_error" in r]
    ax.set_xlabel("target error eps (per entry)")
    ax.set_ylabel("queries")
    ax2 = ax.twinx()
    ax2.loglog(
        [r["eps"] for r in ran],
        [r["actual_max_W_error"] for r in ran],
        "rx",
        label="actual error (runs)",
    )
    ax2.set_ylabel("actual max W error")
    ax.set_title(f"Gaussian noise sigma = {rows[0]['sigma']:g}: queries vs eps")
    ax.legend(loc="upper right", fontsize=8)
    ax2.legend(loc="lower left", fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "noisy_stochastic.png", dpi=110)
    plt.close(fig)
    names.append("noisy_stochastic.png")

    fig, ax = plt.subplots(figsize=(6, 4))
    rows = data["labels"]
    ax.semilogy([r["queries"] for r in rows], [r["max_W_width"] for r in rows], "o-")
    for r in rows:
        ax.annotate(f"{r['bits']} bits", (r["queries"], r["max_W_width"]), fontsize=7)
    ax.set_xlabel("label queries")
    ax.set_ylabel("max width of the W enclosure")
    ax.set_title("App. B: label-only learning (d = 3)")
    fig.tight_layout()
    fig.savefig(out / "noisy_labels.png", dpi=110)
    plt.close(fig)
    names.append("noisy_labels.png")
    return names


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Run, write ``<out>/noisy.json`` (+ PNGs) and return the data."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-plots", action="store_true")
    args = p.parse_args(argv)
    args.out = output_dir(args.out, args.quick, NAME)
    cfg = QUICK if args.quick else FULL
    args.out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    err_rows, ok1 = error_vs_tau(cfg, args.seed)
    sto_rows, ok2 = stochastic(cfg, args.seed)
    lab_rows, ok3 = labels(cfg, args.seed)
    data: dict[str, Any] = {
        "benchmark": NAME,
        "quick": args.quick,
        "metadata": metadata(args.seed, arithmetic="float answers, certified truth", precision=256),
        "settings": {k: cfg[k] for k in ("d", "eps")},
        "error_vs_tau": err_rows,
        "designs": designs(cfg, args.seed),
        "stochastic": sto_rows,
        "labels": lab_rows,
        "times": times(cfg, args.seed),
        "checks": {"error_bounds": ok1, "stochastic": ok2, "labels": ok3},
    }
    data["all_checks_passed"] = bool(ok1 and ok2 and ok3)
    data["figures"] = [] if args.no_plots else plot(data, args.out)
    data["total_wall_s"] = time.perf_counter() - t0
    (args.out / f"{NAME}.json").write_text(json.dumps(data, indent=1, default=str))
    print(f"checks: {data['checks']} in {data['total_wall_s']:.1f} s", file=sys.stderr)
    return data


if __name__ == "__main__":
    sys.exit(0 if main()["all_checks_passed"] else 1)
