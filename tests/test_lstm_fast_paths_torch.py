"""The fast paths of an LSTM language-model step against PyTorch 2.13: the fused float32 LSTM
layer on its transposed, gate-permuted workspace (NOTE [Fused LSTM layout] in ops/recurrent.py)
and the embedding backward that adds rows in index order without ``np.add.at``.

The LSTM cases reach the corners of the arrays path that tests/test_rnn_torch.py does not:
gradients reaching only some outputs (no gradient for the output sequence, h_n or c_n),
sequences of one and two steps, the benchmark's sizes, and saturated gates (exp overflows).
"""

from __future__ import annotations

import numpy as np
import pytest
from test_ops_torch import TOL32
from test_rnn_torch import np_of, pair

import autodiag as ad

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.filterwarnings("ignore:TF32 acceleration on top of oneDNN")


def _run(lib, m, x, h, c, which):
    out, (hn, cn) = m(x, (h, c))
    parts = {"out": out, "hn": hn, "cn": cn}
    rng = np.random.default_rng(3)
    loss = 0
    for name in which:
        w = rng.standard_normal(tuple(parts[name].shape)).astype("float32")
        loss = loss + (parts[name] * lib.tensor(w)).sum()
    loss.backward()
    return out, hn, cn


@pytest.mark.parametrize(
    "which", [("out",), ("hn",), ("cn",), ("hn", "cn"), ("out", "hn", "cn")], ids="+".join
)
@pytest.mark.parametrize("seq", [1, 2, 7])
@pytest.mark.parametrize("bidirectional", [False, True], ids=["uni", "bi"])
def test_fused_lstm_values_and_gradients(which, seq, bidirectional):
    tm, am = pair("LSTM", "float32", 3, 5, bidirectional=bidirectional)
    rng = np.random.default_rng(seq)
    dirs = 2 if bidirectional else 1
    shapes = [(seq, 4, 3), (dirs, 4, 5), (dirs, 4, 5)]
    arrays = [rng.standard_normal(s).astype("float32") for s in shapes]
    tin = [torch.tensor(a, requires_grad=True) for a in arrays]
    ain = [ad.tensor(a, requires_grad=True) for a in arrays]
    touts = _run(torch, tm, *tin, which)
    aouts = _run(ad, am, *ain, which)
    fused = aouts[0].grad_fn if not bidirectional else aouts[0].grad_fn.next_functions[0][0]
    assert fused.name() == "MkldnnRnnLayerBackward0"
    for t, a in zip(touts, aouts):
        np.testing.assert_allclose(np_of(a), np_of(t), **TOL32)
    for t, a in zip(tin, ain):
        np.testing.assert_allclose(np_of(a.grad), np_of(t.grad), **TOL32)
    for (n, tp), (_, ap) in zip(tm.named_parameters(), am.named_parameters()):
        np.testing.assert_allclose(np_of(ap.grad), np_of(tp.grad), **TOL32, err_msg=n)


def test_fused_lstm_at_the_benchmarks_sizes():
    # tests/perf/bench_lstm.py: hidden 64, sequence 35, batch 20
    tm, am = pair("LSTM", "float32", 64, 64)
    rng = np.random.default_rng(0)
    shapes = [(35, 20, 64), (1, 20, 64), (1, 20, 64)]
    arrays = [rng.standard_normal(s).astype("float32") for s in shapes]
    tin = [torch.tensor(a, requires_grad=True) for a in arrays]
    ain = [ad.tensor(a, requires_grad=True) for a in arrays]
    touts = _run(torch, tm, *tin, ("out", "hn", "cn"))
    aouts = _run(ad, am, *ain, ("out", "hn", "cn"))
    tol = dict(rtol=1e-4, atol=1e-5)  # 35 steps of float32 rounding, in two libraries
    for t, a in zip(touts, aouts):
        np.testing.assert_allclose(np_of(a), np_of(t), **tol)
    for t, a in zip(tin, ain):
        np.testing.assert_allclose(np_of(a.grad), np_of(t.grad), **tol)
    for (n, tp), (_, ap) in zip(tm.named_parameters(), am.named_parameters()):
        np.testing.assert_allclose(np_of(ap.grad), np_of(tp.grad), **tol, err_msg=n)


def test_fused_lstm_with_saturated_gates():
    # pre-activations of +-1e4: exp(-z) overflows to inf (sigmoid exactly 0) or is 0 (exactly 1)
    tm, am = pair("LSTM", "float32", 2, 3)
    x = np.array([[[1e4, -1e4]], [[-1e4, 1e4]], [[0.5, -0.25]]], dtype="float32")
    tx, ax = torch.tensor(x, requires_grad=True), ad.tensor(x, requires_grad=True)
    to, (th, tc) = tm(tx)
    ao, (ah, ac) = am(ax)
    for t, a in ((to, ao), (th, ah), (tc, ac)):
        assert np.isfinite(np_of(a)).all()
        np.testing.assert_allclose(np_of(a), np_of(t), **TOL32)
    (to.sum() + tc.sum()).backward()
    (ao.sum() + ac.sum()).backward()
    np.testing.assert_allclose(np_of(ax.grad), np_of(tx.grad), **TOL32)


# ---------------------------------------------------------------------------------------------
# embedding backward: rows added in index order
# ---------------------------------------------------------------------------------------------


def _embedding_grads(lib, weight, idx, g, **kw):
    w = lib.tensor(weight, requires_grad=True)
    lib.nn.functional.embedding(lib.tensor(idx), w, **kw).backward(lib.tensor(g))
    return np_of(w.grad)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
# (scale_grad_by_freq is left out: PyTorch adds ``grad[i] * (1 / count)`` as one fused
# multiply-add, autodiag rounds the product first; they differ in the last bit)
@pytest.mark.parametrize("case", ["uniform", "one_row_repeated", "skewed", "padding_idx"])
def test_embedding_backward_is_pytorchs_bit_for_bit(case, dtype):
    rng = np.random.default_rng(5)
    n, dim = 65, 16
    idx = rng.integers(0, n, (35, 20))
    kw = {}
    if case == "one_row_repeated":
        idx = np.full((700,), 3)
    elif case == "skewed":  # one row takes half the indices: the np.add.at path
        idx = np.where(rng.random(700) < 0.5, 7, rng.integers(0, n, 700))
    elif case == "padding_idx":
        kw = {"padding_idx": 4}
    # magnitudes spread over six decades, so that the order of the additions shows
    g = rng.standard_normal(idx.shape + (dim,)) * 10.0 ** rng.uniform(-3, 3, idx.shape + (1,))
    g = g.astype(dtype)
    g[rng.random(g.shape) < 0.05] = -0.0
    weight = rng.standard_normal((n, dim)).astype(dtype)
    ours = _embedding_grads(ad, weight, idx, g, **kw)
    theirs = _embedding_grads(torch, weight, idx, g, **kw)
    assert ours.dtype == theirs.dtype
    np.testing.assert_array_equal(ours.view(f"u{ours.itemsize}"), theirs.view(f"u{ours.itemsize}"))
