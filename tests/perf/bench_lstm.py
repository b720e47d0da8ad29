"""LSTM language-model training-step benchmark: autodiag vs PyTorch in the same process.

    python tests/perf/bench_lstm.py [--runs 7] [--steps 20] [--threads N] [--profile]

Model: Embedding(65, 64) -> LSTM(64, 64, 1 layer) -> Linear(64, 65); sequence 35, batch 20,
float32, cross-entropy, SGD(lr=0.5); truncated BPTT (the hidden state carried over, detached).
One step = zero_grad + forward + backward + optimizer step. autodiag starts from torch's weights,
so the two compute the same thing (the first-step losses are printed). Each run times ``--steps``
steps after a warm-up; runs are interleaved and the median is reported in ms/step with the ratio
autodiag/torch. Note that torch's CPU LSTM is one fused oneDNN kernel per layer, autodiag's is
~12 recorded ops per time step.

Threads: ``--threads N`` (default: all cores) sets torch's intra-op threads and, before numpy is
imported, the BLAS threads numpy (hence autodiag) uses, unless already set in the environment.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import sys


def _early_threads() -> int:
    n = os.cpu_count() or 1
    for i, arg in enumerate(sys.argv):
        if arg == "--threads" and i + 1 < len(sys.argv):
            n = int(sys.argv[i + 1])
        elif arg.startswith("--threads="):
            n = int(arg.split("=", 1)[1])
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, str(n))
    return n


_THREADS = _early_threads()

import numpy as np  # noqa: E402

import autodiag as ad  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_mlp import measure  # noqa: E402

try:
    import torch
except ImportError:  # pragma: no cover
    torch = None

VOCAB, EMB, HIDDEN, SEQ, BATCH, LR = 65, 64, 64, 35, 20, 0.5


def make_model(lib):
    nn = lib.nn

    class LM(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(VOCAB, EMB)
            self.lstm = nn.LSTM(EMB, HIDDEN)
            self.head = nn.Linear(HIDDEN, VOCAB)

        def forward(self, x, hidden):
            out, hidden = self.lstm(self.embed(x), hidden)
            return self.head(out).reshape(-1, VOCAB), hidden

    return LM()


def make_step(lib, state=None):
    lib.manual_seed(0)
    model = make_model(lib)
    if state is not None:
        model.load_state_dict({k: lib.tensor(v) for k, v in state.items()})
    opt = lib.optim.SGD(model.parameters(), lr=LR)
    loss_fn = lib.nn.CrossEntropyLoss()
    rng = np.random.default_rng(0)
    data = lib.tensor(rng.integers(0, VOCAB, (SEQ + 1, BATCH)))
    x, y = data[:-1], data[1:].reshape(-1)
    hidden = [
        (lib.zeros(1, BATCH, HIDDEN), lib.zeros(1, BATCH, HIDDEN)),
    ]

    def step():
        opt.zero_grad()
        h = tuple(t.detach() for t in hidden[0])
        logits, hidden[0] = model(x, h)
        loss = loss_fn(logits, y)
        loss.backward()
        opt.step()
        return loss

    return model, step


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--runs", type=int, default=7)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--threads", type=int, default=_THREADS)
    p.add_argument("--profile", action="store_true")
    a = p.parse_args()
    print(
        f"LSTM LM: vocab {VOCAB}, emb {EMB}, hidden {HIDDEN}, 1 layer, seq {SEQ}, batch "
        f"{BATCH}, SGD; {a.runs} runs x {a.steps} steps"
    )
    steps = {}
    state = None
    if torch is not None:
        torch.set_num_threads(a.threads)
        tmodel, steps["torch"] = make_step(torch)
        state = {k: v.detach().numpy().copy() for k, v in tmodel.state_dict().items()}
    _, steps["autodiag"] = make_step(ad, state)
    print(
        f"cores: {os.cpu_count()}; torch threads: "
        f"{torch.get_num_threads() if torch is not None else '-'}; "
        f"OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS')}; load average: "
        f"{os.getloadavg()[0]:.2f}"
    )
    first = {k: float(s().detach()) for k, s in steps.items()}
    print("first-step loss: " + ", ".join(f"{k} {v:.6f}" for k, v in first.items()))
    res = measure(steps, a.steps, a.runs)
    for name, ms in res.items():
        print(f"{name:9s} {ms:8.3f} ms/step")
    if "torch" in res:
        print(f"ratio autodiag/torch: {res['autodiag'] / res['torch']:.2f}x")
    if a.profile:
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(50):
            steps["autodiag"]()
        prof.disable()
        pstats.Stats(prof).sort_stats("tottime").print_stats(25)


if __name__ == "__main__":
    main()
