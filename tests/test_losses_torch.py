"""Differential tests of the losses against torch.nn.functional and torch.nn: values, first and
second derivatives, the whole graph (node names and next_functions, node for node), saved
attributes of the fused nodes, warnings and errors; every reduction."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from differential import assert_same, same_error

import autodiag as ad

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(20)
X = RNG.standard_normal((4, 5))
T = RNG.standard_normal((4, 5)) * 1.5
P = RNG.uniform(0.02, 0.98, (4, 5))
Q = RNG.uniform(0.0, 1.0, (4, 5))
W5 = RNG.uniform(0.5, 2.0, 5)
LOGP = np.log(RNG.dirichlet(np.ones(5), 4))
PROB = RNG.dirichlet(np.ones(5), 4)
Y3 = np.array([1.0, -1.0, 1.0, -1.0])
Y_INT = np.array([1, -1, 1, 1])


def walk(loss):
    """Every node reachable from ``loss.grad_fn``, breadth first: (name, next names)."""
    order, seen, out = [loss.grad_fn], {}, []
    i = 0
    while i < len(order):
        n = order[i]
        i += 1
        nxt = []
        for f, k in n.next_functions:
            if f is None:
                nxt.append(None)
                continue
            if f not in seen:
                seen[f] = len(seen)
                order.append(f)
            nxt.append((f.name(), k))
        out.append((n.name(), tuple(nxt)))
    return out


def _leaf(lib, a, dtype="float64"):
    return lib.tensor(np.asarray(a, dtype=dtype), requires_grad=True)


def _const(lib, a, dtype="float64"):
    return lib.tensor(np.asarray(a, dtype=dtype))


@pytest.fixture(autouse=True)
def _no_torch_function_mode():
    """Run without torch function modes: test_compat_torch leaves ``set_default_device("cpu")``
    on (a mode), and under any mode PyTorch 2.13's ``F.l1_loss`` drops its ``weight`` argument
    (its ``handle_torch_function`` call omits it): the oracle itself would be wrong."""
    with torch._C.DisableTorchFunction():
        yield


REDUCTIONS = ["none", "mean", "sum"]

# id -> fn(lib, F, reduction) -> (loss, leaves)
CASES = {
    "l1": lambda m, F, r: _two(m, lambda x, t: F.l1_loss(x, t, reduction=r), X, T, False),
    "l1_target_grad": lambda m, F, r: _two(m, lambda x, t: F.l1_loss(x, t, reduction=r), X, T),
    "l1_weight": lambda m, F, r: _two(
        m, lambda x, t: F.l1_loss(x, t, reduction=r, weight=_const(m, Q)), X, T, False
    ),
    "smooth_l1": lambda m, F, r: _two(m, lambda x, t: F.smooth_l1_loss(x, t, reduction=r), X, T),
    "smooth_l1_beta": lambda m, F, r: _two(
        m, lambda x, t: F.smooth_l1_loss(x, t, reduction=r, beta=0.4), X, T, False
    ),
    "smooth_l1_beta0": lambda m, F, r: _two(
        m, lambda x, t: F.smooth_l1_loss(x, t, reduction=r, beta=0.0), X, T, False
    ),
    "huber": lambda m, F, r: _two(m, lambda x, t: F.huber_loss(x, t, reduction=r), X, T),
    "huber_delta": lambda m, F, r: _two(
        m, lambda x, t: F.huber_loss(x, t, reduction=r, delta=2.5), X, T, False
    ),
    "huber_weight": lambda m, F, r: _two(
        m, lambda x, t: F.huber_loss(x, t, reduction=r, delta=0.7, weight=_const(m, Q)), X, T
    ),
    "mse_weight": lambda m, F, r: _two(
        m, lambda x, t: F.mse_loss(x, t, reduction=r, weight=_const(m, Q)), X, T
    ),
    "bce": lambda m, F, r: _two(
        m, lambda x, t: F.binary_cross_entropy(x, t, reduction=r), P, Q, False
    ),
    "bce_target_grad": lambda m, F, r: _two(
        m, lambda x, t: F.binary_cross_entropy(x, t, reduction=r), P, Q
    ),
    "bce_weight_bcast": lambda m, F, r: _two(
        m, lambda x, t: F.binary_cross_entropy(x, t, _const(m, W5), reduction=r), P, Q, False
    ),
    "bce_sigmoid_edges": lambda m, F, r: _two(
        m,
        lambda x, t: F.binary_cross_entropy(x.sigmoid(), t, reduction=r),
        np.array([-40.0, -3.0, 0.0, 3.0, 40.0]),
        np.array([0.0, 1.0, 0.5, 0.0, 1.0]),
        False,
    ),
    "kl": lambda m, F, r: _two(m, lambda x, t: F.kl_div(x, t, reduction=r), LOGP, PROB, False),
    "kl_batchmean": lambda m, F, r: _two(
        m, lambda x, t: F.kl_div(x, t, reduction="batchmean"), LOGP, PROB, False
    ),
    "kl_target_grad": lambda m, F, r: _two(m, lambda x, t: F.kl_div(x, t, reduction=r), LOGP, PROB),
    "kl_log_target": lambda m, F, r: _two(
        m, lambda x, t: F.kl_div(x, t, reduction=r, log_target=True), LOGP, np.log(PROB)
    ),
    "cosine": lambda m, F, r: _two(
        m,
        lambda x, t: F.cosine_embedding_loss(x, t, _const(m, Y3), margin=0.2, reduction=r),
        X,
        T,
    ),
    "cosine_int_target": lambda m, F, r: _two(
        m,
        lambda x, t: F.cosine_embedding_loss(x, t, m.tensor(Y_INT), reduction=r),
        X,
        T,
        False,
    ),
    "cosine_1d": lambda m, F, r: _two(
        m,
        lambda x, t: F.cosine_embedding_loss(x, t, _const(m, -1.0), margin=-0.5, reduction=r),
        X[0],
        T[0],
    ),
    "margin_ranking": lambda m, F, r: _two(
        m,
        lambda x, t: F.margin_ranking_loss(x, t, _const(m, Y3), margin=0.3, reduction=r),
        X[:, 0],
        T[:, 0],
    ),
    "margin_ranking_target_grad": lambda m, F, r: _three(
        m,
        lambda a, b, y: F.margin_ranking_loss(a, b, y, reduction=r),
        X[:, 0],
        T[:, 0],
        Y3 * 0.5,
    ),
    "nll_weight_ignore": lambda m, F, r: _one(
        m,
        lambda x: F.nll_loss(
            x.log_softmax(1), m.tensor([0, 4, -100, 2]), _const(m, W5), reduction=r
        ),
        X,
    ),
    "nll_kd": lambda m, F, r: _one(
        m,
        lambda x: F.nll_loss(
            x.log_softmax(1),
            m.tensor(RNG_KD_TARGET),
            _const(m, W5[:3]),
            ignore_index=1,
            reduction=r,
        ),
        RNG_KD,
    ),
    "ce_weight_ignore_smooth": lambda m, F, r: _one(
        m,
        lambda x: F.cross_entropy(
            x,
            m.tensor([0, 4, 3, 2]),
            _const(m, W5),
            ignore_index=3,
            label_smoothing=0.2,
            reduction=r,
        ),
        X,
    ),
    "ce_prob_target_smooth": lambda m, F, r: _two(
        m,
        lambda x, t: F.cross_entropy(x, t, _const(m, W5), reduction=r, label_smoothing=0.1),
        X,
        PROB,
    ),
    "ce_kd": lambda m, F, r: _one(
        m,
        lambda x: F.cross_entropy(x, m.tensor(RNG_KD_TARGET), reduction=r, label_smoothing=0.3),
        RNG_KD,
    ),
}
RNG_KD = RNG.standard_normal((2, 3, 4, 2, 2))
RNG_KD_TARGET = RNG.integers(0, 3, (2, 4, 2, 2))


def _one(m, fn, a):
    x = _leaf(m, a)
    return fn(x), [x]


def _two(m, fn, a, b, target_grad=True):
    x = _leaf(m, a)
    t = _leaf(m, b) if target_grad else _const(m, b)
    return fn(x, t), [x, t] if target_grad else [x]


def _three(m, fn, a, b, c):
    x, y, z = _leaf(m, a), _leaf(m, b), _leaf(m, c)
    return fn(x, y, z), [x, y, z]


def _run(m, case, r, second=True):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loss, leaves = CASES[case](m, m.nn.functional, r)
    graph = walk(loss)
    v = m.tensor(np.linspace(0.5, 1.5, loss.numel()).reshape(tuple(loss.shape)))
    grads = m.autograd.grad(loss, leaves, v, create_graph=second)
    out = {"loss": loss, "graph": graph, "grads": grads}
    if second:
        s = sum((g * g.detach().sin()).sum() for g in grads if g.requires_grad)
        if isinstance(s, int):
            out["second"] = None
        else:
            out["second"] = m.autograd.grad(s, leaves, allow_unused=True)
    return out


@pytest.mark.parametrize("r", REDUCTIONS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_loss_matches_torch(case, r):
    try:
        t = _run(torch, case, r)
        second = True
    except RuntimeError as e:
        if "not implemented" not in str(e) and "derivative for" not in str(e):
            raise
        t, second = _run(torch, case, r, second=False), False  # torch has no double backward
    a = _run(ad, case, r, second=second)
    assert a["graph"] == t["graph"]
    assert_same(a["loss"], t["loss"], "loss")
    assert_same(a["grads"], t["grads"], "grads")
    if second:
        assert_same(a["second"], t["second"], "second")


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_fused_nodes_saved_attributes(dtype):
    def run(m):
        x = _leaf(m, X, dtype)
        F = m.nn.functional
        out = []
        for loss in (
            F.smooth_l1_loss(x, _const(m, T, dtype), beta=0.5, reduction="sum"),
            F.huber_loss(x, _const(m, T, dtype), delta=0.5),
            F.binary_cross_entropy(x.sigmoid(), _const(m, Q, dtype), _const(m, W5, dtype)),
        ):
            fn = loss.grad_fn
            out.append((fn.name(), {a: getattr(fn, a) for a in SAVED[fn.name()]}))
            if m is torch:
                assert sorted(a for a in dir(fn) if a.startswith("_saved_")) == SAVED[fn.name()]
        return out

    assert_same(run(ad), run(torch))


SAVED = {
    "SmoothL1LossBackward0": ["_saved_beta", "_saved_reduction", "_saved_self", "_saved_target"],
    "HuberLossBackward0": ["_saved_delta", "_saved_reduction", "_saved_self", "_saved_target"],
    "BinaryCrossEntropyBackward0": [
        "_saved_reduction",
        "_saved_self",
        "_saved_target",
        "_saved_weight",
    ],
}


MIXED = [
    ("smooth_l1", lambda F: F.smooth_l1_loss),
    ("huber_forward", lambda F: F.huber_loss),
    ("l1", lambda F: F.l1_loss),
    ("mse", lambda F: F.mse_loss),
]


@pytest.mark.parametrize("fn", [c[1] for c in MIXED], ids=[c[0] for c in MIXED])
def test_mixed_dtypes(fn):
    def run(m):
        a = m.tensor([0.3, -2.0, 1.0], requires_grad=True)
        b = m.tensor([0.1, 0.5, 1.0], dtype=m.float64, requires_grad=True)
        out = fn(m.nn.functional)(a, b), fn(m.nn.functional)(b, a)
        return out

    assert_same(run(ad), run(torch))


def test_huber_mixed_dtype_backward_raises_as_torch():
    def fn(m):
        a = m.tensor([0.3, -2.0], requires_grad=True)
        b = m.tensor([0.1, 0.5], dtype=m.float64)
        m.nn.functional.huber_loss(a, b).backward()

    same_error(fn, torch, "Found dtype Double but expected Float")

    def int_target(m):
        a = m.tensor([0.3, -2.0], requires_grad=True)
        loss = m.nn.functional.huber_loss(a, m.tensor([1, 0]))
        assert loss.dtype == m.float32  # the forward works
        loss.backward()

    same_error(int_target, torch, "Found dtype Long but expected Float")


ERRORS = [
    ("smooth_l1_neg_beta", lambda F, m: F.smooth_l1_loss(m.ones(3), m.ones(3), beta=-1.0)),
    ("smooth_l1_int", lambda F, m: F.smooth_l1_loss(m.ones(3).long(), m.ones(3).long())),
    ("smooth_l1_bad_reduction", lambda F, m: F.smooth_l1_loss(m.ones(3), m.ones(3), reduction="x")),
    ("huber_delta", lambda F, m: F.huber_loss(m.ones(3), m.ones(3), delta=0.0)),
    ("huber_weight", lambda F, m: F.huber_loss(m.ones(3), m.ones(3), weight=m.ones(2))),
    ("l1_weight", lambda F, m: F.l1_loss(m.ones(3), m.ones(3), weight=m.ones(2))),
    ("l1_int", lambda F, m: F.l1_loss(m.ones(3).long(), m.ones(3).long())),
    ("bce_range", lambda F, m: F.binary_cross_entropy(m.ones(3) * 2, m.ones(3))),
    ("bce_size", lambda F, m: F.binary_cross_entropy(m.ones(3, 2) / 2, m.ones(2))),
    ("bce_dtype", lambda F, m: F.binary_cross_entropy(m.ones(3) / 2, m.ones(3).double())),
    (
        "bce_weight_grad",
        lambda F, m: F.binary_cross_entropy(
            m.ones(3) / 2, m.ones(3), weight=m.ones(3, requires_grad=True)
        ),
    ),
    (
        "bce_bad_reduction",
        lambda F, m: F.binary_cross_entropy(m.ones(3) / 2, m.ones(3), reduction="avg"),
    ),
    ("kl_shapes", lambda F, m: F.kl_div(m.ones(3, 4), m.ones(5), reduction="sum")),
    ("kl_bad_reduction", lambda F, m: F.kl_div(m.ones(3), m.ones(3), reduction="avg")),
    (
        "cos_target_2d",
        lambda F, m: F.cosine_embedding_loss(m.ones(3, 4), m.ones(3, 4), m.ones(3, 1)),
    ),
    ("cos_1d_target", lambda F, m: F.cosine_embedding_loss(m.ones(3, 4), m.ones(4), m.ones(3))),
    (
        "cos_0d_target",
        lambda F, m: F.cosine_embedding_loss(m.ones(3, 4), m.ones(3, 4), m.tensor(1.0)),
    ),
    ("cos_shapes", lambda F, m: F.cosine_embedding_loss(m.ones(3, 4), m.ones(3, 5), m.ones(3))),
    ("mse_int", lambda F, m: F.mse_loss(m.ones(3).long(), m.ones(3).long())),
    ("kl_int", lambda F, m: F.kl_div(m.ones(3), m.tensor([1, 0, 1]), reduction="sum")),
    ("bce_int_target", lambda F, m: F.binary_cross_entropy(m.ones(3) / 2, m.tensor([1, 0, 1]))),
    ("margin_dims", lambda F, m: F.margin_ranking_loss(m.ones(3, 4), m.ones(3, 4), m.ones(3))),
]


@pytest.mark.parametrize("fn", [c[1] for c in ERRORS], ids=[c[0] for c in ERRORS])
def test_loss_errors_match_torch(fn):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ea, et = same_error(lambda m: fn(m.nn.functional, m), torch)
    assert str(ea) == str(et)


def test_loss_warnings_point_at_the_caller():
    for m in (ad, torch):
        F = m.nn.functional
        with pytest.warns(UserWarning, match="different to the input size") as rec:
            F.l1_loss(m.ones(4, 3), m.ones(4, 1))
        assert rec[0].filename == __file__
        with pytest.warns(UserWarning, match="different to the input size"):
            F.smooth_l1_loss(m.ones(4, 3), m.ones(3))
        with pytest.warns(UserWarning, match="different to the input size"):
            F.huber_loss(m.ones(4, 3), m.ones(3))
        with pytest.warns(UserWarning, match="'batchmean' divides only by the batch size") as rec:
            F.kl_div(m.ones(3), m.ones(3))
        assert rec[0].filename == __file__
        with pytest.warns(UserWarning, match="size_average and reduce args will be deprecated"):
            F.l1_loss(m.ones(3), m.zeros(3), size_average=False)


MODULES = [
    ("L1Loss", dict(reduction="sum"), "pair"),
    ("SmoothL1Loss", dict(beta=0.3), "pair"),
    ("HuberLoss", dict(delta=0.6, reduction="none"), "pair"),
    ("MSELoss", dict(), "pair"),
    ("BCELoss", dict(), "prob"),
    ("KLDivLoss", dict(reduction="batchmean"), "kl"),
    ("KLDivLoss", dict(reduction="sum", log_target=True), "kl_log"),
    ("CosineEmbeddingLoss", dict(margin=0.1), "cos"),
    ("MarginRankingLoss", dict(margin=0.5, reduction="sum"), "rank"),
    ("NLLLoss", dict(ignore_index=2), "nll"),
    ("CrossEntropyLoss", dict(label_smoothing=0.05), "nll"),
    ("BCEWithLogitsLoss", dict(pos_weight=None), "pair01"),
]


@pytest.mark.parametrize("name,kw,kind", MODULES, ids=[f"{m[0]}-{m[2]}" for m in MODULES])
def test_loss_modules_match_torch(name, kw, kind):
    def run(m):
        x = _leaf(m, X)
        args = {
            "pair": (x, _const(m, T)),
            "pair01": (x, _const(m, Q)),
            "prob": (x.sigmoid(), _const(m, Q)),
            "kl": (x.log_softmax(1), _const(m, PROB)),
            "kl_log": (x.log_softmax(1), _const(m, np.log(PROB))),
            "cos": (x, _const(m, T), _const(m, Y3)),
            "rank": (x[:, 0], _const(m, T[:, 0]), _const(m, Y3)),
            "nll": ((x.log_softmax(1) if name == "NLLLoss" else x), m.tensor([0, 2, 4, 1])),
        }[kind]
        mod = getattr(m.nn, name)(**kw)
        loss = mod(*args)
        loss.sum().backward()
        return repr(mod), loss, x.grad, walk(loss)

    a, t = run(ad), run(torch)
    assert a[0] == t[0] and a[3] == t[3]
    assert_same(a[1:3], t[1:3])


def test_loss_modules_weight_buffers():
    for m in (ad, torch):
        bce = m.nn.BCELoss(weight=m.ones(5))
        assert [n for n, _ in bce.named_buffers()] == ["weight"]
        assert [n for n, _ in m.nn.L1Loss().named_buffers()] == []
        with pytest.warns(UserWarning, match="size_average and reduce"):
            assert m.nn.SmoothL1Loss(size_average=False).reduction == "sum"


INT_TARGETS = ["mse_loss", "l1_loss", "smooth_l1_loss"]


@pytest.mark.parametrize("name", INT_TARGETS)
def test_integer_targets_promote_as_torch(name):
    """A float32 input with an int64 target computes in float32 (PyTorch's promotion)."""

    def run(m):
        x = m.tensor([0.25, -1.5, 3.0], requires_grad=True)
        loss = getattr(m.nn.functional, name)(x, m.tensor([1, 0, 2]))
        loss.backward()
        return loss, x.grad

    assert_same(run(ad), run(torch))


def test_promote_types_matches_torch():
    names = ["bool", "uint8", "int8", "int16", "int32", "int64", "float16", "float32", "float64"]
    for a in names:
        for b in names:
            t = torch.promote_types(getattr(torch, a), getattr(torch, b))
            got = ad.promote_types(getattr(ad, a), getattr(ad, b))
            assert str(got).split(".")[-1] == str(t).split(".")[-1], (a, b)
