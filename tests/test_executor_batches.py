"""A box's batches on an executor: answers in order, counts and transcript as the serial run,
a lost worker's piece asked again (never dropped, never counted twice), bad input refused."""

from __future__ import annotations

import os
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import verified_attn as va
from verified_attn.executor_batches import ExecutorBatches, check_executor, worker_count

ROOT = Path(__file__).resolve().parents[1]
HEAD = va.SingleHeadAttention(
    [[0.5, -1.25, 0.0], [0.75, 0.0, 0.5], [0.0, 0.25, -0.5]], [1.0, 0.0, -0.5]
)


def _rows(n: int) -> np.ndarray:
    return np.random.default_rng(1).standard_normal((n, 2, 3))


def _row_ids(Xs: np.ndarray) -> np.ndarray:
    return Xs[:, 0, 0] * 1000 + Xs[:, 1, 1]


class DiesOnce:
    """A box whose first call in a worker process ends that process (a worker lost
    mid-batch); later calls, or calls in the parent, answer normally."""

    def __init__(self, flag: Path, parent: int) -> None:
        self.flag, self.parent = flag, parent

    def __call__(self, Xs: np.ndarray) -> np.ndarray:
        if os.getpid() != self.parent and not self.flag.exists():
            self.flag.write_text("died")
            os._exit(1)
        return HEAD.evaluate_batch(Xs)


def _learn(batch_fn: Any) -> va.Recovery:
    oracle = va.Oracle.from_callable(
        lambda X: float(HEAD.evaluate_batch(np.asarray(X)[None])[0]), d=3, batch_fn=batch_fn,
        record=True,
    )
    rec = va.learn_single_head(oracle, seed=0)
    rec.transcript = oracle.transcript  # type: ignore[attr-defined]
    return rec


def _same_run(a: va.Recovery, b: va.Recovery) -> None:
    assert a.queries_by_phase == b.queries_by_phase and a.queries == b.queries
    ta, tb = a.transcript, b.transcript  # type: ignore[attr-defined]
    assert [e.phase for e in ta] == [e.phase for e in tb]
    assert [e.answer for e in ta] == [e.answer for e in tb]  # bit for bit, in order
    assert np.array_equal(np.asarray(a.W, dtype=float), np.asarray(b.W, dtype=float))


def test_pieces_come_back_in_the_batch_order() -> None:
    Xs = _rows(37)
    with ThreadPoolExecutor(3) as pool:
        batches = ExecutorBatches(_row_ids, pool, min_rows=4)
        got = batches(Xs)
    assert got.tolist() == _row_ids(Xs).tolist()
    # The wrong variant: the same pieces joined in another order is seen.
    assert got[::-1].tolist() != _row_ids(Xs).tolist()


def test_a_learner_on_a_thread_pool_is_the_serial_run() -> None:
    serial = _learn(HEAD.evaluate_batch)
    with ThreadPoolExecutor(2) as pool:
        spread = _learn(ExecutorBatches(HEAD.evaluate_batch, pool, min_rows=2))
    _same_run(serial, spread)


def test_a_lost_process_worker_is_asked_again_here(tmp_path: Path) -> None:
    Xs = _rows(40)
    box = DiesOnce(tmp_path / "flag", os.getpid())
    with ProcessPoolExecutor(2) as pool:
        batches = ExecutorBatches(box, pool, min_rows=4, retries=1)
        got = batches(Xs)
    assert (tmp_path / "flag").exists(), "no worker died: the test did not test"
    assert batches.lost_pieces >= 1
    assert got.tolist() == HEAD.evaluate_batch(Xs).tolist()


def test_the_box_s_own_error_is_not_a_lost_worker() -> None:
    def refuses(Xs: np.ndarray) -> np.ndarray:
        raise va.OracleError("the box refuses")

    with ThreadPoolExecutor(2) as pool, pytest.raises(va.OracleError, match="refuses"):
        ExecutorBatches(refuses, pool, min_rows=1)(_rows(8))


def test_bad_executors_and_boxes_are_refused() -> None:
    for bad in ("threads", 4, None):
        with pytest.raises(va.InvalidArgument, match="executor must be"):
            check_executor(bad)
    with ThreadPoolExecutor(1) as pool:
        assert worker_count(pool) == 1
        for kw in ({"min_rows": 0}, {"retries": -1}, {"retries": True}):
            with pytest.raises(va.InvalidArgument):
                ExecutorBatches(_row_ids, pool, **kw)
        with pytest.raises(va.InvalidArgument, match="callable"):
            ExecutorBatches("box", pool)  # type: ignore[arg-type]
    with ProcessPoolExecutor(1) as pool, pytest.raises(va.InvalidArgument, match="pickle"):
        ExecutorBatches(lambda Xs: Xs.sum(axis=(1, 2)), pool, min_rows=1)(_rows(4))


def test_a_shut_down_pool_answers_here() -> None:
    pool = ThreadPoolExecutor(2)
    pool.shutdown()
    batches = ExecutorBatches(_row_ids, pool, min_rows=2)
    Xs = _rows(6)
    assert batches(Xs).tolist() == _row_ids(Xs).tolist() and batches.lost_pieces >= 1


def test_dask_workers_get_the_box_once_and_a_killed_worker_loses_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    distributed = pytest.importorskip(
        "distributed", reason="Dask distributed not installed (pip install 'verified-attn[dask]')"
    )
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    flag, parent = tmp_path / "flag", os.getpid()

    W, v = np.asarray(HEAD.W, dtype=float), np.asarray(HEAD.v, dtype=float)[:, 0]

    def dies_once(Xs: np.ndarray) -> np.ndarray:  # a closure: cloudpickle ships it by value
        if os.getpid() != parent and not flag.exists():
            flag.write_text("died")
            os._exit(1)
        scores = np.einsum("bnd,de,be->bn", Xs, W, Xs[:, -1])
        alpha = np.exp(scores - scores.max(axis=1, keepdims=True))
        alpha /= alpha.sum(axis=1, keepdims=True)
        return np.einsum("bn,bnd,d->b", alpha, Xs, v)

    with (
        distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
            dashboard_address=None,
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        assert worker_count(client) == 2
        spread = _learn(ExecutorBatches(dies_once, client, min_rows=2))
        with pytest.raises(va.InvalidArgument, match="cannot be sent to the Dask workers"):
            ExecutorBatches(HEAD.evaluate_batch, client, min_rows=1)(_rows(4))  # flint inside
    assert flag.exists(), "no worker died: the test did not test"
    _same_run(_learn(dies_once), spread)


def test_oracle_executor_gives_the_serial_run_and_refuses_what_it_cannot_spread() -> None:
    serial = va.learn_single_head(va.Oracle(HEAD, "float", record=True), seed=0)
    with ThreadPoolExecutor(2) as pool:
        oracle = va.Oracle(HEAD, "float", record=True, executor=pool)
        spread = va.learn_single_head(oracle, seed=0)
        assert isinstance(oracle._model_batches, ExecutorBatches)
        with pytest.raises(va.InvalidArgument, match="float batches"):
            va.Oracle(HEAD, "exact", executor=pool)
        with pytest.raises(va.InvalidArgument, match="needs batch_fn"):
            va.Oracle.from_callable(lambda X: 0.0, d=3, executor=pool)
    assert spread.queries_by_phase == serial.queries_by_phase
    assert np.array_equal(spread.W, serial.W) and np.array_equal(spread.v, serial.v)
    with pytest.raises(va.InvalidArgument, match="executor must be"):
        va.Oracle(HEAD, "float", executor="dask")
