"""sum and mean add in PyTorch's CPU order (NOTE [Cascade sums]): float32 results equal
torch's to the bit, for contiguous, permuted and strided inputs over any dims."""

import itertools

import numpy as np
import pytest

import autodiag
from autodiag.ops import _cascade

torch = pytest.importorskip("torch")


@pytest.fixture(autouse=True)
def _same_threads_as_torch(monkeypatch):
    # conftest runs torch on 1 thread; large full sums split by thread count
    monkeypatch.setattr(_cascade, "torch_threads", torch.get_num_threads)


SHAPES = [
    (5,),
    (13,),
    (100,),
    (2000,),
    (4097,),
    (3, 5),
    (64, 10),
    (10, 64),
    (37, 41),
    (2000, 1),
    (4, 5, 6),
    (16, 32, 65),
    (2, 3, 4, 5),
    (9, 17, 33),
]


def _data(shape, seed, dtype=np.float32):
    rs = np.random.RandomState(seed)
    return (rs.standard_normal(shape) * 10.0 ** rs.randint(-3, 4, shape)).astype(dtype)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_sum_and_mean_over_every_dim_set_match_torch_bitwise(shape, dtype):
    a = _data(shape, len(shape), dtype)
    x, t = autodiag.tensor(a), torch.from_numpy(a)
    assert np.array_equal(x.sum().numpy(), t.sum().numpy())
    assert np.array_equal(x.mean().numpy(), t.mean().numpy())
    for r in range(1, len(shape) + 1):
        for dims in itertools.combinations(range(len(shape)), r):
            for keep in (False, True):
                got = x.sum(dims, keepdim=keep).numpy()
                assert np.array_equal(got, t.sum(dims, keepdim=keep).numpy()), (dims, keep)
                got = x.mean(dims, keepdim=keep).numpy()
                assert np.array_equal(got, t.mean(dims, keepdim=keep).numpy()), (dims, keep)


def test_permuted_and_strided_views_follow_torchs_iteration_order():
    rs = np.random.RandomState(1)
    for _ in range(150):
        nd = rs.randint(1, 5)
        shape = tuple(int(rs.choice([1, 2, 3, 5, 8, 9, 17])) for _ in range(nd))
        a = _data(shape, rs.randint(1000))
        perm = tuple(int(p) for p in rs.permutation(nd))
        x = autodiag.tensor(a).permute(perm)
        t = torch.from_numpy(a).permute(perm)
        if x.shape[-1] > 2:
            x, t = x[..., ::2], t[..., ::2]
        dims = tuple(sorted(int(d) for d in rs.choice(nd, rs.randint(1, nd + 1), replace=False)))
        assert np.array_equal(x.sum(dims).numpy(), t.sum(dims).numpy()), (shape, perm, dims)


@pytest.mark.parametrize("threads", [1, 2])
def test_large_full_sums_split_across_threads_as_torch_does(monkeypatch, threads):
    monkeypatch.setattr(_cascade, "torch_threads", lambda: threads)
    old = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        for n in (32767, 32768, 100003):
            a = _data((n,), n)
            assert np.array_equal(
                autodiag.tensor(a).sum().numpy(), torch.from_numpy(a).sum().numpy()
            )
    finally:
        torch.set_num_threads(old)


def test_negative_zeros_sum_to_positive_zero_and_empty_mean_is_nan():
    a = np.full(20, -0.0, np.float32)
    assert np.signbit(torch.from_numpy(a).sum().numpy()) == np.signbit(
        autodiag.tensor(a).sum().numpy()
    )
    assert np.isnan(autodiag.zeros(0).mean().item())


def test_mse_loss_sum_and_bias_gradient_match_torch_bitwise():
    # the polynomial tutorial's loss: MSELoss(reduction='sum') over 2000 points, and the
    # Linear bias gradient (a sum over the batch in AddmmBackward0). x, w and b are multiples
    # of 1/8, so the matmul is exact whatever the BLAS and the CPU (an AVX-512 BLAS rounds a
    # random float32 product elsewhere than torch's); the sums under test round at every step
    rs = np.random.RandomState(0)
    x = (rs.randint(-32, 33, (2000, 3)) / 8).astype(np.float32)
    y = rs.standard_normal(2000).astype(np.float32)
    w = (rs.randint(-16, 17, (1, 3)) / 8).astype(np.float32)
    b = (rs.randint(-16, 17, 1) / 8).astype(np.float32)
    out = {}
    for lib in (torch, autodiag):
        W, B = lib.tensor(w, requires_grad=True), lib.tensor(b, requires_grad=True)
        pred = lib.nn.functional.linear(lib.tensor(x), W, B).flatten()
        loss = lib.nn.functional.mse_loss(pred, lib.tensor(y), reduction="sum")
        loss.backward()
        out[lib] = (loss.detach().numpy(), B.grad.numpy())
    assert np.array_equal(out[torch][0], out[autodiag][0])
    assert np.array_equal(out[torch][1], out[autodiag][1])


@pytest.mark.parametrize(
    "shape, dims",
    [
        ((5000, 40), (0,)),  # multi_row_sum's chunks and levels, 8 leftover columns
        ((4113, 33), (0,)),  # a level-2 flush (4096 rows), one scalar column
        ((300, 9), (0,)),  # one block-less vector and a scalar column
        ((2, 5000, 72), (1,)),  # kept dims outside the reduced one
        ((3, 70001), (1,)),  # inner sums with levels, a scalar tail, rows kept
        ((6, 131), (1,)),  # leftover vectors after row_sum's groups of 4
        ((9, 4), (1,)),  # shorter than a vector: the scalar kernel
        ((70001,), None),  # full sums above the grain size
        ((256, 784), None),
        ((64, 10), None),
        ((64, 256), (0,)),
        ((20, 35, 64), (1,)),
    ],
)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_kernels_cascade_levels_and_tails_match_torch_bitwise(shape, dims, dtype):
    # sizes chosen to reach every level of multi_row_sum and every tail of row_sum and the
    # inner/outer kernels, also with the dims given the other way round (a permuted view)
    a = _data(shape, sum(shape), dtype)
    x, t = autodiag.tensor(a), torch.from_numpy(a)
    if dims is None:
        assert np.array_equal(x.sum().numpy(), t.sum().numpy())
        return
    assert np.array_equal(x.sum(dims).numpy(), t.sum(dims).numpy())
    assert np.array_equal(x.mean(dims, keepdim=True).numpy(), t.mean(dims, keepdim=True).numpy())
    perm = tuple(reversed(range(len(shape))))
    flipped = tuple(len(shape) - 1 - d for d in dims)
    got = x.permute(perm).sum(flipped).numpy()
    assert np.array_equal(got, t.permute(perm).sum(flipped).numpy())


def test_broadcast_and_flipped_arrays_sum_as_their_contiguous_copies():
    # zero and negative strides (an expanded gradient, a flipped numpy view) are summed as
    # their contiguous copy: numpy would walk a flipped axis backwards
    a = _data((300, 40), 7)
    for view in (a[::-1], a[:, ::-1], np.broadcast_to(a[:1], (300, 40))):
        for axes in (None, (0,), (1,)):
            want = _cascade.cascade_sum(np.ascontiguousarray(view), axes)
            assert np.array_equal(_cascade.cascade_sum(view, axes), want), axes
    t = torch.from_numpy(np.ascontiguousarray(a[::-1]))
    assert np.array_equal(_cascade.cascade_sum(a[::-1], (0,)), t.sum(0).numpy())
