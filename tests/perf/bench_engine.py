"""Engine benchmark against PyTorch in the same process (not a test; prints ratios).

    python tests/perf/bench_engine.py [--runs 7] [--big]

* chain: 10,000 elementwise ops (mul / add / sin cycling) on shape (4,) float32
* big (--big): a 1,000,000-op scalar chain
Reports forward µs/op and backward µs/node (median of runs), autodiag/torch ratios, the time the
cyclic GC spent during the runs, and graph memory per node (tracemalloc, autodiag only).
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
import tracemalloc

import autodiag as ad

try:
    import torch
except ImportError:  # pragma: no cover
    torch = None

_gc_time = [0.0]
_gc_start = [0.0]


def _gc_cb(phase, info):
    if phase == "start":
        _gc_start[0] = time.perf_counter()
    else:
        _gc_time[0] += time.perf_counter() - _gc_start[0]


def chain(lib, n: int, shape, dtype):
    x = lib.ones(*shape, dtype=dtype, requires_grad=True) if shape else lib.tensor(
        1.0, dtype=dtype, requires_grad=True)
    c = lib.full(shape, 1.0001, dtype=dtype) if shape else 1.0001
    t0 = time.perf_counter()
    y = x
    for i in range(n):
        k = i % 3
        if k == 0:
            y = y * c
        elif k == 1:
            y = y + c
        else:
            y = y.sin()
    t1 = time.perf_counter()
    (y.sum() if shape else y).backward()
    t2 = time.perf_counter()
    return (t1 - t0) / n * 1e6, (t2 - t1) / n * 1e6


def measure(lib, n, shape, dtype, runs):
    fw, bw = [], []
    _gc_time[0] = 0.0
    for _ in range(runs):
        f, b = chain(lib, n, shape, dtype)
        fw.append(f)
        bw.append(b)
    return statistics.median(fw), statistics.median(bw), _gc_time[0]


def graph_bytes_per_node(n: int) -> float:
    gc.collect()
    tracemalloc.start()
    x = ad.ones(4, requires_grad=True)
    c = ad.full((4,), 1.0001)
    before = tracemalloc.get_traced_memory()[0]
    y = x
    for i in range(n):
        k = i % 3
        y = y * c if k == 0 else (y + c if k == 1 else y.sin())
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    del y
    return (after - before) / n


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--runs", type=int, default=7)
    p.add_argument("--big", action="store_true", help="also the 1,000,000-op scalar chain")
    a = p.parse_args()
    gc.callbacks.append(_gc_cb)
    if torch is not None:
        torch.set_num_threads(1)
    cases = [("10k ops, (4,) float32", 10_000, (4,), "float32", a.runs)]
    if a.big:
        cases.append(("1e6 ops, scalar float32", 1_000_000, (), "float32", max(3, a.runs // 2)))
    print(f"{'case':28s} {'lib':8s} {'fwd us/op':>10s} {'bwd us/node':>12s} {'gc s':>7s}")
    for name, n, shape, dt, runs in cases:
        res = {}
        for lib_name, lib in (("autodiag", ad), ("torch", torch)):
            if lib is None:
                continue
            f, b, g = measure(lib, n, shape, getattr(lib, dt), runs)
            res[lib_name] = (f, b)
            print(f"{name:28s} {lib_name:8s} {f:10.2f} {b:12.2f} {g:7.3f}")
        if "torch" in res:
            (af, ab), (tf, tb) = res["autodiag"], res["torch"]
            print(f"{name:28s} {'ratio':8s} {af / tf:9.2f}x {ab / tb:11.2f}x")
    print(f"graph memory: {graph_bytes_per_node(10_000):.0f} bytes/node (autodiag, tracemalloc)")


if __name__ == "__main__":
    main()
