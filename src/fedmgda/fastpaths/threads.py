"""The CPU thread policy of the fast paths: tiny operations on one CPU thread
(``single_thread_on_cpu``), large products on all the job's threads (``threads_for_product``)."""

from __future__ import annotations

from contextlib import contextmanager

import torch

LARGE_PRODUCT = 1 << 26  # multiply-adds from which a product is split across the CPU threads

# the thread counts single_thread_on_cpu replaced, outermost first
_REPLACED_THREADS: list[int] = []


@contextmanager
def single_thread_on_cpu(device: torch.device, active: bool = True):
    """Tiny operations run on one CPU thread: splitting them costs more than it saves, and on a
    shared, busy machine waiting for a second thread can make each one take milliseconds. Large
    products inside take the threads back (``threads_for_product``)."""
    if not active or device.type != "cpu" or torch.get_num_threads() == 1:
        yield
        return
    threads = torch.get_num_threads()
    _REPLACED_THREADS.append(threads)
    torch.set_num_threads(1)
    try:
        yield
    finally:
        _REPLACED_THREADS.pop()
        torch.set_num_threads(threads)


@contextmanager
def threads_for_product(multiply_adds: float):
    """Inside ``single_thread_on_cpu``: a product of at least ``LARGE_PRODUCT`` multiply-adds runs
    on the threads the process was given (its job's ``threads``). The q-FFL paper's F-MNIST full
    batches (3 x 6 000 samples x 785 features x 20 runs' columns) are such products; Adult's are
    not. The choice depends only on the shapes, so a run stays deterministic for a given thread
    count (``benchmarks/bench_pack.py --threads 1 2`` measures the split)."""
    if multiply_adds < LARGE_PRODUCT or not _REPLACED_THREADS or torch.get_num_threads() != 1:
        yield
        return
    torch.set_num_threads(_REPLACED_THREADS[0])
    try:
        yield
    finally:
        torch.set_num_threads(1)
