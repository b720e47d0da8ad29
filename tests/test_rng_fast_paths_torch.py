"""The faster float32 paths of ``ops/rng.py`` against torch 2.13, bit for bit with the stream
state after: ``randn``/``normal_`` (``ops/_normal_fill32.py``) around its 16-value blocks and
4096-row chunks, after earlier draws that leave the stream at odd offsets, and ``uniform_``'s
fused multiply-add without the double-rounding check when the float64 sum is exact
(``rng._sum_exact_in_float64``), with it otherwise."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from autodiag.ops import _avx_mathfun, rng

torch = pytest.importorskip("torch")

CHUNK = 16 * 4096  # values a chunk of the block path


def _same_bits(program, seed):
    torch.manual_seed(seed)
    want = [t.numpy() for t in program(torch)]
    state = torch.get_rng_state().numpy()
    import autodiag as ad

    ad.manual_seed(seed)
    got = [t.numpy() for t in program(ad)]
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.dtype == w.dtype and g.shape == w.shape, i
        bits = np.dtype(f"i{g.itemsize}")
        bad = np.flatnonzero(g.view(bits).ravel() != w.view(bits).ravel())
        assert not bad.size, f"draw {i}: {bad.size} differ, first at {bad[0]}"
    assert np.array_equal(ad.get_rng_state().numpy(), state)


@pytest.mark.parametrize("offset", [0, 1, 7, 623, 625])
@pytest.mark.parametrize("n", [16, 17, 31, CHUNK - 1, CHUNK, CHUNK + 1, CHUNK + 16, 2 * CHUNK + 5])
def test_randn_after_earlier_draws(n, offset):
    def program(m):
        before = [m.rand(offset)] if offset else []
        return before + [
            m.randn(n),
            m.empty(n).normal_(-0.5, 2.5),
            m.empty(n).normal_(0.0, 0.02),  # mean 0: a float32 product, not fma32
            m.randn(n, dtype=m.float16),
            m.rand(3),
        ]

    _same_bits(program, 11)


BOUNDS = [
    (-3.0, 2.0),
    (-0.1, 0.1),
    (0.1, 0.7),
    (-1 / 3, 1 / 3),  # kaiming/xavier-like bounds: 24 significant bits each
    (5.0, 5.5),
    (1e-30, 1e4),  # a sum spanning more than 53 bits: fma32's checked path
    (-1e-20, 3.0),
    (-2.5, 1e-9),
]


@pytest.mark.parametrize("bounds", BOUNDS)
@pytest.mark.parametrize("n", [1, 17, 65_535, 65_536, 65_537, 200_003])
def test_uniform_bounds(bounds, n):
    lo, hi = bounds
    _same_bits(
        lambda m: [
            m.empty(n).uniform_(lo, hi),
            m.empty(n, dtype=m.float16).uniform_(lo, hi),
            m.rand(n) * 0 + m.empty(n).uniform_(lo, hi),
        ],
        5,
    )


def test_exact_sum_decision_agrees_with_fma32():
    k = np.random.default_rng(0).integers(0, 1 << 24, size=1 << 20)
    u = (np.r_[k, 0, (1 << 24) - 1] * 2.0**-24).astype(np.float32)
    decided = {}
    for lo, hi in BOUNDS:
        lo, hi = np.float32(lo), np.float32(hi)
        decided[(float(lo), float(hi))] = rng._sum_exact_in_float64(hi - lo, lo)
        wide = np.multiply(u, hi - lo, dtype=np.float64) + lo
        if decided[(float(lo), float(hi))]:
            # exact: the float64 sum equals the exact one, so its rounding is the fma's
            assert np.array_equal(wide.astype(np.float32), _avx_mathfun.fma32(u, hi - lo, lo))
            assert np.array_equal(wide - lo, np.multiply(u, hi - lo, dtype=np.float64))
    assert not decided[(float(np.float32(1e-30)), float(np.float32(1e4)))]
    assert decided[(-3.0, 2.0)] and decided[(float(np.float32(-1 / 3)), float(np.float32(1 / 3)))]
    assert not rng._sum_exact_in_float64(np.float32(np.inf), np.float32(0))


@pytest.mark.parametrize("bounds", [(-1e-300, 3.0), (1e-30, 1e4), (-1e-20, 3.0), (-3.0, 2.0)])
def test_uniform_float64_with_a_tiny_bound(bounds):
    # u * (hi - lo) often lands exactly halfway between two doubles and the tiny bound
    # decides the rounding: the fused multiply-add's emulation must step toward it
    lo, hi = bounds
    _same_bits(lambda m: [m.empty(200_003, dtype=m.float64).uniform_(lo, hi)], 5)


def _round32(x: Fraction) -> np.float32:
    """``x`` rounded once to float32 (nearest, ties to even)."""
    f = np.float32(float(x))
    for g in (np.nextafter(f, np.float32(-np.inf)), np.nextafter(f, np.float32(np.inf))):
        dg, df = abs(Fraction(float(g)) - x), abs(Fraction(float(f)) - x)
        if dg < df or (dg == df and int(g.view(np.int32)) % 2 == 0):
            f = g
    return f


def test_fma_emulations_step_toward_a_tiny_addend():
    # a * b exactly halfway between two floats; c far below an ulp decides the direction
    a32 = (np.arange(1, 2001, dtype=np.float32) * 2 + 1) * np.float32(2.0**-12)
    b32 = np.float32(3.0)
    for c in (-1e-20, 1e-20, -1e-30, 0.0):
        got = _avx_mathfun.fma32(a32, b32, np.float32(c))
        want = [_round32(Fraction(float(a)) * 3 + Fraction(float(np.float32(c)))) for a in a32]
        assert np.array_equal(got, np.array(want, np.float32)), c
    a64 = (np.arange(1, 2001, dtype=np.float64) * 2 + 1) * 2.0**-41 + 1.0
    for c in (-1e-300, 1e-300, 0.0):
        got = rng.fma64(a64, 3.0, c)
        want = [float(Fraction(a) * 3 + Fraction(c)) for a in a64]  # float(): one rounding
        assert np.array_equal(got, np.array(want)), c
