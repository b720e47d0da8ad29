"""Engine benchmark against PyTorch in the same process (not a test; prints ratios).

    python tests/perf/bench_engine.py [--runs 7] [--big] [--loop] [--frozen]

* chain: 10,000 elementwise ops (mul / add / sin cycling) on shape (4,) float32
* big (--big): a 1,000,000-op scalar chain
Reports forward µs/op and backward µs/node, as the median of runs and as the mean over runs
(what a user's loop pays: the cyclic GC's collections land in some rounds only, so the median
hides them), autodiag/torch ratios (median of the per-round ratios, and ratio of the means; the
two libraries alternate within a round), the time the cyclic GC spent during the forward passes
(and its share of them), and graph memory per node (tracemalloc, autodiag only). Each run starts
after a full collection, so the collections during a run are that run's own cost; with
``--loop`` the rounds follow each other as in a user's training loop (no collection between
them: the collections the previous rounds made due land where they land). ``--frozen`` freezes
the heap first (``gc.freeze()``), as the CLI does for its run of a target (NOTE [Frozen heap]
in autodiag/target).
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


def _collect_unmeasured() -> None:
    """Each run starts with nothing pending, so the collections it triggers are its own cost
    (not the previous run's); this collection itself is not counted."""
    gc.callbacks.remove(_gc_cb)
    gc.collect()
    gc.callbacks.append(_gc_cb)


def chain(lib, n: int, shape, dtype):
    x = (
        lib.ones(*shape, dtype=dtype, requires_grad=True)
        if shape
        else lib.tensor(1.0, dtype=dtype, requires_grad=True)
    )
    c = lib.full(shape, 1.0001, dtype=dtype) if shape else 1.0001
    g0 = _gc_time[0]
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
    g1 = _gc_time[0]
    (y.sum() if shape else y).backward()
    t2 = time.perf_counter()
    return (t1 - t0) / n * 1e6, (t2 - t1) / n * 1e6, g1 - g0, t1 - t0


def measure(libs: dict, n, shape, dtype_name, runs, loop: bool = False) -> dict:
    """Per library: median forward µs/op, median backward µs/node, GC seconds during its runs,
    and the per-round (forward, backward) times. The libraries alternate within each round, so
    a noisy stretch of the machine falls on both."""
    out = {name: {"fw": [], "bw": [], "gc": 0.0, "fw_gc": 0.0, "fw_s": 0.0} for name in libs}
    for _ in range(runs):
        for name, lib in libs.items():
            if not loop:
                _collect_unmeasured()
            before = _gc_time[0]
            f, b, fw_gc, fw_s = chain(lib, n, shape, getattr(lib, dtype_name))
            out[name]["fw"].append(f)
            out[name]["bw"].append(b)
            out[name]["gc"] += _gc_time[0] - before
            out[name]["fw_gc"] += fw_gc
            out[name]["fw_s"] += fw_s
    return out


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
    p.add_argument("--loop", action="store_true", help="no collection between rounds")
    p.add_argument("--frozen", action="store_true", help="gc.freeze() first, as the CLI does")
    a = p.parse_args()
    gc.callbacks.append(_gc_cb)
    if a.frozen:
        gc.freeze()
    if torch is not None:
        torch.set_num_threads(1)
    cases = [("10k ops, (4,) float32", 10_000, (4,), "float32", a.runs)]
    if a.big:
        cases.append(("1e6 ops, scalar float32", 1_000_000, (), "float32", max(3, a.runs // 2)))
    print(
        f"{'case':28s} {'lib':8s} {'fwd us/op':>10s} {'fwd mean':>9s} {'bwd us/node':>12s} "
        f"{'bwd mean':>9s} {'gc s':>7s} {'gc % fwd':>9s}"
    )
    libs = {"autodiag": ad, **({"torch": torch} if torch is not None else {})}
    for name, n, shape, dt, runs in cases:
        res = measure(libs, n, shape, dt, runs, a.loop)
        for lib_name, r in res.items():
            print(
                f"{name:28s} {lib_name:8s} {statistics.median(r['fw']):10.2f} "
                f"{statistics.fmean(r['fw']):9.2f} {statistics.median(r['bw']):12.2f} "
                f"{statistics.fmean(r['bw']):9.2f} {r['gc']:7.3f} "
                f"{100 * r['fw_gc'] / r['fw_s']:8.0f}%"
            )
        if "torch" in res:
            a_, t_ = res["autodiag"], res["torch"]
            fr = statistics.median(x / y for x, y in zip(a_["fw"], t_["fw"]))
            br = statistics.median(x / y for x, y in zip(a_["bw"], t_["bw"]))
            fm = statistics.fmean(a_["fw"]) / statistics.fmean(t_["fw"])
            bm = statistics.fmean(a_["bw"]) / statistics.fmean(t_["bw"])
            print(f"{name:28s} {'ratio':8s} {fr:9.2f}x {fm:8.2f}x {br:11.2f}x {bm:8.2f}x")
    print(f"graph memory: {graph_bytes_per_node(10_000):.0f} bytes/node (autodiag, tracemalloc)")


if __name__ == "__main__":
    main()
