"""Suite-wide settings for a run split over processes with pytest-xdist (`-n 2`, the README's command).

Each worker computes with one thread, and so do the scripts and tools its tests start: two workers of torch's default
thread count (one per core) would oversubscribe the cores, and a spinning thread pool then slows a test several times
over. The longest test (~2 minutes: every experiment's smoke, 72 short runs in one process) starts first, so that the
other worker runs the rest of the suite beside it. Every test leaves the SIGINT, SIGTERM and SIGHUP handlers (and the
float32 matmul precision) as it found them: a script's `main()` run in-process installs its own, which would otherwise
outlive the test (and keep its run, replay buffer and all, alive).
"""

import os
import signal

import pytest
import torch

LONGEST_TEST = "test_every_smoke_runs_and_aggregates"

if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")  # inherited by every process a test starts
    torch.set_num_threads(1)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=lambda item: item.name != LONGEST_TEST)  # stable: the rest keep their order


@pytest.fixture(autouse=True)
def signal_handlers_put_back():
    handlers = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    precision = torch.get_float32_matmul_precision()  # a GPU run sets TF32; the finite differences compute in float32
    yield
    for signum, handler in handlers.items():
        signal.signal(signum, handler)
    torch.set_float32_matmul_precision(precision)
