"""``randperm`` from n = 214748364 on: PyTorch's inside-out Fisher-Yates on 64-bit draws
(``TensorFactories.cpp``), checked at small n against that loop written out in Python (a
torch check at the real size needs ~12 GB here, with torch's 1.7 GB: not run)."""

from __future__ import annotations

import numpy as np
import pytest

import autodiag as ad
from autodiag.ops import rng


def _inside_out_loop(stream: rng.Stream, n: int) -> np.ndarray:
    """PyTorch's loop, step by step."""
    r = np.zeros(n, dtype=np.int64)
    draws = stream.u64(n)
    for i in range(n):
        z = int(draws[i]) % (i + 1)
        r[i] = i
        r[i] = r[z]
        r[z] = i
    return r


@pytest.mark.parametrize("n", [1, 2, 3, 10, 100, 1000, 5003])
@pytest.mark.parametrize("seed", [0, 1, 2**40 + 7])
def test_inside_out_equals_the_loop(n, seed, monkeypatch):
    monkeypatch.setattr(rng, "_INSIDE_OUT_CHUNK", 64)  # several chunks of draws
    want_stream = rng.Stream(seed)
    want_stream.u32(3)  # an odd offset first
    want = _inside_out_loop(want_stream, n)
    stream = rng.Stream(seed)
    stream.u32(3)
    got = rng._randperm_inside_out(stream, n)
    assert np.array_equal(got, want)
    assert np.array_equal(stream.get_state(), want_stream.get_state())


def test_randperm_switches_at_pytorchs_threshold(monkeypatch):
    # the threshold lowered to 50: randperm(n >= 50) takes the 64-bit inside-out path
    monkeypatch.setattr(rng, "_RANDPERM_SMALL", 50)
    for n in (49, 50, 51):
        ad.manual_seed(3)
        got = ad.randperm(n).numpy()
        stream = rng.Stream(3)
        if n >= 50:
            want = _inside_out_loop(stream, n)
        else:
            want = rng._swaps_to_permutation(
                np.arange(n - 1) + (stream.u32(n - 1) % (n - np.arange(n - 1))).astype(np.int64),
                n,
            )
        assert np.array_equal(got, want), n
        assert sorted(got) == list(range(n))
