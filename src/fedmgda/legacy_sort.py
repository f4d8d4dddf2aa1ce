"""The order numpy's default ``argsort`` gave the authors, computed the same way on every machine.

The authors' shard partition sorts the labels with ``np.argsort`` and numpy's default kind,
``quicksort`` (Fed-MGDA ``main/sampling.py``, ``idxs_labels[1, :].argsort()``), under the numpy
their README names (1.17.2). ``quicksort`` is not stable, so which image of a class lands in which
shard is whatever that sort leaves. numpy 1.17 to 1.24 sorted int64 keys with one scalar introsort
(``numpy/core/src/npysort/quicksort.c.src``, later ``quicksort.cpp``: median-of-3 Hoare partition,
insertion sort below 16 elements, heapsort past a depth of twice the key count's bit length). From
1.25 on, numpy hands int64 sorts to SIMD libraries where the CPU has AVX-512 (and AVX2 from 2.0),
which order equal keys otherwise, so today's ``np.argsort(kind="quicksort")`` depends on the numpy
version and the CPU. :func:`numpy_1_17_argsort` is that scalar introsort step for step, in Python:
the order the authors had, on any machine (docs/protocol.md §1.3).
"""

from __future__ import annotations

import numpy as np

SMALL_QUICKSORT = 15  # numpy's constant: a partition with pr - pl <= 15 is insertion-sorted


def numpy_1_17_argsort(keys) -> np.ndarray:
    """``np.argsort(keys)`` as numpy 1.17-1.24 computed it for integer keys (their
    ``aquicksort_``), whatever numpy and CPU run it. Ties keep that algorithm's order."""
    v = np.asarray(keys)
    if v.ndim != 1 or v.dtype.kind not in "biu":
        raise ValueError(f"numpy_1_17_argsort sorts 1-d integer keys, not {v.dtype} of shape "
                         f"{v.shape}")
    v = v.tolist()
    order, _ = introsort(v)
    return np.asarray(order, dtype=np.int64)


def introsort(v: list[int]) -> tuple[list[int], bool]:
    """numpy 1.17's introsort of ``v``: (the index permutation, whether the heapsort fallback
    ran). Indices ``pl``/``pr`` stand for numpy's pointers into the permutation ``a``."""
    num = len(v)
    a = list(range(num))
    stack: list[tuple[int, int, int]] = []
    depth = 2 * (num.bit_length() - 1) if num else 0  # npy_get_msb(num) * 2
    pl, pr = 0, num - 1
    used_heapsort = False
    while True:
        if depth < 0:
            _heapsort(v, a, pl, pr - pl + 1)
            used_heapsort = True
        else:
            while pr - pl > SMALL_QUICKSORT:
                pm = pl + ((pr - pl) >> 1)
                if v[a[pm]] < v[a[pl]]:
                    a[pm], a[pl] = a[pl], a[pm]
                if v[a[pr]] < v[a[pm]]:
                    a[pr], a[pm] = a[pm], a[pr]
                if v[a[pm]] < v[a[pl]]:
                    a[pm], a[pl] = a[pl], a[pm]
                vp = v[a[pm]]
                pi, pj = pl, pr - 1
                a[pm], a[pj] = a[pj], a[pm]
                while True:
                    pi += 1
                    while v[a[pi]] < vp:
                        pi += 1
                    pj -= 1
                    while vp < v[a[pj]]:
                        pj -= 1
                    if pi >= pj:
                        break
                    a[pi], a[pj] = a[pj], a[pi]
                pk = pr - 1
                a[pi], a[pk] = a[pk], a[pi]
                depth -= 1
                if pi - pl < pr - pi:  # push the larger side, go on with the smaller
                    stack.append((pi + 1, pr, depth))
                    pr = pi - 1
                else:
                    stack.append((pl, pi - 1, depth))
                    pl = pi + 1
            for pi in range(pl + 1, pr + 1):  # insertion sort
                vi = a[pi]
                vp = v[vi]
                pj = pi
                while pj > pl and vp < v[a[pj - 1]]:
                    a[pj] = a[pj - 1]
                    pj -= 1
                a[pj] = vi
        if not stack:
            return a, used_heapsort
        pl, pr, depth = stack.pop()


def _heapsort(v: list[int], a: list[int], start: int, n: int) -> None:
    """numpy's ``aheapsort_`` on ``a[start:start + n]`` (1-based heap indices, as theirs)."""
    off = start - 1  # a[off + k] is their a[k], k = 1..n

    def sift(i: int, n: int, tmp: int) -> None:
        j = i << 1
        while j <= n:
            if j < n and v[a[off + j]] < v[a[off + j + 1]]:
                j += 1
            if v[tmp] < v[a[off + j]]:
                a[off + i] = a[off + j]
                i = j
                j += j
            else:
                break
        a[off + i] = tmp

    for k in range(n >> 1, 0, -1):
        sift(k, n, a[off + k])
    while n > 1:
        tmp = a[off + n]
        a[off + n] = a[off + 1]
        n -= 1
        sift(1, n, tmp)
