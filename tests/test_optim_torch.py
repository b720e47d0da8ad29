"""Differential tests of ``autodiag.optim`` against ``torch.optim``.

The same small model is built in both libraries (autodiag's weights copied from torch's) and
trained for 20 steps on the same data; losses and final weights must agree within float32
tolerance (float64 runs agree much closer). Then the optimizer API: groups, zero_grad,
state_dict round trip, errors, version counters, hooks.
"""

from __future__ import annotations

import numpy as np
import pytest
from test_nn_torch import copy_params, np_of

import autodiag as ad

CONFIGS = [
    ("sgd", "SGD", dict(lr=0.1)),
    ("sgd_momentum", "SGD", dict(lr=0.05, momentum=0.9)),
    ("sgd_dampening", "SGD", dict(lr=0.05, momentum=0.9, dampening=0.3)),
    ("sgd_nesterov_wd", "SGD", dict(lr=0.05, momentum=0.8, nesterov=True, weight_decay=0.01)),
    ("sgd_maximize", "SGD", dict(lr=0.002, momentum=0.5, maximize=True)),
    ("adam", "Adam", dict(lr=0.01)),
    ("adam_wd", "Adam", dict(lr=0.01, weight_decay=0.05)),
    ("adam_amsgrad", "Adam", dict(lr=0.01, amsgrad=True, betas=(0.8, 0.99))),
    ("adam_low_beta1", "Adam", dict(lr=0.01, betas=(0.3, 0.9), eps=1e-6)),
    ("adam_maximize", "Adam", dict(lr=0.002, maximize=True)),
    ("adamw", "AdamW", dict(lr=0.01)),
    ("adamw_amsgrad", "AdamW", dict(lr=0.02, weight_decay=0.1, amsgrad=True)),
    ("rmsprop", "RMSprop", dict(lr=0.01)),
    ("rmsprop_centered_momentum", "RMSprop", dict(lr=0.005, centered=True, momentum=0.9)),
    ("rmsprop_low_alpha_wd", "RMSprop", dict(lr=0.01, alpha=0.3, weight_decay=0.1, eps=1e-4)),
    ("rmsprop_maximize", "RMSprop", dict(lr=0.001, maximize=True, centered=True)),
    ("adagrad", "Adagrad", dict(lr=0.1)),
    (
        "adagrad_decay_wd_init",
        "Adagrad",
        dict(lr=0.1, lr_decay=0.05, weight_decay=0.1, initial_accumulator_value=0.5),
    ),
    ("adagrad_maximize", "Adagrad", dict(lr=0.01, maximize=True)),
    ("adadelta", "Adadelta", dict()),
    ("adadelta_rho_wd", "Adadelta", dict(lr=0.5, rho=0.7, weight_decay=0.05, eps=1e-5)),
    ("adadelta_maximize", "Adadelta", dict(lr=0.1, maximize=True)),
]


def _model(lib, dtype):
    nn = lib.nn
    return nn.Sequential(
        nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 3)
    ).to(getattr(lib, dtype))


def _data(dtype):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((32, 6)).astype(dtype)
    y_cls = rng.integers(0, 3, 32)
    y_reg = rng.standard_normal((32, 3)).astype(dtype)
    return x, y_cls, y_reg


def _train(lib, model, opt_name, kw, loss_kind, dtype, steps=20):
    x, y_cls, y_reg = _data(dtype)
    X = lib.tensor(x)
    Y = lib.tensor(y_cls) if loss_kind == "ce" else lib.tensor(y_reg)
    loss_fn = lib.nn.CrossEntropyLoss() if loss_kind == "ce" else lib.nn.MSELoss()
    opt = getattr(lib.optim, opt_name)(model.parameters(), **kw)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = loss_fn(model(X), Y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, opt


@pytest.mark.parametrize("loss_kind", ["ce", "mse"])
@pytest.mark.parametrize("name,opt_name,kw", CONFIGS, ids=[c[0] for c in CONFIGS])
def test_training_matches_torch(torch, name, opt_name, kw, loss_kind):
    torch.manual_seed(0)
    tm, am = _model(torch, "float32"), _model(ad, "float32")
    copy_params(tm, am)
    tv0 = [p._version for p in tm.parameters()]
    av0 = [p._version for p in am.parameters()]
    tl, topt = _train(torch, tm, opt_name, kw, loss_kind, "float32")
    al, aopt = _train(ad, am, opt_name, kw, loss_kind, "float32")
    np.testing.assert_allclose(al, tl, rtol=1e-4, atol=1e-5)
    named = zip(tm.named_parameters(), am.named_parameters(), tv0, av0)
    for (n, tp), (_, ap), tv, av in named:
        assert ap.dtype is ad.float32 and ap.is_leaf and type(ap) is ad.nn.Parameter
        np.testing.assert_allclose(np_of(ap), np_of(tp), rtol=1e-4, atol=1e-5, err_msg=n)
        # one version bump per in-place write, as torch (mul_ and addcdiv_ for AdamW)
        assert ap._version - av == tp._version - tv, n
    assert repr(aopt) == repr(topt)
    ts, as_ = topt.state_dict(), aopt.state_dict()
    assert as_["param_groups"] == ts["param_groups"]
    assert list(as_["state"]) == list(ts["state"])
    for k in ts["state"]:
        assert list(as_["state"][k]) == list(ts["state"][k])
        for key, tv in ts["state"][k].items():
            av = as_["state"][k][key]
            assert str(av.dtype).rsplit(".")[-1] == str(tv.dtype).rsplit(".")[-1], key
            np.testing.assert_allclose(np_of(av), np_of(tv), rtol=1e-3, atol=1e-5, err_msg=key)


@pytest.mark.parametrize(
    "name,opt_name,kw",
    [CONFIGS[3], CONFIGS[7], CONFIGS[11]],
    ids=["sgd_nesterov_wd", "adam_amsgrad", "adamw_amsgrad"],
)
def test_training_float64_matches_closely(torch, name, opt_name, kw):
    torch.manual_seed(1)
    tm, am = _model(torch, "float64"), _model(ad, "float64")
    copy_params(tm, am)
    tl, _ = _train(torch, tm, opt_name, kw, "ce", "float64")
    al, _ = _train(ad, am, opt_name, kw, "ce", "float64")
    np.testing.assert_allclose(al, tl, rtol=1e-10)
    for tp, ap in zip(tm.parameters(), am.parameters()):
        assert ap.dtype is ad.float64
        np.testing.assert_allclose(np_of(ap), np_of(tp), rtol=1e-9, atol=1e-12)


def test_param_groups_and_add_param_group(torch):
    results = []
    torch.manual_seed(0)
    models = {torch: _model(torch, "float32"), ad: _model(ad, "float32")}
    copy_params(models[torch], models[ad])
    for lib, m in models.items():
        opt = lib.optim.SGD(
            [
                {"params": m[0].parameters()},
                {"params": m[2].parameters(), "lr": 0.5, "momentum": 0.9},
            ],
            lr=0.1,
        )
        opt.add_param_group({"params": m[4].parameters(), "weight_decay": 0.1})
        assert len(opt.param_groups) == 3
        assert opt.param_groups[1]["lr"] == 0.5 and opt.param_groups[2]["lr"] == 0.1
        x = lib.tensor(np.ones((4, 6), dtype=np.float32))
        for _ in range(3):
            opt.zero_grad()
            m(x).pow(2).mean().backward()
            opt.step()
        results.append([np_of(p) for p in m.parameters()])
    for t, a in zip(*results):
        np.testing.assert_allclose(a, t, rtol=1e-5, atol=1e-6)


def test_zero_grad_and_skip_params_without_grad(torch):
    w1 = ad.nn.Parameter(ad.ones(2))
    w2 = ad.nn.Parameter(ad.ones(2))
    opt = ad.optim.Adam([w1, w2], lr=0.1)
    (w1 * 3).sum().backward()
    opt.step()
    assert w2.tolist() == [1.0, 1.0] and w2 not in opt.state and w1 in opt.state
    assert w2._version == 0
    opt.zero_grad(set_to_none=False)
    assert w1.grad is not None and w1.grad.tolist() == [0.0, 0.0]
    opt.zero_grad()
    assert w1.grad is None and w2.grad is None


def test_step_keeps_leaves_and_detects_stale_graph(torch):
    msgs = []
    for lib in (torch, ad):
        w = lib.nn.Parameter(lib.ones(3))
        opt = lib.optim.SGD([w], lr=0.1)
        y = (w * w).sum()  # saves w
        (w * 2).sum().backward()
        opt.step()
        assert w.is_leaf and w.grad_fn is None and w.requires_grad
        with pytest.raises(RuntimeError) as e:
            y.backward()
        msgs.append(str(e.value))
    assert "modified by an inplace operation" in msgs[1]
    assert msgs[1].split(" autodiag:")[0] == msgs[0].split(" Hint:")[0]


def test_closure(torch):
    results = []
    for lib in (torch, ad):
        w = lib.nn.Parameter(lib.tensor([2.0, -1.0]))
        opt = lib.optim.SGD([w], lr=0.1)
        calls = []

        def closure(w=w, opt=opt, calls=calls, lib=lib):
            assert lib.is_grad_enabled()
            opt.zero_grad()
            loss = (w * w).sum()
            loss.backward()
            calls.append(1)
            return loss

        with lib.no_grad():
            loss = opt.step(closure)
        results.append((loss.item(), *w.tolist(), len(calls)))
    assert results[1] == pytest.approx(results[0])  # flat: newer pytest refuses nested approx


def test_state_dict_round_trip(torch):
    """Train 5 steps, save, load into a fresh optimizer, continue: identical to 10 steps."""
    ad.manual_seed(0)
    ref = _model(ad, "float32")
    a = _model(ad, "float32")
    a.load_state_dict(ref.state_dict())
    _, opt_ref = _train(ad, ref, "Adam", dict(lr=0.01, amsgrad=True), "ce", "float32", steps=10)
    _, opt_a = _train(ad, a, "Adam", dict(lr=0.01, amsgrad=True), "ce", "float32", steps=5)
    sd = opt_a.state_dict()
    opt_b = ad.optim.Adam(a.parameters(), lr=0.5, amsgrad=True)
    opt_b.load_state_dict(sd)
    assert opt_b.param_groups[0]["lr"] == 0.01
    assert opt_b.state[next(a.parameters())]["step"].item() == 5
    x, y, _ = _data("float32")
    for _ in range(5):
        opt_b.zero_grad()
        ad.nn.functional.cross_entropy(a(ad.tensor(x)), ad.tensor(y)).backward()
        opt_b.step()
    for pr, pa in zip(ref.parameters(), a.parameters()):
        np.testing.assert_array_equal(pa._data, pr._data)
    # state tensors are cast to the parameter's dtype, the step counter is kept
    a.double()
    opt_c = ad.optim.Adam(a.parameters())
    opt_c.load_state_dict(sd)
    st = opt_c.state[next(a.parameters())]
    assert st["exp_avg"].dtype is ad.float64 and st["step"].dtype is ad.float32


OPT_ERRORS = [
    ("empty", lambda lib: lib.optim.SGD([], lr=0.1)),
    ("tensor_params", lambda lib: lib.optim.SGD(lib.ones(2, requires_grad=True), lr=0.1)),
    ("non_leaf", lambda lib: lib.optim.SGD([lib.ones(2, requires_grad=True) * 2], lr=0.1)),
    ("not_tensor", lambda lib: lib.optim.Adam([1.0])),
    ("bad_lr", lambda lib: lib.optim.SGD([lib.nn.Parameter(lib.ones(1))], lr=-1)),
    ("bad_momentum", lambda lib: lib.optim.SGD([lib.nn.Parameter(lib.ones(1))], momentum=-1)),
    ("nesterov", lambda lib: lib.optim.SGD([lib.nn.Parameter(lib.ones(1))], nesterov=True)),
    ("bad_beta", lambda lib: lib.optim.Adam([lib.nn.Parameter(lib.ones(1))], betas=(1.0, 0.9))),
    ("bad_eps", lambda lib: lib.optim.AdamW([lib.nn.Parameter(lib.ones(1))], eps=-1.0)),
    (
        "set_params",
        lambda lib: lib.optim.SGD([{"params": {lib.nn.Parameter(lib.ones(1))}}], lr=0.1),
    ),
    (
        "dup_groups",
        lambda lib: (lambda p: lib.optim.SGD([{"params": [p]}, {"params": [p]}], lr=0.1))(
            lib.nn.Parameter(lib.ones(1))
        ),
    ),
    (
        "load_groups",
        lambda lib: (
            lambda p: lib.optim.SGD([p], lr=0.1).load_state_dict({"state": {}, "param_groups": []})
        )(lib.nn.Parameter(lib.ones(1))),
    ),
    (
        "load_sizes",
        lambda lib: (
            lambda p: lib.optim.SGD([p], lr=0.1).load_state_dict(
                {"state": {}, "param_groups": [{"params": [0, 1], "lr": 0.1}]}
            )
        )(lib.nn.Parameter(lib.ones(1))),
    ),
]


@pytest.mark.parametrize("fn", [c[1] for c in OPT_ERRORS], ids=[c[0] for c in OPT_ERRORS])
def test_optimizer_errors(torch, fn):
    with pytest.raises(Exception) as te:
        fn(torch)
    with pytest.raises(Exception) as ae:
        fn(ad)
    assert type(ae.value) is type(te.value)
    assert str(ae.value) == str(te.value)


def test_step_hooks_and_step_done(torch):
    events = []

    class MySGD(ad.optim.SGD):
        def step(self, closure=None):
            events.append("my-step")
            return super().step(closure)

        def _step_done(self):
            events.append("done")

    w = ad.nn.Parameter(ad.ones(2))
    opt = MySGD([w], lr=0.1)
    opt.register_step_pre_hook(lambda o, a, k: events.append("pre"))
    h = opt.register_step_post_hook(lambda o, a, k: events.append("post"))
    w.sum().backward()
    opt.step()
    assert events == ["pre", "my-step", "post", "done"]  # reported once for the nested step
    h.remove()
    events.clear()
    opt.step()
    assert events == ["pre", "my-step", "done"]

    class Plain(ad.optim.Optimizer):
        def __init__(self, params):
            super().__init__(params, {"lr": 1.0})

        def step(self, closure=None):
            events.append("plain")

    events.clear()
    p = Plain([w])
    p._step_done = lambda: events.append("done")
    p.step()
    assert events == ["plain", "done"]
