"""PyTorch's CPU floating-point ``sum``, in its order of additions, in vectorised numpy.

NOTE [Cascade sums]: a float32 sum depends on the order of its additions, and numpy's pairwise
sum adds in a different order from PyTorch's CPU kernel (``cascade_sum`` in
``aten/src/ATen/native/cpu/SumKernel.cpp``), so a loss summed over 2,000 elements differs in its
last digit and a training run drifts from PyTorch's printed numbers. PyTorch's order is fixed
by the shapes and strides alone, so we replay it:

- TensorIterator drops size-1 dims, orders the rest by the input's strides (fastest first) and
  merges neighbours that are both reduced or both kept. The first two dims form a 2-D kernel
  call; the outer dims are walked in order and each call's partial sum is added to the output
  (``out += partial``, the output starting at 0).
- The kernel: reduced dim contiguous and ≥ 8 long (AVX2: 8 float32 or 4 float64 lanes) → each
  row is read as vectors, summed by ``row_sum`` per lane, then the scalar tail and the lanes are
  added one by one; kept dim contiguous → columns in blocks of 4 vectors are summed by
  ``multi_row_sum``, the others by ``row_sum``; otherwise the scalar variants of the same two
  (blocks of 4 columns).
- ``row_sum`` sums 4 interleaved streams (``multi_row_sum`` over rows of 4), adds the leftover
  elements to the first stream, then the streams in order. ``multi_row_sum`` sums chunks of
  ``2**max(4, ceil(log2 n) // 4)`` elements left to right and carries the chunk sums up a
  4-level cascade (each level flushed into the next every ``step`` entries).
- A full reduction of ≥ 32,768 elements runs on several threads: each sums its contiguous
  share, and the shares are added in thread order. We split as PyTorch's OpenMP ``parallel_for``
  does, for ``torch_threads()`` threads (``OMP_NUM_THREADS``, else the CPU count: PyTorch's
  default; set it to torch's ``get_num_threads()`` when they differ).

NOTE [Short sums]: np.add.reduce adds an axis's elements left to right, from +0.0, whenever
that axis is not numpy's inner loop (another axis with 2+ elements has a smaller stride: the
lanes), and along any axis shorter than 8 (numpy's pairwise sum adds under 8 elements in
order); np.einsum summing an axis out adds in that same order, at about half the cost when
there are many short rows. Every kernel lays its lanes out last (row_sum's 4 streams are lanes
too), so each level of multi_row_sum is one reduction of a reshaped view (16-row chunks, groups
of 16 chunk sums, groups of 16 of those; the partial groups and the tail are the four
accumulators, added in order) and row_sum's streams are combined by one more. No Python loop
per row, column or output; the results start from +0.0, so they are never -0.0 and need no
sign fix. Plans (NOTE [Cascade plans]) keep the per-call Python to a dict look-up.

A left-to-right sum is ``np.cumsum(...)[-1]`` (numpy accumulates strictly in order), plus +0.0
(PyTorch's accumulators start at +0.0, so a sum of -0.0s is +0.0). Inputs with zero or negative
strides (broadcast or flipped views) are made contiguous first: PyTorch's order for those is not
replayed (the result is still a correct sum, maybe differing in the last bit). AVX-512 builds use
16-lane vectors; we assume AVX2, PyTorch's default capability on x86 machines without AVX-512.
"""

from __future__ import annotations

import math
import os
import string

import numpy as np

_VECTOR_BYTES = 32  # AVX2
_GRAIN_SIZE = 32768  # at::internal::GRAIN_SIZE
_LEVELS = 4  # multi_row_sum's num_levels
_ILP = 4  # row_sum's ilp_factor, and the rows per multi_row_sum block in the outer kernels


def torch_threads() -> int:
    """The intra-op thread count PyTorch uses by default (OMP_NUM_THREADS, else the CPUs)."""
    env = os.environ.get("OMP_NUM_THREADS", "")
    if env.isdigit() and int(env) > 0:
        return int(env)
    return _CPUS


_CPUS = os.cpu_count() or 1  # read once: os.cpu_count() costs ~10 us a call on Linux


def _seq(x: np.ndarray, axis: int = 0) -> np.ndarray:
    """Left-to-right sum along ``axis`` starting from +0.0."""
    if x.shape[axis] == 0:
        return np.zeros(x.shape[:axis] + x.shape[axis + 1 :], x.dtype)
    return _fold(x, axis - x.ndim) + x.dtype.type(0)


def _multi_row_sum(x: np.ndarray) -> np.ndarray:
    """``multi_row_sum`` along axis 0 (trailing axes are independent lanes)."""
    return _mrs(x, -x.ndim)


def _row_sum(x: np.ndarray) -> np.ndarray:
    """``row_sum`` along axis 0: 4 interleaved streams, leftovers into the first."""
    return _rs(x, -x.ndim)


def _columns(y: np.ndarray, lanes: int, d0, d1, itemsize: int) -> np.ndarray:
    """One 2-D kernel call: reduce axis 0 of ``y`` (dim d0) for each column (axis 1, dim d1;
    trailing axes are more of the same calls). The algorithm per column is chosen from the
    strides as ``cascade_sum``'s four branches choose it."""
    n, cols = y.shape[0], y.shape[1]
    if d0[1] == itemsize and n >= lanes:  # vectorized_inner_sum
        nvec = n // lanes
        vec = _row_sum(y[: nvec * lanes].reshape((nvec, lanes) + y.shape[1:]))
        acc = np.zeros(y.shape[1:], y.dtype)
        for i in range(nvec * lanes, n):  # the scalar tail first, then the lanes
            acc = acc + y[i]
        for lane in range(lanes):
            acc = acc + vec[lane]
        return acc
    if d1[1] == itemsize and cols >= lanes:  # vectorized_outer_sum
        block = _ILP * lanes
    elif d0[1] < d1[1]:  # scalar_inner_sum
        return _row_sum(y)
    else:  # scalar_outer_sum
        block = _ILP
    c = cols // block * block
    if c == cols:
        return _multi_row_sum(y)
    if c == 0:
        return _row_sum(y)
    return np.concatenate([_multi_row_sum(y[:, :c]), _row_sum(y[:, c:])], axis=0)


def _coalesce(sizes, strides, reduced):
    """TensorIterator's merge of neighbouring dims (given fastest first) of the same kind."""
    out = []
    for size, stride, r in zip(sizes, strides, reduced):
        if out and out[-1][2] == r and out[-1][0] * out[-1][1] == stride:
            out[-1] = (out[-1][0] * size, out[-1][1], r)
        else:
            out.append((size, stride, r))
    return out


def cascade_sum(a: np.ndarray, axes=None, keepdims: bool = False) -> np.ndarray:
    """``a.sum(axis=axes, keepdims=keepdims)`` with PyTorch's CPU order of additions.

    float32 and float64 ndarrays only; other dtypes (integer sums are exact) and array
    subclasses (an efficient zero stays one) go to numpy.
    """
    if type(a) is not np.ndarray or a.dtype not in _FLOATS or a.size == 0:
        return np.asarray(a.sum(axis=axes, keepdims=keepdims))
    if axes is not None and not isinstance(axes, int):
        axes = tuple(axes)
    key = (a.shape, a.strides, a.dtype.char, axes, keepdims)
    plan = _PLANS.get(key)
    if plan is None:
        plan = _plan(a, axes, keepdims)
        if len(_PLANS) >= _MAX_PLANS:
            _PLANS.clear()
        _PLANS[key] = plan
    kind, order, shape, out_shape = plan[0], plan[1], plan[2], plan[3]
    if kind is _COPY:  # nothing really reduced: out = 0 + a
        return (a + a.dtype.type(0)).reshape(out_shape)
    if plan[-1]:  # zero or negative strides: numpy may walk a flipped axis backwards
        a = np.ascontiguousarray(a)
    y = np.transpose(a, order).reshape(shape) if order is not None else a.reshape(shape)
    return kind(y, plan, a.itemsize).reshape(out_shape)


_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))
_PLANS: dict = {}  # (shape, strides, dtype, axes, keepdims) -> plan (NOTE [Cascade plans])
_MAX_PLANS = 4096
_COPY = object()
_EINSUM_ROWS = 256  # _reduce: einsum from this many inner loops (rows of the last axis)
_SUBSCRIPTS: dict = {}  # (ndim, axis) -> einsum subscripts summing that axis out


def _plan(a: np.ndarray, axes, keepdims: bool):
    """NOTE [Cascade plans]: the order of additions depends on the shape, strides and reduced
    dims only, so TensorIterator's dim ordering and merging is worked out once per such key:
    the transpose and reshape that lay the input out slowest dim first, and which kernel runs.
    Zero or negative strides (broadcast or flipped views) are made contiguous first, so they
    are planned as the contiguous layout."""
    if axes is None:
        axes = range(a.ndim)
    elif isinstance(axes, int):
        axes = (axes,)
    axes = {ax % a.ndim for ax in axes} if a.ndim else set()
    out_shape = tuple(
        1 if i in axes else s for i, s in enumerate(a.shape) if keepdims or i not in axes
    )
    strides = a.strides
    copy = any(st <= 0 for st, s in zip(strides, a.shape) if s != 1)
    if copy:
        strides = np.empty(a.shape, a.dtype).strides
    # TensorIterator's order, fastest first: size-1 dims dropped; the reduced dims first (the
    # output's zero strides put them there), by the input's strides; then the kept dims as the
    # new, contiguous output lays them out (the last fastest)
    live = [i for i in range(a.ndim) if a.shape[i] != 1]
    red = sorted((i for i in live if i in axes), key=lambda i: strides[i])
    if not red:
        return (_COPY, None, None, out_shape)
    fast = red + [i for i in reversed(live) if i not in axes]
    dims = _coalesce(
        [a.shape[i] for i in fast], [strides[i] for i in fast], [i in axes for i in fast]
    )
    order = fast[::-1] + [i for i in range(a.ndim) if a.shape[i] == 1]
    if order == list(range(a.ndim)):
        order = None
    shape = tuple(s for s, _, _ in reversed(dims))  # slowest first
    lanes = _VECTOR_BYTES // a.itemsize
    kind = _general
    if dims[0][1] == a.itemsize and dims[0][0] >= lanes and not any(r for _, _, r in dims[1:]):
        kind = _inner  # vectorized_inner_sum on each kept index
    elif (
        dims[0][2]
        and len(dims) > 1
        and dims[1][1] == a.itemsize
        and dims[1][0] >= lanes
        and all(not r for _, _, r in dims[2:])
    ):
        kind = _outer  # vectorized_outer_sum: reduced dim outside a contiguous kept one
    if len(dims) == 1 and a.size >= _GRAIN_SIZE:  # maybe split across threads
        return (_full, order, shape, out_shape, dims, lanes, kind, copy)
    return (kind, order, shape, out_shape, dims, lanes, copy)


def _full(y: np.ndarray, plan, itemsize: int) -> np.ndarray:
    threads = torch_threads()
    if threads > 1:
        return _threaded_sum(y, plan, threads)
    return plan[6](y, plan, itemsize)


def _general(y: np.ndarray, plan, itemsize: int) -> np.ndarray:
    return _serial(y, plan[4], plan[5], itemsize)


def _fold(x: np.ndarray, axis: int) -> np.ndarray:
    """Left-to-right sum along ``axis`` (negative). np.add.reduce adds an axis's elements
    in order when another axis is the inner loop (a smaller stride, more than one element);
    along the inner axis it would sum pairwise, so there it is a cumulative sum's last."""
    n = x.shape[axis]
    if n == 1:
        return x[(Ellipsis, 0) + (slice(None),) * (-1 - axis)]
    st = abs(x.strides[axis])
    if (x.shape[-1] > 1 and abs(x.strides[-1]) < st) or any(
        s > 1 and abs(t) < st for s, t in zip(x.shape, x.strides)
    ):
        return _reduce(x, axis)
    if n == 0:
        return np.zeros(x.shape[:axis] + x.shape[axis:][1:], x.dtype)
    return np.cumsum(x, axis=axis, dtype=x.dtype).take(-1, axis=axis)


def _reduce(x: np.ndarray, axis: int) -> np.ndarray:
    """``np.add.reduce(x, axis)`` where another axis with 2+ elements has a smaller stride (so
    the rows are added in order, NOTE [Short sums]). On large inputs np.einsum does the same
    additions in the same order (its iterator also runs the smallest stride innermost and adds
    each row into the output in turn), at half the cost per row."""
    if x.size < _EINSUM_ROWS * x.shape[-1]:  # numpy's inner loops are along the last axis
        return np.add.reduce(x, axis)
    key = (x.ndim, axis)
    sub = _SUBSCRIPTS.get(key)
    if sub is None:
        letters = string.ascii_letters[: x.ndim]
        sub = _SUBSCRIPTS[key] = letters + "->" + letters.replace(letters[axis], "")
    return np.einsum(sub, x)


def _sum_rows(parts):
    """Left-to-right sum of same-shaped arrays (None for a zero partial)."""
    total = None
    for p in parts:
        if p is not None:
            total = p if total is None else total + p
    return total


def _mrs(x: np.ndarray, axis: int = -2) -> np.ndarray:
    """``multi_row_sum`` along ``axis`` (negative; the axes after it are independent lanes)."""
    n = x.shape[axis]
    power = max(4, (n - 1).bit_length() // _LEVELS if n > 1 else 0)
    step = 1 << power
    m = n // step
    if m == 0:
        return _fold(x, axis)
    lead, lanes = x.shape[:axis], x.shape[axis:][1:]
    rest = (slice(None),) * (-1 - axis)
    level = _fold(x[(Ellipsis, slice(0, m * step)) + rest].reshape(lead + (m, step) + lanes), axis)
    parts = [_fold(x[(Ellipsis, slice(m * step, None)) + rest], axis) if n > m * step else None]
    for _ in range(_LEVELS - 2):  # acc[1], acc[2]: partial groups; full groups go up a level
        k = level.shape[axis]
        g = k // step
        parts.append(
            _fold(level[(Ellipsis, slice(g * step, None)) + rest], axis) if k > g * step else None
        )
        if g == 0:
            level = None
            break
        level = _fold(
            level[(Ellipsis, slice(0, g * step)) + rest].reshape(lead + (g, step) + lanes), axis
        )
    if level is not None:
        parts.append(_fold(level, axis))  # acc[3]: never flushed
    return _sum_rows(parts)


def _rs(x: np.ndarray, axis: int = -2) -> np.ndarray:
    """``row_sum`` along ``axis``: 4 interleaved streams, leftovers into the first. The
    streams are lanes of smaller stride, so _lane_mrs applies; never -0.0 (NOTE [Short
    sums])."""
    n = x.shape[axis]
    k = n // _ILP
    if not k:
        return np.add.reduce(x, axis)  # fewer than 4 rows: leftovers only, in order
    lead, lanes = x.shape[:axis], x.shape[axis:][1:]
    rest = (slice(None),) * (-1 - axis)
    streams = x[(Ellipsis, slice(0, k * _ILP)) + rest].reshape(lead + (k, _ILP) + lanes)
    s = _lane_mrs(streams, axis - 1)
    if n > k * _ILP:  # [first stream, leftovers..., other streams]
        first, others = s[(Ellipsis, slice(0, 1)) + rest], s[(Ellipsis, slice(1, None)) + rest]
        s = np.concatenate((first, x[(Ellipsis, slice(k * _ILP, None)) + rest], others), axis)
    return np.add.reduce(s, axis)  # under 8 rows: in order


def _lane_mrs(x: np.ndarray, axis: int = -2) -> np.ndarray:
    """``multi_row_sum`` along ``axis`` (negative) whose lanes (the axes after it) include a
    smaller stride with 2+ elements, so that every in-order reduction is one _reduce (NOTE
    [Short sums]): 16-row chunks; chunk sums of a partial group of 16 into acc[1], full groups'
    sums (16 chunks) of a partial group into acc[2], sums of 16 such groups into acc[3]; the
    tail into acc[0]. Under 2**20 rows (a chunk of 16); never -0.0."""
    n = x.shape[axis]
    if n < 16:
        return _reduce(x, axis)
    if (n - 1).bit_length() // _LEVELS > 4:  # chunks longer than 16
        return _mrs(x, axis) + x.dtype.type(0)
    m, r = divmod(n, 16)
    lead, lanes = x.shape[:axis], x.shape[axis:][1:]
    rest = (slice(None),) * (-1 - axis)

    def rows(a, start, stop=None):
        return a[(Ellipsis, slice(start, stop)) + rest]

    def groups(a, g):
        return _reduce(rows(a, 0, 16 * g).reshape(lead + (g, 16) + lanes), axis)

    if m == 1:
        acc = _reduce(rows(x, 0, 16), axis)
    else:
        chunks = groups(x, m)
        g, p = divmod(m, 16)
        if not g:
            acc = _reduce(chunks, axis)
        else:
            level2 = groups(chunks, g)
            g3, p3 = divmod(g, 16)
            return _sum_rows(  # acc[0] + acc[1] + acc[2] + acc[3], in that order
                [
                    _reduce(rows(x, 16 * m), axis) if r else None,
                    _reduce(rows(chunks, 16 * g), axis) if p else None,
                    _reduce(rows(level2, 16 * g3), axis) if p3 else None,
                    _reduce(groups(level2, g3), axis) if g3 else None,
                ]
            )
    return _reduce(rows(x, 16 * m), axis) + acc if r else acc


def _inner(y: np.ndarray, plan, itemsize: int) -> np.ndarray:
    """vectorized_inner_sum on the last axis of ``y`` (contiguous), for each leading index."""
    lanes = plan[5]
    n = y.shape[-1]
    nvec = n // lanes
    if y.ndim == 1 and nvec < 1024:
        return _inner_short(y, n, nvec, lanes)
    v = _rs(y[..., : nvec * lanes].reshape(y.shape[:-1] + (nvec, lanes)))
    if n > nvec * lanes:  # the scalar tail first, then the lanes
        v = np.concatenate((y[..., nvec * lanes :], v), axis=-1)
    return np.add.accumulate(v, axis=-1)[..., -1]  # in order; not -0.0 (v's is not)


def _inner_short(y: np.ndarray, n: int, nvec: int, lanes: int) -> np.ndarray:
    """``_inner`` of one short row (a loss's full sum): _rs and _lane_mrs spelled out for a
    1-D input, to keep the Python per call small. Never -0.0 (NOTE [Short sums])."""
    k = nvec // _ILP
    width = k * _ILP * lanes
    if k:
        x = y[:width].reshape(k, _ILP, lanes)
        if k < 16:
            s = np.add.reduce(x, 0)
        else:
            m, r = divmod(k, 16)
            if m == 1:
                s = np.add.reduce(x[:16], 0)
            else:
                s = np.add.reduce(np.add.reduce(x[: 16 * m].reshape(m, 16, _ILP, lanes), 1), 0)
            if r:
                s = np.add.reduce(x[16 * m :], 0) + s
        if nvec > k * _ILP:  # leftover vectors go into the first stream
            left = y[width : nvec * lanes].reshape(-1, lanes)
            s = np.concatenate((s[:1], left, s[1:]))
        v = np.add.reduce(s, 0)  # under 8 rows: in order
    else:
        v = np.add.reduce(y[: nvec * lanes].reshape(nvec, lanes), 0)
    if n > nvec * lanes:  # the scalar tail first, then the lanes
        v = np.concatenate((y[nvec * lanes :], v))
    return np.add.accumulate(v)[-1]


def _outer(y: np.ndarray, plan, itemsize: int) -> np.ndarray:
    """vectorized_outer_sum: axis -2 of ``y`` reduced for each column of the contiguous last
    axis (leading axes kept): blocks of 4 vectors of columns by multi_row_sum, the rest by
    row_sum."""
    y = np.swapaxes(y, -1, -2)  # y's axes are slowest first: (..., kept d1, reduced d0)
    cols = y.shape[-1]
    c = cols // (_ILP * plan[5]) * (_ILP * plan[5])
    if c == cols:
        return _lane_mrs(y)
    if c == 0:
        return _rs(y)
    return np.concatenate((_lane_mrs(y[..., :c]), _rs(y[..., c:])), axis=-1)


def cascade_mean(a: np.ndarray, axes=None, keepdims: bool = False) -> np.ndarray:
    """PyTorch's CPU mean: the cascade sum divided by the count (not times 1/count)."""
    total = cascade_sum(a, axes, keepdims)
    count = a.size // max(total.size, 1) if a.size else 0
    with np.errstate(all="ignore"):  # the mean of nothing is nan, as in PyTorch
        return np.asarray(total / a.dtype.type(count), dtype=a.dtype)


def _serial(y: np.ndarray, dims, lanes: int, itemsize: int) -> np.ndarray:
    """The kernel on the two fastest dims, then ``out += partial`` in the order
    serial_for_each visits the partials (the fastest dim first). Returns the kept values in
    the output's order."""
    if len(dims) == 1:  # a 1-D reduction: one column
        y, dims = y[None], dims + [(1, 0, False)]
    # y's axes are dims reversed; the kernel takes (d0, d1) as axes 0, 1, the rest trail
    part = _columns(np.moveaxis(y, (-1, -2), (0, 1)), lanes, dims[0], dims[1], itemsize)
    part = np.moveaxis(part, 0, -1)  # back to slowest first: (outer..., d1)
    rest = list(reversed(dims[1:]))  # part's axes, slowest first
    red = [i for i, d in enumerate(rest) if d[2]]
    if not red:
        return part
    keep = [i for i, d in enumerate(rest) if not d[2]]
    t = np.transpose(part, red + keep)
    t = t.reshape((-1,) + t.shape[len(red) :])  # the partials of each output, in visit order
    return _seq(t, axis=0)


def _threaded_sum(x: np.ndarray, plan, threads: int) -> np.ndarray:
    """two_pass_reduction: each thread sums its contiguous share; shares added in order.
    (One share at a time: numpy's adds on the shares as rows of one array are far slower.)"""
    n = x.shape[0]
    threads = min(threads, math.ceil(n / _GRAIN_SIZE))
    chunk = math.ceil(n / threads)
    shares = [_inner(x[start : start + chunk], plan, x.itemsize) for start in range(0, n, chunk)]
    return np.asarray(_sum_rows(shares) + x.dtype.type(0))
