"""``utils.checkpoint``: gradients equal to the plain forward's (and PyTorch's), node names,
activations really freed, RNG replayed, and PyTorch's errors and warnings."""

from __future__ import annotations

import doctest
import warnings
import weakref

import numpy as np
import pytest
from differential import names, run_both, same_error

import autodiag as ad
from autodiag.utils import checkpoint as ad_checkpoint


def block(m):
    def f(x, w):
        h = (x @ w).tanh()
        return (h * h.sin()).sum(-1) * 2

    return f


def inputs(m):
    x = m.tensor([[0.5, -1.0, 2.0], [1.5, 0.25, -0.75]], dtype=m.float64, requires_grad=True)
    w = m.tensor([[0.1, 0.2], [-0.3, 0.4], [0.5, -0.6]], dtype=m.float64, requires_grad=True)
    return x, w


def run_ckpt(m, reentrant, fn, *args, **kwargs):
    return m.utils.checkpoint.checkpoint(fn, *args, use_reentrant=reentrant, **kwargs)


@pytest.mark.parametrize("reentrant", [True, False])
def test_gradients_equal_plain_and_torch(torch, reentrant):
    def f(m):
        x, w = inputs(m)
        y = run_ckpt(m, reentrant, block(m), x, w)
        node = names(y.grad_fn)
        y.sum().backward()
        gx, gw = x.grad, w.grad
        x2, w2 = inputs(m)
        block(m)(x2, w2).sum().backward()
        np.testing.assert_allclose(gx.numpy(), x2.grad.numpy(), rtol=1e-12)
        np.testing.assert_allclose(gw.numpy(), w2.grad.numpy(), rtol=1e-12)
        return y, gx, gw, node

    run_both(f, torch)


def test_reentrant_node_name(torch):
    def f(m):
        x, w = inputs(m)
        y = run_ckpt(m, True, lambda a, b: (a @ b, 3, a.sin()), x, w)
        return y[0], y[1], y[2], names(y[0].grad_fn), names(y[2].grad_fn)

    out = run_both(f, torch)
    assert out[3][0] == "CheckpointFunctionBackward"


def test_non_reentrant_works_with_autograd_grad_and_inputs(torch):
    def f(m):
        x, w = inputs(m)
        y = run_ckpt(m, False, block(m), x, w).sum()
        (gx,) = m.autograd.grad(y, x, retain_graph=True)
        y.backward(inputs=[w])
        return gx, w.grad, x.grad

    run_both(f, torch)


def test_reentrant_refuses_autograd_grad_and_inputs(torch):
    def grad_call(m):
        x, w = inputs(m)
        m.autograd.grad(run_ckpt(m, True, block(m), x, w).sum(), x)

    def inputs_call(m):
        x, w = inputs(m)
        run_ckpt(m, True, block(m), x, w).sum().backward(inputs=[x])

    for fn in (grad_call, inputs_call):
        same_error(
            fn,
            torch,
            "When use_reentrant=True, torch.utils.checkpoint is incompatible "
            "with .grad() or passing an `inputs` parameter to .backward().",
        )


def test_non_reentrant_double_backward(torch):
    def f(m):
        x, w = inputs(m)
        y = run_ckpt(m, False, block(m), x, w).sum()
        (gx,) = m.autograd.grad(y, x, create_graph=True)
        (ggx, ggw) = m.autograd.grad((gx**2).sum(), (x, w))
        return gx, ggx, ggw

    run_both(f, torch)


def test_nested_non_reentrant_double_backward_last_save_is_an_output(torch):
    # exp saves its own output last: the recomputed tensor handed to backward must come from
    # a completely recorded op for the second derivative to be right
    def f(m):
        ck = m.utils.checkpoint.checkpoint
        x = m.tensor([0.5, -1.0, 2.0], dtype=m.float64, requires_grad=True)

        def inner(t):
            return (t.sin() * t).exp()

        def outer(t):
            return ck(inner, t * 2, use_reentrant=False).tanh() * t

        y = ck(outer, x, use_reentrant=False).sum()
        (g,) = m.autograd.grad(y, x, create_graph=True)
        return g, m.autograd.grad(g.sum(), x)

    run_both(f, torch)


@pytest.mark.filterwarnings("ignore:None of the inputs have requires_grad")  # inner, no_grad
def test_nested_reentrant(torch):
    def f(m):
        ck = m.utils.checkpoint.checkpoint
        x = m.tensor([0.5, -1.0, 2.0], dtype=m.float64, requires_grad=True)
        y = ck(
            lambda t: ck(lambda u: u.exp() * u, t * 2, use_reentrant=True).sin(),
            x,
            use_reentrant=True,
        )
        y.sum().backward()
        return y, x.grad, names(y.grad_fn)

    run_both(f, torch)


@pytest.mark.parametrize("reentrant", [True, False])
def test_retain_graph_second_backward_recomputes(torch, reentrant):
    def f(m):
        x, w = inputs(m)
        y = run_ckpt(m, reentrant, block(m), x, w).sum()
        y.backward(retain_graph=True)
        first = x.grad.clone()
        y.backward()
        return first, x.grad

    run_both(f, torch)


@pytest.mark.parametrize("reentrant", [True, False])
def test_saved_activations_are_not_kept(reentrant):
    refs = []

    def f(x):
        h = x.sin()
        refs.append(weakref.ref(h))
        return (h * h).sum()  # MulBackward0 saves h twice

    x1 = ad.tensor([0.5, 1.0, 2.0], requires_grad=True)
    x2 = ad.tensor([0.5, 1.0, 2.0], requires_grad=True)
    plain = f(x1)
    assert refs[0]() is not None  # the plain graph keeps h alive
    y = run_ckpt(ad, reentrant, f, x2)
    assert refs[1]() is None  # the checkpointed one does not
    plain.backward()
    y.backward()
    assert np.array_equal(x1.grad.numpy(), x2.grad.numpy())


def test_non_reentrant_saves_only_placeholders():
    packed = []
    x, w = inputs(ad)

    def counting_block(a, b):
        # every tensor saved inside the checkpoint reaches the checkpoint's pack hook, which
        # returns a placeholder: record what the graph holds instead
        return block(ad)(a, b)

    y = run_ckpt(ad, False, counting_block, x, w)
    for node in _walk(y.grad_fn):
        saved = node._saved
        if saved is None or not isinstance(saved, tuple):
            continue
        for s in saved:
            if isinstance(s, ad.autograd.graph.SavedTensor):
                packed.append(s)
            assert not isinstance(s, ad.Tensor), f"{node.name()} keeps a tensor"
    assert packed and all(s.tensor is None and s.data is None for s in packed)
    assert all(type(s.packed).__name__ == "_Holder" and s.packed.value is None for s in packed)


def _walk(root):
    seen, stack = set(), [root]
    while stack:
        n = stack.pop()
        if n is None or n in seen:
            continue
        seen.add(n)
        yield n
        stack.extend(e[0] for e in n.next_functions)


@pytest.mark.parametrize("reentrant", [True, False])
def test_rng_state_is_replayed(reentrant):
    def dropout_like(x):
        return (x * (ad.rand_like(x) > 0.5) * 2).sum()

    x = ad.linspace(0.1, 3.0, 64, dtype=ad.float64, requires_grad=True)
    ad.manual_seed(7)
    run_ckpt(ad, reentrant, dropout_like, x).backward()
    next_draw = ad.rand(3)
    x2 = x.detach().requires_grad_()
    ad.manual_seed(7)
    dropout_like(x2).backward()
    # the recomputation drew the forward's mask again ...
    assert np.array_equal(x.grad.numpy(), x2.grad.numpy())
    # ... and handed the caller's random stream back where the forward left it
    assert np.array_equal(ad.rand(3).numpy(), next_draw.numpy())


@pytest.mark.parametrize("reentrant", [True, False])
def test_without_preserved_rng_the_mask_changes(reentrant):
    def dropout_like(x):
        return (x * (ad.rand_like(x) > 0.5) * 2).sum()

    x = ad.linspace(0.1, 3.0, 64, dtype=ad.float64, requires_grad=True)
    ad.manual_seed(7)
    run_ckpt(ad, reentrant, dropout_like, x, preserve_rng_state=False).backward()
    ad.manual_seed(7)
    x2 = x.detach().requires_grad_()
    dropout_like(x2).backward()
    assert not np.array_equal(x.grad.numpy(), x2.grad.numpy())


def test_default_use_reentrant_warns_and_is_reentrant(torch):
    def f(m):
        x, w = inputs(m)
        with warnings.catch_warnings(record=True) as rec:
            warnings.simplefilter("always")
            y = m.utils.checkpoint.checkpoint(block(m), x, w)
        msgs = [str(r.message) for r in rec if "use_reentrant" in str(r.message)]
        return names(y.grad_fn), msgs

    run_both(f, torch)


def test_no_input_requires_grad_warns(torch):
    def f(m):
        x, w = inputs(m)
        with warnings.catch_warnings(record=True) as rec:
            warnings.simplefilter("always")
            y = run_ckpt(m, True, block(m), x.detach(), w.detach())
        return y.requires_grad, [str(r.message) for r in rec]

    run_both(f, torch)


def test_errors(torch):
    same_error(
        lambda m: run_ckpt(m, True, block(m), *inputs(m), foo=1),
        torch,
        "Unexpected keyword arguments: foo",
    )

    def modified(m):
        x, w = inputs(m)
        x2 = x * 1
        y = run_ckpt(m, False, block(m), x2, w)
        x2.mul_(2)
        y.sum().backward()

    same_error(
        modified,
        torch,
        "modified by an inplace operation",
        "is at version 1; expected version 0 instead",
    )


def test_kwargs_and_no_grad_mode(torch):
    def f(m):
        x, w = inputs(m)
        y = run_ckpt(m, False, lambda a, b=None: (a @ b).exp().sum(), x, b=w)
        y.backward()
        with m.no_grad():
            z = run_ckpt(m, False, block(m), x, w)
        return y, x.grad, w.grad, z.requires_grad

    run_both(f, torch)


@pytest.mark.parametrize("reentrant", [True, False])
def test_checkpoint_sequential(torch, reentrant):
    def f(m):
        x = m.tensor([0.5, -1.0, 2.0], dtype=m.float64, requires_grad=True)
        fs = [m.sin, m.exp, m.tanh, m.sigmoid, lambda t: t * 3]
        y = m.utils.checkpoint.checkpoint_sequential(fs, 2, x, use_reentrant=reentrant)
        y.sum().backward()
        return y, x.grad, names(y.grad_fn)

    run_both(f, torch)


def test_docstring_examples_run():
    assert doctest.testmod(ad_checkpoint).failed == 0
