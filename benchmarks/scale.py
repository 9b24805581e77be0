"""Scale benchmark (issue 16): the single-head learner and the low-rank skeleton at large d.

Each measurement runs in its own subprocess, so its peak RSS (``ru_maxrss``) is that size's
alone. The black box is fast and timed *inside* itself, so the learner's own overhead
(query construction, conversions, bookkeeping, logits, solves, verification checking) is
``total - box``, reported as ``overhead_ratio = (total - box) / box``:

- float: ``Oracle.from_callable(fn, d, batch_fn=...)``; the box does one d x d product per
  query (``W x_N`` for the whole batch at once), then the softmax over the N tokens;
  its rows also give ``bits``, ``-log2`` of the largest entry error of W and v over
  their largest entry (:mod:`verified_attn.precision`'s metric, the truth being the box's
  float64 parameters);
- certified: one of our exact heads behind a timing wrapper, each answer an arb ball at
  256 bits (the box's own time is its ball evaluation; converting the query to an exact
  matrix is the oracle's, i.e. the learner's, side).

- certified skeleton at d = 768 (``--skeleton-certified-fast``): the same exact head behind
  :class:`verified_attn.boxes.FastCertifiedHead`, which returns the exact head's balls bit
  for bit but computes the scores with a float64 product proved exact (the rational box
  takes tens of milliseconds a query there, the fast one about one).

The certificate is built on request, so it is timed separately (build, JSON size, check).
``--profile`` adds a cProfile run per size (in another subprocess, so it does not distort
the timed run) and records the top learner-side costs (the box's own frames excluded;
NumPy builtins the box calls, such as ``c_einsum``, cannot be told apart and are listed).
With the rational box the certified skeleton at d = 768 would take hours of box time, so
``--extrapolate 768:64`` predicts that from the rational box's measured time per query there
(and times the fast box on the same queries, checking the balls are the same), with the
overhead ratio of the largest certified run (``skeleton_certified_extrapolated``). Run from
the repository root::

    python benchmarks/scale.py                 # full: float d = 128..1024, certified 32..256,
                                               # skeleton float d = 384, 768, certified
                                               # d = 128..384, d = 768 with the fast box
                                               # (and predicted with the rational one)
    python benchmarks/scale.py --quick         # seconds; tiny sizes
    python benchmarks/scale.py --profile       # + cProfile top costs per size
    python benchmarks/scale.py --skeleton 768:64 --profile --append   # one size, kept with
                                               # the other rows of the results JSON

BLAS runs single-threaded in the children (``OPENBLAS_NUM_THREADS=1``): on a shared,
loaded 2-core machine a threaded BLAS oversubscribes and the box's time becomes noise.

>>> import tempfile, pathlib
>>> out = pathlib.Path(tempfile.mkdtemp())
>>> data = main(["--quick", "--out", str(out), "--no-plots"])
>>> all(r["queries"] == r["bound"] for r in data["single_head"])
True
"""

from __future__ import annotations

import argparse
import cProfile
import json
import math
import os
import pstats
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
# This checkout's package (not whichever one is installed), here and in the children.
sys.path.insert(1, str(Path(__file__).resolve().parent.parent))

from _common import metadata, output_dir, progress

NAME = "scale"
ROOT = Path(__file__).resolve().parent.parent
PRECISION = 256
#: Goals from the issue: learner overhead / box time.
FLOAT_GOAL = 0.3
CERTIFIED_GOAL = 0.5

FULL = {
    "float": [128, 256, 512, 768, 1024],
    "certified": [32, 64, 128, 256],  # 256: ~10 min, nearly all of it the box's
    "skeleton": [(384, 32), (768, 64)],
    # d / r = 12 as in the GPT-2-sized head; d = 768 with the rational box is predicted
    "skeleton_certified": [(128, 11), (256, 21), (384, 32)],
    # the GPT-2-sized head certified, with the fast box (the same balls as the exact head's)
    "skeleton_certified_fast": [(768, 64)],
    "skeleton_certified_extrapolated": [(768, 64)],
}
QUICK = {"float": [8, 16], "certified": [4, 8], "skeleton": [(16, 2)], "skeleton_certified": [],
         "skeleton_certified_fast": [(16, 2)], "skeleton_certified_extrapolated": []}


# ---------------------------------------------------------------------------------------
# The timed black boxes.
# ---------------------------------------------------------------------------------------


class _Clock:
    seconds = 0.0


def float_box(W: np.ndarray, v: np.ndarray, clock: type[_Clock]) -> tuple[Any, Any]:
    """(fn, batch_fn) of the head (W, v): one d x d product per query, timed inside."""

    def batch_fn(Xs: np.ndarray) -> np.ndarray:
        t0 = time.perf_counter()
        shift = Xs[:, -1, :] @ W.T  # (B, d): W x_N for every query, one product
        s = np.einsum("bnd,bd->bn", Xs, shift)
        s -= s.max(axis=1, keepdims=True)
        e = np.exp(s)
        out = (e * (Xs @ v)).sum(axis=1) / e.sum(axis=1)
        clock.seconds += time.perf_counter() - t0
        return out

    def fn(X: np.ndarray) -> float:
        return float(batch_fn(X[None])[0])

    return fn, batch_fn


class TimedModel:
    """One of our models as a black box whose ball evaluations are timed."""

    def __init__(self, model: Any, clock: type[_Clock]) -> None:
        self.model = model
        self.d = model.d
        self.model_class = "single-head"
        self.clock = clock

    def evaluate_batch(self, Xs: np.ndarray) -> np.ndarray:
        t0 = time.perf_counter()
        out = self.model.evaluate_batch(Xs)
        self.clock.seconds += time.perf_counter() - t0
        return out

    def evaluate_rational(self, Xq: Any, arith: Any) -> Any:
        t0 = time.perf_counter()
        out = self.model.evaluate_rational(Xq, arith)
        self.clock.seconds += time.perf_counter() - t0
        return out


def float_instance(d: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng([seed, d, 2])
    return rng.normal(0.0, 1.0 / math.sqrt(d), size=(d, d)), rng.normal(0.0, 1.0, size=d)


def low_rank_instance(d: int, r: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Dyadic K, Q with entries j/8 (as benchmarks/low_rank.py): W = K^T Q / 2^ceil(log2 sqrt d)."""
    rng = np.random.default_rng(seed)
    K = rng.integers(-8, 9, (r, d)) / 8
    Q = rng.integers(-8, 9, (r, d)) / 8
    W = K.T @ Q / 2 ** math.ceil(math.log2(math.sqrt(d)))
    v = rng.integers(-3, 4, d).astype(float)
    v[0] = 2.0
    return W, v


# ---------------------------------------------------------------------------------------
# One measurement (run in a child process).
# ---------------------------------------------------------------------------------------


def box_per_query(spec: dict[str, Any]) -> dict[str, Any]:
    """The certified box's own time per skeleton-shaped query [b + u; b] at this d (what a
    run too long to make is extrapolated from): ``n`` answers timed, as in a run."""
    import verified_attn as va
    from verified_attn.boxes import FastCertifiedHead
    from verified_attn.low_rank.claims import random_low_rank_head

    d, r, n = spec["d"], spec["r"], spec.get("n", 24)
    model = random_low_rank_head(d, r, spec.get("seed", 0), den=3)
    rng = np.random.default_rng(1)
    u = rng.integers(0, 2, (n, d)).astype(float)
    b = rng.integers(-4096, 4097, (n, d)) / 4096
    per_query = {}
    answers = {}
    for name, box in (("rational", model), ("fast", FastCertifiedHead(model))):
        clock = type("Clock", (_Clock,), {})
        oracle = va.Oracle(TimedModel(box, clock), "certified", precision=PRECISION)
        answers[name] = oracle.query_many(np.stack([b + u, b], axis=1))
        per_query[name] = clock.seconds / n
    same = all(x.mid() == y.mid() and x.rad() == y.rad()
               for x, y in zip(answers["rational"], answers["fast"], strict=True))
    return {"kind": "certified_box", "d": d, "r": r, "queries": n,
            "box_seconds_per_query": per_query["rational"],
            "fast_box_seconds_per_query": per_query["fast"], "same_balls": same,
            "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def extrapolate(rows: list[dict[str, Any]], probe: dict[str, Any]) -> dict[str, Any]:
    """A certified skeleton run at (d, r) predicted from the box's measured time per query
    there and the largest measured certified run's learner overhead ratio."""
    d, r = probe["d"], probe["r"]
    from verified_attn.low_rank.skeleton import skeleton_query_bound

    ran = [x for x in rows  # runs with the same (rational) box as the prediction
           if x["arithmetic"] == "certified" and x.get("box", "rational") == "rational"]
    last = max(ran, key=lambda x: x["d"]) if ran else None
    queries = skeleton_query_bound(d, r) + 8
    box = queries * probe["box_seconds_per_query"]
    ratio = last["overhead_ratio"] if last else None
    return {
        "d": d, "r": r, "queries_at_least": queries,
        "box_seconds_per_query": probe["box_seconds_per_query"],
        "fast_box_seconds_per_query": probe.get("fast_box_seconds_per_query"),
        "fast_box_same_balls": probe.get("same_balls"),
        "predicted_box_seconds": box,
        "overhead_ratio_used": ratio, "overhead_ratio_from_d": last["d"] if last else None,
        "predicted_seconds": None if ratio is None else box * (1 + ratio),
        "note": "not run: predicted from the box's time per query at this d (measured on "
                f"{probe['queries']} queries) times the learning + verification queries "
                "without rescales, and the learner overhead of the largest certified run",
    }


def measure(spec: dict[str, Any]) -> dict[str, Any]:
    import verified_attn as va

    if spec["kind"] == "certified_box":
        return box_per_query(spec)
    kind, d, seed = spec["kind"], spec["d"], spec.get("seed", 0)
    clock = type("Clock", (_Clock,), {})
    profiler = cProfile.Profile() if spec.get("profile") else None
    if kind in ("single_head", "skeleton") and spec["arithmetic"] == "float":
        if kind == "single_head":
            W, v = float_instance(d, seed)
        else:
            W, v = low_rank_instance(d, spec["r"], seed)
        fn, batch_fn = float_box(W, v, clock)
        oracle = va.Oracle.from_callable(fn, d, batch_fn=batch_fn, model_class="single-head")
        truth, truth_v = W, v
    else:
        import flint  # noqa: F401  (the certified instance)

        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from exact_recovery import rational_instance

        if kind == "single_head":
            Wq, vq = rational_instance(d, seed)
            model = va.SingleHeadAttention(Wq, vq)
        else:
            from verified_attn.low_rank.claims import random_low_rank_head

            model = random_low_rank_head(d, spec["r"], seed, den=3)
        box = model
        if spec.get("box") == "fast":  # the same balls, the scores by a proved-exact BLAS
            from verified_attn.boxes import FastCertifiedHead

            box = FastCertifiedHead(model)
        oracle = va.Oracle(TimedModel(box, clock), "certified", precision=PRECISION)
        truth = model
    learn = va.learn_single_head if kind == "single_head" else va.learn_low_rank
    t0 = time.perf_counter()
    if profiler is not None:
        profiler.enable()
    rec = learn(oracle)
    if profiler is not None:
        profiler.disable()
    total = time.perf_counter() - t0
    row: dict[str, Any] = {
        "kind": kind,
        "arithmetic": spec["arithmetic"],
        "d": d,
        "seconds": total,
        "box_seconds": clock.seconds,
        "learner_seconds": total - clock.seconds,
        "overhead_ratio": (total - clock.seconds) / clock.seconds,
        "queries": rec.queries,
        "bound": rec.bound,
        "verification_queries": rec.verification_queries,
        "queries_by_phase": rec.queries_by_phase,
        "verified": rec.verified,
        "exact": rec.exact,
    }
    if kind == "skeleton":
        row["r"] = spec["r"]
        row["rank"] = rec.rank
    if spec["arithmetic"] == "certified":
        row["box"] = spec.get("box", "rational")
        if row["box"] == "fast":
            row["box_fast_queries"] = box.fast_queries
            row["box_exact_integer_queries"] = box.exact_queries
    if isinstance(truth, np.ndarray):
        Wh = np.asarray(rec.W, dtype=np.float64)
        row["max_abs_error"] = float(np.max(np.abs(Wh - truth)))
        row["relative_error"] = float(np.linalg.norm(Wh - truth) / np.linalg.norm(truth))
        # The precision metric (issue 39): largest entry error of W, v over the largest entry.
        from verified_attn.precision import bits, relative_parameter_error

        metric = relative_parameter_error([(Wh, rec.v)], [(truth, truth_v)], ordered=True)
        row["parameter_error"] = metric
        row["bits"] = bits(metric)
    else:
        row["equal"] = bool(rec.exact and rec.W == truth.W and rec.v == truth.v)
        if not rec.exact:  # balls: do they contain the true rationals, and how wide are they?
            row.update(_ball_check(rec, truth))
    if spec.get("certificate"):
        t1 = time.perf_counter()
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "cert.json"
            rec.certificate(path)
            t2 = time.perf_counter()
            row["certificate_bytes"] = path.stat().st_size
            try:
                ok = bool(va.verify_certificate(path).ok)
            except va.CertificateError as exc:  # recorded (e.g. a checker's size bound)
                ok = False
                row["certificate_error"] = str(exc)
            t3 = time.perf_counter()
        row["certificate_seconds"] = t2 - t1
        row["certificate_check_seconds"] = t3 - t2
        row["certificate_ok"] = ok
    if profiler is not None:
        row["profile_top"] = _top_costs(profiler)
    row["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return row


def _ball_check(rec: Any, model: Any) -> dict[str, Any]:
    """Whether every learned ball of W and v contains the true rational, and the widest."""
    import flint

    prec = flint.ctx.prec
    flint.ctx.prec = 4 * PRECISION  # the true rationals as balls far narrower than ours
    try:
        pairs = [(x, y) for x, y in zip(np.ravel(np.asarray(rec.W, dtype=object)),
                                         list(model.W), strict=True)]
        pairs += list(zip(np.ravel(np.asarray(rec.v, dtype=object)), list(model.v), strict=True))
        inside = all(b.contains(flint.arb(flint.fmpq(int(q.p), int(q.q)))) for b, q in pairs)
        widest = max(float(b.rad()) for b, _ in pairs)
    finally:
        flint.ctx.prec = prec
    return {"balls_contain_truth": inside, "max_ball_radius": widest}


def _top_costs(profiler: cProfile.Profile, top: int = 12) -> list[dict[str, Any]]:
    """The learner-side functions with the largest own time (the box's frames excluded)."""
    stats = pstats.Stats(profiler).stats  # type: ignore[attr-defined]
    rows = []
    for (filename, line, func), (_cc, calls, tottime, cumtime, _callers) in stats.items():
        if filename == __file__ or filename.endswith("benchmarks/scale.py"):
            continue  # the timed box itself
        if "models.py" in filename and func in ("_evaluate_rational", "evaluate_rational"):
            continue  # the certified box's ball evaluation
        if filename.endswith("boxes.py"):
            continue  # the fast certified box's own work (its NumPy calls cannot be told apart)
        where = f"{Path(filename).name}:{line}({func})" if line else func
        rows.append({"function": where, "calls": calls, "tottime": round(tottime, 3),
                     "cumtime": round(cumtime, 3)})
    rows.sort(key=lambda r: -r["tottime"])
    return rows[:top]


def run_child(spec: dict[str, Any]) -> dict[str, Any]:
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--child", json.dumps(spec)],
        capture_output=True,
        text=True,
        env=env,
        cwd=str(ROOT),
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"child {spec} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------------------------------
# The benchmark.
# ---------------------------------------------------------------------------------------


def run_benchmark(
    sizes: dict[str, Any],
    seed: int,
    profile: bool,
    out: Path | None = None,
    previous: dict[str, Any] | None = None,
    profile_max_d: int = 1 << 30,
    certificates: bool = True,
) -> dict[str, Any]:
    """Run every size; with ``out``, rewrite the JSON after each row (long runs keep what
    they measured); rows of ``previous`` for other sizes are kept (``--append``)."""
    data: dict[str, Any] = {
        "benchmark": NAME,
        **metadata(seed, precision=PRECISION, blas_threads=1, verify=8),
        "goals": {"float_overhead_ratio": FLOAT_GOAL, "certified_overhead_ratio": CERTIFIED_GOAL},
        "single_head": [],
        "skeleton": [],
    }
    if previous:
        for key in ("single_head", "skeleton", "skeleton_certified_extrapolated"):
            if key in previous:
                data[key] = list(previous[key])
        for key, val in previous.items():  # e.g. the "before" figures: kept as they were
            data.setdefault(key, val)
    specs: list[tuple[str, dict[str, Any]]] = []
    for d in sizes["float"]:
        specs.append(("single_head", {"kind": "single_head", "arithmetic": "float", "d": d,
                                      "certificate": d in (512, 16)}))
    for d in sizes["certified"]:
        specs.append(("single_head", {"kind": "single_head", "arithmetic": "certified", "d": d,
                                      "certificate": d in (128, 8)}))
    for d, r in sizes["skeleton"]:
        specs.append(("skeleton", {"kind": "skeleton", "arithmetic": "float", "d": d, "r": r,
                                   "certificate": certificates}))
    for d, r in sizes["skeleton_certified"]:
        specs.append(("skeleton", {"kind": "skeleton", "arithmetic": "certified", "d": d,
                                   "r": r}))
    for d, r in sizes.get("skeleton_certified_fast", []):
        specs.append(("skeleton", {"kind": "skeleton", "arithmetic": "certified", "d": d,
                                   "r": r, "box": "fast"}))
    for group, spec in progress(specs, "sizes", unit="size"):
        spec["seed"] = seed
        row = run_child(spec)
        if profile and spec["d"] <= profile_max_d:
            prof = run_child({**spec, "profile": True, "certificate": False})
            row["profile_top"] = prof["profile_top"]
            row["profiled_seconds"] = prof["seconds"]
            row["profiled_peak_rss_mib"] = prof["peak_rss_mib"]  # no certificate built
        goal = FLOAT_GOAL if spec["arithmetic"] == "float" else CERTIFIED_GOAL
        row["goal_met"] = row["overhead_ratio"] <= goal
        same = ("kind", "arithmetic", "d", "box")
        data[group] = [r for r in data[group] if any(r.get(k) != row.get(k) for k in same)]
        data[group].append(row)
        data[group].sort(key=lambda r: (r["arithmetic"], r["d"]))
        if out is not None:
            out.mkdir(parents=True, exist_ok=True)
            (out / f"{NAME}.json").write_text(json.dumps(data, indent=1, default=str))
        _log(
            f"{group} {spec['arithmetic']} d={spec['d']}: {row['seconds']:.2f} s, box "
            f"{row['box_seconds']:.2f} s, overhead {row['overhead_ratio']:.2f}, "
            f"{row['peak_rss_mib']:.0f} MiB, queries {row['queries']}/{row['bound']}"
        )
    for d, r in sizes.get("skeleton_certified_extrapolated", []):
        probe = run_child({"kind": "certified_box", "d": d, "r": r, "seed": seed})
        row = extrapolate(data["skeleton"], probe)
        data["skeleton_certified_extrapolated"] = [
            x for x in data.get("skeleton_certified_extrapolated", []) if x["d"] != d
        ] + [row]
        _log(f"certified skeleton d={d} r={r}: predicted {row['predicted_seconds']} s")
        if out is not None:
            (out / f"{NAME}.json").write_text(json.dumps(data, indent=1, default=str))
    return data


def plot(data: dict[str, Any], out: Path) -> list[str]:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:  # pragma: no cover
        return []
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    for arith, marker in (("float", "o"), ("certified", "s")):
        rows = [r for r in data["single_head"] if r["arithmetic"] == arith]
        if not rows:
            continue
        ds = [r["d"] for r in rows]
        ax1.plot(ds, [r["seconds"] for r in rows], marker=marker, label=f"{arith}: total")
        ax1.plot(ds, [r["box_seconds"] for r in rows], marker=marker, linestyle="--",
                 label=f"{arith}: inside the box")
        ax2.plot(ds, [r["peak_rss_mib"] for r in rows], marker=marker, label=arith)
    for arith, box, color in (("float", None, "tab:purple"), ("certified", "rational", "tab:brown"),
                              ("certified", "fast", "tab:olive")):
        rows = sorted((r for r in data["skeleton"] if r["arithmetic"] == arith
                       and (box is None or r.get("box", "rational") == box)),
                      key=lambda r: r["d"])
        if not rows:
            continue
        ds = [r["d"] for r in rows]
        kind = arith if box is None else f"{arith}, {box} box"
        label = f"skeleton {kind} (" + ", ".join(f"r={r['r']}" for r in rows) + ")"
        ax1.plot(ds, [r["seconds"] for r in rows], marker="*", ms=10, color=color, label=label)
        ax1.plot(ds, [r["box_seconds"] for r in rows], marker="*", ms=8, ls="--", color=color,
                 label=f"skeleton {kind}: inside the box")
        ax2.plot(ds, [r["peak_rss_mib"] for r in rows], marker="*", ms=10, color=color,
                 label=label + (": with its certificate built and checked"
                                if any("certificate_bytes" in r for r in rows) else ""))
        alone = [r for r in rows if "profiled_peak_rss_mib" in r and "certificate_bytes" in r]
        if alone:  # the profiled run builds no certificate: the learner's own peak
            ax2.plot([r["d"] for r in alone], [r["profiled_peak_rss_mib"] for r in alone],
                     marker="*", ms=8, ls="--", color=color,
                     label=f"skeleton {kind}: learning only (no certificate)")
    for r in data.get("skeleton_certified_extrapolated", []):
        if r.get("predicted_seconds"):
            ax1.scatter([r["d"]], [r["predicted_seconds"]], marker="*", s=140,
                        facecolors="none", edgecolors="tab:brown",
                        label=f"skeleton certified d={r['d']} r={r['r']}, rational box: "
                              "predicted, not run")
    for ax in (ax1, ax2):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("d")
        ax.legend(fontsize=7)
    ax1.set_ylabel("seconds (end to end, verification included)")
    ax2.set_ylabel("peak RSS (MiB)")
    ax1.set_title("time vs d")
    ax2.set_title("memory vs d (one subprocess per size)")
    fig.tight_layout()
    path = out / f"{NAME}.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return [path.name]


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--profile", action="store_true")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=None, help="output folder")
    p.add_argument("--no-plots", action="store_true")
    p.add_argument("--only", choices=["float", "certified", "skeleton", "skeleton_certified",
                                      "skeleton_certified_fast",
                                      "skeleton_certified_extrapolated"],
                   action="append", help="run only these groups")
    p.add_argument("--float", type=int, nargs="*", help="float single-head sizes d")
    p.add_argument("--certified", type=int, nargs="*", help="certified single-head sizes d")
    p.add_argument("--skeleton", nargs="*", help="float skeleton sizes as D:R")
    p.add_argument("--skeleton-certified", nargs="*", help="certified skeleton sizes as D:R")
    p.add_argument("--skeleton-certified-fast", nargs="*",
                   help="certified skeleton sizes as D:R with the fast certified box "
                        "(verified_attn.boxes.FastCertifiedHead: the same balls)")
    p.add_argument("--extrapolate", nargs="*",
                   help="certified skeleton sizes D:R predicted from the box's time per query")
    p.add_argument("--profile-max-d", type=int, default=1 << 30,
                   help="profile only sizes up to this d")
    p.add_argument("--no-skeleton-certificate", action="store_true",
                   help="do not build the skeleton's certificate (GiBs at d = 768)")
    p.add_argument("--append", action="store_true",
                   help="keep the rows of an existing results JSON for other sizes")
    p.add_argument("--child", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    args.out = output_dir(args.out, args.quick, "scale")
    if args.child:
        row = measure(json.loads(args.child))
        print(json.dumps(row))
        return row
    sizes = dict(QUICK if args.quick else FULL)
    if args.only:
        sizes = {k: (v if k in args.only else []) for k, v in sizes.items()}
    given = {
        "float": args.float,
        "certified": args.certified,
        "skeleton": None if args.skeleton is None else [_pair(x) for x in args.skeleton],
        "skeleton_certified": None
        if args.skeleton_certified is None
        else [_pair(x) for x in args.skeleton_certified],
        "skeleton_certified_fast": None
        if args.skeleton_certified_fast is None
        else [_pair(x) for x in args.skeleton_certified_fast],
        "skeleton_certified_extrapolated": None
        if args.extrapolate is None
        else [_pair(x) for x in args.extrapolate],
    }
    if any(v is not None for v in given.values()):
        sizes = {k: (v or []) for k, v in given.items()}
    path = args.out / f"{NAME}.json"
    previous = json.loads(path.read_text()) if args.append and path.exists() else None
    data = run_benchmark(
        sizes, args.seed, args.profile, args.out, previous, args.profile_max_d,
        not args.no_skeleton_certificate,
    )
    args.out.mkdir(parents=True, exist_ok=True)
    if not args.no_plots:
        data["plots"] = plot(data, args.out)
    (args.out / f"{NAME}.json").write_text(json.dumps(data, indent=1, default=str))
    return data


def _pair(text: str) -> tuple[int, int]:
    d, r = text.split(":")
    return int(d), int(r)


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
