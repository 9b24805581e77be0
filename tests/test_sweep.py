"""Claims at any size and va.sweep: in-process, on a process pool and on a loopback Dask
cluster (started and stopped here), compared cell by cell; the CLI; a wrong variant fails."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from concurrent.futures import Executor, Future, ProcessPoolExecutor
from pathlib import Path
from typing import Any

import pytest

import verified_attn as va
import verified_attn.exact_recovery.claims as er_claims
from verified_attn.checks import SIZE_PRESETS, Claim, ClaimResult
from verified_attn.claims import NO_SIZE_NOTE, all_claims, check_claims, get_claim
from verified_attn.cli import main
from verified_attn.errors import InvalidArgument

ROOT = Path(__file__).resolve().parents[1]

# Golden learning-query counts d^2 + d (written out, not computed).
GOLDEN = {2: 6, 3: 12, 4: 20, 16: 272}

# The claims the issue asks to be sized (their ids, as registered).
SIZED = {
    "thm-4.1/query-count",
    "thm-4.1/certified-recovery",
    "thm-5.1/skeleton-count",
    "thm-5.1/nuclear-recovery",
    "thm-6.1/error-bound",
    "prop-7.1/canonical-recovery",
}

# A small grid whose details carry float errors (the nuclear-norm program above and below
# its phase transition) and one whose details carry exact counts: both must agree exactly.
NUCLEAR = "thm-5.1/nuclear-recovery"
NUCLEAR_SIZES = [{"d": 8, "r": 1, "c": 1.0}, {"d": 8, "r": 1, "c": 3.0}, {"d": 6, "r": 2, "c": 3.0}]
COUNT = "thm-5.1/skeleton-count"
COUNT_SIZES = [4, 6]
SEEDS = [0, 1, 2]


def key(cell: dict[str, Any]) -> tuple[Any, ...]:
    """What must be identical whichever executor ran the cell (seconds may differ)."""
    return (cell["d"], cell["seed"], cell["size"], cell["passed"], cell["detail"], cell["queries"])


@pytest.fixture(scope="module")
def reference() -> dict[str, dict[str, Any]]:
    return {
        NUCLEAR: va.sweep(NUCLEAR, sizes=NUCLEAR_SIZES, seeds=SEEDS),
        COUNT: va.sweep(COUNT, sizes=COUNT_SIZES, seeds=SEEDS),
    }


def _same_cells(a: dict[str, Any], b: dict[str, Any]) -> None:
    assert len(a["cells"]) == len(b["cells"]) > 0
    for x, y in zip(a["cells"], b["cells"], strict=True):
        assert key(x) == key(y)


# ---------------------------------------------------------------------------------------
# Claims declare their sizes
# ---------------------------------------------------------------------------------------


def test_the_asked_claims_have_size_support() -> None:
    sized = {c.id for c in all_claims() if c.sized}
    assert sized >= SIZED
    for cid in SIZED:
        claim = get_claim(cid)
        assert "d" in claim.sizes
        assert list(claim.presets) == list(SIZE_PRESETS)
        ds = [claim.presets[p]["d"] for p in SIZE_PRESETS]
        assert ds == sorted(ds) and ds[0] < ds[-1]  # large is larger


def test_default_check_unchanged_and_size_recorded() -> None:
    [default] = check_claims(["thm-4.1/query-count"])
    assert default.passed and "size" not in default.data  # the old behaviour, untouched
    assert (default.queries, default.bound) == (72, 72)  # d = 8: 8^2 + 8
    [small] = check_claims(["thm-4.1/query-count"], size="small")
    assert small.passed and small.data["size"] == {"d": 8}
    [at] = check_claims(["thm-4.1/query-count"], d=16)
    assert at.passed and at.data["size"] == {"d": 16}
    assert (at.queries, at.bound) == (GOLDEN[16], GOLDEN[16])
    assert "float: 272" in at.detail  # float mode counted too


def test_unsized_claims_say_they_ran_at_their_default() -> None:
    results = check_claims(["thm-4.1/v-zero", "thm-4.1/query-count"], d=3)
    by_id = {r.id: r for r in results}
    assert by_id["thm-4.1/v-zero"].data["size"] is None
    assert by_id["thm-4.1/v-zero"].data["size_note"] == NO_SIZE_NOTE
    assert by_id["thm-4.1/query-count"].data["size"] == {"d": 3}


def test_multi_parameter_sizes_follow_their_types() -> None:
    claim = get_claim(NUCLEAR)
    # c = 4: the measured constant at r = 1 up to d = 64 (3 fails at d = 64; docs/sweeps.md)
    assert claim.size_params() == {"d": 16, "r": 1, "c": 4.0}
    assert claim.size_params("large", d=40, r=2) == {"d": 40, "r": 2, "c": 4.0}
    assert claim.size_params(c=1.5) == {"d": 16, "r": 1, "c": 1.5}
    with pytest.raises(InvalidArgument, match="r must be an int"):
        claim.size_params(r=1.5)
    with pytest.raises(InvalidArgument, match="no size parameter 'q'"):
        claim.size_params(q=3)
    with pytest.raises(InvalidArgument, match="size must be one of"):
        claim.size_params("huge")


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"sizes": {"d": 4}}, "all or none"),
        (
            {"sizes": {"d": 4}, "check_at": lambda s, p: None, "presets": {"small": {"d": 4}}},
            "exactly",
        ),
        (
            {
                "sizes": {"d": 4},
                "check_at": lambda s, p: None,
                "presets": {"small": {"d": 4}, "medium": {"d": 0}, "large": {"d": 9}},
            },
            "preset 'medium' d must be an int >= 1",
        ),
    ],
)
def test_a_badly_declared_claim_is_refused(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(InvalidArgument, match=match):
        Claim("x/y", "Thm 0", "s", lambda seed: None, **kwargs)


@pytest.mark.parametrize(
    ("kwargs", "match"), [({"size": "huge"}, "size must be one of"), ({"d": 0}, "d must be")]
)
def test_check_claims_validates_size(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(InvalidArgument, match=match):
        check_claims(["thm-4.1/query-count"], **kwargs)


# ---------------------------------------------------------------------------------------
# sweep in-process
# ---------------------------------------------------------------------------------------


def test_sweep_in_process_cells_and_golden_counts() -> None:
    out = va.sweep("thm-4.1/query-count", sizes=[4, 2, 3], seeds=[1, 0])
    assert out["claim"] == "thm-4.1/query-count" and out["executor"] == "in-process"
    assert [(c["d"], c["seed"]) for c in out["cells"]] == [
        (d, s) for d in (2, 3, 4) for s in (0, 1)
    ]  # ordered by (d, seed) whatever order they were given in
    for c in out["cells"]:
        assert set(c) >= {"d", "seed", "passed", "detail", "seconds"}
        assert c["passed"] is True and c["queries"] == c["bound"] == GOLDEN[c["d"]]
        assert c["detail"].startswith(f"d = {c['d']}: {GOLDEN[c['d']]} queries")
    assert out["passed"] == 6 and out["failed"] == 0 and out["all_passed"] is True
    assert out["versions"]["verified_attn"] == va.__version__ and out["versions_agree"]
    assert json.loads(json.dumps(out)) == out  # JSON-ready as it is


def test_sweep_reference_grid(reference: dict[str, dict[str, Any]]) -> None:
    nuclear = reference[NUCLEAR]
    by_c = {(c["d"], c["size"]["c"]): c["passed"] for c in nuclear["cells"]}
    # Below its phase transition (m = 2rd) nuclear-norm recovery fails; at m = 3 * 2rd it holds.
    assert by_c[(8, 1.0)] is False and by_c[(8, 3.0)] is True
    assert [c["d"] for c in nuclear["cells"]] == [6, 6, 6, 8, 8, 8, 8, 8, 8]
    assert all(c["passed"] for c in reference[COUNT]["cells"])


def test_a_wrong_bound_fails_at_a_larger_size(monkeypatch: pytest.MonkeyPatch) -> None:
    """A bound formula off by one beyond d = 8 passes the default check, fails the sweep."""
    right = er_claims.query_bound

    def wrong(d: int, affine: bool = False) -> int:
        return right(d, affine=affine) + (d > 8)

    monkeypatch.setattr(er_claims, "query_bound", wrong)
    assert get_claim("thm-4.1/query-count").check(0).passed  # d = 1, 2, 5, 8 only
    out = va.sweep("thm-4.1/query-count", sizes=[8, 16], seeds=[0])
    assert [c["passed"] for c in out["cells"]] == [True, False]
    assert out["all_passed"] is False and out["failed"] == 1
    assert "bound d^2 + d = 273" in out["cells"][1]["detail"]


def test_a_crashing_cell_is_a_failed_cell() -> None:
    out = va.sweep(NUCLEAR, sizes=[{"d": 4, "r": 5}], seeds=[0])
    [cell] = out["cells"]
    assert cell["passed"] is False and "r must be <= d" in cell["detail"]


class _LostWorkers(Executor):
    """An executor whose every future fails, as when a worker dies."""

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Future:
        f: Future = Future()
        f.set_exception(OSError("worker lost"))
        return f


def test_a_lost_worker_is_a_failed_cell_not_a_crash() -> None:
    out = va.sweep("thm-4.1/query-count", sizes=[2], seeds=[0, 1], executor=_LostWorkers())
    assert [c["passed"] for c in out["cells"]] == [False, False]
    assert out["cells"][0]["detail"] == "cell raised OSError: worker lost"
    assert out["executor"] == "_LostWorkers"


@pytest.mark.parametrize(
    ("claim", "kwargs", "match"),
    [
        ("no/such", {}, "unknown claim id 'no/such'; known ids: .*thm-4.1/query-count"),
        ("thm-4.1/v-zero", {}, "'thm-4.1/v-zero' has no size support.*thm-4.1/query-count"),
        (3, {}, "claim_id must be"),
        ("thm-4.1/query-count", {"sizes": []}, "sizes must not be empty"),
        ("thm-4.1/query-count", {"sizes": [0]}, "d must be an int >= 1, got 0"),
        ("thm-4.1/query-count", {"sizes": [True]}, "an entry of sizes must be"),
        ("thm-4.1/query-count", {"sizes": ["8"]}, "an entry of sizes must be"),
        ("thm-4.1/query-count", {"sizes": 8}, "sizes must be a sequence"),
        ("thm-4.1/query-count", {"sizes": [2, 2]}, "twice"),
        ("thm-4.1/query-count", {"sizes": [{"r": 2}]}, "no size parameter 'r'"),
        ("thm-4.1/query-count", {"seeds": [-1]}, "an entry of seeds must be an int >= 0"),
        ("thm-4.1/query-count", {"seeds": []}, "seeds must not be empty"),
        ("thm-4.1/query-count", {"seeds": [0, 0]}, "twice"),
        ("thm-4.1/query-count", {"executor": "pool"}, "executor must be"),
    ],
)
def test_sweep_validates_its_arguments(claim: Any, kwargs: dict[str, Any], match: str) -> None:
    args = {"sizes": [2], "seeds": [0], **kwargs}
    with pytest.raises(InvalidArgument, match=match):
        va.sweep(claim, **args)


# ---------------------------------------------------------------------------------------
# The same cells on a process pool and on a Dask cluster
# ---------------------------------------------------------------------------------------


def test_process_pool_agrees_cell_by_cell(reference: dict[str, dict[str, Any]]) -> None:
    with ProcessPoolExecutor(2) as pool:
        nuclear = va.sweep(NUCLEAR, sizes=NUCLEAR_SIZES, seeds=SEEDS, executor=pool)
        count = va.sweep(COUNT, sizes=COUNT_SIZES, seeds=SEEDS, executor=pool)
    assert nuclear["executor"] == "ProcessPoolExecutor(max_workers=2)"
    _same_cells(nuclear, reference[NUCLEAR])
    _same_cells(count, reference[COUNT])
    assert nuclear["versions_agree"] and count["versions_agree"]


@pytest.fixture
def worktree_on_path(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """Workers must import this checkout's verified_attn, not another installed copy."""
    path = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    monkeypatch.setenv("PYTHONPATH", path)
    return {**os.environ, "PYTHONPATH": path}


def test_dask_local_cluster_agrees_cell_by_cell(
    reference: dict[str, dict[str, Any]], worktree_on_path: dict[str, str]
) -> None:
    distributed = pytest.importorskip(
        "distributed", reason="Dask distributed not installed (pip install 'verified-attn[dask]')"
    )
    with (
        distributed.LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            dashboard_address=None,
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        files = client.run(lambda: __import__("verified_attn").__file__)
        assert len(files) == 2 and set(files.values()) == {va.__file__}
        executor = client.get_executor()
        nuclear = va.sweep(NUCLEAR, sizes=NUCLEAR_SIZES, seeds=SEEDS, executor=executor)
        count = va.sweep(COUNT, sizes=COUNT_SIZES, seeds=SEEDS, executor=executor)
    _same_cells(nuclear, reference[NUCLEAR])
    _same_cells(count, reference[COUNT])
    assert nuclear["versions_agree"] and nuclear["executor"] == "ClientExecutor"


def _wait_for(path: Path, proc: subprocess.Popen, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not path.exists():
        if proc.poll() is not None:
            raise RuntimeError(f"dask scheduler exited with {proc.returncode}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"no {path} after {seconds} s")
        time.sleep(0.2)


def test_cli_sweep_on_a_dask_scheduler_and_two_workers(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    reference: dict[str, dict[str, Any]],
    worktree_on_path: dict[str, str],
) -> None:
    """`dask scheduler --host 127.0.0.1` and two `dask worker` processes, stopped after."""
    pytest.importorskip(
        "distributed", reason="Dask distributed not installed (pip install 'verified-attn[dask]')"
    )
    dask = [sys.executable, "-m", "distributed.cli.dask_scheduler"]
    worker = [sys.executable, "-m", "distributed.cli.dask_worker"]
    info = tmp_path / "scheduler.json"
    procs: list[subprocess.Popen] = []
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL, "env": worktree_on_path}
    try:
        procs.append(
            subprocess.Popen(
                [*dask, "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
                 "--scheduler-file", str(info)],
                **quiet,
            )
        )  # fmt: skip
        _wait_for(info, procs[0])
        address = json.loads(info.read_text())["address"]
        assert address.startswith("tcp://127.0.0.1:")
        for _ in range(2):
            procs.append(
                subprocess.Popen(
                    [*worker, address, "--nthreads", "1", "--no-dashboard",
                     "--host", "127.0.0.1"],
                    **quiet,
                )
            )  # fmt: skip
        import distributed

        with distributed.Client(address, timeout=60) as client:
            client.wait_for_workers(2, timeout=120)
        out_file = tmp_path / "sweep.json"
        code = main(
            [
                "sweep", COUNT, "--sizes", "4,6", "--seeds", "0,1,2",
                "--scheduler", address, "--json", str(out_file),
            ]
        )  # fmt: skip
        printed = capsys.readouterr().out
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
    assert all(p.poll() is not None for p in procs)
    assert code == 0, printed
    data = json.loads(out_file.read_text())
    assert data["executor"] == f"dask scheduler {address}" and data["dask_workers"] == 2
    _same_cells(data, reference[COUNT])
    assert f"{COUNT}: 6 passed, 0 failed" in printed


# ---------------------------------------------------------------------------------------
# CLI
# ---------------------------------------------------------------------------------------


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, out, err


def test_cli_sweep_on_a_process_pool_writes_json(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "s.json"
    code, out, _ = run(
        capsys, "sweep", "thm-4.1/query-count", "--sizes", "2,3", "--seeds", "0,1",
        "--workers", "2", "--json", str(path),
    )  # fmt: skip
    assert code == 0
    assert "thm-4.1/query-count: 4 passed, 0 failed; ProcessPoolExecutor(max_workers=2)" in out
    data = json.loads(path.read_text())
    assert [(c["d"], c["seed"], c["queries"]) for c in data["cells"]] == [
        (2, 0, 6), (2, 1, 6), (3, 0, 12), (3, 1, 12),
    ]  # fmt: skip
    inline = va.sweep("thm-4.1/query-count", sizes=[2, 3], seeds=[0, 1])
    _same_cells(data, inline)


def test_cli_sweep_exit_1_when_a_cell_fails(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    right = er_claims.query_bound
    monkeypatch.setattr(er_claims, "query_bound", lambda d, affine=False: right(d) + (d > 2))
    code, out, _ = run(capsys, "sweep", "thm-4.1/query-count", "--sizes", "2,3")
    assert code == 1
    assert "PASS  d = 2, seed 0" in out and "FAIL  d = 3, seed 0" in out
    assert "1 passed, 1 failed" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["sweep", "no/such", "--sizes", "2"], "unknown claim id"),
        (["sweep", "thm-4.1/v-zero", "--sizes", "2"], "has no size support"),
        (["sweep", "thm-4.1/query-count", "--sizes", "2,x"], "integers separated by commas"),
        (["sweep", "thm-4.1/query-count"], "--sizes"),
        (["sweep", "thm-4.1/query-count", "--sizes", "0"], "d must be an int >= 1"),
        (
            ["sweep", "thm-4.1/query-count", "--sizes", "2", "--workers", "2", "--scheduler", "x"],
            "not allowed with",
        ),
        (["check", "--size", "huge"], "invalid choice"),
        (["check", "--d", "0"], "expected an integer >= 1"),
    ],
)
def test_cli_bad_usage_exits_2(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    code, _, err = run(capsys, *argv)
    assert code == 2 and message in err


def test_cli_scheduler_without_dask_says_what_to_install(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "distributed", None)  # import distributed -> ImportError
    code, _, err = run(
        capsys, "sweep", "thm-4.1/query-count", "--sizes", "2", "--scheduler", "tcp://x:1"
    )
    assert code == 2 and "pip install 'verified-attn[dask]'" in err


def test_cli_check_size_and_d(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, out, _ = run(capsys, "check", "thm-4.1", "--size", "small")
    n = len([c for c in all_claims() if c.id.startswith("thm-4.1/")])
    # the count and certified recovery, and the six symbolic claims (every d up to d_max)
    k = 8
    assert code == 0
    assert f"{k} of {n} claims ran at --size small; the other {n - k} have no size support" in out
    path = tmp_path / "c.json"
    code, out, _ = run(capsys, "check", "thm-4.1/query-count", "--d", "3", "--json", str(path))
    assert code == 0 and "1 of 1 claims ran at --d 3" in out and "12 (12)" in out
    [claim] = json.loads(path.read_text())["claims"]
    assert claim["data"]["size"] == {"d": 3}
    code, out, _ = run(capsys, "check", "thm-4.1/query-count")
    assert code == 0 and "ran at" not in out  # no size asked: the old output


def test_claim_result_run_at_default_matches_check() -> None:
    claim = get_claim("thm-4.1/query-count")
    assert isinstance(claim.run(0), ClaimResult) and claim.run(0).detail == claim.check(0).detail


@pytest.mark.slow
def test_benchmark_quick_run(tmp_path: Path, worktree_on_path: dict[str, str]) -> None:
    """benchmarks/sweep.py --quick: both worker counts ran, their cells agree, the speed-up
    is the median of the paired runs' ratios, c = 3 holds at d = 8."""
    script = ROOT / "benchmarks" / "sweep.py"
    proc = subprocess.run(
        [sys.executable, str(script), "--quick", "--out", str(tmp_path), "--no-plots"],
        env=worktree_on_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    data = json.loads((tmp_path / "sweep_quick.json").read_text())
    assert [r["workers"] for r in data["runs"]] == [2, 1]  # the grid once on each pool
    assert [r["distinct_pids"] for r in data["runs"]] == [2, 1] and data["cells_agree"]
    pairs = data["pairs"]  # 5 paired timings, the order alternating
    assert [p["order"] for p in pairs] == [[1, 2], [2, 1], [1, 2], [2, 1], [1, 2]]
    ratios = [p["seconds"]["1"] / p["seconds"]["2"] for p in pairs]
    assert data["speedups"] == ratios and data["speedup_2_over_1"] == statistics.median(ratios)
    assert all(len(p["load_average_before"]) == 3 and p["cells_agree"] for p in pairs)
    at_claim = [r for r in data["phase_transition"] if r["c"] == 3.0]
    below = [r for r in data["phase_transition"] if r["c"] == 1.0]
    assert at_claim and all(r["success_rate"] == 1.0 for r in at_claim)
    assert below and all(r["success_rate"] < 1.0 for r in below)


def test_cells_in_one_process_hold_the_precision_lock(monkeypatch: pytest.MonkeyPatch) -> None:
    # python-flint's working precision is process-wide: two certified cells in threads at
    # once changed each other's precision (7 queries instead of 6, about 1 run in 200). So
    # every cell holds the lock, and two threads never run cells at the same time.
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from verified_attn.arithmetic import PRECISION_LOCK

    sweep_module = sys.modules["verified_attn.sweep"]  # va.sweep is the function

    real = sweep_module.run_claim
    seen: list[bool] = []
    inside = [0]
    overlap = threading.Event()

    def watched(*args: Any, **kwargs: Any) -> Any:
        inside[0] += 1
        if inside[0] > 1:
            overlap.set()
        seen.append(PRECISION_LOCK.locked())
        try:
            return real(*args, **kwargs)
        finally:
            inside[0] -= 1

    monkeypatch.setattr(sweep_module, "run_claim", watched)
    with ThreadPoolExecutor(2) as pool:
        out = va.sweep("thm-4.1/query-count", sizes=[2, 3], seeds=[0, 1], executor=pool)
    assert out["all_passed"] and seen == [True] * 4 and not overlap.is_set()
