"""Every CLI command on a huge chain, against the plain run of the same script (not a test;
prints wall time and peak memory ratios).

    python tests/perf/bench_chain_cli.py [--n 1000000] [--repeat 3] [--only graph,trace ...]

Writes a script that builds an ``--n``-op chain of cheap ops (multiply and add, alternating) on
autodiag's engine and calls ``backward()``, then runs, one at a time, as subprocesses:
``python script.py`` (the plain run) and each command on it, output to a file in the temporary
folder. Each child's wall time and peak RSS (``os.wait4``'s ``ru_maxrss``) is measured; a
figure is the median of ``--repeat`` runs, and a ratio is the command's median over the plain
run's median.

Target (issue 18): every command at most 3x the plain run's time and 2x its peak memory on the
1,000,000-op chain.

MEMORY: run one benchmark at a time on a shared machine. Before ``trace`` streamed and truncated,
``trace -f json`` on 1e6 took 15 GB: use ``--n 100000`` to measure an old tree.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

CHAIN = """\
import autodiag as torch
x = torch.ones(1, requires_grad=True)
y = x
for i in range({n}):
    y = y * 1.0000001 if i % 2 else y + 1e-7
y.sum().backward()
"""

# name -> the command's arguments after ``python -m autodiag`` (SCRIPT and OUT filled in)
COMMANDS = {
    "graph": ["graph", "{script}", "-o", "{out}"],
    "graph -f json": ["graph", "{script}", "-f", "json", "-o", "{out}"],
    "graph -f dot": ["graph", "{script}", "-f", "dot", "-o", "{out}"],
    # Mermaid stops at 400 nodes unless told (cli/graph.py): the whole graph, as DOT's
    "graph -f mermaid": [
        "graph",
        "{script}",
        "-f",
        "mermaid",
        "--max-nodes",
        "2000000",
        "-o",
        "{out}",
    ],
    "trace": ["trace", "{script}", "-o", "{out}"],
    "trace -f json": ["trace", "{script}", "-f", "json", "-o", "{out}"],
    "anomaly": ["anomaly", "{script}", "-o", "{out}"],
    "inplace": ["inplace", "{script}", "-o", "{out}"],
    "leaks": ["leaks", "{script}", "-o", "{out}"],
    "check": ["check", "{script}", "-o", "{out}"],
}


def measure(argv: list[str], env: dict) -> tuple[float, float, int, float]:
    """Run ``argv``; (wall seconds, peak RSS in MB, exit code, CPU seconds) of that child
    alone. CPU time (user + system) is less disturbed by other work on a shared machine."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    # wait4 reaps this child and returns its own rusage (RUSAGE_CHILDREN would be the maximum
    # over every child so far)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode(errors="replace")
    proc.stderr.close()
    if proc.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(argv)} failed ({proc.returncode}):\n{err[-2000:]}")
    cpu = usage.ru_utime + usage.ru_stime
    return wall, usage.ru_maxrss / 1024, proc.returncode, cpu  # ru_maxrss: KiB on Linux


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=1_000_000, help="ops in the chain")
    p.add_argument("--repeat", type=int, default=3, help="runs per command (median)")
    p.add_argument(
        "--only",
        default=None,
        help="comma-separated command names (default: all): " + ", ".join(COMMANDS),
    )
    a = p.parse_args()
    names = list(COMMANDS) if a.only is None else [s.strip() for s in a.only.split(",")]
    for name in names:
        if name not in COMMANDS:
            raise SystemExit(f"unknown command {name!r}; choose from {', '.join(COMMANDS)}")
    env = dict(os.environ, COLUMNS="160")
    with tempfile.TemporaryDirectory(prefix="bench-chain-") as tmp:
        # compiled bytecode is cached (in the temporary folder, not beside the sources) as in
        # an ordinary install, even where PYTHONDONTWRITEBYTECODE is set; a warm-up run fills it
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = os.path.join(tmp, "pycache")
        script = os.path.join(tmp, "chain.py")
        with open(script, "w") as f:
            f.write(CHAIN.format(n=a.n))
        out = os.path.join(tmp, "report.out")

        def runs(argv):
            got = [measure(argv, env) for _ in range(a.repeat)]
            return (
                statistics.median(g[0] for g in got),
                statistics.median(g[1] for g in got),
                got[-1][2],
                statistics.median(g[3] for g in got),
            )

        warm = os.path.join(tmp, "warm.py")
        with open(warm, "w") as f:
            f.write(CHAIN.format(n=10))
        measure([sys.executable, "-m", "autodiag", "check", warm, "-o", out], env)
        plain_t, plain_m, _, plain_c = runs([sys.executable, script])
        print(f"{a.n:,}-op chain, median of {a.repeat} (python {sys.version.split()[0]})")
        print(
            f"{'command':<16} {'time s':>8} {'cpu s':>7} {'peak MB':>8} {'time x':>7} "
            f"{'cpu x':>6} {'mem x':>6} {'exit':>4} {'out MB':>7}"
        )
        print(
            f"{'python script':<16} {plain_t:8.2f} {plain_c:7.2f} {plain_m:8.0f} {1:7.2f} "
            f"{1:6.2f} {1:6.2f}"
        )
        for name in names:
            argv = [sys.executable, "-m", "autodiag"] + [
                s.format(script=script, out=out) for s in COMMANDS[name]
            ]
            t, m, code, c = runs(argv)
            size = os.path.getsize(out) / 1e6 if os.path.exists(out) else 0.0
            print(
                f"{name:<16} {t:8.2f} {c:7.2f} {m:8.0f} {t / plain_t:7.2f} {c / plain_c:6.2f} "
                f"{m / plain_m:6.2f} {code:>4} {size:7.1f}",
                flush=True,
            )
            if os.path.exists(out):
                os.unlink(out)


if __name__ == "__main__":
    main()
