"""Differential tests of ``torch.func`` (``autodiag.func``): grad, grad_and_value, vjp, jvp,
jacrev, jacfwd, hessian, vmap and functional_call, and their compositions.

Every snippet runs under autodiag and PyTorch (``m`` is the module): values, nesting of the
results, whether results carry history, and errors (type and PyTorch's key phrase).
"""

from __future__ import annotations

import threading

import pytest
from differential import assert_same, run_both, same_error

import autodiag as ad

torch = pytest.importorskip("torch")

# torch.func's vjp-based transforms call torch.jit.script internally, which warns in 2.13
pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated")


def X(m):
    return m.tensor([0.5, -1.25, 2.0], dtype=m.float64)


def Y(m):
    return m.tensor([[1.5, 0.25, -0.5], [-0.75, 1.0, 0.125]], dtype=m.float64)


def flags(tree):
    """Per tensor of a nested result: does it carry history?"""
    if isinstance(tree, (tuple, list)):
        return tuple(flags(t) for t in tree)
    if isinstance(tree, dict):
        return {k: flags(v) for k, v in tree.items()}
    return (tree.requires_grad, tree.grad_fn is not None)


def both_flags(fn):
    a = run_both(fn, torch)
    assert flags(a) == flags(fn(torch))
    return a


# ---------------------------------------------------------------------------------------------
# grad, grad_and_value
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "case",
    [
        lambda m: m.func.grad(lambda x: (x.sin() * x).sum())(X(m)),
        lambda m: m.func.grad(lambda x, y: (x * y).sum(), argnums=1)(X(m), Y(m)[0]),
        lambda m: m.func.grad(lambda x, y: (x * y.exp()).sum(), argnums=(0, 1))(X(m), Y(m)[1]),
        lambda m: m.func.grad(lambda x, y: (x * y.exp()).sum(), argnums=-1)(X(m), Y(m)[1]),
        lambda m: m.func.grad(lambda d: (d["a"] * d["b"][0]).sum())({"a": X(m), "b": [Y(m)[0]]}),
        lambda m: m.func.grad(lambda x: ((x**2).sum(), x.cos()), has_aux=True)(X(m)),
        lambda m: m.func.grad_and_value(lambda x: (x**3).sum())(X(m)),
        lambda m: m.func.grad_and_value(lambda x: ((x**3).sum(), {"y": x * 2}), has_aux=True)(X(m)),
        # an output unrelated to the input: zero gradient
        lambda m: m.func.grad(lambda x: m.tensor(1.0, dtype=m.float64))(X(m)),
        # a kwarg is passed through, never differentiated
        lambda m: m.func.grad(lambda x, scale=1.0: (x * scale).sum())(X(m), scale=3.0),
        # no_grad inside f is respected
        lambda m: m.func.grad(lambda x: (x * _detached_sum(m, x)).sum())(X(m)),
    ],
)
def test_grad_matches_torch(case):
    both_flags(case)


def _detached_sum(m, x):
    with m.no_grad():
        return x.sum()


def test_grad_of_grad_and_higher_orders():
    f = lambda m: lambda x: (x.sin() * x**2).sum()  # noqa: E731
    both_flags(lambda m: m.func.grad(lambda x: m.func.grad(f(m))(x).sum())(X(m)))
    third = lambda m: m.func.grad(m.func.grad(m.func.grad(lambda x: x.exp() * x**3)))  # noqa: E731
    both_flags(lambda m: third(m)(m.tensor(0.7, dtype=m.float64)))


def test_grad_keeps_history_to_outer_tensors_and_respects_outer_no_grad():
    def with_outer(m):
        w = m.tensor([1.0, 2.0, 3.0], dtype=m.float64, requires_grad=True)
        g = m.func.grad(lambda x: (x * w).pow(2).sum())(X(m))
        g.sum().backward()
        return g, w.grad

    a = both_flags(lambda m: with_outer(m)[0])
    assert a.requires_grad
    run_both(lambda m: with_outer(m)[1], torch)

    def input_requires_grad(m):
        x = X(m).requires_grad_()
        g = m.func.grad(lambda x: (x**3).sum())(x)
        (gx,) = m.autograd.grad(g.sum(), x)
        return g, gx

    assert flags(run_both(input_requires_grad, torch)) == flags(input_requires_grad(torch))

    def under_no_grad(m):
        x = X(m).requires_grad_()
        with m.no_grad():
            return m.func.grad(lambda x: (x**3).sum())(x)

    assert not both_flags(under_no_grad).requires_grad


def test_aux_sharing_the_outputs_graph_stays_differentiable():
    def f(m):
        w = m.tensor([1.0, 2.0, 3.0], dtype=m.float64, requires_grad=True)

        def fn(x):
            y = x.sin() * x
            return y.sum(), y * w

        g, aux = m.func.grad(fn, has_aux=True)(X(m))
        aux.sum().backward()
        return g, aux, w.grad

    both_flags(f)


def test_no_perturbation_confusion():
    # d/dx [x * d/dy (x * y)] = d/dx x² = 2x: the inner grad must not differentiate x
    def f(m):
        c = m.tensor(3.0, dtype=m.float64)
        return m.func.grad(lambda x: x * m.func.grad(lambda y: x * y)(c))(
            m.tensor(1.5, dtype=m.float64)
        )

    assert both_flags(f).item() == 3.0


@pytest.mark.parametrize(
    "case,phrase",
    [
        (lambda m: m.func.grad(lambda x: x * 2)(X(m)), "Expected f(*args) to return a scalar"),
        (lambda m: m.func.grad(lambda x: 3.0)(X(m)), "Expected f(*args) to return a Tensor"),
        (lambda m: m.func.grad(lambda x: x)(3.0), "Thing passed to transform API must be"),
        (lambda m: m.func.grad(lambda x: x.sum(), argnums=1)(X(m)), "Got argnum=1, but only"),
        (lambda m: m.func.grad(lambda x: x.sum(), argnums=())(X(m)), "must be non-empty"),
        (lambda m: m.func.grad(lambda x: x.sum(), argnums=1.0)(X(m)), "must be int or Tuple"),
        (
            lambda m: m.func.grad(lambda x, y: x.sum(), argnums=(0, 0))(X(m), X(m)),
            "argnums elements must be unique",
        ),
        (
            lambda m: m.func.grad(lambda x: x.sum(), has_aux=True)(X(m)),
            "should be a tuple: (output, aux) if has_aux is True",
        ),
        (
            lambda m: m.func.grad(lambda x: x.sum())(m.arange(3)),
            "only Tensors of floating point dtype can require gradients",
        ),
    ],
)
def test_grad_errors_as_torch(case, phrase):
    same_error(case, torch, phrase)


# ---------------------------------------------------------------------------------------------
# vjp, jvp
# ---------------------------------------------------------------------------------------------


def test_vjp_matches_torch_and_can_be_called_twice():
    def f(m):
        out, fn = m.func.vjp(lambda x, y: (x * y.exp(), (x**2).sum()), X(m), Y(m)[0])
        ct = (m.ones(3, dtype=m.float64), m.tensor(2.0, dtype=m.float64))
        return out, fn(ct), fn(ct)

    both_flags(f)

    def aux(m):
        out, fn, a = m.func.vjp(lambda x: (x.sin(), {"c": x.cos()}), X(m), has_aux=True)
        return out, fn(m.ones(3, dtype=m.float64)), a

    both_flags(aux)


def test_vjp_errors_as_torch():
    same_error(
        lambda m: m.func.vjp(lambda x: x * 2, X(m))[1](m.ones(2, dtype=m.float64)),
        torch,
        "Mismatch in shape",
    )
    same_error(
        lambda m: m.func.vjp(lambda x: x * 2, X(m))[1]((m.ones(3, dtype=m.float64),)),
        torch,
        "Expected pytree structure of cotangents to be the same",
        "cotangents: (*,), primal output: *",
    )
    same_error(
        lambda m: m.func.vjp(lambda x: x * 2, X(m), has_aux=True),
        torch,
        "vjp(f, *primals): output of function f should be a tuple",
    )
    same_error(
        lambda m: m.func.vjp(lambda x: 3.0, X(m)),
        torch,
        "expected f(*primals) to return only tensors, got unsupported type <class 'float'>",
    )


def test_jvp_matches_torch():
    v = lambda m: m.tensor([1.0, -2.0, 0.5], dtype=m.float64)  # noqa: E731
    both_flags(lambda m: m.func.jvp(lambda x: (x.sin() * x, x.sum()), (X(m),), (v(m),)))
    both_flags(lambda m: m.func.jvp(lambda x, y: x * y, (X(m), Y(m)[0]), (v(m), Y(m)[1])))
    both_flags(lambda m: m.func.jvp(lambda x: (x.exp(), {"a": x}), (X(m),), (v(m),), has_aux=True))
    both_flags(lambda m: m.func.jvp(lambda x: x.exp(), (X(m),), (v(m),), strict=True))
    # an output that does not depend on the input has a zero jvp
    both_flags(lambda m: m.func.jvp(lambda x: m.ones(2, dtype=m.float64), (X(m),), (v(m),)))


def test_jvp_errors_as_torch():
    one = lambda m: m.ones(3, dtype=m.float64)  # noqa: E731
    same_error(
        lambda m: m.func.jvp(lambda x: x, X(m), one(m)), torch, "Expected primals to be a tuple"
    )
    same_error(
        lambda m: m.func.jvp(lambda x: x, (X(m),), (m.ones(2, dtype=m.float64),)),
        torch,
        "Tensor is of size [3] while the given forward gradient is of size [2]",
    )
    same_error(
        lambda m: m.func.jvp(lambda x: x, (X(m),), (one(m), one(m))),
        torch,
        "Expected primals and tangents to have the same python structure",
    )
    same_error(
        lambda m: m.func.jvp(lambda x: m.ones(2), (X(m),), (one(m),), strict=True),
        torch,
        "jvp(f, primals, tangents, strict=True): The output of f is independent of the inputs.",
    )
    same_error(
        lambda m: m.func.jvp(lambda x: 3, (X(m),), (one(m),)),
        torch,
        "expected f(*primals) to return only tensors, got unsupported type <class 'int'>",
    )


# ---------------------------------------------------------------------------------------------
# jacrev, jacfwd, hessian
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("jac", ["jacrev", "jacfwd"])
@pytest.mark.parametrize(
    "case",
    [
        lambda m, J: J(lambda x: x.sin() * x.sum())(X(m)),
        lambda m, J: J(lambda x, y: (x * y, x.sum()), argnums=(0, 1))(X(m), Y(m)[0]),
        lambda m, J: J(lambda y: y @ y.T)(Y(m)),
        lambda m, J: J(lambda d: {"o": d["a"] * 2, "p": d["a"].sum()})({"a": X(m)}),
        lambda m, J: J(lambda x: (x.exp(), x.sum()), has_aux=True)(X(m)),
        lambda m, J: J(lambda x: x.sum())(X(m)),
        lambda m, J: J(lambda x: m.ones(2, dtype=m.float64))(X(m)),
    ],
)
def test_jacobians_match_torch(jac, case):
    both_flags(lambda m: case(m, getattr(m.func, jac)))


@pytest.mark.parametrize(
    "case",
    [
        lambda m: m.func.hessian(lambda x: (x.sin() * x**3).sum())(X(m)),
        lambda m: m.func.hessian(lambda x: x**3)(X(m)),
        lambda m: m.func.hessian(lambda x, y: (x * y.exp()).sum(), argnums=(0, 1))(X(m), Y(m)[0]),
        lambda m: m.func.jacrev(m.func.jacrev(lambda x: (x**4).sum()))(X(m)),
    ],
)
def test_hessian_matches_torch(case):
    both_flags(case)


def test_jacobian_errors_as_torch():
    same_error(
        lambda m: m.func.jacrev(lambda x: 3)(X(m)),
        torch,
        "expected f(*primals) to return only tensors, got unsupported type <class 'int'>",
    )
    same_error(
        lambda m: m.func.jacfwd(lambda x: x + m.randn(3, dtype=m.float64))(X(m)),
        torch,
        "vmap: called random operation while in randomness error mode",
    )
    same_error(
        lambda m: m.func.jacrev(lambda x: x)(m.arange(3)),
        torch,
        "only Tensors of floating point dtype can require gradients",
    )


# ---------------------------------------------------------------------------------------------
# vmap
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "case",
    [
        lambda m: m.func.vmap(m.dot)(Y(m), Y(m) * 2),
        lambda m: m.func.vmap(lambda a, b: a * b, in_dims=(0, None))(Y(m), X(m)),
        lambda m: m.func.vmap(lambda a: a.sum(), in_dims=1)(Y(m)),
        lambda m: m.func.vmap(lambda a: a.sum(), in_dims=-1)(Y(m)),
        lambda m: m.func.vmap(lambda a: a * 2, out_dims=1)(Y(m)),
        lambda m: m.func.vmap(lambda a: (a, a.sum()), out_dims=(1, 0))(Y(m)),
        lambda m: m.func.vmap(lambda a: [a, a * 2])(X(m)),
        lambda m: m.func.vmap(lambda d: d["a"] * d["b"], in_dims=({"a": 0, "b": None},))(
            {"a": Y(m), "b": X(m)}
        ),
        lambda m: m.func.vmap(lambda t: t[0] + t[1], in_dims=((0, 1),))((Y(m), Y(m).T)),
        lambda m: m.func.vmap(lambda a, b=None: a * b)(X(m), b=Y(m)[0]),
        # outputs that do not depend on the batch are repeated
        lambda m: m.func.vmap(lambda a: m.ones(2, dtype=m.float64))(X(m)),
        lambda m: m.func.vmap(lambda a: m.ones(2, dtype=m.float64), out_dims=None)(X(m)),
        # nested vmap: an outer product
        lambda m: m.func.vmap(
            m.func.vmap(lambda a, b: a * b, in_dims=(None, 0)), in_dims=(0, None)
        )(X(m), Y(m)[0]),
        lambda m: m.func.vmap(lambda a: a * 2, chunk_size=2)(Y(m)),
        lambda m: m.func.vmap(m.func.vmap(lambda a: a * 2, randomness="same"))(Y(m)),
        lambda m: m.func.vmap(lambda a: a + m.ones(()) * 0, randomness="different")(X(m)),
    ],
)
def test_vmap_matches_torch(case):
    both_flags(case)


def test_vmap_is_differentiable_and_composes_with_jacrev():
    def f(m):
        y = Y(m).requires_grad_()
        out = m.func.vmap(lambda r: (r.sin() * r).sum())(y)
        (g,) = m.autograd.grad(out.sum(), y, create_graph=True)
        (gg,) = m.autograd.grad(g.sum(), y)
        return out, g, gg

    run_both(f, torch)
    both_flags(lambda m: m.func.jacrev(m.func.vmap(lambda r: r.exp() * r.sum()))(Y(m)))
    both_flags(lambda m: m.func.vmap(m.func.jacrev(lambda r: r.exp() * r.sum()))(Y(m)))
    both_flags(lambda m: m.func.vmap(m.func.hessian(lambda r: (r**3).prod()))(Y(m)))


def test_vmap_randomness_same_gives_one_draw_per_batch():
    ad.manual_seed(0)
    out = ad.func.vmap(lambda a: a + ad.randn(()), randomness="same")(ad.zeros(4))
    assert len(set(out.tolist())) == 1
    out = ad.func.vmap(lambda a: a + ad.randn(()), randomness="different")(ad.zeros(4))
    assert len(set(out.tolist())) == 4


def test_vmap_randomness_error_is_per_thread_and_restored():
    seen = []

    def other_thread(started, release):
        started.set()
        release.wait(5)
        seen.append(ad.randn(2).shape)  # another thread draws normally during the vmap

    started, release = threading.Event(), threading.Event()
    t = threading.Thread(target=other_thread, args=(started, release))
    t.start()
    started.wait(5)

    def f(a):
        release.set()
        t.join(5)
        return a * 2

    ad.func.vmap(f)(ad.zeros(2))
    assert seen == [(2,)]
    assert ad.randn(3).shape == (3,)  # the stream is back after the vmap
    with pytest.raises(RuntimeError, match="randomness error mode"):
        ad.func.vmap(lambda a: ad.nn.functional.dropout(a, 0.5))(ad.ones(2, 3))
    assert ad.rand(1).shape == (1,)


def test_vmap_randomness_error_blocks_ending_out_of_order_leave_no_guard():
    # thread A's vmap starts, then B's; A's ends first. Each block restoring what it replaced
    # left B's restore putting A's guard back: A could never draw again.
    a_in, b_in, a_out = threading.Event(), threading.Event(), threading.Event()
    after = []

    def fa(x):
        a_in.set()
        b_in.wait(5)
        return x * 2

    def fb(x):
        b_in.set()
        a_out.wait(5)
        return x * 2

    def thread_a():
        ad.func.vmap(fa)(ad.ones(1))
        a_out.set()
        try:
            after.append(ad.randn(2).shape)
        except RuntimeError as e:
            after.append(str(e))

    ta = threading.Thread(target=thread_a)
    ta.start()
    a_in.wait(5)
    tb = threading.Thread(target=lambda: ad.func.vmap(fb)(ad.ones(1)))
    tb.start()
    ta.join(5)
    tb.join(5)
    assert after == [(2,)]
    assert ad.randn(1).shape == (1,)
    from autodiag.ops import factories

    assert not type(factories._rng[0]).__name__.startswith("_Random")


@pytest.mark.parametrize(
    "case,phrase",
    [
        (
            lambda m: m.func.vmap(lambda a, b: a + b)(m.ones(3), m.ones(4)),
            "got sizes [3, 4] for the mapped dimension",
        ),
        (lambda m: m.func.vmap(lambda a: a)(3.0), "We cannot vmap over non-Tensor arguments"),
        (
            lambda m: m.func.vmap(lambda a: a, in_dims=2)(m.ones(3)),
            "expected in_dim to satisfy -1 <= in_dim < 1",
        ),
        (
            lambda m: m.func.vmap(lambda a, b: a, in_dims=(0,))(m.ones(3), m.ones(3)),
            "in_dims is not compatible with the structure of `inputs`",
        ),
        (
            lambda m: m.func.vmap(lambda a: a, in_dims=None)(m.ones(3)),
            "expected `in_dims` to be int or a (potentially nested) tuple",
        ),
        (
            lambda m: m.func.vmap(lambda a: a, in_dims=(None,))(m.ones(3)),
            "vmap: Expected at least one Tensor to vmap over",
        ),
        (
            lambda m: m.func.vmap(lambda a: a, in_dims=("x",))(m.ones(3)),
            "in_dim must be either an integer dimension or None",
        ),
        (
            lambda m: m.func.vmap(lambda a: a + m.randn(()))(m.ones(3)),
            "vmap: called random operation while in randomness error mode",
        ),
        (lambda m: m.func.vmap(lambda a: 3.0)(m.ones(3)), "must only return Tensors"),
        (lambda m: m.func.vmap(lambda a: None)(m.ones(3)), "must only return Tensors"),
        (
            lambda m: m.func.vmap(lambda a: a, out_dims=None)(m.arange(3.0)),
            "can not return a BatchedTensor when out_dim is None",
        ),
        (
            lambda m: m.func.vmap(lambda a: a, out_dims=3)(m.ones(3)),
            "Dimension out of range (expected to be in range of [-1, 0], but got 3)",
        ),
        (
            lambda m: m.func.vmap(lambda a: (a, a), out_dims=(0, 0, 0))(m.ones(3)),
            "out_dims is not compatible with the structure of `outputs`",
        ),
        (lambda m: m.func.vmap(lambda a: a, randomness="foo"), "Only allowed values for"),
        (lambda m: m.func.vmap(lambda a: a, chunk_size=0), "chunk_size should be None or"),
    ],
)
def test_vmap_errors_as_torch(case, phrase):
    same_error(case, torch, phrase)


def test_vmap_over_an_empty_batch_is_refused_not_guessed():
    with pytest.raises(NotImplementedError, match="empty batch"):
        ad.func.vmap(lambda a: a * 2)(ad.ones(0, 3))


# ---------------------------------------------------------------------------------------------
# functional_call, and the per-sample-gradient recipe
# ---------------------------------------------------------------------------------------------


def _model(m):
    m.manual_seed(0)
    net = m.nn.Sequential(m.nn.Linear(3, 4), m.nn.Tanh(), m.nn.Linear(4, 2)).double()
    with m.no_grad():
        for i, p in enumerate(net.parameters()):
            p.copy_(m.linspace(-1, 1, p.numel(), dtype=m.float64).reshape(p.shape) * (i + 1))
    return net


def test_functional_call_matches_torch_and_leaves_the_module_alone():
    def f(m):
        net = _model(m)
        params = {k: v.detach() * 2 for k, v in net.named_parameters()}
        before = [p.detach().clone() for p in net.parameters()]
        out = m.func.functional_call(net, params, (Y(m),))
        partial = m.func.functional_call(net, {"0.bias": m.zeros(4, dtype=m.float64)}, Y(m))
        kw = m.func.functional_call(
            net, ({"0.weight": params["0.weight"]}, {}), (), {"input": Y(m)}
        )
        after = list(net.parameters())
        assert all((a == b).all() for a, b in zip(after, before))
        assert all(type(p).__name__ == "Parameter" for p in after)
        return out, partial, kw

    both_flags(f)


def test_functional_call_updates_the_given_buffers_not_the_modules():
    def f(m):
        class Counter(m.nn.Module):  # a buffer written in forward, as BatchNorm's running stats
            def __init__(self):
                super().__init__()
                self.register_buffer("seen", m.zeros(3, dtype=m.float64))

            def forward(self, x):
                self.seen.add_(x.detach().sum(0))
                return x * 2

        mod = Counter()
        given = m.ones(3, dtype=m.float64)
        out = m.func.functional_call(mod, {"seen": given}, (Y(m),))
        return out, given, mod.seen

    run_both(f, torch)


def test_functional_call_errors_as_torch():
    lin = lambda m: m.nn.Linear(3, 2)  # noqa: E731
    same_error(
        lambda m: m.func.functional_call(
            lin(m), {"weight": m.ones(2, 3)}, (m.ones(3),), strict=True
        ),
        torch,
        "Error(s) in reparametrizing for Linear:\n\tMissing key(s): 'bias'.",
    )
    same_error(
        lambda m: m.func.functional_call(
            lin(m), {"weight": m.ones(2, 3), "foo": m.ones(1)}, (m.ones(3),), strict=True
        ),
        torch,
        "Error(s) in reparametrizing for Linear:\n\tUnexpected key(s): 'foo'."
        "\n\tMissing key(s): 'bias'.",
    )
    same_error(
        lambda m: m.func.functional_call(
            lin(m), ({"weight": m.ones(2, 3)}, {"weight": m.ones(2, 3)}), (m.ones(3),)
        ),
        torch,
        "['weight'] appeared in multiple dictionaries",
    )
    same_error(
        lambda m: m.func.functional_call(lin(m), [1], (m.ones(3),)),
        torch,
        "Expected all elements of parameter_and_buffer_dicts to be dictionaries",
    )


def test_functional_call_restores_the_module_when_the_call_raises():
    net = _model(ad)
    before = dict(net.named_parameters())
    with pytest.raises(RuntimeError):
        ad.func.functional_call(net, {"0.weight": ad.ones(4, 3, dtype=ad.float64)}, (ad.ones(5),))
    assert dict(net.named_parameters()) == before


def test_per_sample_gradients_vmap_grad_functional_call():
    """The torch.func tutorial's recipe: vmap(grad(loss)) over a batch, params unmapped."""

    def f(m):
        net = _model(m)
        params = {k: v.detach() for k, v in net.named_parameters()}
        data = Y(m).repeat(2, 1) * m.tensor([[1.0], [2.0], [-1.0], [0.5]], dtype=m.float64)
        targets = m.tensor([0, 1, 1, 0])

        def loss(params, x, t):
            out = m.func.functional_call(net, params, (x.unsqueeze(0),))
            return m.nn.functional.cross_entropy(out, t.unsqueeze(0))

        per_sample = m.func.vmap(m.func.grad(loss), in_dims=(None, 0, 0))(params, data, targets)
        # the same gradients one sample at a time, through ordinary backward
        loops = []
        for i in range(data.shape[0]):
            net.zero_grad()
            loss(dict(net.named_parameters()), data[i], targets[i]).backward()
            loops.append({k: p.grad.clone() for k, p in net.named_parameters()})
        for k in per_sample:
            assert_same(per_sample[k], m.stack([d[k] for d in loops]), k)
        return per_sample

    both_flags(f)


def test_model_ensembling_with_stack_module_state():
    """The torch.func ensembling tutorial: stacked weights, vmap over functional_call."""

    def f(m):
        models = [_model(m) for _ in range(3)]
        with m.no_grad():
            for i, net in enumerate(models):
                for p in net.parameters():
                    p.mul_(1 + i)
        params, buffers = m.func.stack_module_state(models)
        base = models[0]

        def call(params, buffers, x):
            return m.func.functional_call(base, (params, buffers), (x,))

        out = m.func.vmap(call, in_dims=(0, 0, None))(params, buffers, Y(m))
        (g,) = m.autograd.grad(out.pow(2).sum(), [params["0.weight"]])
        return out, g, {k: (tuple(v.shape), v.is_leaf, v.requires_grad) for k, v in params.items()}

    both_flags(lambda m: f(m)[:2])
    assert f(ad)[2] == f(torch)[2]


def test_stack_module_state_errors_as_torch():
    same_error(
        lambda m: m.func.stack_module_state([]), torch, "Expected at least one model, got 0."
    )
    same_error(
        lambda m: m.func.stack_module_state([m.nn.Linear(2, 2), m.nn.Linear(2, 2).eval()]),
        torch,
        "Expected all models to have the same training/eval mode.",
    )
    same_error(
        lambda m: m.func.stack_module_state([m.nn.Linear(2, 2), m.nn.Tanh()]),
        torch,
        "Expected all models to be of the same class.",
    )
