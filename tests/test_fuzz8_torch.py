"""issue 17 (fuzz8): the silent differences left after the fuzzer's classes, each compared with
PyTorch: numpy scalars written into a tensor, numpy uint64 fill values, and integer tensors
that a grad-requiring float value is written into."""

from __future__ import annotations

import numpy as np
import pytest

import autodiag as ad


def _outcome(fn, m):
    """What ``fn(m)`` gives: the tensor's dtype, values and autograd state, or its error."""
    try:
        with np.errstate(all="ignore"):
            out = fn(m)
        return (
            "ok",
            str(out.dtype).split(".")[-1],
            repr(out.tolist()),
            out.requires_grad,
            out.grad_fn.name() if out.grad_fn is not None else None,
        )
    except Exception as e:  # the exception's type and message are the contract
        return (type(e).__name__, str(e).splitlines()[0])


def _same(fn, torch):
    assert _outcome(fn, ad) == _outcome(fn, torch)


# --- numpy scalars as setitem values ------------------------------------------------------------

SETITEM_VALUES = [
    np.float32(1.5),  # was written (1.5); PyTorch: "can't assign a numpy.float32 ..."
    np.float16(1.5),
    np.bool_(True),
    np.array(1.5),  # a 0-d array: the message named "ndarray", PyTorch's "numpy.ndarray"
    np.array(2, dtype=np.int64),
    np.float64(1.5),  # a float subclass: accepted
    np.complex128(1.5),  # a complex subclass: accepted
    np.int64(2),  # numpy integers: accepted
    np.int32(-7),
    np.uint8(4),
    np.uint64(3),
    np.uint64(2**63),  # ValueError: Overflow when unpacking long long
]


@pytest.mark.parametrize("value", SETITEM_VALUES, ids=lambda v: f"{type(v).__name__}({v})")
@pytest.mark.parametrize("dt", ["float32", "float64", "int64", "int32", "bool"])
@pytest.mark.parametrize("where", ["int", "slice", "mask", "index"])
def test_setitem_numpy_scalar_is_accepted_or_refused_as_pytorch(torch, value, dt, where):
    index = {
        "int": lambda m: 0,
        "slice": lambda m: slice(0, 2),
        "mask": lambda m: m.tensor([True, False, True]),
        "index": lambda m: m.tensor([2, 0]),
    }[where]

    def fn(m):
        t = m.zeros(3, dtype=getattr(m, dt))
        t[index(m)] = value
        return t

    _same(fn, torch)


# --- numpy uint64 fill values ---------------------------------------------------------------


@pytest.mark.parametrize("value", [np.uint64(2**63 - 1), np.uint64(2**63), np.uint64(2**64 - 1)])
@pytest.mark.parametrize("dt", ["float32", "int64", "uint8", "bool"])
def test_numpy_uint64_beyond_int64_is_refused_as_pytorch(torch, value, dt):
    # float32.fill_(np.uint64(2**64 - 1)) was 1.8447e+19; PyTorch's argument parser reads a
    # numpy integer as an int64: "TypeError: an integer is required"
    fns = [
        lambda m: m.zeros(2, dtype=getattr(m, dt)).fill_(value),
        lambda m: m.full((2,), value, dtype=getattr(m, dt)),
        lambda m: m.zeros(2, dtype=getattr(m, dt)).masked_fill(m.tensor([True, False]), value),
        lambda m: m.zeros(2, dtype=getattr(m, dt)).masked_fill_(m.tensor([True, False]), value),
        lambda m: m.zeros(2, dtype=getattr(m, dt)).new_full((2,), value),
    ]
    for fn in fns:
        _same(fn, torch)


# --- a grad-requiring float written into an integer tensor ----------------------------------


def _value(m):
    return m.tensor(2.5, requires_grad=True)


def _values(m, n=2):
    return m.full((n,), 2.5, requires_grad=True)


def _mask(m):
    return m.tensor([True, False])


INT_WRITES = {
    # out of place: PyTorch refuses an integer output that would require grad (set_history);
    # autodiag returned tensor([2, 0], grad_fn=<MaskedFillBackward1>)
    "masked_fill": lambda m, t: t.masked_fill(_mask(m), _value(m)),
    # in place: PyTorch writes it and the tensor requires grad (no check there)
    "masked_fill_": lambda m, t: t.masked_fill_(_mask(m), _value(m)),
    "fill_": lambda m, t: t.fill_(_value(m)),
    # copy_ records only into a differentiable dtype; autodiag recorded CopyBackwards/CopySlices
    "copy_": lambda m, t: t.copy_(_values(m)),
    "copy_ 0-d": lambda m, t: t.copy_(_value(m)),
    "t[0] = v": lambda m, t: t.__setitem__(0, _value(m)),
    "t[:] = v (copy_)": lambda m, t: t.__setitem__(slice(None), _values(m)),
    "t[...] = v (copy_)": lambda m, t: t.__setitem__(Ellipsis, _values(m)),
    "t[0:1] = v": lambda m, t: t.__setitem__(slice(0, 1), _values(m, 1)),
    "t[:] = 0-d (fill_)": lambda m, t: t.__setitem__(slice(None), _value(m)),
    "t[mask] = v (index_put_)": lambda m, t: t.__setitem__(_mask(m), _value(m)),
    "t[idx] = v (index_put_)": lambda m, t: t.__setitem__(m.tensor([1, 0]), _values(m)),
}


@pytest.mark.parametrize("case", list(INT_WRITES))
@pytest.mark.parametrize("dt", ["int64", "bool", "uint8"])
def test_grad_requiring_float_written_into_int_tensor_as_pytorch(torch, case, dt):
    def fn(m):
        t = m.zeros(2, dtype=getattr(m, dt))
        r = INT_WRITES[case](m, t)
        return t if r is None else r

    _same(fn, torch)


def test_masked_fill_float_output_still_records(torch):
    # the dtype check leaves the ordinary case alone: gradient to the value, through the mask
    for m in (ad, torch):
        v = m.tensor(2.5, requires_grad=True)
        x = m.tensor([1.0, 2.0, 3.0], requires_grad=True)
        y = x.masked_fill(m.tensor([True, False, True]), v)
        y.sum().backward()
        assert y.grad_fn.name() == "MaskedFillBackward1"
        assert v.grad.tolist() == 2.0 and x.grad.tolist() == [0.0, 1.0, 0.0]


# --- classes found by the fuzzer's new ops (tests/fuzz/ops.py, fuzz8 section) ----------------


def test_erf_second_derivative_where_2x_overflows_is_pytorchs_nan(torch):
    # erf's gradient recorded as PyTorch's 2/sqrt(pi) * exp(-(x.pow(2))) * grad: its double
    # backward is NaN at x = -3e38 in float32 (0 * (2 * x) = 0 * -inf); x * x gave 0
    def fn(m):
        x = m.tensor([1.0, -3e38, 1.0], requires_grad=True)
        w = m.tensor([0.5, 1.0, 1.5])
        (g,) = m.autograd.grad(m.erf(x), x, w, create_graph=True)
        assert g.grad_fn.next_functions[1][0] is None  # (expr, grad): grad is a constant
        return m.autograd.grad(g, x, w)[0]

    want, got = fn(torch).numpy(), fn(ad).numpy()
    assert np.isnan(got).tolist() == np.isnan(want).tolist() == [False, True, False]
    np.testing.assert_allclose(got, want, rtol=1e-6)  # exp's last place: README


def test_masked_fill_inplace_value_sharing_memory_is_no_overlap(torch):
    # masked_fill_ reads its value tensor's number: x.masked_fill_(m, x[0]) was refused as a
    # partial overlap
    def one(m):
        x = m.tensor([1.0])
        return x.masked_fill_(m.tensor([False]), x.reshape(()))

    def two(m):
        x = m.tensor([1.0, 2.0])
        return x.masked_fill_(m.tensor([False, True]), x[0])

    _same(one, torch)
    _same(two, torch)


@pytest.mark.parametrize(
    "dts",
    [("float64", "float64", "float32", 0), ("float32", "float32", "float64", 0)]
    + [("float64", "float64", "float32", 1), ("float32", "float64", "float32", 1)]
    + [("float32", "float32", "float64", 1), ("float32", "float64", "float64", 0)],
)
def test_lerp_weight_dtype_as_pytorch(torch, dts):
    # a 0-d weight of another dtype is cast (PyTorch: no check); the messages name C++ types
    xd, ed, wd, wdim = dts

    def fn(m):
        x = m.tensor([1.0, 2.0], dtype=getattr(m, xd), requires_grad=True)
        e = m.tensor([5.0, 3.0], dtype=getattr(m, ed))
        w = m.tensor([0.3] * wdim if wdim else 0.3, dtype=getattr(m, wd), requires_grad=True)
        y = m.lerp(x, e, w)
        y.sum().backward()
        assert str(w.grad.dtype) == str(w.dtype)
        return y

    _same(fn, torch)


def test_batch_norm_parameter_dtypes_as_pytorch(torch):
    # mixed dtypes were computed silently (float64 input, float32 bias); PyTorch's CPU rule:
    # "mixed type" when the first parameter given differs from the input
    import itertools

    diffs = []
    for xd in ("float32", "float64", "float16"):
        for combo in itertools.product((None, "float32", "float64"), repeat=4):
            if (combo[2] is None) != (combo[3] is None):
                continue

            def fn(m, xd=xd, combo=combo):
                x = m.tensor([[1.0, 1.0], [2.0, 2.0], [4.0, 4.0]], dtype=getattr(m, xd))
                w, b, rm, rv = (
                    None if c is None else m.ones(2, dtype=getattr(m, c)) for c in combo
                )
                return m.nn.functional.batch_norm(x, rm, rv, w, b, training=True)

            want, got = _outcome(fn, torch), _outcome(fn, ad)
            if want[0] != got[0] or want[0] != "ok" and want != got:
                diffs.append(f"{xd} {combo}: torch {want} autodiag {got}")
    assert not diffs, "\n".join(diffs)


def test_pad_crops_first_as_pytorch(torch):
    # F.pad(zeros(0, 0), (2, -1)) returned a (0, 1) tensor; PyTorch's constant_pad_nd crops
    # with narrow first ("narrow(): length must be non-negative.")
    import itertools

    for shape in [(0, 0), (2, 1), (1, 3), (0, 2), (3,)]:
        for pads in itertools.product([-2, -1, 0, 1], repeat=2 if len(shape) == 1 else 4):
            _same(lambda m: m.nn.functional.pad(m.ones(shape), pads, value=2.0), torch)


def test_roll_of_empty_tensor_reads_no_dims(torch):
    # PyTorch returns an empty tensor's copy before it wraps the dims: roll(empty, 1, 3) of a
    # 3-d tensor is no IndexError
    def fn(m):
        e = m.empty((1, 1, 0), requires_grad=True)
        r = m.roll(e, -1, 3)
        r.sum().backward()
        assert tuple(e.grad.shape) == (1, 1, 0)
        return r

    _same(fn, torch)


@pytest.mark.parametrize("x_shape, w_shape", [((), ()), ((2,), ()), ((), (2,))])
def test_lerp_all_zero_dim_promotes_as_pytorch(torch, x_shape, w_shape):
    # lerp(0-d float32, 0-d float32, 0-d float64) is float64 in PyTorch (all 0-d: promoted);
    # lerp_ keeps self's dtype
    def out_of_place(m):
        x = m.full(x_shape, 1.5, requires_grad=True)
        w = m.full(w_shape, 0.3, dtype=m.float64, requires_grad=True)
        y = m.lerp(x, m.full(x_shape, 4.0), w)
        y.sum().backward()
        assert (str(x.grad.dtype), str(w.grad.dtype)) == (str(x.dtype), str(w.dtype))
        return y

    def in_place(m):
        return m.full(x_shape, 1.5).lerp_(
            m.full(x_shape, 4.0), m.full(w_shape, 0.3, dtype=m.float64)
        )

    _same(out_of_place, torch)
    _same(in_place, torch)


def test_roll_of_an_efficient_zero_gradient(torch):
    # abs_'s SgnBackward0 hands roll's backward an immutable zero: np.roll wrote into it
    # ("ZeroTensors are immutable") in the second derivative
    def fn(m):
        x = m.tensor([1.0], dtype=m.float64, requires_grad=True)
        y = m.roll(x, 2, -1).abs_()
        (g,) = m.autograd.grad(y, x, m.ones(1, dtype=m.float64), create_graph=True)
        return m.autograd.grad(g, x, m.ones(1, dtype=m.float64))[0]

    _same(fn, torch)


def test_copy_into_an_expanded_empty_view(torch):
    # numpy's "assignment destination is read-only" (a ValueError) leaked: nothing to write
    def fn(m):
        t = m.empty((0,)).expand((2, -1)).detach()
        return t.copy_(m.empty((1, 0)))

    _same(fn, torch)


@pytest.mark.parametrize("n", [3, 17, 40])
@pytest.mark.parametrize("dt", ["float32", "float64"])
@pytest.mark.parametrize("how", ["min", "max", "min_", "max_", "min_row", "min_bcast"])
def test_clamp_one_tensor_bound_ties_as_pytorchs_maximum(torch, n, dt, how):
    # clamp(x, min=t) is PyTorch's maximum(x, t): on tied zeros its vectorised body returns the
    # bound, its scalar tail x (NOTE [maximum ties]); autodiag returned x everywhere
    def fn(m):
        x = m.zeros(n, dtype=getattr(m, dt))
        x[::2] = -0.0
        b = m.zeros(n, dtype=getattr(m, dt))
        b[1::3] = -0.0
        r = {
            "min": lambda: m.clamp(x, min=b),
            "max": lambda: m.clamp(x, max=b),
            "min_": lambda: x.clone().clamp_(min=b),
            "max_": lambda: x.clone().clamp_(max=b),
            "min_row": lambda: m.clamp(x, min=b.reshape(1, n)),
            "min_bcast": lambda: m.clamp(x.reshape(1, n), min=b[:1]),
        }[how]()
        return m.tensor(np.signbit(r.numpy()).astype(np.int64).tolist())

    _same(fn, torch)


@pytest.mark.parametrize("index", ["all", "ellipsis", "fill_tensor", "fill_number", "row"])
def test_writing_a_tensor_value_into_self_overlapping_memory_as_pytorch(torch, index):
    # x[:] = 2.0 on an expanded tensor is fill_ of a 0-d tensor, which PyTorch refuses (internal
    # overlap); autodiag wrote the shared elements. fill_ of a number writes them in both.
    def fn(m):
        t = m.ones(1, 1).expand(2, 3)
        if index == "all":
            t[:] = 2.0
        elif index == "ellipsis":
            t[...] = m.tensor(2.0)
        elif index == "fill_tensor":
            t.fill_(m.tensor(2.0))
        elif index == "fill_number":
            t.fill_(2.0)
        else:
            t[0] = 2.0
        return t

    _same(fn, torch)


TIE_OPS = {
    "maximum(b, x)": lambda m, x, b: m.maximum(b, x),
    "minimum(b, x)": lambda m, x, b: m.minimum(b, x),
    "maximum(x, b)": lambda m, x, b: m.maximum(x, b),
    "minimum(x, b)": lambda m, x, b: m.minimum(x, b),
    "clamp(min=b)": lambda m, x, b: m.clamp(x, min=b),
    "clamp(max=b)": lambda m, x, b: m.clamp(x, max=b),
    "clamp(b, b + 1)": lambda m, x, b: m.clamp(x, b, b + 1),
    "clamp_max(x, b)": lambda m, x, b: m.clamp_max(x, b),
    "clamp_min(x, b)": lambda m, x, b: m.clamp_min(x, b),
}


@pytest.mark.parametrize("case", list(TIE_OPS))
@pytest.mark.parametrize("create_graph", [False, True])
def test_tie_of_a_promoted_operand_splits_the_gradient_as_pytorch(torch, case, create_graph):
    # a float64 0-d -0.41 next to a float32 -0.41: the forward compares them in float32 (a
    # tie), and so does PyTorch's backward; autodiag's compared the saved operands in float64
    # and gave the float32 operand no gradient (minimum(b, x): x.grad [0, 0] for [0, 0.5])
    def fn(m):
        x = m.tensor([1.0, -0.41, -1.0], dtype=m.float32, requires_grad=True)
        b = m.tensor(-0.41, dtype=m.float64, requires_grad=True)
        r = TIE_OPS[case](m, x, b)
        gx, gb = m.autograd.grad(r.sum(), [x, b], create_graph=create_graph)
        return m.cat([gx.double(), gb.reshape(1)]).detach()

    _same(fn, torch)


@pytest.mark.parametrize("f", ["std", "var"])
def test_std_var_of_all_elements_use_pytorchs_float32_mean(torch, f):
    # PyTorch's one-output std/var (std_var_all_cpu) takes self.mean() in float32, which
    # overflows for [1, -3e38, -3e38, 1]: inf where autodiag gave 1.55e38; and its float32
    # results are then PyTorch's to the bit (216 of 800 random cases differed)
    x = [1.0, 1.0, -3e38, -3e38, 1.0, 1.0]
    for shape, kw in [((6,), {}), ((6,), {"dim": 0}), ((1, 6), {"dim": 1}), ((6, 1), {"dim": 0})]:
        _same(lambda m: getattr(m.tensor(x).reshape(shape), f)(**kw), torch)
    _same(lambda m: getattr(m.tensor(x).reshape(3, 2), f)(0), torch)  # two outputs: finite
    rng = np.random.default_rng(1)
    for _ in range(50):
        a = (rng.standard_normal(int(rng.integers(2, 300))) * 1e3 + 5).astype(np.float32)
        assert getattr(ad.tensor(a), f)().item() == getattr(torch.from_numpy(a), f)().item()


def test_inplace_clamp_compares_in_the_promoted_dtype_not_selfs(torch):
    # x.clamp_(max=b) of a float32 x and a float64 b (both with dims): the result is float32,
    # but PyTorch's backward compares x and b promoted (float64): no tie at 0.1f vs 0.1
    def fn(m):
        x = m.tensor([0.1, 2.0, -1.0], dtype=m.float32)
        b = m.tensor([0.1, 0.5, 0.5], dtype=m.float64, requires_grad=True)
        (gb,) = m.autograd.grad(x.clamp_(max=b).sum(), b)
        return gb

    _same(fn, torch)
