"""What PyTorch scripts touch first, against PyTorch (the oracle): the bugs real scripts hit
(``requires_grad_()`` on a non-leaf, ``vec[i] += 1``) and the compatibility names (devices,
``to``, legacy tensor types, ``torch.save``/``torch.load``, ...). Each test runs the same code
with ``T`` = torch and ``T`` = autodiag and compares."""

from __future__ import annotations

import numpy as np
import pytest

import autodiag as ad


def both(torch):
    return [("torch", torch), ("autodiag", ad)]


# --- bugs found running tutorials ---------------------------------------------------------------


def test_requires_grad_on_a_non_leaf_that_requires_grad_is_a_no_op(torch):
    out = {}
    for name, T in both(torch):
        x = T.ones(2, requires_grad=True)
        y = x * 2
        r = y.requires_grad_()
        assert r is y and y.requires_grad and not y.is_leaf
        with pytest.raises(RuntimeError, match="only change requires_grad flags of leaf"):
            y.requires_grad_(False)
        t = T.tensor([0.3, 1.2, -0.5], dtype=T.float64, requires_grad=True)
        out[name] = (type(y.grad_fn).__name__, T.autograd.gradgradcheck(T.exp, (t.clone(),)))
    assert out["autodiag"] == out["torch"] == ("MulBackward0", True)


def _bag_of_words(T, dtype):
    vocab = {"a": 0, "b": 1, "c": 2, "d": 3}
    vec = T.zeros(len(vocab), dtype=dtype)
    for word in "a b a d a".split():
        vec[vocab[word]] += 1
    vec[T.tensor(2)] += 5
    m = T.zeros(2, 3, dtype=dtype)
    m[1, 2] += 2
    m[0][1] += 3
    return vec.tolist(), m.tolist(), vec._version


@pytest.mark.parametrize("dtype", ["float32", "float64", "int64"])
def test_item_increment_of_a_1d_tensor(torch, dtype):
    got = _bag_of_words(ad, getattr(ad, dtype))
    assert got == _bag_of_words(torch, getattr(torch, dtype))
    assert got[0] == [3, 1, 5, 1]


def test_an_element_is_a_view_that_writes_through(torch):
    out = {}
    for name, T in both(torch):
        v = T.arange(4.0)
        e = v[2]
        e.add_(10)
        e.mul_(2)
        out[name] = (v.tolist(), e.item(), e._base is v, e.shape, v._version)
    assert out["autodiag"] == out["torch"]
    assert out["torch"][0] == [0.0, 1.0, 24.0, 3.0]


# --- devices --------------------------------------------------------------------------------


@pytest.fixture
def default_device_restored(torch):
    """``set_default_device`` installs a torch function mode for the rest of the process: put
    torch's default back, or every later test's oracle runs under that mode."""
    yield
    torch.set_default_device(None)


def test_devices(torch, default_device_restored):
    out = {}
    for name, T in both(torch):
        dev = T.device("cuda" if T.cuda.is_available() else "cpu")
        x = T.ones(2, 3)
        out[name] = (
            repr(dev),
            str(dev),
            dev.type,
            dev.index,
            x.device == dev,
            dev == T.device("cpu"),
            hash(dev) == hash(T.device("cpu")),
            str(T.device("cuda", 1)),
            T.device("cuda:2").index,
            x.is_cpu,
            T.cuda.is_available(),
            T.cuda.device_count(),
            T.backends.mps.is_available(),
            T.backends.mps.is_built(),
            T.accelerator.is_available(),
            T.accelerator.current_accelerator(),
            str(T.get_default_device()),
        )
        T.set_default_device("cpu")
        with pytest.raises(RuntimeError, match="device type at start of device string"):
            T.device("gpu")
        for bad in (
            lambda: x.cuda(),
            lambda: x.to("cuda"),
            lambda: x.to(T.device("cuda")),
            lambda: x.to(device="cuda:0"),
            lambda: T.tensor([1.0], device="cuda"),
        ):
            with pytest.raises(AssertionError, match="Torch not compiled with CUDA enabled"):
                bad()
    assert out["autodiag"] == out["torch"]
    with pytest.raises(AssertionError, match="CPU only"):
        ad.set_default_device("cuda")  # PyTorch fails later, at the next tensor


@pytest.mark.parametrize(
    "args,kwargs",
    [
        (("cpu",), {}),
        (("cpu", "float64"), {}),
        (("device:cpu",), {}),
        (("float64",), {}),
        (("int64",), {}),
        ((), {"dtype": "float64"}),
        ((), {"device": "cpu", "dtype": "int64"}),
        (("other",), {}),
        (("cpu", "float64", False, True), {}),
        (("float32",), {"copy": True}),
    ],
)
def test_to_device_dtype_or_tensor(torch, args, kwargs):
    out = {}
    for name, T in both(torch):

        def conv(a):
            if a == "other":
                return T.zeros(1, dtype=T.float64)
            if a == "device:cpu":
                return T.device("cpu")
            if a in ("float64", "int64", "float32"):
                return getattr(T, a)
            return a

        x = T.tensor([[1.5, -2.0]], requires_grad=True)
        y = x.to(*[conv(a) for a in args], **{k: conv(v) for k, v in kwargs.items()})
        g = None
        if y.requires_grad:
            (y * y).sum().backward()
            g = x.grad.tolist()
        out[name] = (
            y.tolist(),
            str(y.dtype).split(".")[-1],
            y is x,
            g,
            type(y.grad_fn).__name__,
            str(y.cpu().device),
        )
    assert out["autodiag"] == out["torch"]


def test_variable_and_legacy_tensor_types(torch):
    out = {}
    for name, T in both(torch):
        x = T.ones(2)
        v = T.autograd.Variable(x, requires_grad=True)
        w = T.autograd.Variable(x)
        a = T.FloatTensor([1, 2])
        out[name] = (
            v is x,
            v.requires_grad,
            v.is_leaf,
            x.requires_grad,
            w.requires_grad,
            a.tolist(),
            str(a.dtype),
            isinstance(a, T.FloatTensor),
            isinstance(a, T.LongTensor),
            isinstance(T.ones(1).long(), T.LongTensor),
            tuple(T.FloatTensor(2, 3).shape),
            tuple(T.DoubleTensor(T.Size([4])).shape),
            T.LongTensor([1.7, 2.2]).tolist(),
            str(T.DoubleTensor([1]).dtype),
            T.FloatTensor(T.tensor([1.0, 2.0])).tolist(),
            a.type(),
            str(a.type(T.DoubleTensor).dtype),
            T.FloatTensor().shape == (0,),
        )
        v.sum().backward()
        assert v.grad.tolist() == [1.0, 1.0]
        with pytest.raises(TypeError, match="expected"):
            T.FloatTensor(T.tensor([1, 2]))
    strip = [
        tuple(
            s.replace("torch.", "").replace("autodiag.", "") if isinstance(s, str) else s for s in o
        )
        for o in out.values()
    ]
    assert strip[0] == strip[1]


@pytest.mark.parametrize(
    "make",
    [
        lambda T: range(3),
        lambda T: (1.5, 2),
        lambda T: [range(2), (3, 4)],
        lambda T: [T.tensor(1.0), T.tensor(2.0)],
        lambda T: np.float64(2.5),
        lambda T: [np.float64(1), 2],
        lambda T: [np.float32(1), 2.5],
        lambda T: [True, False],
        lambda T: __import__("collections").deque([1, 2]),
        lambda T: [[1, 2], [3, 4]],
    ],
)
def test_tensor_from_any_sequence(torch, make):
    a, t = ad.tensor(make(ad)), torch.tensor(make(torch))
    assert a.tolist() == t.tolist()
    assert str(a.dtype).split(".")[-1] == str(t.dtype).split(".")[-1]


# --- torch.save / torch.load ----------------------------------------------------------------


def _checkpoint(T):
    T.manual_seed(0)
    model = T.nn.Sequential(T.nn.Linear(3, 4), T.nn.ReLU(), T.nn.Linear(4, 1))
    opt = T.optim.Adam(model.parameters(), lr=0.01)
    x = T.tensor([[0.5, -1.0, 2.0], [1.0, 0.0, -0.5]])
    for _ in range(2):
        opt.zero_grad()
        model(x).pow(2).mean().backward()
        opt.step()
    return model, opt, x


def test_save_load_roundtrip_of_a_training_checkpoint(torch, tmp_path):
    out = {}
    for name, T in both(torch):
        model, opt, x = _checkpoint(T)
        t = T.arange(6.0).reshape(2, 3)
        p = tmp_path / f"{name}.pt"
        T.save(
            {
                "epoch": 2,
                "model": model.state_dict(),
                "optimizer": opt.state_dict(),
                "t": t,
                "same": (t, t),
                "names": ["a", None, 1.5],
                "dt": T.float64,
            },
            p,
        )
        ck = T.load(p)
        model2 = T.nn.Sequential(T.nn.Linear(3, 4), T.nn.ReLU(), T.nn.Linear(4, 1))
        model2.load_state_dict(ck["model"])
        opt2 = T.optim.Adam(model2.parameters(), lr=0.5)
        opt2.load_state_dict(ck["optimizer"])
        for m, o in ((model, opt), (model2, opt2)):  # one more step: the same on both
            o.zero_grad()
            m(x).pow(2).mean().backward()
            o.step()
        same = all(T.equal(a, b) for a, b in zip(model.parameters(), model2.parameters()))
        p2 = tmp_path / f"{name}-t.pt"
        T.save(T.tensor([1.0, 2.0], requires_grad=True), p2)
        lt = T.load(p2)
        out[name] = (
            ck["epoch"],
            list(ck["model"]),
            ck["t"].tolist(),
            ck["same"][0] is ck["same"][1],
            ck["names"],
            str(ck["dt"]).split(".")[-1],
            same,
            lt.tolist(),
            lt.requires_grad,
            lt.is_leaf,
            type(ck["model"]).__name__,
        )
    assert out["autodiag"] == out["torch"]
    assert out["autodiag"][6] is True


def test_save_refuses_arbitrary_objects_and_load_never_unpickles(torch, tmp_path):
    class Thing:
        pass

    with pytest.raises(
        TypeError,
        match=r"obj\['x'\] is a .*Thing, which autodiag's safe "
        "format cannot store",
    ):
        ad.save({"x": Thing()}, tmp_path / "a.pt")
    p = tmp_path / "torch.pt"
    torch.save({"w": torch.ones(2)}, p)  # PyTorch's own format: pickled
    with pytest.raises(RuntimeError, match="a PyTorch file, which holds pickled objects"):
        ad.load(p)
    (tmp_path / "junk.pt").write_bytes(b"not a zip")
    with pytest.raises(RuntimeError, match="not a file written by autodiag"):
        ad.load(tmp_path / "junk.pt")


def test_module_to_a_device(torch):
    out = {}
    for name, T in both(torch):
        T.manual_seed(0)
        m = T.nn.Linear(2, 1)
        r = m.to(T.device("cpu"))
        r2 = m.to("cpu", T.float64)
        with pytest.raises(AssertionError, match="Torch not compiled with CUDA enabled"):
            m.to(T.device("cuda"))
        out[name] = (r is m, r2 is m, str(m.weight.dtype).split(".")[-1], str(m.weight.device))
    assert out["autodiag"] == out["torch"]


# --- numpy's argument names, which PyTorch's argument parser takes too --------------------------


@pytest.mark.parametrize(
    "call",
    [
        "t.argmax(axis=1)",
        "t.argmin(axis=0)",
        "t.sum(axis=0)",
        "T.sum(t, axis=1)",
        "t.mean(axis=1, keepdims=True)",
        "t.amax(axis=0)",
        "t.max(axis=1).values",
        "t.min(axis=1).indices",
        "t.std(axis=1)",
        "t.var(axis=1)",
        "t.prod(axis=1)",
        "t.softmax(axis=1)",
        "t.logsumexp(axis=1, keepdims=True)",
        "t.all(axis=1)",
        "T.cat([t, t], axis=0)",
        "t.sum(axis=(0, 1))",
    ],
)
def test_numpy_argument_names(torch, call):
    x = [[1.0, 5.0, 2.0], [4.0, 0.0, 3.0]]
    got = {}
    for T in (ad, torch):
        t = T.tensor(x)
        got[T] = eval(call, {"T": T, "t": t}).numpy()
    np.testing.assert_allclose(got[ad], got[torch], rtol=1e-6)
    assert got[ad].dtype == got[torch].dtype


def test_numpy_and_torch_names_together_are_refused():
    with pytest.raises(TypeError, match="multiple values for argument 'dim'"):
        ad.tensor([1.0, 2.0]).sum(axis=0, dim=0)
