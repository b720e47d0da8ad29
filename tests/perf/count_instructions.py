"""Instructions per op of the engine's forward, counted by callgrind (not a test; prints counts).

    python tests/perf/count_instructions.py [--ops 10000] [--rounds 3] [--backward]
    python tests/perf/count_instructions.py --mlp nn|raw [--steps 20]

The machine is too noisy to see a 2% change in ``bench_engine.py``'s ratios; an instruction count
is the same on every run, so it can. This runs the 10k-op chain of ``bench_engine.py`` (mul / add
/ sin cycling on shape (4,) float32, each forward followed by a backward, as in a training loop)
under ``valgrind --tool=callgrind`` and counts only the forward: each op runs inside
``functools.reduce``, and callgrind counts while that C function runs (``--toggle-collect``).
The count includes the cyclic GC collections the forward triggers; their share is printed too.
``--backward`` counts the backward instead (per node; the forward runs uncounted).
``--mlp nn`` / ``--mlp raw`` counts whole training steps of ``bench_mlp.py``'s MLP (``nn.Linear``
+ ``optim.SGD``, or raw tensors with a manual update) instead, per step, after 5 uncounted ones;
BLAS runs one thread (``OPENBLAS_NUM_THREADS=1``), so its share is the same on every run.
``--torch CONTESTANT`` counts ``bench_torch_engine.py``'s MLP training steps on real PyTorch
(one intra-op thread) under one of its contestants (``plain``, ``check``, ``observe(health)``,
...; issue 21's ``--engine torch`` overheads): the ratio of two counts is the overhead without
the machine's noise. PyTorch starts slowly under callgrind (a minute or more).

What it leaves out: memory and cache effects, which callgrind does not time. A change that cuts
instructions but not objects (or the reverse) still needs ``bench_engine.py`` to confirm it.
The reduce callback adds a Python call per op (and materialises one frame object per saving op,
since ``sys._getframe`` sees a new caller each time), the same for every revision compared.
Requires valgrind; autodiag only (PyTorch is not loaded) but with ``--torch``.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile


def _workload(ops: int, rounds: int, backward: bool) -> None:
    import functools
    import gc

    import autodiag as ad

    c = ad.full((4,), 1.0001, dtype=ad.float32)

    def step(y, i):
        k = i % 3
        if k == 0:
            return y * c
        if k == 1:
            return y + c
        return y.sin()

    for _ in range(rounds):
        x = ad.ones(4, dtype=ad.float32, requires_grad=True)
        gc.collect()
        if backward:
            y = x
            for i in range(ops):
                y = step(y, i)
            loss = y.sum()
            functools.reduce(lambda _, __: loss.backward(), (0,), None)  # counted
            del loss
        else:
            y = functools.reduce(step, range(ops), x)  # counted
            y.sum().backward()
        del x, y


def _mlp_workload(kind: str, steps: int) -> None:
    import functools

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    sys.modules["torch"] = None  # bench_mlp's optional import: autodiag alone is counted
    import bench_mlp

    import autodiag as ad

    make = bench_mlp.make_lib_step if kind == "nn" else bench_mlp.make_raw_step
    step = make(ad)
    for _ in range(5):
        step()
    functools.reduce(lambda _, __: step(), range(steps), None)  # counted


def _torch_workload(contestant: str, steps: int) -> None:
    import functools

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import bench_torch_engine as b
    import torch

    torch.set_num_threads(1)
    b.register()
    b.backward_trace.bind_seam()  # as bench_torch_engine.main does
    run = b.mlp(1)
    run()  # warm-up, uncounted
    with b.CONTESTANTS[contestant]():
        run()
        functools.reduce(lambda _, __: run(), range(steps), None)  # counted


def _inclusive(annotate_out: str, function: str) -> int:
    for line in annotate_out.splitlines():
        if line.rstrip().endswith("]") and f":{function} [" in line:
            return int(line.split()[0].replace(",", ""))
    return 0


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--ops", type=int, default=10_000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--backward", action="store_true", help="count the backward, not the forward")
    p.add_argument("--mlp", choices=("nn", "raw"), help="count MLP training steps instead")
    p.add_argument("--steps", type=int, default=20, help="MLP steps counted (with --mlp)")
    p.add_argument(
        "--torch",
        metavar="CONTESTANT",
        help="count MLP steps on PyTorch under a bench_torch_engine.py contestant",
    )
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.child:
        if a.torch:
            _torch_workload(a.torch, a.steps)
        elif a.mlp:
            _mlp_workload(a.mlp, a.steps)
        else:
            _workload(a.ops, a.rounds, a.backward)
        return
    if shutil.which("valgrind") is None or shutil.which("callgrind_annotate") is None:
        sys.exit("count_instructions.py needs valgrind (callgrind and callgrind_annotate)")
    # Bytecode compiled from source lays out memory differently from bytecode read from a .pyc
    # (a first run after an edit counted ~0.7% more): write the .pyc files first.
    subprocess.run([sys.executable, "-c", "import autodiag"], check=True)
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "callgrind.out")
        subprocess.run(
            [
                "valgrind",
                "--tool=callgrind",
                f"--callgrind-out-file={out}",
                "--toggle-collect=functools_reduce",
                sys.executable,
                __file__,
                "--child",
                "--ops",
                str(a.ops),
                "--rounds",
                str(a.rounds),
            ]
            + (["--backward"] if a.backward else [])
            + (["--mlp", a.mlp, "--steps", str(a.steps)] if a.mlp else [])
            + (["--torch", a.torch, "--steps", str(a.steps)] if a.torch else []),
            check=True,
            env={**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        text = subprocess.run(
            ["callgrind_annotate", "--inclusive=yes", out],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    m = re.search(r"^\s*([\d,]+)\s.*PROGRAM TOTALS", text, re.M)
    if m is None:
        sys.exit("callgrind_annotate printed no totals")
    total = int(m.group(1).replace(",", ""))
    gc_part = _inclusive(text, "gc_collect_main")
    if a.torch:
        print(
            f"MLP step on PyTorch under {a.torch!r}, {a.steps} steps: "
            f"{total / a.steps:,.0f} instructions/step (cyclic GC {gc_part / total:.1%} of them)"
        )
        return
    if a.mlp:
        print(
            f"MLP step ({a.mlp}), {a.steps} steps: {total / a.steps:,.0f} instructions/step "
            f"(cyclic GC {gc_part / total:.1%} of them)"
        )
        return
    n = a.ops * a.rounds
    what = "backward" if a.backward else "forward"
    print(
        f"{what}, {a.ops} ops x {a.rounds} rounds: {total / n:,.0f} instructions/op "
        f"(cyclic GC {gc_part / total:.1%} of them)"
    )


if __name__ == "__main__":
    main()
