"""PyTorch's CPU random stream: a 32-bit Mersenne Twister and ATen's sampling transforms.

``Stream`` is the state of one generator (the global one ``torch.manual_seed`` seeds, or a
``torch.Generator``'s): an mt19937 (numpy's ``MT19937`` draws the raw 32-bit words, in C),
seeded as PyTorch seeds it (``init_genrand(seed & 0xffffffff)``), plus PyTorch's cached second
Box-Muller normal. The functions below turn its words into samples the way ATen's CPU kernels
do (``DistributionsHelper.h``, ``TransformationHelper.h``, ``cpu/DistributionTemplates.h``,
``TensorFactories.cpp``, ``cpu/MultinomialKernel.cpp``), vectorised, so a seeded program draws
PyTorch's numbers. ``tests/test_rng_torch.py`` checks each against torch 2.13 bit for bit.

NOTE [Draw order]: ATen fills a tensor element by element in memory order, each element taking
one 32-bit word (float32 and narrower: ``random()``) or two (float64, int64 ranges of 2**32 or
more: ``random64()`` = first word << 32 | second word). ``fill`` lays values drawn in that
order into an array of any strides.

NOTE [One draw at a time]: PyTorch's generator is process-global, and each op draws under the
generator's mutex: two threads drawing at once get disjoint runs of the stream. Here too: every
sampler below holds its stream's lock (``_atomic``; re-entrant, as ``normal`` draws through
``uniform01``) for the whole draw, and so do ``get_state``/``set_state``/``manual_seed``. Without
it, the cached Box-Muller normal (``take_normal``/``keep_normal``) was handed to two threads at
once and the stream's words and its cache could disagree (tests/test_torch_engine_threads.py).

NOTE [FMA]: the AVX2 kernels are compiled with FMA contraction: ``x * (to - from) + from`` and
``z * std + mean`` are fused multiply-adds in PyTorch, so they are here too (``fma32``,
``fma64``): rounding twice would differ in the last bit about once in three draws.
"""

from __future__ import annotations

import functools
import math
import os
import threading

import numpy as np

from autodiag.ops import _libm as libm
from autodiag.ops._avx_mathfun import fma32
from autodiag.ops._normal_fill32 import box_muller_uniform16

__all__ = ["STATE_BYTES", "Stream"]

_MASK32 = 0xFFFFFFFF
_MASK64 = (1 << 64) - 1
_N = 624  # mt19937's state words
# sizeof(CPUGeneratorImplState): the byte layout of torch.get_rng_state()
STATE_BYTES = 5056
# PyTorch's randperm switches to 64-bit draws from this n on (TensorFactories.cpp)
_RANDPERM_SMALL = _MASK32 // 20


def _init_genrand(seed32: int) -> np.ndarray:
    """mt19937's seeding: each word from the one before (a 624-step recurrence)."""
    key = [seed32]
    for i in range(1, _N):
        prev = key[-1]
        key.append((1812433253 * (prev ^ (prev >> 30)) + i) & _MASK32)
    return np.array(key, dtype=np.uint32)


class Stream:
    """One generator's state: mt19937 words, the initial seed, the cached normal."""

    __slots__ = ("_bg", "seed", "next_double_normal", "next_float_normal", "_fresh", "lock")

    def __init__(self, seed: int | None = None) -> None:
        self.lock = threading.RLock()  # NOTE [One draw at a time]
        self._bg = np.random.MT19937(0)
        self.manual_seed(int.from_bytes(os.urandom(8), "little") if seed is None else seed)

    def __getstate__(self) -> dict:  # copy and pickle: a lock is not copied, a new one is made
        return {k: getattr(self, k) for k in self.__slots__ if k != "lock"}

    def __setstate__(self, state: dict) -> None:
        self.lock = threading.RLock()
        for k, v in state.items():
            setattr(self, k, v)

    def manual_seed(self, seed: int) -> Stream:
        with self.lock:
            return self._seeded(seed)

    def _seeded(self, seed: int) -> Stream:
        self.seed = int(seed) & _MASK64
        self._bg.state = {
            "bit_generator": "MT19937",
            "state": {"key": _init_genrand(self.seed & _MASK32), "pos": _N},
        }
        self.next_double_normal = None
        self.next_float_normal = None
        self._fresh = True  # no word drawn since seeding (get_state's ``next`` is 0, not 624)
        return self

    # NOTE: samplers change a stream only through its methods: vmap's guard (func/_vmap.py)
    # stands in for the global stream and forwards method lookups, not attribute writes.

    def take_normal(self) -> float | None:
        """The cached second normal of the last Box-Muller pair, consumed (or None)."""
        cached, self.next_double_normal = self.next_double_normal, None
        return cached

    def keep_normal(self, value: float) -> None:
        self.next_double_normal = value

    # --- raw words -------------------------------------------------------------------------

    def u32(self, n: int) -> np.ndarray:
        """The next ``n`` 32-bit words (``random()``), as uint64."""
        if n <= 0:
            return np.zeros(0, dtype=np.uint64)
        self._fresh = False
        return self._bg.random_raw(int(n))

    def u64(self, n: int) -> np.ndarray:
        """The next ``n`` 64-bit draws (``random64()``: two words, the first high)."""
        w = self.u32(2 * n).reshape(-1, 2)
        return (w[:, 0] << np.uint64(32)) | w[:, 1]

    # --- torch.get_rng_state() / set_rng_state() layout --------------------------------------

    def get_state(self) -> np.ndarray:
        """PyTorch's ``CPUGeneratorImplState`` bytes (5056, little-endian)."""
        with self.lock:
            return self._state()

    def _state(self) -> np.ndarray:
        st = self._bg.state["state"]
        pos = int(st["pos"])
        raw = np.zeros(STATE_BYTES, dtype=np.uint8)
        head = np.array(
            [self.seed, (625 - pos) | (1 << 32), 0 if self._fresh and pos == _N else pos],
            dtype=np.uint64,
        )  # initial seed; left (int) and seeded (int); next
        raw[:24] = head.view(np.uint8)
        raw[24:5016] = st["key"].astype(np.uint64).view(np.uint8)
        if self.next_double_normal is not None:
            raw[5024:5032] = np.array([self.next_double_normal], np.float64).view(np.uint8)
            raw[5040] = 1
        if self.next_float_normal is not None:
            raw[5048:5052] = np.array([self.next_float_normal], np.float32).view(np.uint8)
            raw[5052] = 1
        return raw

    @classmethod
    def from_state(cls, raw: np.ndarray) -> Stream:
        new = cls(0)
        new.set_state(raw)
        return new

    def set_state(self, raw: np.ndarray) -> None:
        with self.lock:
            self._set_state(raw)

    def _set_state(self, raw: np.ndarray) -> None:
        seed, left_seeded, nxt = (int(v) for v in raw[:24].view(np.uint64))
        left, seeded = left_seeded & _MASK32, left_seeded >> 32
        words = raw[24:5016].view(np.uint64)
        consistent = nxt == 625 - left or (left == 1 and nxt == 0)
        if not seeded or not 0 < left <= _N or nxt > _N:  # PyTorch's mt19937::is_valid
            raise RuntimeError("Invalid mt19937 state")
        if not consistent:
            raise NotImplementedError(
                f"set_rng_state: an mt19937 state whose position fields disagree "
                f"(left={left}, next={nxt}) is not supported by autodiag"
            )
        self._bg.state = {
            "bit_generator": "MT19937",
            "state": {"key": words.astype(np.uint32), "pos": 625 - left},  # truncated, as torch
        }
        self.seed = seed
        self._fresh = nxt == 0
        self.next_double_normal = (
            float(raw[5024:5032].view(np.float64)[0]) if raw[5040:5044].any() else None
        )
        self.next_float_normal = float(raw[5048:5052].view(np.float32)[0]) if raw[5052] else None

    # --- numpy-style draws for code that wants plain arrays ----------------------------------

    def random(self, size=None) -> np.ndarray:
        """Uniform float64 in [0, 1), as ``torch.rand(size, dtype=torch.float64)`` draws them."""
        shape = () if size is None else tuple(np.atleast_1d(size)) if np.ndim(size) else (size,)
        return uniform(self, int(np.prod(shape, dtype=np.int64)), np.dtype(np.float64)).reshape(
            shape
        )

    def standard_normal(self, size=None) -> np.ndarray:
        """Standard normals (float64), as ``torch.randn(size, dtype=torch.float64)``."""
        shape = () if size is None else tuple(np.atleast_1d(size)) if np.ndim(size) else (size,)
        n = int(np.prod(shape, dtype=np.int64))
        return normal(self, n, np.dtype(np.float64), 0.0, 1.0).reshape(shape)


# ---------------------------------------------------------------------------------------------
# layout
# ---------------------------------------------------------------------------------------------


def _atomic(sampler):
    """``sampler(stream, ...)`` holding the stream's lock (NOTE [One draw at a time])."""

    @functools.wraps(sampler)
    def draw(stream, *args, **kwargs):
        with stream.lock:
            return sampler(stream, *args, **kwargs)

    return draw


def memory_order(arr: np.ndarray) -> tuple:
    """The axes of ``arr`` from outermost to innermost in memory (NOTE [Draw order])."""
    strides = [abs(s) if n > 1 else 0 for s, n in zip(arr.strides, arr.shape)]
    return tuple(sorted(range(arr.ndim), key=lambda a: -strides[a]))


def fill(dst: np.ndarray, values: np.ndarray) -> None:
    """Write ``values`` (flat, in draw order) into ``dst`` in memory order."""
    if dst.flags.c_contiguous:
        dst[...] = values.reshape(dst.shape)
        return
    order = memory_order(dst)
    dst.transpose(order)[...] = values.reshape([dst.shape[a] for a in order])


def empty_like(arr: np.ndarray, dtype=None) -> np.ndarray:
    """``at::empty_like``'s layout: ``arr``'s axis order when its elements are dense in
    memory (a transposed tensor), else C order (an expanded or sliced one)."""
    dtype = arr.dtype if dtype is None else dtype
    order = memory_order(arr)
    dense = np.empty([arr.shape[a] for a in order], dtype=arr.dtype)
    expected = dict(zip(order, dense.strides))
    if all(arr.strides[a] == expected[a] or arr.shape[a] <= 1 for a in range(arr.ndim)):
        return np.empty(dense.shape, dtype=dtype).transpose(np.argsort(order))
    return np.empty(arr.shape, dtype=dtype)


def in_memory_order(layout: np.ndarray, values: np.ndarray) -> np.ndarray:
    """``values`` (shaped like ``layout``) flat, in ``layout``'s memory order: how ATen pairs
    an input with the draws for an output laid out as ``layout``."""
    return values.transpose(memory_order(layout)).ravel()


# ---------------------------------------------------------------------------------------------
# fused multiply-add in float64 (NOTE [FMA])
# ---------------------------------------------------------------------------------------------

_SPLIT = 134217729.0  # 2**27 + 1: Dekker's split


def _two_prod(a, b):
    """(p, e) with p + e == a * b exactly (Dekker)."""
    p = a * b
    t = _SPLIT * a
    ah = t - (t - a)
    al = a - ah
    t = _SPLIT * b
    bh = t - (t - b)
    bl = b - bh
    e = ((ah * bh - p) + ah * bl + al * bh) + al * bl
    return p, e


def _two_sum(a, b):
    s = a + b
    bv = s - a
    return s, (a - (s - bv)) + (b - bv)


def fma64(a, b, c) -> np.ndarray:
    """``a * b + c`` in float64 rounded once (Boldo-Melquiond: the low parts are added with
    rounding to odd, which makes the final rounding correct)."""
    a, b, c = (np.asarray(v, np.float64) for v in (a, b, c))
    if b.ndim == 0 and c.ndim == 0 and b == 1 and c == 0:
        return a + 0.0  # a * 1 + 0 is a (a -0 becomes +0)
    ph, pl = _two_prod(a, b)
    sh, sl = _two_sum(c, ph)
    v, ve = _two_sum(sl, pl)
    # round v to odd: inexact and even -> the neighbour on the side of the error
    even = (v.view(np.int64) & 1) == 0
    # (toward the error's side: ``v + ve`` would round back to v, ve being below half its ulp)
    v = np.where((ve != 0) & even, np.nextafter(v, np.copysign(np.inf, ve)), v)
    out = sh + v
    # an infinite or NaN product (huge bounds) has no low part: the plain expression is it
    return np.where(np.isfinite(out), out, a * b + c)


# ---------------------------------------------------------------------------------------------
# uniform
# ---------------------------------------------------------------------------------------------

# mantissa digits of each float dtype: uniform_real keeps that many low bits of a draw
_DIGITS = {np.dtype(np.float64): 53, np.dtype(np.float32): 24, np.dtype(np.float16): 11}


def _check_float(dtype: np.dtype, op: str) -> None:
    if dtype not in _DIGITS:
        raise NotImplementedError(f"autodiag: {op} does not support dtype {dtype}")


@_atomic
def uniform01(stream: Stream, n: int, dtype: np.dtype) -> np.ndarray:
    """``uniform_real_distribution(0, 1)``: float32/16 from one word, float64 from two."""
    dtype = np.dtype(dtype)
    _check_float(dtype, "uniform_")
    digits = _DIGITS[dtype]
    if digits == 53:
        bits = stream.u64(n) & np.uint64((1 << 53) - 1)
        out = bits.view(np.int64).astype(np.float64)  # int64 converts faster than uint64
        out *= 2.0**-53
        return out
    # dist_acctype is float32: the low 24 bits of a word, converted from int32 (SIMD in
    # numpy, unlike uint64 to float32)
    bits = stream.u32(n).astype(np.uint32)
    bits &= np.uint32((1 << digits) - 1)
    out = bits.view(np.int32).astype(np.float32)
    out *= np.float32(2.0**-digits)
    return out


def _low_bit(v: float) -> int:
    """The exponent of the lowest set bit of a nonzero finite float."""
    num, den = abs(v).as_integer_ratio()
    return (num & -num).bit_length() - den.bit_length()


def _sum_exact_in_float64(scale: np.float32, offset: np.float32) -> bool:
    """Whether ``u * scale + offset`` is exact in float64 for every float32 uniform ``u =
    k * 2**-24`` (k < 2**24): each term is a multiple of 2**low and the sum is below 2**top
    in magnitude, so it has at most ``top - low`` significant bits; 53 fit in a float64.
    Then rounding that sum to float32 is the fused multiply-add's single rounding, with no
    double-rounding case to look for (``fma32``'s check). True for most bounds: for
    ``uniform_(-b, b)`` the sum spans 49 bits."""
    scale, offset = float(scale), float(offset)
    if not (math.isfinite(scale) and math.isfinite(offset)):
        return False
    lows = [_low_bit(scale) - 24] if scale else []
    lows += [_low_bit(offset)] if offset else []
    if not lows:
        return True
    top = math.frexp(abs(scale) + abs(offset))[1] + 1  # a bit of margin over the sum's bound
    return top - min(lows) <= 53


# values a chunk of uniform_'s float32 fused multiply-add: 1e6 at once is ~3x slower (measured)
_UNIFORM_CHUNK = 65536


@_atomic
def uniform(stream: Stream, n: int, dtype: np.dtype, low=0.0, high=1.0) -> np.ndarray:
    """``uniform_(low, high)``: ``x * (high - low) + low`` fused, in the dtype's precision; a
    value that rounds up to ``high`` becomes ``low`` (the range is [low, high), as torch's).

    float16 is float32's draw (24 bits, float32 bounds) rounded to half, as torch 2.13 does:
    ``rand(..., dtype=float16)`` is ``rand(...)``'s numbers in half."""
    dtype = np.dtype(dtype)
    _check_float(dtype, "uniform_")
    if dtype == np.float64:
        out = fma64(uniform01(stream, n, dtype), float(high) - float(low), float(low))
    else:
        out = uniform01(stream, n, np.dtype(np.float32))
        lo, hi = np.float32(low), np.float32(high)
        if lo == 0 and hi == 1:  # x * 1 + 0 is x
            pass
        elif _sum_exact_in_float64(hi - lo, lo):  # one rounding, to float32: the fma's
            wide = np.multiply(out, hi - lo, dtype=np.float64)
            wide += lo
            out = wide.astype(np.float32)
        else:
            for start in range(0, n, _UNIFORM_CHUNK):  # fma32's float64 temporaries in cache
                part = out[start : start + _UNIFORM_CHUNK]
                part[...] = fma32(part, hi - lo, lo)
        out = out.astype(dtype, copy=False)
    out[out == dtype.type(high)] = dtype.type(low)
    return out


# ---------------------------------------------------------------------------------------------
# normal
# ---------------------------------------------------------------------------------------------


def _box_muller_pairs(stream: Stream, k: int) -> tuple[np.ndarray, np.ndarray]:
    """``normal_distribution<double>``'s ``k`` pairs: (r cos, r sin) from two uniforms each."""
    u = uniform01(stream, 2 * k, np.dtype(np.float64)).reshape(k, 2)
    r = np.sqrt(-2.0 * libm.log1p(-u[:, 1]))
    theta = 2.0 * np.pi * u[:, 0]
    return r * libm.cos(theta), r * libm.sin(theta)


def _normal_serial(stream: Stream, n: int, mean: float, std: float) -> np.ndarray:
    """The element-by-element path: each pair's sine waits in the generator for the next
    draw (``next_double_normal_sample``), across calls."""
    out = np.empty(n, dtype=np.float64)
    start = 0
    if n:
        cached = stream.take_normal()
        if cached is not None:
            out[0] = cached
            start = 1
    k = (n - start + 1) // 2
    c, s = _box_muller_pairs(stream, k)
    out[start:] = np.stack([c, s], axis=1).ravel()[: n - start]
    if (n - start) % 2:
        stream.keep_normal(float(s[-1]))
    return fma64(out, std, mean)


# rows of 16 per vectorised chunk: 64k values, a few hundred kB per temporary
_BLOCK_ROWS = 4096


def _fill_blocks(u: np.ndarray, block, stream: Stream, dtype, mean, std) -> np.ndarray:
    """``normal_fill``: uniforms for every element, Box-Muller 16 at a time; a ragged tail
    redraws 16 fresh uniforms into the last 16 slots."""
    n = u.size
    rows = u[: n - n % 16].reshape(-1, 16)
    for start in range(0, rows.shape[0], _BLOCK_ROWS):  # chunks that stay in cache
        chunk = rows[start : start + _BLOCK_ROWS]
        chunk[...] = block(chunk, mean, std)
    if n % 16:
        tail = uniform01(stream, 16, dtype)
        u[n - 16 :] = block(tail.reshape(1, 16), mean, std).ravel()
    return u


def _box_muller_16_double(u: np.ndarray, mean: float, std: float) -> np.ndarray:
    radius = np.sqrt(-2.0 * libm.log(1.0 - u[:, :8]))
    theta = 2.0 * np.pi * u[:, 8:]
    return np.concatenate(
        [fma64(radius * libm.cos(theta), std, mean), fma64(radius * libm.sin(theta), std, mean)],
        axis=1,
    )


def _normal_half_blocks(stream: Stream, n: int, mean, std) -> np.ndarray:
    """float16 ``normal_`` of 16 or more contiguous values, as torch 2.13 computes it on AVX2:
    float32's kernel (``box_muller_uniform16``, float32 mean and std) on float32 uniforms,
    then each value rounded to half. Unlike float32's path, only the whole blocks' uniforms
    are drawn first (16 * (n // 16) words, not n); a ragged tail then draws 16 more, whose
    normals fill the last 16 slots. Checked bit for bit, and the generator state after,
    against torch."""
    whole = n - n % 16
    out = np.empty(n, dtype=np.float32)
    u = uniform01(stream, whole, np.dtype(np.float32))
    _fill_blocks(u, box_muller_uniform16, stream, np.float32, mean, std)
    out[:whole] = u
    if n % 16:
        tail = uniform01(stream, 16, np.dtype(np.float32)).reshape(1, 16)
        out[n - 16 :] = box_muller_uniform16(tail, mean, std).ravel()
    return out.astype(np.float16)


@_atomic
def normal(
    stream: Stream, n: int, dtype: np.dtype, mean=0.0, std=1.0, contiguous: bool = True
) -> np.ndarray:
    """``normal_(mean, std)`` of ``n`` elements: contiguous tensors of 16 or more take the
    block path (float32 and float16: the AVX2 kernel), the rest the element-by-element one."""
    dtype = np.dtype(dtype)
    _check_float(dtype, "normal_")
    if n >= 16 and contiguous and dtype == np.float32:
        u = uniform01(stream, n, dtype)
        return _fill_blocks(u, box_muller_uniform16, stream, dtype, mean, std)
    if n >= 16 and contiguous and dtype == np.float64:
        u = uniform01(stream, n, dtype)
        return _fill_blocks(u, _box_muller_16_double, stream, dtype, mean, std)
    if n >= 16 and contiguous and dtype == np.float16:
        return _normal_half_blocks(stream, n, mean, std)
    if n >= 16 and contiguous:
        raise NotImplementedError(f"autodiag: normal_ of {n} {dtype} values is not supported")
    return _normal_serial(stream, n, float(mean), float(std)).astype(dtype)


# ---------------------------------------------------------------------------------------------
# integers
# ---------------------------------------------------------------------------------------------

_WIDE = {np.dtype(np.int64), np.dtype(np.float64), np.dtype(np.float32)}


@_atomic
def random_from_to(stream: Stream, n: int, dtype: np.dtype, low: int, high: int) -> np.ndarray:
    """``random_(low, high)`` (``randint``): ``word % (high - low) + low``; 64-bit draws when
    the range needs them and the dtype can hold them."""
    dtype = np.dtype(dtype)
    span = int(high) - int(low)
    words = stream.u64(n) if span >= 1 << 32 and dtype in _WIDE else stream.u32(n)
    vals = (words % np.uint64(span)) + np.uint64(int(low) & _MASK64)  # wraps, as uint64 does
    return vals.view(np.int64).astype(dtype)


# random_() without bounds: the modulus per dtype (floats: 2**digits + 1 integers)
_RANDOM_MOD = {
    np.dtype(np.int64): 1 << 63,
    np.dtype(np.int32): 1 << 31,
    np.dtype(np.int16): 1 << 15,
    np.dtype(np.int8): 1 << 7,
    np.dtype(np.uint8): 1 << 8,
    np.dtype(np.bool_): 2,
    np.dtype(np.float64): (1 << 53) + 1,
    np.dtype(np.float32): (1 << 24) + 1,
    np.dtype(np.float16): (1 << 11) + 1,
}


@_atomic
def random_full(stream: Stream, n: int, dtype: np.dtype) -> np.ndarray:
    """``random_()``: integers in [0, 2**digits] (floats) or [0, max] (integers)."""
    dtype = np.dtype(dtype)
    if dtype not in _RANDOM_MOD:
        raise NotImplementedError(f"autodiag: random_ does not support dtype {dtype}")
    wide = dtype in (np.dtype(np.int64), np.dtype(np.float64))
    words = stream.u64(n) if wide else stream.u32(n)
    return (words % np.uint64(_RANDOM_MOD[dtype])).astype(dtype)


@_atomic
def randperm(stream: Stream, n: int) -> np.ndarray:
    """``randperm(n)``: PyTorch's Fisher-Yates (position i swaps with i + word % (n - i)),
    computed without a loop over the swaps (below); from n = 214748364 on, its inside-out
    variant on 64-bit draws (``_randperm_inside_out``)."""
    n = int(n)
    if n >= _RANDPERM_SMALL:
        return _randperm_inside_out(stream, n)
    if n <= 1:
        return np.arange(n, dtype=np.int64)
    i = np.arange(n - 1, dtype=np.int64)
    target = i + (stream.u32(n - 1) % (n - i).astype(np.uint64)).astype(np.int64)
    return _swaps_to_permutation(target, n)


# steps a chunk of the inside-out shuffle's draws (2 words each, as uint64: 16 MB)
_INSIDE_OUT_CHUNK = 1 << 20


def _randperm_inside_out(stream: Stream, n: int) -> np.ndarray:
    """PyTorch's ``randperm`` for large n (``TensorFactories.cpp``): for i = 0 .. n-1,
    ``z = random64() % (i + 1); r[i] = r[z]; r[z] = i``, without a loop over the steps.

    Step k writes the value k to position z_k, so position p ends with the last step k > p
    whose z_k is p, if any. Otherwise it keeps what step p moved in: position p itself when
    z_p = p, else what position z_p held just before step p, which is the latest earlier
    step k > z_p with z_k = z_p, if any, else (again) what step z_p moved in. Those links go
    to smaller positions; pointer doubling resolves them in log n vectorised rounds.

    Memory: about 7 int64 arrays of n (n = 214748364: ~12 GB), as the argsort and the links
    need them; PyTorch's result alone is 1.7 GB."""
    steps = np.arange(n, dtype=np.int64)
    z = np.empty(n, dtype=np.int64)
    for start in range(0, n, _INSIDE_OUT_CHUNK):
        stop = min(n, start + _INSIDE_OUT_CHUNK)
        words = stream.u64(stop - start)
        words %= (steps[start:stop] + 1).astype(np.uint64)
        z[start:stop] = words
        del words
    by_z = np.argsort(z, kind="stable")  # steps grouped by their z, each group in step order
    z_sorted = z[by_z]
    same = z_sorted[1:] == z_sorted[:-1]
    prev = np.full(n, -1, dtype=np.int64)  # the previous step with the same z
    prev[by_z[1:][same]] = by_z[:-1][same]
    # the last step writing into each position (the last of its z group), after the position's
    # own step; -1 where none
    last = np.full(n, -1, dtype=np.int64)
    ends = np.r_[~same, True]
    last[z_sorted[ends]] = by_z[ends]
    del same, ends, z_sorted, by_z
    # moved[p]: the value step p moved into position p: p (z_p = p), a step's value (>= 0),
    # or -1 with link[p] = z_p: what step z_p moved in
    moved = np.where(prev > z, prev, -1)
    moved[z == steps] = steps[z == steps]
    del prev
    link = z
    open_ = np.flatnonzero(moved < 0)
    while open_.size:
        target = link[open_]
        found = moved[target]
        moved[open_] = found
        link[open_] = link[target]
        open_ = open_[found < 0]
    return np.where(last > steps, last, moved)


def _swaps_to_permutation(target: np.ndarray, n: int) -> np.ndarray:
    """``range(n)`` after swapping positions ``i`` and ``target[i] >= i`` for i = 0, 1, ...

    Step i fixes position i: it takes the value then at ``target[i]``. A position p > i holds p
    until some step k < i swaps into it (``target[k] == p``); then it holds ``before[k]``, the
    value position k held just before step k. So ``before[p]`` is ``before[link[p]]`` for the
    latest such step ``link[p]``, else p: chains of links, resolved to their roots by pointer
    doubling (log n vectorised rounds, not n Python steps).
    """
    steps = np.arange(n - 1, dtype=np.int64)
    moved = np.flatnonzero(target != steps)
    # group the moving steps by destination, in step order
    by_dest = moved[np.argsort(target[moved], kind="stable")]
    dest = target[by_dest]
    change = dest[1:] != dest[:-1]
    first_of_group = np.r_[True, change][: dest.size]
    last_of_group = np.r_[change, True][: dest.size]
    link = np.full(n, -1, dtype=np.int64)
    link[dest[last_of_group]] = by_dest[last_of_group]
    # before[p]: follow the links down to a position never swapped into (its own value)
    before = np.where(link < 0, np.arange(n, dtype=np.int64), link)
    while True:
        nxt = before[before]
        if np.array_equal(nxt, before):
            break
        before = nxt
    # roots hold their own index: before[] is that root, which is the value
    # result[i]: the value at target[i] before step i: ``before`` of the previous step into
    # the same position, else target[i] itself (or before[i] when step i does not move)
    out = np.empty(n, dtype=np.int64)
    out[: n - 1] = target
    prev = np.full(n - 1, -1, dtype=np.int64)
    prev[by_dest[~first_of_group]] = by_dest[np.flatnonzero(~first_of_group) - 1]
    has_prev = prev >= 0
    out[: n - 1][has_prev] = before[prev[has_prev]]
    still = target == steps
    out[: n - 1][still] = before[steps[still]]
    out[n - 1] = before[n - 1]
    return out


# ---------------------------------------------------------------------------------------------
# bernoulli, exponential, multinomial
# ---------------------------------------------------------------------------------------------


@_atomic
def bernoulli_scalar(stream: Stream, n: int, p: float) -> np.ndarray:
    """``bernoulli_(p)`` with a number p: a float64 uniform per element, ``u < p``.

    NOTE: this is ATen's portable kernel, the one torch 2.13 runs on this machine; a build
    that samples with MKL's VSL instead (Intel CPUs) draws other numbers."""
    return uniform01(stream, n, np.dtype(np.float64)) < float(p)


@_atomic
def bernoulli_tensor(stream: Stream, p: np.ndarray) -> np.ndarray:
    """``bernoulli_(p)`` with probabilities ``p`` (flat, in draw order): float64 p compares a
    float64 uniform, any other float p a float32 one."""
    dtype = np.dtype(np.float64) if p.dtype == np.float64 else np.dtype(np.float32)
    return uniform01(stream, p.size, dtype) < p.astype(dtype, copy=False)


@_atomic
def exponential(stream: Stream, n: int, lambd: float) -> np.ndarray:
    """``exponential_(lambd)``: ``-1 / lambd * log1p(-u)`` in float64."""
    u = uniform01(stream, n, np.dtype(np.float64))
    return (-1.0 / float(lambd)) * libm.log1p(-u)


@_atomic
def multinomial_with_replacement(stream: Stream, rows: np.ndarray, n: int) -> np.ndarray:
    """ATen's CPU kernel: per row, the running sum in the input's dtype divided by the total,
    the last entry set to 1, then for each sample a float64 uniform and the first category
    whose cumulative probability reaches it."""
    out = np.empty((rows.shape[0], n), dtype=np.int64)
    for r, row in enumerate(rows):  # one Python step per distribution, not per sample
        cum = np.cumsum(row)  # sequential, in the row's dtype, as the kernel's `sum += val`
        cum = cum / cum[-1]
        cum[-1] = 1
        u = uniform01(stream, n, np.dtype(np.float64))
        out[r] = np.searchsorted(cum.astype(np.float64), u, side="left")
    return out


@_atomic
def log_normal(stream: Stream, n: int, mean: float, std: float) -> np.ndarray:
    """``log_normal_(mean, std)``: ``exp`` of the element-by-element normal (any size)."""
    return libm.exp(_normal_serial(stream, n, float(mean), float(std)))


@_atomic
def cauchy(stream: Stream, n: int, median: float, sigma: float) -> np.ndarray:
    """``cauchy_(median, sigma)``: ``median + sigma * tan(pi * (u - 0.5))`` in float64."""
    u = uniform01(stream, n, np.dtype(np.float64))
    return float(median) + float(sigma) * libm.tan(np.pi * (u - 0.5))


@_atomic
def geometric(stream: Stream, n: int, p: float) -> np.ndarray:
    """``geometric_(p)``: ``ceil(log(u) / log(1 - p))`` in float64."""
    u = uniform01(stream, n, np.dtype(np.float64))
    return np.ceil(libm.log(u) / libm.log(1.0 - float(p)))
