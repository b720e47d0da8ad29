"""Packed sequences against PyTorch 2.13: pack_padded_sequence / pack_sequence /
pad_packed_sequence / unpack_sequence, and PackedSequence through RNN/LSTM/GRU (layers,
bidirectional, batch_first, proj_size, given or default initial states, enforce_sorted): the
packed data, batch_sizes and permutations, outputs, h_n (c_n) at each sequence's own last step,
gradients, second gradients, errors.

Node names: PyTorch's packed path runs the composed cells (RNN.cpp's PackedLayer, no fused
oneDNN LSTM), and so does autodiag's; the recorded graphs are compared node for node below.
"""

from __future__ import annotations

import numpy as np
import pytest
from differential import same_error
from test_attention_torch import _graph

import autodiag as ad

torch = pytest.importorskip("torch")

R = np.random.default_rng(0)
X = R.standard_normal((5, 4, 3))
H = R.standard_normal((4, 4, 4))


def _pack_args(lens, batch_first, enforce_sorted):
    return lens, batch_first, enforce_sorted


@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize(
    ("lens", "enforce_sorted"),
    [([5, 4, 2, 1], True), ([5, 5, 5, 5], True), ([2, 5, 1, 4], False), ([3, 3, 1, 3], False)],
)
def test_pack_and_pad_match_torch(lens, enforce_sorted, batch_first):
    res = []
    for T in (ad, torch):
        x = T.tensor(X.transpose(1, 0, 2) if batch_first else X, requires_grad=True)
        p = T.nn.utils.rnn.pack_padded_sequence(x, lens, batch_first, enforce_sorted)
        out, lengths = T.nn.utils.rnn.pad_packed_sequence(
            p, batch_first=batch_first, padding_value=-7.0, total_length=6
        )
        w = T.tensor(R_W[: out.numel()].reshape(out.shape))
        (out * w).sum().backward()
        idx = [None if t is None else t.numpy() for t in (p.sorted_indices, p.unsorted_indices)]
        res.append(
            dict(
                data=p.data.detach().numpy(),
                batch_sizes=p.batch_sizes.numpy(),
                idx=idx,
                out=out.detach().numpy(),
                lengths=lengths.numpy(),
                grad=x.grad.numpy(),
                graph=_graph(out),
                data_node=p.data.grad_fn.name(),
            )
        )
    a, t = res
    for k in ("data", "batch_sizes", "out", "lengths", "grad"):
        np.testing.assert_array_equal(a[k], t[k], err_msg=k)
        assert a[k].dtype == t[k].dtype, k
    for i, j in zip(a["idx"], t["idx"], strict=True):
        assert (i is None) == (j is None)
        if i is not None:
            np.testing.assert_array_equal(i, j)
    assert a["graph"] == t["graph"]
    assert a["data_node"] == t["data_node"] == "PackPaddedSequenceBackward0"


R_W = R.standard_normal(1000)


def test_pack_sequence_and_unpack_sequence_match_torch():
    seqs = [X[:3, 0], X[:5, 1], X[:1, 2]]
    res = []
    for T in (ad, torch):
        ts = [T.tensor(s, requires_grad=True) for s in seqs]
        p = T.nn.utils.rnn.pack_sequence(ts, enforce_sorted=False)
        back = T.nn.utils.rnn.unpack_sequence(p)
        sum((b * b).sum() for b in back).backward()
        res.append(
            ([b.detach().numpy() for b in back], [t.grad.numpy() for t in ts], p.batch_sizes)
        )
    for x, y in zip(res[0][0] + res[0][1], res[1][0] + res[1][1], strict=True):
        np.testing.assert_array_equal(x, y)
    assert res[0][2].tolist() == res[1][2].tolist() == [3, 2, 2, 1, 1]


def _pair(T_name, mode, kw, dtype):
    torch.manual_seed(0)
    t = getattr(torch.nn, mode)(3, 4, **kw).to(getattr(torch, dtype))
    a = getattr(ad.nn, mode)(3, 4, **kw).to(getattr(ad, dtype))
    a.load_state_dict({k: ad.tensor(v.detach().numpy()) for k, v in t.state_dict().items()})
    return a, t


def _run(T, m, mode, kw, dtype, lens, enforce_sorted, with_hx, create_graph=False):
    bf = kw.get("batch_first", False)
    x = T.tensor((X.transpose(1, 0, 2) if bf else X).astype(dtype), requires_grad=True)
    p = T.nn.utils.rnn.pack_padded_sequence(x, lens, bf, enforce_sorted)
    hx = None
    leaves = [x]
    if with_hx:
        dirs = 2 if kw.get("bidirectional") else 1
        n = kw.get("num_layers", 1) * dirs
        size = kw.get("proj_size", 0) or 4
        h0 = T.tensor(H[:n, :, :size].astype(dtype), requires_grad=True)
        hx = h0
        leaves.append(h0)
        if mode == "LSTM":
            c0 = T.tensor(H[:n, ::-1, :4].copy().astype(dtype), requires_grad=True)
            hx = (h0, c0)
            leaves.append(c0)
    o, h = m(p, hx)
    assert isinstance(o, T.nn.utils.rnn.PackedSequence)
    out, _ = T.nn.utils.rnn.pad_packed_sequence(o, batch_first=bf)
    states = h if isinstance(h, tuple) else (h,)
    loss = (out * out).sum() + sum((s**3).sum() for s in states)
    grads = T.autograd.grad(loss, leaves + list(m.parameters()), create_graph=create_graph)
    return out, states, grads, o


CONFIGS = [
    ("RNN", {}),
    ("RNN", {"nonlinearity": "relu", "num_layers": 2}),
    ("GRU", {}),
    ("GRU", {"bidirectional": True, "batch_first": True}),
    ("LSTM", {}),
    ("LSTM", {"num_layers": 2, "bidirectional": True}),
    ("LSTM", {"proj_size": 2, "bidirectional": True, "batch_first": True}),
    ("GRU", {"num_layers": 3, "bias": False}),
]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize(
    ("lens", "enforce_sorted", "with_hx"),
    [([5, 4, 2, 1], True, False), ([2, 5, 1, 4], False, True), ([4, 4, 4, 4], True, True)],
)
@pytest.mark.parametrize(("mode", "kw"), CONFIGS, ids=[f"{m}-{kw}" for m, kw in CONFIGS])
def test_recurrent_layers_on_packed_batches_match_torch(
    mode, kw, lens, enforce_sorted, with_hx, dtype
):
    a, t = _pair(None, mode, kw, dtype)
    ra = _run(ad, a, mode, kw, dtype, lens, enforce_sorted, with_hx)
    rt = _run(torch, t, mode, kw, dtype, lens, enforce_sorted, with_hx)
    tol = 1e-5 if dtype == "float32" else 1e-12
    np.testing.assert_allclose(ra[0].detach().numpy(), rt[0].detach().numpy(), rtol=tol, atol=tol)
    for s, u in zip(ra[1], rt[1], strict=True):
        # each sequence's final state is its own last step's, in the caller's batch order
        np.testing.assert_allclose(s.detach().numpy(), u.detach().numpy(), rtol=tol, atol=tol)
    for g, h in zip(ra[2], rt[2], strict=True):
        np.testing.assert_allclose(g.numpy(), h.numpy(), rtol=tol * 10, atol=tol * 10)
    assert _graph(ra[3].data) == _graph(rt[3].data)
    assert _graph(ra[1][0]) == _graph(rt[1][0])


def test_final_state_is_each_sequences_last_step():
    """Without torch's word for it: h_n of a sequence equals the output at its last step."""
    m = ad.nn.GRU(3, 4).double()
    lens = [2, 5, 1, 4]
    p = ad.nn.utils.rnn.pack_padded_sequence(ad.tensor(X), lens, enforce_sorted=False)
    o, h = m(p)
    out, _ = ad.nn.utils.rnn.pad_packed_sequence(o)
    for b, n in enumerate(lens):
        np.testing.assert_array_equal(h[0, b].detach().numpy(), out[n - 1, b].detach().numpy())
        assert (out[n:, b] == 0).all()


@pytest.mark.parametrize("mode", ["GRU", "LSTM"])
def test_second_gradients_match_torch(mode):
    kw = {"bidirectional": True}
    a, t = _pair(None, mode, kw, "float64")
    res = []
    for T, m in ((ad, a), (torch, t)):
        _, _, grads, _ = _run(T, m, mode, kw, "float64", [2, 5, 1, 4], False, True, True)
        gx = grads[0]
        res.append(T.autograd.grad((gx * gx).sum(), list(m.parameters())))
    for g, h in zip(*res, strict=True):
        np.testing.assert_allclose(g.detach().numpy(), h.detach().numpy(), rtol=1e-9, atol=1e-10)


def test_pack_padded_sequence_double_backward_through_its_node():
    res = []
    for T in (ad, torch):
        x = T.tensor(X, requires_grad=True)
        p = T.nn.utils.rnn.pack_padded_sequence(x, [5, 4, 2, 1])
        (g,) = T.autograd.grad((p.data**3).sum(), x, create_graph=True)
        (gg,) = T.autograd.grad((g * g).sum(), x)
        res.append(gg.numpy())
    np.testing.assert_allclose(res[0], res[1], rtol=1e-12)


def test_packed_sequence_is_a_tuple_with_torchs_fields_and_methods():
    p = ad.nn.utils.rnn.pack_sequence([ad.ones(2, 3), ad.ones(1, 3)])
    data, batch_sizes, sorted_indices, unsorted_indices = p
    assert p._fields == torch.nn.utils.rnn.PackedSequence._fields
    assert sorted_indices is None and unsorted_indices is None
    assert p.double().data.dtype == ad.float64 and p.double().batch_sizes is batch_sizes
    assert p.float() is p and not p.is_cuda
    q = ad.nn.utils.rnn.PackedSequence((data, batch_sizes))
    assert q.data is data
    inv = ad.nn.utils.rnn.invert_permutation(ad.tensor([2, 0, 1]))
    assert inv.tolist() == torch.nn.utils.rnn.invert_permutation(torch.tensor([2, 0, 1])).tolist()


ERRORS = [
    (
        "unsorted",
        lambda T: T.nn.utils.rnn.pack_padded_sequence(T.ones(5, 3, 2), [2, 5, 1]),
    ),
    (
        "zero_length",
        lambda T: T.nn.utils.rnn.pack_padded_sequence(T.ones(5, 3, 2), [5, 2, 0]),
    ),
    (
        "lengths_count",
        lambda T: T.nn.utils.rnn.pack_padded_sequence(T.ones(5, 3, 2), [5, 2]),
    ),
    (
        "total_length",
        lambda T: T.nn.utils.rnn.pad_packed_sequence(
            T.nn.utils.rnn.pack_padded_sequence(T.ones(5, 3, 2), [5, 2, 1]), total_length=3
        ),
    ),
    (
        "hidden_size",
        lambda T: T.nn.GRU(2, 4)(
            T.nn.utils.rnn.pack_padded_sequence(T.ones(5, 3, 2), [5, 2, 1]), T.zeros(1, 2, 4)
        ),
    ),
    (
        "input_size",
        lambda T: T.nn.GRU(3, 4)(T.nn.utils.rnn.pack_padded_sequence(T.ones(5, 3, 2), [5, 2, 1])),
    ),
]


@pytest.mark.parametrize("fn", [e[1] for e in ERRORS], ids=[e[0] for e in ERRORS])
def test_errors_match_torch(fn):
    ea, et = same_error(fn, torch)
    assert str(ea) == str(et)


@pytest.mark.parametrize(
    "hx",
    [((1, 1, 4), (1, 1, 4)), ((1, 2, 4), (1, 3, 4)), ((2, 3, 4), (2, 3, 4)), None],
    ids=["broadcastable", "batch", "layers", "input_size"],
)
def test_lstm_packed_shape_errors_are_runtime_errors_naming_the_size(hx):
    """PyTorch's LSTM skips the module's size checks on a packed batch and fails inside its
    kernel ("output with shape [1, 16] doesn't match the broadcast shape [3, 16]", "mat1 and
    mat2 shapes cannot be multiplied"); autodiag runs the checks the padded path runs, so the
    same RuntimeError names the expected and the given size."""
    for T in (ad, torch):
        p = T.nn.utils.rnn.pack_padded_sequence(T.ones(5, 3, 2), [5, 2, 1])
        m = T.nn.LSTM(2 if hx is not None else 3, 4)
        with pytest.raises(RuntimeError) as e:
            m(p, None if hx is None else (T.zeros(*hx[0]), T.zeros(*hx[1])))
        if T is ad:
            assert "Expected hidden" in str(e.value) or "input_size" in str(e.value)
