"""Recurrent layers against PyTorch 2.13: ``nn.RNN``/``LSTM``/``GRU`` and their cells,
``unsafe_split``/``unsafe_chunk`` and ``nn.utils.rnn``.

Weights are copied from torch's module (the generators differ). Compared: outputs, final states,
gradients of the input, every weight and the initial states (float32 and float64), the grad_fn
graph (node names and ``next_functions``), parameter names/shapes/order, ``state_dict`` keys,
reprs, and errors (type and message). The graphs are PyTorch's default CPU graphs: composed
cells for RNN, GRU, the cells and float64/projected LSTMs, one fused ``MkldnnRnnLayerBackward0``
per layer and direction for a float32 LSTM.
"""

from __future__ import annotations

import gc
import math
import warnings
import weakref

import numpy as np
import pytest
from test_ops_torch import TOL32, TOL64, assert_same_graph

import autodiag as ad

torch = pytest.importorskip("torch")

# the oneDNN switch prints a TF32 note on some builds
pytestmark = pytest.mark.filterwarnings("ignore:TF32 acceleration on top of oneDNN")


def np_of(t) -> np.ndarray:
    return np.asarray(t.detach().numpy())


def copy_params(src, dst) -> None:
    sp, dp = dict(src.named_parameters()), dict(dst.named_parameters())
    assert list(sp) == list(dp)
    with ad.no_grad():
        for name, p in dp.items():
            assert tuple(p.shape) == tuple(sp[name].shape), name
            p.copy_(ad.tensor(np_of(sp[name])))


def pair(name, dtype, *args, **kwargs):
    """The same module in both libraries, autodiag's weights copied from torch's."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tm = getattr(torch.nn, name)(*args, **kwargs).to(getattr(torch, dtype))
        am = getattr(ad.nn, name)(*args, **kwargs).to(getattr(ad, dtype))
    copy_params(tm, am)
    return tm, am


def leaves(rng, dtype, *shapes):
    arrays = [rng.standard_normal(s).astype(dtype) for s in shapes]
    return (
        [torch.tensor(a, requires_grad=True) for a in arrays],
        [ad.tensor(a, requires_grad=True) for a in arrays],
    )


def flat(out):
    """(output, h) or (output, (h, c)) or h or (h, c) -> a flat list of tensors."""
    res = []
    stack = [out]
    while stack:
        o = stack.pop(0)
        if isinstance(o, tuple):
            stack[:0] = list(o)
        else:
            res.append(o)
    return res


def compare(tm, am, t_in, a_in, dtype, graph=True):
    """Run both, compare every output, then backward a weighted sum of all outputs and compare
    the gradients of the leaves and of every parameter."""
    tol = TOL32 if dtype == "float32" else TOL64
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        touts = flat(tm(*t_in))
        aouts = flat(am(*a_in))
    assert len(touts) == len(aouts)
    rng = np.random.default_rng(7)
    weights = [rng.standard_normal(tuple(t.shape)).astype(dtype) for t in touts]
    for i, (t, a) in enumerate(zip(touts, aouts)):
        assert tuple(a.shape) == tuple(t.shape), i
        assert a.dtype == getattr(ad, dtype)
        np.testing.assert_allclose(np_of(a), np_of(t), **tol, err_msg=f"output {i}")
        if graph:
            assert_same_graph(t.grad_fn, a.grad_fn, f"output {i}")
    tl = sum((t * torch.tensor(w)).sum() for t, w in zip(touts, weights))
    al = sum((a * ad.tensor(w)).sum() for a, w in zip(aouts, weights))
    tl.backward()
    al.backward()
    for i, (t, a) in enumerate(zip(flat(tuple(t_in)), flat(tuple(a_in)))):
        if t is None or not t.requires_grad:
            continue
        np.testing.assert_allclose(np_of(a.grad), np_of(t.grad), **tol, err_msg=f"input {i}")
    for (name, tp), (_, ap) in zip(tm.named_parameters(), am.named_parameters()):
        np.testing.assert_allclose(np_of(ap.grad), np_of(tp.grad), **tol, err_msg=name)


# ---------------------------------------------------------------------------------------------
# layers
# ---------------------------------------------------------------------------------------------

LAYER_CASES = [
    ("RNN", {}),
    ("RNN", {"nonlinearity": "relu"}),
    ("RNN", {"num_layers": 2, "bidirectional": True}),
    ("RNN", {"batch_first": True, "bias": False}),
    ("GRU", {}),
    ("GRU", {"num_layers": 3, "batch_first": True}),
    ("GRU", {"bidirectional": True, "bias": False}),
    ("LSTM", {}),
    ("LSTM", {"num_layers": 2, "bidirectional": True}),
    ("LSTM", {"batch_first": True}),
    ("LSTM", {"bias": False, "bidirectional": True, "batch_first": True}),
    ("LSTM", {"proj_size": 2}),
    ("LSTM", {"proj_size": 3, "num_layers": 2, "bidirectional": True}),
]
LAYER_IDS = [
    f"{n}-{'-'.join(f'{k}={v}' for k, v in kw.items()) or 'default'}" for n, kw in LAYER_CASES
]


def _state_shapes(name, kw, batch, batched=True):
    layers = kw.get("num_layers", 1) * (2 if kw.get("bidirectional") else 1)
    hidden = kw.get("proj_size") or 4
    lead = (layers, batch) if batched else (layers,)
    if name == "LSTM":
        return [(*lead, hidden), (*lead, 4)]
    return [(*lead, hidden)]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("with_state", [False, True], ids=["no-h0", "h0"])
@pytest.mark.parametrize("name,kw", LAYER_CASES, ids=LAYER_IDS)
def test_layer_values_gradients_and_graph(name, kw, with_state, dtype):
    rng = np.random.default_rng(0)
    tm, am = pair(name, dtype, 3, 4, **kw)
    seq, batch = 5, 2
    shape = (batch, seq, 3) if kw.get("batch_first") else (seq, batch, 3)
    shapes = [shape] + (_state_shapes(name, kw, batch) if with_state else [])
    tx, ax = leaves(rng, dtype, *shapes)
    t_in, a_in = [tx[0]], [ax[0]]
    if with_state:
        t_in.append(tuple(tx[1:]) if name == "LSTM" else tx[1])
        a_in.append(tuple(ax[1:]) if name == "LSTM" else ax[1])
    compare(tm, am, t_in, a_in, dtype)


@pytest.mark.parametrize("with_state", [False, True], ids=["no-h0", "h0"])
@pytest.mark.parametrize("name,kw", LAYER_CASES, ids=LAYER_IDS)
def test_layer_unbatched_input(name, kw, with_state):
    rng = np.random.default_rng(1)
    tm, am = pair(name, "float64", 3, 4, **kw)
    shapes = [(5, 3)] + (_state_shapes(name, kw, None, batched=False) if with_state else [])
    tx, ax = leaves(rng, "float64", *shapes)
    t_in, a_in = [tx[0]], [ax[0]]
    if with_state:
        t_in.append(tuple(tx[1:]) if name == "LSTM" else tx[1])
        a_in.append(tuple(ax[1:]) if name == "LSTM" else ax[1])
    compare(tm, am, t_in, a_in, "float64")


@pytest.mark.parametrize("name", ["RNN", "GRU"])
def test_rnn_and_gru_graph_is_pytorchs_default_cpu_graph(name):
    # no oneDNN switch needed: PyTorch composes RNN and GRU on CPU exactly as autodiag does
    tm, am = pair(name, "float32", 3, 4, num_layers=2, bidirectional=True, batch_first=True)
    x = np.ones((2, 5, 3), dtype="float32")
    to, th = tm(torch.tensor(x, requires_grad=True))
    ao, ah = am(ad.tensor(x, requires_grad=True))
    assert_same_graph(to.grad_fn, ao.grad_fn)
    assert_same_graph(th.grad_fn, ah.grad_fn)


@pytest.mark.parametrize(
    "dtype,kw,name",
    [
        ("float32", {}, "MkldnnRnnLayerBackward0"),
        ("float64", {}, "StackBackward0"),
        ("float32", {"proj_size": 2}, "StackBackward0"),
    ],
)
def test_lstm_node_is_fused_where_torchs_is(dtype, kw, name):
    tm, am = pair("LSTM", dtype, 3, 4, **kw)
    x = np.ones((5, 2, 3), dtype=dtype)
    to, (th, tc) = tm(torch.tensor(x, requires_grad=True))
    ao, (ah, ac) = am(ad.tensor(x, requires_grad=True))
    assert ao.grad_fn.name() == to.grad_fn.name() == name
    for t, a in ((to, ao), (th, ah), (tc, ac)):
        assert_same_graph(t.grad_fn, a.grad_fn)
    if name.startswith("Mkldnn"):
        assert ah.grad_fn.next_functions[0][1] == 1
        assert ac.grad_fn.next_functions[0][1] == 2


def test_fused_lstm_second_derivatives():
    tm, am = pair("LSTM", "float32", 3, 4, bidirectional=True)
    rng = np.random.default_rng(9)
    tx, ax = leaves(rng, "float32", (5, 2, 3), (2, 2, 4), (2, 2, 4))

    def run(lib, m, x, h, c):
        out, (hn, cn) = m(x, (h, c))
        loss = (out**2).sum() + (hn * cn).sum()
        gs = lib.autograd.grad(loss, (x, h, c), create_graph=True)
        sum((g**2).sum() for g in gs).backward()
        return gs

    for tg, ag in zip(run(torch, tm, *tx), run(ad, am, *ax)):
        np.testing.assert_allclose(np_of(ag), np_of(tg), **TOL32)
    for t, a in zip(tx, ax):
        np.testing.assert_allclose(np_of(a.grad), np_of(t.grad), rtol=1e-4, atol=1e-5)
    for (n, tp), (_, ap) in zip(tm.named_parameters(), am.named_parameters()):
        np.testing.assert_allclose(np_of(ap.grad), np_of(tp.grad), rtol=1e-4, atol=1e-5, err_msg=n)


def test_fused_lstm_detects_an_inplace_write_into_a_saved_input():
    am = ad.nn.LSTM(3, 4)
    x = ad.randn(5, 2, 3, requires_grad=True)
    y = x * 1
    out, _ = am(y)
    with ad.no_grad():
        y.add_(1)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        out.sum().backward()


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_long_sequence_backward_does_not_recurse_and_matches(dtype):
    tm, am = pair("LSTM", dtype, 2, 3)
    x = (np.random.default_rng(2).standard_normal((3000, 1, 2)) * 0.1).astype(dtype)
    tx, ax = torch.tensor(x, requires_grad=True), ad.tensor(x, requires_grad=True)
    tm(tx)[0][-1].sum().backward()
    am(ax)[0][-1].sum().backward()
    np.testing.assert_allclose(
        np_of(ax.grad), np_of(tx.grad), **(TOL32 if dtype == "float32" else TOL64)
    )


def test_dropping_the_output_frees_the_graph_without_gc():
    am = ad.nn.LSTM(3, 4, num_layers=2, bidirectional=True)
    was = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        out, (h, c) = am(ad.randn(4, 2, 3, requires_grad=True))
        refs, stack, seen = [], [out.grad_fn, h.grad_fn, c.grad_fn], set()
        while stack:
            n = stack.pop()
            if id(n) in seen:
                continue
            seen.add(id(n))
            refs.append(weakref.ref(n))
            stack.extend(f for f, _ in n.next_functions if f is not None)
        del out, h, c, n, stack
        alive = [
            r() for r in refs if r() is not None and "AccumulateGrad" not in type(r()).__name__
        ]
        assert alive == []
    finally:
        if was:
            gc.enable()


# ---------------------------------------------------------------------------------------------
# dropout between layers, train/eval
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["RNN", "GRU", "LSTM"])
def test_dropout_one_zeroes_the_next_layers_input_as_torch(name):
    # p = 1 is deterministic in both libraries: layer 2 sees zeros
    tm, am = pair(name, "float64", 3, 4, num_layers=2, dropout=1.0)
    rng = np.random.default_rng(3)
    tx, ax = leaves(rng, "float64", (5, 2, 3))
    compare(tm, am, tx, ax, "float64", graph=False)
    # and in eval mode no dropout at all
    tm.eval(), am.eval()
    tx, ax = leaves(rng, "float64", (5, 2, 3))
    compare(tm, am, tx, ax, "float64")


def test_dropout_between_layers_uses_autodiags_generator():
    lstm = ad.nn.LSTM(3, 4, num_layers=3, dropout=0.5)
    x = ad.randn(6, 2, 3)
    outs = []
    for _ in range(2):
        ad.manual_seed(123)
        outs.append(lstm(x)[0].detach().numpy())
    np.testing.assert_array_equal(outs[0], outs[1])
    ad.manual_seed(124)
    assert not np.array_equal(lstm(x)[0].detach().numpy(), outs[0])
    lstm.eval()
    np.testing.assert_array_equal(lstm(x)[0].detach().numpy(), lstm(x)[0].detach().numpy())


def test_dropout_with_one_layer_warns_as_torch():
    with pytest.warns(UserWarning, match="num_layers greater than 1, but got dropout=0.5"):
        ad.nn.GRU(3, 4, dropout=0.5)


# ---------------------------------------------------------------------------------------------
# cells
# ---------------------------------------------------------------------------------------------

CELL_CASES = [
    ("RNNCell", {}),
    ("RNNCell", {"nonlinearity": "relu"}),
    ("RNNCell", {"bias": False}),
    ("LSTMCell", {}),
    ("LSTMCell", {"bias": False}),
    ("GRUCell", {}),
    ("GRUCell", {"bias": False}),
]
CELL_IDS = [
    f"{n}-{'-'.join(f'{k}={v}' for k, v in kw.items()) or 'default'}" for n, kw in CELL_CASES
]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("mode", ["batched-h0", "batched", "unbatched-h0", "unbatched"])
@pytest.mark.parametrize("name,kw", CELL_CASES, ids=CELL_IDS)
def test_cell(name, kw, mode, dtype):
    rng = np.random.default_rng(4)
    tm, am = pair(name, dtype, 3, 4, **kw)
    lead = (2,) if mode.startswith("batched") else ()
    n_states = 0 if not mode.endswith("h0") else 2 if name == "LSTMCell" else 1
    tx, ax = leaves(rng, dtype, (*lead, 3), *[(*lead, 4)] * n_states)
    t_in, a_in = [tx[0]], [ax[0]]
    if n_states == 2:
        t_in.append(tuple(tx[1:]))
        a_in.append(tuple(ax[1:]))
    elif n_states == 1:
        t_in.append(tx[1])
        a_in.append(ax[1])
    compare(tm, am, t_in, a_in, dtype)


@pytest.mark.parametrize("name", ["RNNCell", "LSTMCell", "GRUCell"])
def test_cell_second_derivatives(name):
    tm, am = pair(name, "float64", 2, 3)
    rng = np.random.default_rng(5)
    tx, ax = leaves(rng, "float64", (2, 2))

    def run(lib, m, x):
        out = m(x)
        out = out[0] if isinstance(out, tuple) else out
        (g,) = lib.autograd.grad((out**2).sum(), x, create_graph=True)
        (g * g).sum().backward()
        return g

    tg, ag = run(torch, tm, tx[0]), run(ad, am, ax[0])
    np.testing.assert_allclose(np_of(ag), np_of(tg), **TOL64)
    np.testing.assert_allclose(np_of(ax[0].grad), np_of(tx[0].grad), **TOL64)
    np.testing.assert_allclose(np_of(am.weight_hh.grad), np_of(tm.weight_hh.grad), **TOL64)


# ---------------------------------------------------------------------------------------------
# parameters, state_dict, repr, init
# ---------------------------------------------------------------------------------------------

MODULES = [
    ("RNN", (3, 4), {}),
    ("RNN", (3, 4, 2, "relu"), {"bias": False, "batch_first": True}),
    ("LSTM", (3, 4), {"num_layers": 2, "bidirectional": True, "dropout": 0.25}),
    ("LSTM", (3, 4), {"proj_size": 2, "num_layers": 2}),
    ("GRU", (3, 4), {"bias": False, "bidirectional": True}),
    ("RNNCell", (3, 4), {"nonlinearity": "relu"}),
    ("RNNCell", (3, 4), {"bias": False}),
    ("LSTMCell", (3, 4), {}),
    ("GRUCell", (3, 4), {"bias": False}),
]


@pytest.mark.parametrize(
    "name,args,kw", MODULES, ids=[m[0] + str(i) for i, m in enumerate(MODULES)]
)
def test_parameters_state_dict_and_repr(name, args, kw):
    tm = getattr(torch.nn, name)(*args, **kw)
    am = getattr(ad.nn, name)(*args, **kw)
    assert [(n, tuple(p.shape)) for n, p in am.named_parameters()] == [
        (n, tuple(p.shape)) for n, p in tm.named_parameters()
    ]
    assert list(am.state_dict()) == list(tm.state_dict())
    assert repr(am) == repr(tm)
    if hasattr(tm, "_flat_weights_names"):
        assert am._flat_weights_names == tm._flat_weights_names
        assert [[tuple(w.shape) for w in ws] for ws in am.all_weights] == [
            [tuple(w.shape) for w in ws] for ws in tm.all_weights
        ]
    # load torch's state_dict into autodiag's module
    am.load_state_dict({k: ad.tensor(v.numpy()) for k, v in tm.state_dict().items()})
    for (n, tp), (_, ap) in zip(tm.named_parameters(), am.named_parameters()):
        np.testing.assert_array_equal(np_of(ap), np_of(tp.detach()), err_msg=n)


@pytest.mark.parametrize("name", ["RNN", "LSTM", "GRU", "RNNCell", "LSTMCell", "GRUCell"])
def test_default_init_is_uniform_within_one_over_sqrt_hidden(name):
    m = getattr(ad.nn, name)(10, 16)
    bound = 1 / math.sqrt(16)
    values = np.concatenate([np_of(p).ravel() for p in m.parameters()])
    assert np.abs(values).max() <= bound
    # U(-b, b) has standard deviation b / sqrt(3)
    assert abs(values.std() - bound / math.sqrt(3)) < 0.1 * bound
    ad.manual_seed(0)
    a = [np_of(p) for p in getattr(ad.nn, name)(10, 16).parameters()]
    ad.manual_seed(0)
    b = [np_of(p) for p in getattr(ad.nn, name)(10, 16).parameters()]
    assert all(np.array_equal(x, y) for x, y in zip(a, b))


def test_flatten_parameters_is_accepted():
    ad.nn.LSTM(3, 4).flatten_parameters()


# ---------------------------------------------------------------------------------------------
# errors: PyTorch's type and message
# ---------------------------------------------------------------------------------------------

CTOR_ERRORS = [
    ("LSTM", (3, 4), {"dropout": 2}),
    ("LSTM", (3, 4), {"dropout": True}),
    ("GRU", (3, 0), {}),
    ("GRU", (0, 4), {}),
    ("RNN", (3, 4), {"num_layers": 0}),
    ("RNN", (3, 4), {"nonlinearity": "sigmoid"}),
    ("RNN", (3, 4), {"proj_size": 2}),
    ("GRU", (3, 4), {"proj_size": 2}),
    ("LSTM", (3, 4), {"proj_size": 4}),
    ("LSTM", (3, 4), {"proj_size": -1}),
    ("LSTM", (3, 4), {"bias": 1}),
    ("LSTM", (3.0, 4), {}),
]


def _error(fn):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            fn()
        except Exception as e:  # noqa: BLE001 - the error itself is what is compared
            return type(e), str(e)
    return None


@pytest.mark.parametrize("name,args,kw", CTOR_ERRORS, ids=[str(i) for i in range(len(CTOR_ERRORS))])
def test_constructor_errors(name, args, kw):
    expected = _error(lambda: getattr(torch.nn, name)(*args, **kw))
    assert expected is not None
    assert _error(lambda: getattr(ad.nn, name)(*args, **kw)) == expected


FORWARD_ERRORS = [
    ("LSTM", {}, lambda L: (L.zeros(5, 2, 2),)),
    ("LSTM", {}, lambda L: (L.zeros(2, 5, 2, 3),)),
    ("LSTM", {}, lambda L: (L.zeros(5, 2, 3), (L.zeros(1, 3, 4), L.zeros(1, 2, 4)))),
    ("LSTM", {}, lambda L: (L.zeros(5, 2, 3), (L.zeros(1, 2, 4), L.zeros(1, 2, 5)))),
    ("LSTM", {}, lambda L: (L.zeros(5, 2, 3), (L.zeros(2, 4), L.zeros(2, 4)))),
    ("LSTM", {}, lambda L: (L.zeros(5, 3), (L.zeros(1, 1, 4), L.zeros(1, 1, 4)))),
    ("LSTM", {}, lambda L: (L.zeros(5, 2, 3, dtype=L.float64),)),
    ("LSTM", {}, lambda L: (L.zeros(0, 2, 3),)),
    ("RNN", {}, lambda L: (L.zeros(5, 2, 3, 1),)),
    ("RNN", {}, lambda L: (L.zeros(5, 2, 3), L.zeros(2, 2, 4))),
    ("RNN", {}, lambda L: (L.zeros(5, 3), L.zeros(1, 1, 4))),
    ("RNN", {}, lambda L: (L.zeros(5, 2, 3), L.zeros(2, 4))),
    ("GRU", {}, lambda L: (L.zeros(5, 2, 3, 1),)),
    ("GRU", {"batch_first": True}, lambda L: (L.zeros(2, 5, 3), L.zeros(1, 5, 4))),
    ("RNNCell", {}, lambda L: (L.zeros(2, 2, 3),)),
    ("RNNCell", {}, lambda L: (L.zeros(2, 3), L.zeros(1, 2, 4))),
    ("RNNCell", {}, lambda L: (L.zeros(2, 5),)),
    ("RNNCell", {}, lambda L: (L.zeros(2, 3), L.zeros(3, 4))),
    ("RNNCell", {"nonlinearity": "gelu"}, lambda L: (L.zeros(2, 3),)),
    ("GRUCell", {}, lambda L: (L.zeros(2, 3), L.zeros(2, 5))),
    ("GRUCell", {}, lambda L: (L.zeros(2, 2, 3),)),
    ("LSTMCell", {}, lambda L: (L.zeros(2, 3), (L.zeros(2, 4), L.zeros(1, 2, 4)))),
    ("LSTMCell", {}, lambda L: (L.zeros(2, 3), (L.zeros(3, 4), L.zeros(3, 4)))),
    ("LSTMCell", {}, lambda L: (L.zeros(2, 3), (L.zeros(2, 4), L.zeros(2, 5)))),
    ("LSTMCell", {}, lambda L: (L.zeros(2, 7),)),
]


@pytest.mark.parametrize(
    "name,kw,make", FORWARD_ERRORS, ids=[str(i) for i in range(len(FORWARD_ERRORS))]
)
def test_forward_errors(name, kw, make):
    tm, am = pair(name, "float32", 3, 4, **kw)
    if name == "RNNCell" and "nonlinearity" in kw:
        tm.nonlinearity = am.nonlinearity = kw["nonlinearity"]
    expected = _error(lambda: tm(*make(torch)))
    assert expected is not None
    assert _error(lambda: am(*make(ad))) == expected


@pytest.mark.parametrize(
    "name,states",
    [
        ("LSTM", lambda L: (L.zeros(1, 2, 4, dtype=L.float64), L.zeros(1, 2, 4))),
        ("LSTM", lambda L: (L.zeros(1, 2, 4), L.zeros(1, 2, 4, dtype=L.float64))),
        ("GRU", lambda L: L.zeros(1, 2, 4, dtype=L.float64)),
        ("RNN", lambda L: L.zeros(1, 2, 4, dtype=L.float64)),
    ],
)
def test_initial_states_of_another_dtype_are_refused(name, states):
    # PyTorch raises RuntimeError ("get_mkldnn_dtype: unsupported data type" for the fused
    # LSTM, "mat1 and mat2 must have the same dtype" for the composed layers)
    tm, am = pair(name, "float32", 3, 4)
    with pytest.raises(RuntimeError):
        tm(torch.zeros(5, 2, 3), states(torch))
    with pytest.raises(RuntimeError, match="dtype"):
        am(ad.zeros(5, 2, 3), states(ad))


# ---------------------------------------------------------------------------------------------
# unsafe_split / unsafe_chunk
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "fn",
    [
        lambda L, x: L.unsafe_chunk(x, 3, 1),
        lambda L, x: x.unsafe_chunk(2, 0),
        lambda L, x: L.unsafe_split(x, 2, 1),
        lambda L, x: x.unsafe_split(4, 1),
        lambda L, x: L.unsafe_chunk(x, 7, -1),
    ],
)
def test_unsafe_split_and_chunk(fn):
    rng = np.random.default_rng(6)
    tx, ax = leaves(rng, "float64", (4, 5))
    touts, aouts = fn(torch, tx[0]), fn(ad, ax[0])
    assert len(touts) == len(aouts)
    for t, a in zip(touts, aouts):
        np.testing.assert_array_equal(np_of(a), np_of(t))
        assert a.grad_fn.name() == t.grad_fn.name()
        assert a._base is None and t._base is None
    # gradient reaches only the pieces used (the others contribute zeros)
    (touts[0] * 2).sum().backward()
    (aouts[0] * 2).sum().backward()
    np.testing.assert_array_equal(np_of(ax[0].grad), np_of(tx[0].grad))


def test_unsafe_split_takes_an_int_only():
    with pytest.raises(TypeError, match="must be int, not list"):
        torch.unsafe_split(torch.zeros(4), [1, 3])
    with pytest.raises(TypeError, match="'split_size' must be int, not list"):
        ad.unsafe_split(ad.zeros(4), [1, 3])


def test_unsafe_chunk_of_an_empty_dim():
    tx, ax = torch.zeros(0, 3, requires_grad=True), ad.zeros(0, 3, requires_grad=True)
    tp, ap = torch.unsafe_chunk(tx, 3), ad.unsafe_chunk(ax, 3)
    assert [(tuple(p.shape), p.grad_fn.name()) for p in ap] == [
        (tuple(p.shape), p.grad_fn.name()) for p in tp
    ]


def test_writing_into_an_unsafe_piece_never_changes_the_input():
    x = ad.arange(6.0)
    a, _ = ad.unsafe_chunk(x, 2)
    a.add_(1)
    assert x.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]


# ---------------------------------------------------------------------------------------------
# nn.utils.rnn
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("side", ["right", "left"])
def test_pad_sequence(batch_first, side):
    rng = np.random.default_rng(8)
    tx, ax = leaves(rng, "float64", (3, 2), (1, 2), (4, 2))
    kw = {"batch_first": batch_first, "padding_value": -1.5, "padding_side": side}
    tp = torch.nn.utils.rnn.pad_sequence(tx, **kw)
    ap = ad.nn.utils.rnn.pad_sequence(ax, **kw)
    np.testing.assert_array_equal(np_of(ap), np_of(tp))
    assert_same_graph(tp.grad_fn, ap.grad_fn)
    w = rng.standard_normal(tuple(tp.shape))
    (tp * torch.tensor(w)).sum().backward()
    (ap * ad.tensor(w)).sum().backward()
    for t, a in zip(tx, ax):
        np.testing.assert_array_equal(np_of(a.grad), np_of(t.grad))


def test_pad_sequence_of_a_tensor_and_errors():
    x = np.arange(6.0).reshape(3, 2)
    tp = torch.nn.utils.rnn.pad_sequence(torch.tensor(x))
    ap = ad.nn.utils.rnn.pad_sequence(ad.tensor(x))
    np.testing.assert_array_equal(np_of(ap), np_of(tp))
    for args, kw in [(([],), {}), (([torch.zeros(2)],), {"padding_side": "mid"})]:
        expected = _error(lambda: torch.nn.utils.rnn.pad_sequence(*args, **kw))
        a_args = tuple([ad.zeros(2) for _ in a] if isinstance(a, list) else a for a in args)
        assert _error(lambda: ad.nn.utils.rnn.pad_sequence(*a_args, **kw)) == expected


# Packed sequences (pack_padded_sequence & co. through the layers): tests/test_packed_torch.py


def test_recurrent_layers_under_the_torch_alias():
    from autodiag.torch_alias import torch_alias

    with torch_alias():
        import torch as alias
        from torch.nn.utils.rnn import pad_sequence

        lstm = alias.nn.LSTM(2, 3, batch_first=True)
        out, (h, c) = lstm(pad_sequence([alias.ones(3, 2), alias.ones(1, 2)], batch_first=True))
        assert isinstance(lstm, ad.nn.LSTM) and tuple(out.shape) == (2, 3, 3)
