"""Differential tests of ``autodiag.nn`` against ``torch.nn`` (the oracle).

Each test builds the same module in both libraries (autodiag's weights copied from torch's), then
compares what a user sees: reprs, parameter names and orders, forward values and gradients in
float32 and float64, grad_fn graphs, hook calls (order and arguments), state_dict contents and
error messages. The ops themselves (linear, losses, layer_norm ...) have their rows in
test_ops_torch.py; this file is about modules.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from test_ops_torch import TOL32, TOL64, assert_same_graph

import autodiag as ad

# ---------------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------------


def np_of(t) -> np.ndarray:
    return np.asarray(t.detach().numpy())


def copy_params(src, dst) -> None:
    """Copy torch module ``src``'s parameters into autodiag module ``dst`` (same names)."""
    sp, dp = dict(src.named_parameters()), dict(dst.named_parameters())
    assert list(sp) == list(dp)
    with ad.no_grad():
        for name, p in dp.items():
            p.copy_(ad.tensor(np_of(sp[name])))


def build(lib, factory, dtype):
    torch_dt = getattr(lib, dtype)
    return factory(lib).to(torch_dt)


def tol(dtype: str) -> dict:
    return TOL32 if dtype == "float32" else TOL64


# ---------------------------------------------------------------------------------------------
# reprs
# ---------------------------------------------------------------------------------------------

REPRS = [
    lambda nn: nn.Linear(3, 2),
    lambda nn: nn.Linear(3, 2, bias=False),
    lambda nn: nn.ReLU(),
    lambda nn: nn.ReLU(inplace=True),
    lambda nn: nn.LeakyReLU(0.2, inplace=True),
    lambda nn: nn.Sigmoid(),
    lambda nn: nn.Tanh(),
    lambda nn: nn.GELU(),
    lambda nn: nn.GELU(approximate="tanh"),
    lambda nn: nn.Softplus(beta=2.0),
    lambda nn: nn.Softmax(dim=1),
    lambda nn: nn.LogSoftmax(-1),
    lambda nn: nn.Dropout(),
    lambda nn: nn.Dropout(0.2, inplace=True),
    lambda nn: nn.LayerNorm(4),
    lambda nn: nn.LayerNorm((4, 5), eps=1e-6, elementwise_affine=False),
    lambda nn: nn.LayerNorm(4, bias=False),
    lambda nn: nn.Embedding(10, 3),
    lambda nn: nn.Embedding(10, 3, padding_idx=-1, max_norm=1.0, scale_grad_by_freq=True),
    lambda nn: nn.MSELoss(),
    lambda nn: nn.CrossEntropyLoss(label_smoothing=0.1),
    lambda nn: nn.NLLLoss(),
    lambda nn: nn.BCEWithLogitsLoss(),
    lambda nn: nn.Identity(),
    lambda nn: nn.Flatten(),
    lambda nn: nn.Sequential(),
    lambda nn: nn.Sequential(nn.Linear(2, 3), nn.Sequential(nn.ReLU(), nn.Linear(3, 1))),
    lambda nn: nn.ModuleList([nn.ReLU(), nn.ReLU(), nn.Tanh(), nn.Linear(2, 2)]),
    lambda nn: nn.ModuleList(),
]


@pytest.mark.parametrize("i", range(len(REPRS)))
def test_module_repr(torch, i):
    assert repr(REPRS[i](ad.nn)) == repr(REPRS[i](torch.nn))


def test_custom_module_repr_and_names(torch):
    def make(lib):
        nn = lib.nn

        class Block(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(3, 3)
                self.norm = nn.LayerNorm(3)
                self.register_buffer("scale", lib.ones(3))
                self.register_buffer("tmp", lib.zeros(1), persistent=False)

            def forward(self, x):
                return self.norm(self.fc(x)) * self.scale

        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.blocks = nn.ModuleList([Block(), Block()])
                self.shared = self.blocks[0]  # the same module reachable twice
                self.head = nn.Linear(3, 1, bias=False)

            def forward(self, x):
                for b in self.blocks:
                    x = b(x)
                return self.head(x)

        return Net()

    t, a = make(torch), make(ad)
    assert repr(a) == repr(t)
    assert [n for n, _ in a.named_parameters()] == [n for n, _ in t.named_parameters()]
    assert [n for n, _ in a.named_buffers()] == [n for n, _ in t.named_buffers()]
    assert [n for n, _ in a.named_modules()] == [n for n, _ in t.named_modules()]
    assert [n for n, _ in a.named_modules(remove_duplicate=False)] == [
        n for n, _ in t.named_modules(remove_duplicate=False)
    ]
    assert [n for n, _ in a.named_children()] == [n for n, _ in t.named_children()]
    assert [n for n, _ in a.named_parameters(prefix="m", recurse=False)] == [
        n for n, _ in t.named_parameters(prefix="m", recurse=False)
    ]
    assert list(a.state_dict()) == list(t.state_dict())
    assert len(list(a.parameters())) == len(list(t.parameters()))
    assert {"blocks", "shared", "head"} <= set(dir(a))


def test_parameter(torch):
    for lib in (torch, ad):
        p = lib.nn.Parameter(lib.tensor([1.0, 2.0]))
        assert p.is_leaf and p.requires_grad
        assert type(p * 2) is lib.Tensor and type(p.detach()) is lib.Tensor
        assert isinstance(p, lib.Tensor)
    t = torch.nn.Parameter(torch.tensor([1.0, 2.0], dtype=torch.float64))
    a = ad.nn.Parameter(ad.tensor([1.0, 2.0], dtype=ad.float64))
    assert repr(a) == repr(t)
    assert repr(ad.nn.Parameter(ad.tensor([1.5]), requires_grad=False)) == repr(
        torch.nn.Parameter(torch.tensor([1.5]), requires_grad=False)
    )
    # shares storage with the tensor it wraps
    base = ad.zeros(2)
    p = ad.nn.Parameter(base)
    with ad.no_grad():
        p.add_(1)
    assert base.tolist() == [1.0, 1.0]
    with pytest.raises(RuntimeError, match="floating point"):
        ad.nn.Parameter(ad.tensor([1, 2]))
    import copy
    import pickle

    q = copy.deepcopy(p)
    assert type(q) is ad.nn.Parameter and q.tolist() == p.tolist() and q._data is not p._data
    r = pickle.loads(pickle.dumps(p))
    assert type(r) is ad.nn.Parameter and r.requires_grad


# ---------------------------------------------------------------------------------------------
# registration errors (same type and message as torch)
# ---------------------------------------------------------------------------------------------

REGISTRATION_ERRORS = [
    ("tensor_as_param", lambda lib, m: setattr(m, "weight", lib.ones(2, 3))),
    ("int_as_module", lambda lib, m: setattr(m, "sub", None) or m.add_module("x", 3)),
    ("dot_in_name", lambda lib, m: m.register_parameter("a.b", lib.nn.Parameter(lib.ones(1)))),
    ("empty_name", lambda lib, m: m.register_buffer("", lib.ones(1))),
    ("existing_attr", lambda lib, m: m.register_buffer("training", lib.ones(1))),
    ("non_leaf_param", lambda lib, m: m.register_parameter("p", lib.nn.Parameter(lib.ones(1)) * 2)),
    ("buffer_not_tensor", lambda lib, m: m.register_buffer("b", [1.0])),
    (
        "module_attr_not_module",
        lambda lib, m: (m.add_module("s", lib.nn.ReLU()), setattr(m, "s", 3)),
    ),
    ("missing_attr", lambda lib, m: m.nope),
    ("train_not_bool", lambda lib, m: m.train("yes")),
]


@pytest.mark.parametrize(
    "fn", [c[1] for c in REGISTRATION_ERRORS], ids=[c[0] for c in REGISTRATION_ERRORS]
)
def test_registration_errors(torch, fn):
    with pytest.raises(Exception) as te:
        fn(torch, torch.nn.Linear(3, 2))
    with pytest.raises(Exception) as ae:
        fn(ad, ad.nn.Linear(3, 2))
    assert type(ae.value) is type(te.value)
    assert str(ae.value) == str(te.value)


def test_setattr_moves_between_kinds(torch):
    for lib in (torch, ad):
        m = lib.nn.Linear(2, 2)
        m.extra = lib.nn.ReLU()
        assert "extra" in m._modules
        m.extra = lib.nn.Parameter(lib.ones(1))
        assert "extra" in m._parameters and "extra" not in m._modules
        m.bias = None
        assert m.bias is None and "bias" in m._parameters
        del m.extra
        assert not hasattr(m, "extra")
    a, t = ad.nn.Linear(2, 2, bias=False), torch.nn.Linear(2, 2, bias=False)
    assert [n for n, _ in a.named_parameters()] == [n for n, _ in t.named_parameters()]


# ---------------------------------------------------------------------------------------------
# layers: values, gradients and graphs against torch
# ---------------------------------------------------------------------------------------------

LAYERS = [
    # (id, factory(lib), input shape, input kind)
    ("linear", lambda lib: lib.nn.Linear(4, 3), (5, 4), "float"),
    ("linear_nobias", lambda lib: lib.nn.Linear(4, 3, bias=False), (5, 4), "float"),
    ("linear_3d", lambda lib: lib.nn.Linear(4, 3), (2, 5, 4), "float"),
    ("linear_1d", lambda lib: lib.nn.Linear(4, 3), (4,), "float"),
    (
        "mlp",
        lambda lib: lib.nn.Sequential(
            lib.nn.Linear(4, 8),
            lib.nn.ReLU(),
            lib.nn.Linear(8, 8),
            lib.nn.Tanh(),
            lib.nn.Linear(8, 2),
            lib.nn.Sigmoid(),
        ),
        (6, 4),
        "float",
    ),
    ("gelu", lambda lib: lib.nn.Sequential(lib.nn.Linear(4, 4), lib.nn.GELU()), (3, 4), "float"),
    ("gelu_tanh", lambda lib: lib.nn.GELU("tanh"), (3, 4), "float"),
    ("leaky", lambda lib: lib.nn.LeakyReLU(0.1), (3, 4), "float"),
    ("softplus", lambda lib: lib.nn.Softplus(2.0, 1.0), (3, 4), "float"),
    ("softmax", lambda lib: lib.nn.Softmax(dim=1), (3, 4), "float"),
    ("log_softmax", lambda lib: lib.nn.LogSoftmax(dim=-1), (3, 4), "float"),
    ("layernorm", lambda lib: lib.nn.LayerNorm(4), (3, 4), "float"),
    ("layernorm_2d", lambda lib: lib.nn.LayerNorm((3, 4)), (2, 3, 4), "float"),
    ("layernorm_plain", lambda lib: lib.nn.LayerNorm(4, elementwise_affine=False), (3, 4), "float"),
    (
        "flatten",
        lambda lib: lib.nn.Sequential(lib.nn.Flatten(), lib.nn.Linear(12, 2)),
        (2, 3, 4),
        "float",
    ),
    ("identity", lambda lib: lib.nn.Identity(), (3,), "float"),
    (
        "dropout_eval",
        lambda lib: lib.nn.Sequential(lib.nn.Linear(4, 4), lib.nn.Dropout(0.5)).eval(),
        (3, 4),
        "float",
    ),
    ("embedding", lambda lib: lib.nn.Embedding(7, 3), (2, 4), "index"),
    ("embedding_pad", lambda lib: lib.nn.Embedding(7, 3, padding_idx=2), (2, 4), "index"),
    (
        "embed_mlp",
        lambda lib: lib.nn.Sequential(
            lib.nn.Embedding(7, 4), lib.nn.LayerNorm(4), lib.nn.Linear(4, 2)
        ),
        (3, 2),
        "index",
    ),
]


def _input(lib, shape, kind, dtype, rng_seed=0):
    rng = np.random.default_rng(rng_seed)
    if kind == "index":
        x = np.array(rng.integers(0, 7, shape))
        x.flat[0] = 2  # the padding index appears
        return lib.tensor(x)
    return lib.tensor(rng.standard_normal(shape).astype(dtype), requires_grad=True)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("lid,factory,shape,kind", LAYERS, ids=[c[0] for c in LAYERS])
def test_layer_matches_torch(torch, lid, factory, shape, kind, dtype):
    torch.manual_seed(0)
    tm = build(torch, factory, dtype)
    am = build(ad, factory, dtype)
    copy_params(tm, am)
    tx, ax = _input(torch, shape, kind, dtype), _input(ad, shape, kind, dtype)
    ty, ay = tm(tx), am(ax)
    np.testing.assert_allclose(np_of(ay), np_of(ty), **tol(dtype))
    assert str(ay.dtype).rsplit(".", 1)[-1] == str(ty.dtype).rsplit(".", 1)[-1]
    assert_same_graph(ty.grad_fn, ay.grad_fn)
    g = np.random.default_rng(1).standard_normal(tuple(ty.shape)).astype(dtype)
    ty.backward(torch.tensor(g))
    ay.backward(ad.tensor(g))
    if kind == "float":
        np.testing.assert_allclose(np_of(ax.grad), np_of(tx.grad), **tol(dtype))
    for (name, tp), (_, ap) in zip(tm.named_parameters(), am.named_parameters()):
        assert ap.grad is not None, name
        np.testing.assert_allclose(np_of(ap.grad), np_of(tp.grad), err_msg=name, **tol(dtype))
        assert ap.grad.dtype == ap.dtype


def test_dropout_train(torch):
    ad.manual_seed(0)
    d = ad.nn.Dropout(0.25)
    x = ad.ones(1000, requires_grad=True)
    y = d(x)
    kept = y._data != 0
    assert 0.65 < kept.mean() < 0.85
    np.testing.assert_allclose(y._data[kept], 1 / 0.75, rtol=1e-6)
    assert y.grad_fn.name() == "MulBackward0"
    y.sum().backward()
    np.testing.assert_array_equal(x.grad._data, y._data)
    d.eval()
    assert d(x) is x
    ad.manual_seed(3)
    a = ad.nn.functional.dropout(ad.ones(10), 0.5)
    ad.manual_seed(3)
    b = ad.nn.functional.dropout(ad.ones(10), 0.5)
    assert a.tolist() == b.tolist()  # seeded: reproducible
    with pytest.raises(ValueError, match="dropout probability has to be between 0 and 1"):
        ad.nn.Dropout(1.5)
    with pytest.raises(ValueError, match="dropout probability has to be between 0 and 1"):
        torch.nn.Dropout(1.5)


def test_linear_init_as_pytorch(torch):
    """kaiming_uniform_(a=sqrt(5)) for the weight, U(+-1/sqrt(fan_in)) for the bias."""
    ad.manual_seed(0)
    m = ad.nn.Linear(400, 300)
    bound = 1 / 20
    w, b = m.weight._data, m.bias._data
    assert w.dtype == np.float32 and w.shape == (300, 400)
    assert np.abs(w).max() <= bound and np.abs(w).max() > 0.99 * bound
    assert np.abs(b).max() <= bound and np.abs(b).max() > 0.9 * bound
    assert abs(w.std() - bound / np.sqrt(3)) < 1e-3  # uniform's std
    m64 = ad.nn.Linear(3, 2, dtype=ad.float64)
    assert m64.weight.dtype is ad.float64
    e = ad.nn.Embedding(10, 4, padding_idx=1)
    assert not e.weight._data[1].any() and abs(e.weight._data.std() - 1) < 0.5


def test_init_functions(torch):
    for nl, p in [
        ("linear", None),
        ("relu", None),
        ("tanh", None),
        ("leaky_relu", None),
        ("leaky_relu", 0.2),
        ("selu", None),
        ("sigmoid", None),
    ]:
        assert ad.nn.init.calculate_gain(nl, p) == pytest.approx(
            torch.nn.init.calculate_gain(nl, p)
        )
    for shape in [(3, 5), (2, 3, 4, 5)]:
        assert ad.nn.init._calculate_fan_in_and_fan_out(
            ad.empty(*shape)
        ) == torch.nn.init._calculate_fan_in_and_fan_out(torch.empty(*shape))
    for fn in (
        lambda lib: lib.nn.init._calculate_fan_in_and_fan_out(lib.empty(3)),
        lambda lib: lib.nn.init.calculate_gain("cube"),
        lambda lib: lib.nn.init.kaiming_uniform_(lib.empty(2, 3), mode="fan_x"),
    ):
        with pytest.raises(ValueError) as te:
            fn(torch)
        with pytest.raises(ValueError) as ae:
            fn(ad)
        assert str(ae.value) == str(te.value)
    w = ad.nn.Parameter(ad.empty(30, 50))
    ad.nn.init.xavier_uniform_(w, gain=2.0)
    assert np.abs(w._data).max() <= 2.0 * np.sqrt(6 / 80) and w.is_leaf
    ad.nn.init.zeros_(w)
    assert not w._data.any() and w._version > 0
    ad.nn.init.ones_(w)
    ad.nn.init.normal_(w, 1.0, 0.01)
    assert abs(w._data.mean() - 1) < 0.01
    ad.nn.init.constant_(w, 0.5)
    assert (w._data == 0.5).all()
    ad.nn.init.kaiming_normal_(w, nonlinearity="relu")
    assert abs(w._data.std() - np.sqrt(2 / 50)) < 0.03


# ---------------------------------------------------------------------------------------------
# modes, grads, dtype conversion
# ---------------------------------------------------------------------------------------------


def test_train_eval_zero_grad_requires_grad(torch):
    for lib in (torch, ad):
        _check_modes(lib)


def _check_modes(lib):
    m = lib.nn.Sequential(lib.nn.Linear(3, 3), lib.nn.Dropout(), lib.nn.Linear(3, 1))
    assert m.training and all(c.training for c in m.modules())
    assert m.eval() is m
    assert not any(c.training for c in m.modules())
    m.train()
    assert all(c.training for c in m.modules())
    m(lib.ones(2, 3)).sum().backward()
    assert all(p.grad is not None for p in m.parameters())
    m.zero_grad(set_to_none=False)
    assert all(p.grad is not None and not np_of(p.grad).any() for p in m.parameters())
    m.zero_grad()
    assert all(p.grad is None for p in m.parameters())
    m.requires_grad_(False)
    assert not any(p.requires_grad for p in m.parameters())
    seen = []
    assert m.apply(lambda mod: seen.append(type(mod).__name__)) is m
    assert seen == ["Linear", "Dropout", "Linear", "Sequential"]


def test_to_dtype_keeps_parameters(torch):
    m = ad.nn.Linear(3, 2)
    w = m.weight
    m(ad.ones(1, 3)).sum().backward()
    assert m.double() is m
    assert m.weight is w and w.dtype is ad.float64 and w.grad.dtype is ad.float64
    assert m(ad.ones(1, 3, dtype=ad.float64)).dtype is ad.float64
    m.to(ad.float32)
    assert w.dtype is ad.float32
    m.float()
    with pytest.raises(TypeError, match="only accepts floating point"):
        m.to(ad.int64)
    with pytest.raises(TypeError, match="only accepts floating point"):
        torch.nn.Linear(2, 2).to(torch.int64)


def test_sequential_and_modulelist_api(torch):
    for lib in (torch, ad):
        nn = lib.nn
        a, b, c = nn.Linear(2, 2), nn.ReLU(), nn.Linear(2, 1)
        s = nn.Sequential(a, b, c)
        assert len(s) == 3 and s[0] is a and s[-1] is c and list(s) == [a, b, c]
        assert isinstance(s[1:], nn.Sequential) and list(s[1:]) == [b, c]
        with pytest.raises(IndexError, match="index 3 is out of range"):
            s[3]
        s.append(nn.Tanh())
        assert len(s) == 4
        s.insert(0, nn.Identity())
        assert isinstance(s[0], nn.Identity) and s[1] is a
        del s[0]
        assert s[0] is a and [k for k, _ in s.named_children()] == ["0", "1", "2", "3"]
        s[1] = nn.Sigmoid()
        assert isinstance(s[1], nn.Sigmoid)
        assert len(s + nn.Sequential(nn.ReLU())) == 5
        s2 = nn.Sequential(__import__("collections").OrderedDict([("fc", a), ("act", b)]))
        assert s2.fc is a and [n for n, _ in s2.named_parameters()] == ["fc.weight", "fc.bias"]
        ml = nn.ModuleList([a, b])
        ml.append(c)
        ml.extend([nn.ReLU()])
        ml.insert(1, nn.Tanh())
        assert len(ml) == 5 and ml[-1] is not c and ml[0] is a
        assert len(ml[1:3]) == 2
        del ml[1]
        assert ml[1] is b


# ---------------------------------------------------------------------------------------------
# state_dict
# ---------------------------------------------------------------------------------------------


def _net(lib):
    return lib.nn.Sequential(lib.nn.Linear(3, 4), lib.nn.LayerNorm(4), lib.nn.Linear(4, 2))


def test_state_dict_round_trip(torch):
    src, dst = _net(ad), _net(ad)
    sd = src.state_dict()
    assert list(sd) == list(_net(torch).state_dict())
    assert all(not v.requires_grad and type(v) is ad.Tensor for v in sd.values())
    assert sd["0.weight"]._data is src[0].weight._data  # detached, same storage
    assert set(src.state_dict(keep_vars=True).values()) >= {src[0].weight}
    w_before = dst[0].weight
    r = dst.load_state_dict(sd)
    assert repr(r) == "<All keys matched successfully>"
    assert dst[0].weight is w_before and dst[0].weight._data is not sd["0.weight"]._data
    for k, v in dst.state_dict().items():
        np.testing.assert_array_equal(v._data, sd[k]._data)
    assert dst[0].weight._version > 0  # loaded by an in-place copy_
    # torch's state dict loads into autodiag and vice versa (values only)
    t = _net(torch)
    dst.load_state_dict({k: ad.tensor(np_of(v)) for k, v in t.state_dict().items()})
    for k, v in t.state_dict().items():
        np.testing.assert_array_equal(dst.state_dict()[k]._data, np_of(v))


@pytest.mark.parametrize("case", ["missing", "unexpected", "both", "shape"])
def test_load_state_dict_errors(torch, case):
    def mutate(sd, lib):
        sd = dict(sd)
        if case in ("missing", "both"):
            del sd["2.bias"]
        if case in ("unexpected", "both"):
            sd["3.weight"] = lib.ones(1)
            sd["0.extra"] = lib.ones(1)
        if case == "shape":
            sd["0.weight"] = lib.ones(2, 2)
        return sd

    msgs = []
    for lib in (torch, ad):
        m = _net(lib)
        with pytest.raises(RuntimeError) as e:
            m.load_state_dict(mutate(m.state_dict(), lib))
        msgs.append(str(e.value))
    assert msgs[1] == msgs[0]
    phrase = {
        "missing": "Missing key(s) in state_dict",
        "unexpected": "Unexpected key(s) in state_dict",
        "both": "Missing key(s) in state_dict",
        "shape": "size mismatch for 0.weight",
    }[case]
    assert phrase in msgs[1]
    if case != "shape":
        tr = _net(torch).load_state_dict(mutate(_net(torch).state_dict(), torch), strict=False)
        ar = _net(ad).load_state_dict(mutate(_net(ad).state_dict(), ad), strict=False)
        assert repr(ar) == repr(tr)


# ---------------------------------------------------------------------------------------------
# hooks: same calls, same order, same arguments
# ---------------------------------------------------------------------------------------------


def _desc(x):
    """Comparable summary of a hook argument: tensors by shape and rounded values."""
    if x is None:
        return None
    if isinstance(x, (tuple, list)):
        return tuple(_desc(i) for i in x)
    if hasattr(x, "shape") and hasattr(x, "detach"):
        return ("T", tuple(x.shape), tuple(np.round(np_of(x).astype(np.float64), 5).ravel()))
    if hasattr(x, "forward"):
        return type(x).__name__
    return repr(x)


def _hooked_run(lib, x_requires_grad: bool, modify: bool):
    nn = lib.nn
    lib.manual_seed(0)
    net = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))
    log = []
    names = {id(m): n or "root" for n, m in net.named_modules()}
    for m in net.modules():
        n = names[id(m)]
        m.register_forward_pre_hook(lambda mod, args, n=n: log.append(("pre", n, _desc(args))))
        m.register_forward_hook(
            lambda mod, args, out, n=n: log.append(("fwd", n, _desc(args), _desc(out)))
        )

        def bw(mod, gin, gout, n=n):
            log.append(("bwd", n, _desc(mod), _desc(gin), _desc(gout)))
            if modify and n == "2":
                return tuple(None if g is None else g * 2 for g in gin)
            return None

        m.register_full_backward_hook(bw)
        m.register_full_backward_pre_hook(
            lambda mod, gout, n=n: log.append(("bpre", n, _desc(gout)))
        )
    return net, log


@pytest.mark.parametrize("x_grad", [True, False])
@pytest.mark.parametrize("modify", [False, True])
def test_module_hooks_match_torch(torch, x_grad, modify):
    x = np.random.default_rng(0).standard_normal((5, 3)).astype(np.float32)
    results = []
    tnet = None
    for lib in (torch, ad):
        net, log = _hooked_run(lib, x_grad, modify)
        if tnet is None:
            tnet = net
        else:
            copy_params(tnet, net)
        xt = lib.tensor(x, requires_grad=x_grad)
        with warnings.catch_warnings(record=True) as ws:
            warnings.simplefilter("always")
            y = net(xt)
            y.pow(2).sum().backward()
        grads = [np_of(p.grad) for p in net.parameters()]
        results.append(
            (
                log,
                grads,
                [str(w.message)[:40] for w in ws],
                None if xt.grad is None else np_of(xt.grad),
            )
        )
    (tlog, tgrads, twarn, txg), (alog, agrads, awarn, axg) = results
    assert [e[:2] for e in alog] == [e[:2] for e in tlog]  # order
    for te, ae in zip(tlog, alog):
        assert ae == te, f"hook call differs: {ae[:2]}"
    for tg, ag in zip(tgrads, agrads):
        np.testing.assert_allclose(ag, tg, **TOL32)
    assert awarn == twarn
    if txg is not None:
        np.testing.assert_allclose(axg, txg, **TOL32)


def test_hook_handles_and_kwargs(torch):
    for lib in (torch, ad):
        _check_handles(lib)


def _check_handles(lib):
    m = lib.nn.Linear(2, 2)
    calls = []
    h1 = m.register_forward_pre_hook(lambda mod, args: calls.append("a"))
    h2 = m.register_forward_pre_hook(lambda mod, args: calls.append("b"), prepend=True)
    h3 = m.register_forward_hook(
        lambda mod, args, kw, out: calls.append(("k", kw)), with_kwargs=True
    )
    m(lib.ones(1, 2))
    assert calls == ["b", "a", ("k", {})]
    for h in (h1, h2, h3):
        h.remove()
    calls.clear()
    m(lib.ones(1, 2))
    assert calls == []
    # a pre-hook may replace the input, a forward hook the output
    m.register_forward_pre_hook(lambda mod, args: args[0] * 0)
    m.register_forward_hook(lambda mod, args, out: out + 1)
    out = m(lib.ones(1, 2))
    np.testing.assert_allclose(np_of(out)[0], np_of(m.bias) + 1, rtol=1e-6)


def test_backward_hook_graph_names(torch):
    """The identity nodes that carry module backward hooks are PyTorch's, by name."""
    outs = []
    for lib in (torch, ad):
        m = lib.nn.Linear(3, 2)
        m.register_full_backward_hook(lambda *a: None)
        y = m(lib.ones(4, 3, requires_grad=True))
        outs.append(y)
    assert_same_graph(outs[0].grad_fn, outs[1].grad_fn)
    assert outs[1].grad_fn.name() == "BackwardHookFunctionBackward"


# ---------------------------------------------------------------------------------------------
# errors of layers and losses: same type and message as torch
# ---------------------------------------------------------------------------------------------

LAYER_ERRORS = [
    ("linear_dtype", lambda T: T.nn.Linear(3, 2)(T.ones(4, 3, dtype=T.float64))),
    ("addmm_self_dtype", lambda T: T.addmm(T.ones(2), T.ones(3, 4), T.ones(4, 2, dtype=T.float64))),
    ("linear_shape", lambda T: T.nn.Linear(3, 2)(T.ones(4, 4))),
    ("linear_shape_3d", lambda T: T.nn.Linear(3, 2)(T.ones(2, 4, 4))),
    ("linear_shape_nobias", lambda T: T.nn.Linear(3, 2, bias=False)(T.ones(4, 4))),
    ("linear_0d", lambda T: T.nn.functional.linear(T.tensor(2.0), T.ones(3, 1), T.ones(3))),
    ("layernorm_shape", lambda T: T.nn.LayerNorm(3)(T.ones(2, 4))),
    ("layernorm_int_shape", lambda T: T.nn.functional.layer_norm(T.ones(2, 4), 4)),
    ("embedding_range", lambda T: T.nn.Embedding(3, 2)(T.tensor([3]))),
    ("embedding_float", lambda T: T.nn.Embedding(3, 2)(T.tensor([1.0]))),
    ("embedding_padding", lambda T: T.nn.Embedding(3, 2, padding_idx=3)),
    ("ce_target_range", lambda T: T.nn.CrossEntropyLoss()(T.ones(4, 3), T.tensor([0, 1, 2, 3]))),
    ("ce_batch", lambda T: T.nn.CrossEntropyLoss()(T.ones(4, 3), T.tensor([0, 1]))),
    ("ce_float_target", lambda T: T.nn.functional.cross_entropy(T.ones(4, 3), T.ones(4))),
    (
        "ce_int_probs",
        lambda T: T.nn.functional.cross_entropy(T.ones(2, 3), T.ones(2, 3, dtype=T.int64)),
    ),
    (
        "ce_smoothing",
        lambda T: T.nn.functional.cross_entropy(
            T.ones(2, 3), T.tensor([0, 1]), label_smoothing=1.5
        ),
    ),
    (
        "nll_weight_grad",
        lambda T: T.nn.functional.nll_loss(
            T.ones(2, 3, requires_grad=True), T.tensor([0, 1]), T.ones(3, requires_grad=True)
        ),
    ),
    (
        "nll_target_3d",
        lambda T: T.nn.functional.nll_loss(T.ones(2, 3, 4), T.tensor([[0, 1, 2], [1, 1, 1]])),
    ),
    ("nll_multi_target", lambda T: T.nn.functional.nll_loss(T.ones(2, 3), T.tensor([[0], [1]]))),
    ("mse_shapes", lambda T: T.nn.MSELoss()(T.ones(4, 3), T.ones(4, 4))),
    ("bce_shapes", lambda T: T.nn.BCEWithLogitsLoss()(T.ones(4, 3), T.ones(4))),
    ("bad_reduction", lambda T: T.nn.MSELoss(reduction="avg")(T.ones(4, 3), T.ones(4, 3))),
    ("no_forward", lambda T: T.nn.Module()(T.ones(1))),
    ("sequential_index", lambda T: T.nn.Sequential(T.nn.ReLU())[5]),
    ("dropout_p", lambda T: T.nn.functional.dropout(T.ones(2), 1.5)),
    (
        "leaky_inplace_leaf",
        lambda T: T.nn.functional.leaky_relu(T.ones(2, requires_grad=True), inplace=True),
    ),
]


@pytest.mark.parametrize("fn", [c[1] for c in LAYER_ERRORS], ids=[c[0] for c in LAYER_ERRORS])
def test_layer_errors_match_torch(torch, fn):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(Exception) as te:
            fn(torch)
        with pytest.raises(Exception) as ae:
            fn(ad)
    assert type(ae.value) is type(te.value)
    assert str(ae.value) == str(te.value)


def test_loss_warnings_match_torch(torch):
    """mse_loss's broadcast warning and the deprecated size_average/reduce arguments."""
    for fn in (
        lambda T: T.nn.functional.mse_loss(T.ones(4, 3), T.ones(4, 1)),
        lambda T: T.nn.MSELoss(size_average=False)(T.ones(2), T.zeros(2)),
        lambda T: T.nn.functional.softmax(T.ones(2, 3)),
    ):
        msgs = []
        for lib in (torch, ad):
            with warnings.catch_warnings(record=True) as ws:
                warnings.simplefilter("always")
                out = fn(lib)
            msgs.append(([str(w.message) for w in ws], np_of(out).tolist()))
        assert msgs[1] == msgs[0]
