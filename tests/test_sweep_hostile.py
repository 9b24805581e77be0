"""A sweep on a broken, shut-down or silent executor: failed cells, never a raw error or a hang."""

from __future__ import annotations

import socket
import threading
import time
from concurrent.futures import Executor, Future, ProcessPoolExecutor, ThreadPoolExecutor
from typing import Any

import pytest

import verified_attn as va
from verified_attn.errors import InvalidArgument
from verified_attn.sweep import MAX_WORKERS, check_scheduler, check_workers, dask_client

CLAIM = "thm-4.1/query-count"


def test_a_shut_down_pool_gives_failed_cells() -> None:
    pool = ThreadPoolExecutor(1)
    pool.shutdown()
    out = va.sweep(CLAIM, sizes=[2], seeds=[0, 1], executor=pool)
    assert out["failed"] == 2 and not out["all_passed"]
    assert all("RuntimeError" in c["detail"] for c in out["cells"])


def test_a_broken_process_pool_gives_failed_cells() -> None:
    pool = ProcessPoolExecutor(1)
    try:
        pool.submit(_exit).exception()  # the worker dies: the pool is broken
        out = va.sweep(CLAIM, sizes=[2], seeds=[0], executor=pool)
    finally:
        pool.shutdown()
    assert out["failed"] == 1 and "BrokenProcessPool" in out["cells"][0]["detail"]


def _exit() -> None:
    import os

    os._exit(1)


class _Silent(Executor):
    """An executor whose futures never resolve (a worker lost without a word)."""

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Future[Any]:
        return Future()


def test_a_future_that_never_resolves_times_out_as_a_failed_cell() -> None:
    start = time.perf_counter()
    out = va.sweep(CLAIM, sizes=[2], seeds=[0, 1], executor=_Silent(), timeout=0.5)
    assert time.perf_counter() - start < 10
    assert out["failed"] == 2 and all("timeout" in c["detail"] for c in out["cells"])
    with pytest.raises(InvalidArgument, match="timeout"):
        va.sweep(CLAIM, sizes=[2], seeds=[0], executor=_Silent(), timeout=0)


def test_workers_are_capped() -> None:
    assert check_workers(1) == 1 and check_workers(MAX_WORKERS) == MAX_WORKERS
    for bad in (0, -1, 10**6, MAX_WORKERS + 1, 2.0, True):
        with pytest.raises(InvalidArgument, match="workers"):
            check_workers(bad)


@pytest.mark.parametrize("address", ["::::", "tcp://", ":8786", "a b", "", "x" * 300, None])
def test_malformed_scheduler_addresses_are_refused(address: Any) -> None:
    with pytest.raises(InvalidArgument, match="scheduler"):
        check_scheduler(address)
    with pytest.raises(InvalidArgument, match="scheduler"):
        dask_client(address)


def test_a_scheduler_that_answers_non_dask_bytes_is_refused() -> None:
    pytest.importorskip("distributed")
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]
    stop = threading.Event()

    def answer() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            conn.sendall(b"HTTP/1.0 200 OK\r\n\r\nnot dask" * 64)
            conn.close()

    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    try:
        with pytest.raises(InvalidArgument, match="cannot use the Dask scheduler"):
            dask_client(f"tcp://127.0.0.1:{port}", timeout=3)
    finally:
        stop.set()
        thread.join()
        server.close()
