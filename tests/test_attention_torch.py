"""The ops a GPT needs (tril/triu, sort/argsort/topk, roll, repeat_interleave, baddbmm, lerp,
silu, elu, one_hot, pad, normalize, masked_fill_, multinomial, bernoulli) and
scaled_dot_product_attention, against PyTorch: values, the recorded graph node for node
(names and next_functions), first and second derivatives (or PyTorch's error where it has
none), and errors (type and key phrase)."""

from __future__ import annotations

import numpy as np
import pytest

import autodiag as ad

R = np.random.default_rng(0)
X = R.standard_normal((3, 4))
X3 = R.standard_normal((2, 3, 4))
B1, B2 = R.standard_normal((2, 3, 5)), R.standard_normal((2, 5, 4))
W = R.uniform(0, 1, (3, 4))
Q, K, V = (
    R.standard_normal((2, 3, 5, 4)),
    R.standard_normal((2, 3, 6, 4)),
    R.standard_normal((2, 3, 6, 4)),
)
V3 = R.standard_normal((2, 3, 6, 3))  # another head dim for value: PyTorch's math path
FMASK = R.standard_normal((5, 6))
BMASK = R.standard_normal((5, 6)) > -0.5
BMASK[:, 0] = True
DEAD = BMASK.copy()
DEAD[1] = False  # a fully masked row: 0 in PyTorch's safe softmax, not NaN
TIES = np.array([[3.0, 1.0, 3.0, np.nan, 2.0, 1.0], [0.5, 0.5, -1.0, 2.0, 2.0, 0.0]])


def F(T):
    return T.nn.functional


# name -> (function of (module, *tensors), inputs, indices of inputs that need no grad)
CASES = {
    "tril": (lambda T, x: x.tril(1), [X], ()),
    "triu": (lambda T, x: T.triu(x, -1), [X3], ()),
    "tril_": (lambda T, x: (x * 1).tril_(), [X], ()),
    "triu_": (lambda T, x: (x * 1).triu_(2), [X], ()),
    "sort": (lambda T, x: x.sort(0).values, [X], ()),
    "sort_desc": (lambda T, x: T.sort(x, 1, descending=True)[0], [X3], ()),
    "topk": (lambda T, x: x.topk(2).values, [X3], ()),
    "topk_smallest": (lambda T, x: x.topk(2, dim=0, largest=False)[0], [X], ()),
    "roll": (lambda T, x: x.roll(1), [X], ()),
    "roll_dims": (lambda T, x: T.roll(x, (1, -2), (0, 2)), [X3], ()),
    "repeat_interleave_int": (lambda T, x: x.repeat_interleave(2, dim=1), [X], ()),
    "repeat_interleave_flat": (lambda T, x: x.repeat_interleave(3), [X], ()),
    "repeat_interleave_tensor": (
        lambda T, x: x.repeat_interleave(T.tensor([1, 0, 2]), dim=0),
        [X],
        (),
    ),
    "baddbmm": (lambda T, a, b, c: T.baddbmm(a, b, c, beta=0.5, alpha=2), [X, B1, B2], ()),
    "baddbmm_method": (lambda T, a, b, c: a.baddbmm(b, c), [X3, B1, B2], ()),
    "baddbmm_const_input": (lambda T, a, b, c: T.baddbmm(a, b, c), [X3, B1, B2], (0, 2)),
    "lerp": (lambda T, a, b: T.lerp(a, b, 0.3), [X, X3[0]], ()),
    "lerp_tensor": (lambda T, a, b, w: T.lerp(a, b, w), [X, X3[0], W], ()),
    "lerp_": (lambda T, a, b: (a * 1).lerp_(b, 0.7), [X, X3[0]], ()),
    "silu": (lambda T, x: F(T).silu(x), [X], ()),
    "silu_inplace": (lambda T, x: F(T).silu(x * 1, inplace=True), [X], ()),
    "elu": (lambda T, x: F(T).elu(x, 0.7), [X], ()),
    "elu_inplace": (lambda T, x: F(T).elu(x * 1, 0.7, inplace=True), [X], ()),
    "pad": (lambda T, x: F(T).pad(x, (1, 2)), [X], ()),
    "pad_crop_value": (lambda T, x: F(T).pad(x, (1, -1, 2, 0, 0, 1), value=2.5), [X3], ()),
    "normalize": (lambda T, x: F(T).normalize(x), [X], ()),
    "normalize_p1": (lambda T, x: F(T).normalize(x, p=1, dim=-1), [X3], ()),
    "masked_fill_": (lambda T, x: (x * 1).masked_fill_(T.tensor(W > 0.5), -1.0), [X], ()),
    "sdpa": (lambda T, q, k, v: F(T).scaled_dot_product_attention(q, k, v), [Q, K, V], ()),
    "sdpa_causal": (
        lambda T, q, k, v: F(T).scaled_dot_product_attention(q, k, v, is_causal=True),
        [Q, K, V],
        (),
    ),
    "sdpa_float_mask_scale": (
        lambda T, q, k, v, m: F(T).scaled_dot_product_attention(q, k, v, attn_mask=m, scale=0.2),
        [Q, K, V, FMASK],
        (3,),
    ),
    "sdpa_bool_mask_dead_row": (
        lambda T, q, k, v, m: F(T).scaled_dot_product_attention(q, k, v, attn_mask=m),
        [Q, K, V, DEAD],
        (3,),
    ),
    "sdpa_mask_and_causal": (
        lambda T, q, k, v, m: F(T).scaled_dot_product_attention(
            q, k, v, attn_mask=m, is_causal=True
        ),
        [Q, K, V, FMASK],
        (3,),
    ),
    "sdpa_key_needs_no_grad": (
        lambda T, q, k, v: F(T).scaled_dot_product_attention(q, k, v),
        [Q, K, V],
        (1,),
    ),
    "sdpa_math": (lambda T, q, k, v: F(T).scaled_dot_product_attention(q, k, v), [Q, K, V3], ()),
    "sdpa_math_causal": (
        lambda T, q, k, v: F(T).scaled_dot_product_attention(q, k, v, is_causal=True),
        [Q, K, V3],
        (),
    ),
    "sdpa_math_grad_mask": (
        lambda T, q, k, v, m: F(T).scaled_dot_product_attention(q, k, v, attn_mask=m),
        [Q, K, V, FMASK],
        (),
    ),
    "sdpa_math_bool_mask_negative_scale": (
        lambda T, q, k, v, m: F(T).scaled_dot_product_attention(q, k, v, attn_mask=m, scale=-0.3),
        [Q, K, V3, DEAD],
        (3,),
    ),
    "sdpa_3d": (
        lambda T, q, k, v: F(T).scaled_dot_product_attention(q, k, v, is_causal=True),
        [Q[0], K[0], V[0]],
        (),
    ),
    "sdpa_2d": (
        lambda T, q, k, v: F(T).scaled_dot_product_attention(q, k, v),
        [Q[0, 0], K[0, 0], V[0, 0]],
        (),
    ),
    "sdpa_broadcast_batch": (
        lambda T, q, k, v: F(T).scaled_dot_product_attention(q, k, v),
        [Q[:1], K, V],
        (),
    ),
}


def _graph(t):
    """The graph below ``t`` breadth first: (name, [(next name, input_nr) | None])."""
    out, seen, queue = [], set(), [t.grad_fn]
    while queue:
        f = queue.pop(0)
        if f is None or id(f) in seen:
            continue
        seen.add(id(f))
        nxt = [None if g is None else (g.name(), nr) for g, nr in f.next_functions]
        out.append((f.name(), nxt))
        queue.extend(g for g, _ in f.next_functions)
    return out


def _inputs(T, arrays, no_grad):
    return [
        T.tensor(a, requires_grad=i not in no_grad and a.dtype.kind == "f")
        for i, a in enumerate(arrays)
    ]


def _run(T, fn, arrays, no_grad):
    ins = _inputs(T, arrays, no_grad)
    return ins, fn(T, *ins)


def _second(T, out, ins, seed):
    """Gradients with create_graph, then the gradient of their squared sum (or the error)."""
    live = [t for t in ins if t.requires_grad]
    grads = T.autograd.grad(out, live, T.tensor(seed), create_graph=True, allow_unused=True)
    terms = [(g * g).sum() for g in grads if g is not None and g.requires_grad]
    if not terms:
        return grads, None
    try:
        second = T.autograd.grad(sum(terms), live, allow_unused=True)
    except RuntimeError as e:
        return grads, e
    return grads, second


@pytest.mark.parametrize("name", sorted(CASES))
def test_op_matches_torch(torch, name):
    fn, arrays, no_grad = CASES[name]
    t_ins, t_out = _run(torch, fn, arrays, no_grad)
    a_ins, a_out = _run(ad, fn, arrays, no_grad)
    np.testing.assert_allclose(
        a_out.detach().numpy(), t_out.detach().numpy(), rtol=1e-10, atol=1e-12
    )
    assert _graph(a_out) == _graph(t_out)
    seed = np.random.default_rng(1).standard_normal(tuple(t_out.shape))
    t_grads, t_second = _second(torch, t_out, t_ins, seed)
    a_grads, a_second = _second(ad, a_out, a_ins, seed)
    for tg, ag in zip(t_grads, a_grads):
        assert (tg is None) == (ag is None)
        if tg is not None:
            np.testing.assert_allclose(
                ag.detach().numpy(), tg.detach().numpy(), rtol=1e-9, atol=1e-12
            )
            assert ag.requires_grad == tg.requires_grad
    if isinstance(t_second, Exception):
        assert isinstance(a_second, type(t_second)), a_second
        assert str(t_second).split(" is not")[0] in str(a_second)
        return
    assert (t_second is None) == (a_second is None)
    for tg, ag in zip(t_second or (), a_second or ()):
        if tg is None or ag is None:  # unused: PyTorch may give None where we give zeros
            assert tg is None or not tg.abs().sum()
            assert ag is None or not ag.abs().sum()
            continue
        np.testing.assert_allclose(ag.numpy(), tg.numpy(), rtol=1e-8, atol=1e-12)


@pytest.mark.parametrize(
    "call",
    [
        lambda T: T.sort(T.tensor(TIES), 1),
        lambda T: T.sort(T.tensor(TIES), 1, descending=True),
        lambda T: T.tensor(X3).topk(3),
        lambda T: T.tensor(X3).topk(2, dim=1, largest=False),
        lambda T: T.tensor(TIES[:1]).topk(3),
        lambda T: T.tensor([[3, 1, 3, 2]]).sort(descending=True),
    ],
)
def test_sort_and_topk_order_ties_and_nan_as_torch(torch, call):
    # NOTE: sort is stable (ties in input order, also descending); topk's order among ties is
    # not specified by PyTorch (its partial sort differs from row to row): only rows whose
    # ties it keeps in input order are compared by index
    t, a = call(torch), call(ad)
    np.testing.assert_array_equal(a.values.numpy(), t.values.numpy())
    np.testing.assert_array_equal(a.indices.numpy(), t.indices.numpy())
    assert a.indices.dtype is ad.int64


@pytest.mark.parametrize("descending", [False, True])
def test_argsort_is_sort_indices(torch, descending):
    t = torch.tensor(TIES).argsort(dim=1, descending=descending)
    a = ad.tensor(TIES).argsort(dim=1, descending=descending)
    np.testing.assert_array_equal(a.numpy(), t.numpy())


@pytest.mark.parametrize(
    "call",
    [
        lambda T: T.repeat_interleave(T.tensor([1, 2, 0, 3])),
        lambda T: F(T).one_hot(T.tensor([[1, 0], [2, 2]])),
        lambda T: F(T).one_hot(T.tensor([0, 1]), 4),
        lambda T: F(T).one_hot(T.tensor([], dtype=T.int64), 3),
        lambda T: T.tensor([[1, 2], [3, 4]]).roll(-1, 1),
        lambda T: T.tensor([1.0, 2.0]).lerp(T.tensor([3.0, 5.0]), 1.0),
        lambda T: F(T).pad(T.tensor([[1, 2]]), (2, 1), value=7),
    ],
)
def test_integer_and_exact_results(torch, call):
    t, a = call(torch), call(ad)
    assert a.tolist() == t.tolist()
    assert str(a.dtype).split(".")[-1] == str(t.dtype).split(".")[-1]


@pytest.mark.parametrize(
    ("call", "phrase"),
    [
        (lambda T: T.ones(3).tril(), "tril: input tensor must have at least 2 dimensions"),
        (lambda T: T.ones(3).topk(4), "selected index k out of range"),
        (lambda T: T.ones(2, 3).roll((1, 2), (0,)), "shifts and dimensions must align"),
        (lambda T: T.ones(2, 3).repeat_interleave(-1, dim=0), "Repeats must be non-negative"),
        (
            lambda T: T.ones(2, 3).repeat_interleave(T.tensor([1, 2, 3]), dim=0),
            "repeats must have the same size as input along dim",
        ),
        (
            lambda T: T.baddbmm(T.ones(3, 4), T.ones(2, 3, 5), T.ones(2, 6, 4)),
            "Expected size for first two dimensions of batch2 tensor to be: [2, 5]",
        ),
        (lambda T: F(T).one_hot(T.tensor([1.0])), "one_hot is only applicable to index tensor"),
        (lambda T: F(T).one_hot(T.tensor([-1, 2])), "Class values must be non-negative."),
        (lambda T: F(T).one_hot(T.tensor([1, 5]), 3), "Class values must be smaller than"),
        (lambda T: F(T).pad(T.ones(3), (1,)), "Padding length must be divisible by 2"),
        (lambda T: F(T).pad(T.ones(3), (1, 1, 1, 1)), "Padding length should be less than"),
        (lambda T: F(T).pad(T.ones(2, 3), (1, 1), mode="bogus"), "Unrecognised padding mode"),
        (
            lambda T: T.multinomial(T.tensor([0.5, -1.0]), 1),
            "probability tensor contains either `inf`, `nan` or element < 0",
        ),
        (lambda T: T.multinomial(T.tensor([0.0, 0.0]), 1), "sum of probabilities <= 0"),
        (
            lambda T: T.multinomial(T.tensor([0.5, 0.5]), 3),
            "cannot sample n_sample > prob_dist.size(-1) samples without replacement",
        ),
        (lambda T: T.multinomial(T.ones(2, 2, 2), 1), "prob_dist must be 1 or 2 dim"),
        (lambda T: T.multinomial(T.tensor([1.0, 2.0]), 0), "cannot sample n_sample <= 0"),
        (lambda T: T.bernoulli(T.tensor([0.5, 1.5])), "Expected p_in >= 0 && p_in <= 1"),
        (
            lambda T: F(T).scaled_dot_product_attention(
                T.ones(1, 2, 3), T.ones(1, 2, 3), T.ones(1, 2, 3, dtype=T.float64)
            ),
            "Expected query, key, and value to have the same dtype",
        ),
        (
            lambda T: F(T).scaled_dot_product_attention(
                T.ones(1, 2, 3), T.ones(1, 2, 3), T.ones(1, 2, 3), attn_mask=T.ones(2, 2).long()
            ),
            "Expected attn_mask dtype to be bool or float or to match query dtype",
        ),
        (
            lambda T: F(T).scaled_dot_product_attention(
                T.ones(2, 3), T.ones(2, 3), T.ones(2, 2), attn_mask=T.ones(2, 2), is_causal=True
            ),
            "Explicit attn_mask should not be set when is_causal=True",
        ),
        (
            lambda T: F(T).scaled_dot_product_attention(
                T.ones(2, 4, 5, 8), T.ones(2, 4, 5, 8), T.ones(2, 4, 5, 8), attn_mask=T.ones(3, 3)
            ),
            "The size of tensor a (5) must match the size of tensor b (3) at non-singleton",
        ),
    ],
)
def test_errors_match_torch(torch, call, phrase):
    with pytest.raises(Exception) as t_err:
        call(torch)
    with pytest.raises(type(t_err.value)) as a_err:
        call(ad)
    assert phrase in str(t_err.value)
    assert phrase in str(a_err.value)


def test_pad_modes_other_than_constant_name_the_mode():
    with pytest.raises(NotImplementedError, match="mode='reflect'"):
        ad.nn.functional.pad(ad.ones(2, 3), (1, 1), mode="reflect")


def test_flash_attention_backward_has_no_derivative_as_in_torch(torch):
    def run(T):
        q = T.tensor(Q, requires_grad=True)
        (g,) = T.autograd.grad(
            F(T).scaled_dot_product_attention(q, q, q).sum(), q, create_graph=True
        )
        with pytest.raises(RuntimeError) as e:
            g.sum().backward()
        return str(e.value)

    assert run(ad) == run(torch)


# --- random ops: autodiag's stream is not PyTorch's, so distributions are compared -----------


def test_multinomial_with_replacement_has_the_distribution():
    g = ad.Generator().manual_seed(0)
    p = ad.tensor([[0.1, 0.0, 0.6, 0.3], [1.0, 1.0, 0.0, 2.0]])
    draws = ad.multinomial(p, 40000, replacement=True, generator=g)
    assert draws.shape == (2, 40000) and draws.dtype is ad.int64
    freq = np.stack([np.bincount(r, minlength=4) / 40000 for r in draws.numpy()])
    np.testing.assert_allclose(freq, [[0.1, 0, 0.6, 0.3], [0.25, 0.25, 0, 0.5]], atol=0.01)
    assert (freq[:, [1, 2]][[0, 1], [0, 1]] == 0).all()  # zero weights are never drawn


def test_multinomial_without_replacement_draws_distinct_indices_by_weight():
    g = ad.Generator().manual_seed(1)
    p = ad.tensor([0.7, 0.2, 0.1, 0.0])
    rows = np.stack([ad.multinomial(p, 3, generator=g).numpy() for _ in range(4000)])
    assert all(len(set(r)) == 3 for r in rows)
    assert not (rows == 3).any()  # weight 0: never among the first three
    first = np.bincount(rows[:, 0], minlength=4) / len(rows)
    np.testing.assert_allclose(first, [0.7, 0.2, 0.1, 0.0], atol=0.03)
    one_d = ad.multinomial(ad.tensor([1.0, 0.0, 0.0]), 2)
    assert one_d.shape == (2,) and one_d[0].item() == 0


def test_multinomial_and_bernoulli_repeat_under_a_seed():
    p = ad.tensor([0.2, 0.5, 0.3])
    ad.manual_seed(3)
    a = (ad.multinomial(p, 10, True), ad.bernoulli(ad.full((10,), 0.5)))
    ad.manual_seed(3)
    b = (ad.multinomial(p, 10, True), ad.bernoulli(ad.full((10,), 0.5)))
    assert all(x.tolist() == y.tolist() for x, y in zip(a, b))


def test_bernoulli_distribution_dtype_and_zero_gradient(torch):
    g = ad.Generator().manual_seed(0)
    p = ad.tensor([0.0, 0.25, 1.0], dtype=ad.float64, requires_grad=True)
    draws = np.stack([ad.bernoulli(p, generator=g).detach().numpy() for _ in range(8000)])
    np.testing.assert_allclose(draws.mean(0), [0.0, 0.25, 1.0], atol=0.02)
    out = ad.bernoulli(p)
    t_out = torch.bernoulli(torch.tensor([0.0, 0.25, 1.0], dtype=torch.float64, requires_grad=True))
    assert out.dtype is ad.float64 and out.grad_fn.name() == t_out.grad_fn.name()
    out.sum().backward()
    assert p.grad.tolist() == [0.0, 0.0, 0.0]
    x = ad.ones(5, dtype=ad.float64).bernoulli_(0.0)
    assert x.tolist() == [0.0] * 5 and x._version == 1
    y = ad.zeros(4, requires_grad=True) * 1
    y.bernoulli_(0.5)
    assert y.grad_fn.name() == "BernoulliBackward2"


def test_sdpa_dropout_records_torchs_math_path_and_drops(torch):
    q = ad.tensor(Q, requires_grad=True)
    ad.manual_seed(0)
    out = ad.nn.functional.scaled_dot_product_attention(q, q, q, dropout_p=0.5)
    tq = torch.tensor(Q, requires_grad=True)
    t_out = torch.nn.functional.scaled_dot_product_attention(tq, tq, tq, dropout_p=0.5)
    assert _graph(out) == _graph(t_out)
    full = ad.nn.functional.scaled_dot_product_attention(q, q, q)
    assert not np.allclose(out.detach().numpy(), full.detach().numpy())
    ad.manual_seed(0)
    again = ad.nn.functional.scaled_dot_product_attention(q, q, q, dropout_p=0.5)
    assert ad.equal(again, out)


def test_topk_values_with_ties_match_torch(torch):
    for k, largest in ((3, True), (4, False)):
        t = torch.tensor(TIES).topk(k, largest=largest)
        a = ad.tensor(TIES).topk(k, largest=largest)
        np.testing.assert_array_equal(a.values.numpy(), t.values.numpy())
        # the indices point at those values
        np.testing.assert_array_equal(np.take_along_axis(TIES, a.indices.numpy(), 1), t.values)


@pytest.mark.parametrize("L,S", [(2, 0), (0, 2), (0, 0)])
@pytest.mark.parametrize("how", ["plain", "causal", "mask"])
def test_sdpa_with_no_keys_or_no_queries_matches_torch(torch, L, S, how):
    # no keys: every row is dead, so the output is zeros (numpy's max over an empty axis raised)
    def run(T):
        q = T.tensor(np.ones((1, L, 3)), requires_grad=True)
        k = T.tensor(np.ones((1, S, 3)), requires_grad=True)
        v = T.tensor(np.ones((1, S, 2)), requires_grad=True)
        mask = T.ones(L, S, dtype=T.bool) if how == "mask" else None
        o = F(T).scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=how == "causal")
        grads = T.autograd.grad(o.sum(), [q, k, v], allow_unused=True, materialize_grads=True)
        return [o.detach().numpy(), *(g.numpy() for g in grads)]

    for a, b in zip(run(ad), run(torch), strict=True):
        assert a.shape == b.shape and a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)
