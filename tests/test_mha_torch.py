"""nn.MultiheadAttention, SiLU/ELU modules, ModuleDict, ParameterList and ParameterDict
against PyTorch: parameter layout and names, outputs, attention weights, gradients, the
recorded graph, reprs."""

from __future__ import annotations

import numpy as np
import pytest
from test_attention_torch import _graph

import autodiag as ad

R = np.random.default_rng(0)


def _pair(torch, **kw):
    """The same MultiheadAttention in both engines (autodiag's loaded from torch's)."""
    torch.manual_seed(0)
    t = torch.nn.MultiheadAttention(**kw, dtype=torch.float64)
    a = ad.nn.MultiheadAttention(**kw, dtype=ad.float64)
    assert list(a.state_dict()) == list(t.state_dict())
    a.load_state_dict({k: ad.tensor(v.detach().numpy()) for k, v in t.state_dict().items()})
    return t, a


# name -> (constructor kwargs, call kwargs, (query, key, value) shapes, "self" | "kv" | "")
CASES = {
    "self_batch_first": (dict(embed_dim=8, num_heads=2, batch_first=True), {}, (3, 5, 8), "self"),
    "self_seq_first_no_weights": (
        dict(embed_dim=8, num_heads=4),
        dict(need_weights=False),
        (5, 3, 8),
        "self",
    ),
    "per_head_weights": (
        dict(embed_dim=8, num_heads=2, batch_first=True),
        dict(average_attn_weights=False),
        (2, 4, 8),
        "self",
    ),
    "causal_bool_mask_no_weights": (
        dict(embed_dim=8, num_heads=2, batch_first=True),
        dict(need_weights=False, attn_mask="causal", is_causal=True),
        (2, 4, 8),
        "self",
    ),
    "float_mask_with_weights": (
        dict(embed_dim=8, num_heads=2, batch_first=True),
        dict(attn_mask="float"),
        (2, 4, 8),
        "self",
    ),
    "key_padding_mask": (
        dict(embed_dim=8, num_heads=2, batch_first=True),
        dict(key_padding_mask="pad"),
        (2, 4, 8),
        "self",
    ),
    "key_padding_mask_no_weights": (
        dict(embed_dim=8, num_heads=2, batch_first=True),
        dict(key_padding_mask="pad", need_weights=False, attn_mask="causal"),
        (2, 4, 8),
        "self",
    ),
    "cross_attention_kv": (dict(embed_dim=8, num_heads=2), {}, (4, 2, 8), "kv"),
    "separate_qkv": (dict(embed_dim=8, num_heads=2, bias=False), {}, (4, 2, 8), ""),
    "kdim_vdim_bias_kv_zero_attn": (
        dict(embed_dim=8, num_heads=2, kdim=4, vdim=6, add_bias_kv=True, add_zero_attn=True),
        {},
        (4, 2, 8),
        "",
    ),
    "unbatched": (dict(embed_dim=8, num_heads=2), {}, (4, 8), "self"),
}


def _inputs(T, shape, share, kdim, vdim):
    q = T.tensor(R_Q[: int(np.prod(shape))].reshape(shape), requires_grad=True)
    if share == "self":
        return q, q, q
    kshape = shape[:-1] + (kdim,)
    vshape = shape[:-1] + (vdim,)
    k = T.tensor(R_K[: int(np.prod(kshape))].reshape(kshape), requires_grad=True)
    if share == "kv" and kdim == vdim:
        return q, k, k
    v = T.tensor(R_V[: int(np.prod(vshape))].reshape(vshape), requires_grad=True)
    return q, k, v


R_Q, R_K, R_V = (R.standard_normal(200) for _ in range(3))


def _masks(T, call, L, batch):
    call = dict(call)
    if call.get("attn_mask") == "causal":
        call["attn_mask"] = T.ones(L, L, dtype=T.bool).triu(1)  # True: not allowed
    elif call.get("attn_mask") == "float":
        call["attn_mask"] = T.tensor(np.linspace(-2.0, 1.0, L * L).reshape(L, L))
    if call.get("key_padding_mask") == "pad":
        pad = np.zeros((batch, L), dtype=bool)
        pad[0, -1] = True
        call["key_padding_mask"] = T.tensor(pad)
    return call


@pytest.mark.parametrize("name", sorted(CASES))
def test_multihead_attention_matches_torch(torch, name):
    kw, call, shape, share = CASES[name]
    t_m, a_m = _pair(torch, **kw)
    kdim, vdim = kw.get("kdim", kw["embed_dim"]), kw.get("vdim", kw["embed_dim"])
    bf = kw.get("batch_first", False)
    L = shape[1] if bf else shape[0]
    batch = shape[0] if bf else (shape[1] if len(shape) == 3 else 1)
    outs = []
    for T, m in ((torch, t_m), (ad, a_m)):
        ins = _inputs(T, shape, share, kdim, vdim)
        out, w = m(*ins, **_masks(T, call, L, batch))
        (out.sum() + (0 if w is None else (w * w).sum())).backward()
        grads = {n: p.grad.numpy() for n, p in m.named_parameters()}
        grads.update({f"in{i}": t.grad.numpy() for i, t in enumerate(ins) if t.grad is not None})
        outs.append((out, w, grads))
    (t_out, t_w, t_g), (a_out, a_w, a_g) = outs
    np.testing.assert_allclose(a_out.detach().numpy(), t_out.detach().numpy(), atol=1e-12)
    assert (a_w is None) == (t_w is None)
    if t_w is not None:
        np.testing.assert_allclose(a_w.detach().numpy(), t_w.detach().numpy(), atol=1e-12)
        assert _graph(a_w) == _graph(t_w)
    assert _graph(a_out) == _graph(t_out)
    assert a_g.keys() == t_g.keys()
    for k in t_g:
        np.testing.assert_allclose(a_g[k], t_g[k], atol=1e-11, err_msg=k)


def test_multihead_attention_layout_and_init_as_torch(torch):
    for kw in (
        dict(embed_dim=8, num_heads=2),
        dict(embed_dim=8, num_heads=2, kdim=3, vdim=5, add_bias_kv=True, bias=False),
    ):
        t = torch.nn.MultiheadAttention(**kw)
        a = ad.nn.MultiheadAttention(**kw)
        assert [(n, tuple(p.shape)) for n, p in a.named_parameters()] == [
            (n, tuple(p.shape)) for n, p in t.named_parameters()
        ]
        assert repr(a) == repr(t)
    a = ad.nn.MultiheadAttention(16, 4)
    assert a.in_proj_bias.abs().sum().item() == 0 and a.out_proj.bias.abs().sum().item() == 0
    bound = (6 / (16 + 48)) ** 0.5  # xavier_uniform_ over the packed (48, 16) weight
    w = a.in_proj_weight.detach().numpy()
    assert np.abs(w).max() <= bound and np.abs(w).max() > 0.8 * bound


@pytest.mark.parametrize(
    ("kw", "args", "phrase"),
    [
        (dict(embed_dim=8, num_heads=3), None, "embed_dim must be divisible by num_heads"),
        (dict(embed_dim=0, num_heads=2), None, "embed_dim and num_heads must be greater than 0"),
        (dict(embed_dim=8, num_heads=2), ((2, 3, 8), (2, 8)), "expected `key` and `value`"),
        (dict(embed_dim=8, num_heads=2), ((2, 3, 4), (2, 3, 4)), "was expecting embedding dim"),
    ],
)
def test_multihead_attention_errors_as_torch(torch, kw, args, phrase):
    def run(T):
        m = T.nn.MultiheadAttention(**kw)
        q, k = (T.ones(*s) for s in args)
        m(q, k, k)

    for T in (torch, ad):
        with pytest.raises((ValueError, AssertionError)) as e:
            run(T) if args else T.nn.MultiheadAttention(**kw)
        assert phrase in str(e.value)


def test_is_causal_needs_a_mask_as_in_torch(torch):
    for T in (torch, ad):
        m = T.nn.MultiheadAttention(8, 2)
        x = T.ones(3, 1, 8)
        with pytest.raises(RuntimeError, match="Need attn_mask if specifying the is_causal"):
            m(x, x, x, is_causal=True)


@pytest.mark.parametrize(
    "make",
    [
        lambda T: T.nn.SiLU(),
        lambda T: T.nn.ELU(0.5, inplace=True),
        lambda T: T.nn.ModuleDict({"b": T.nn.ReLU(), "a": T.nn.Linear(2, 3)}),
        lambda T: T.nn.ModuleDict([("x", T.nn.Tanh())]),
        lambda T: T.nn.ParameterList([T.ones(2, 3), T.nn.Parameter(T.zeros(4))]),
        lambda T: T.nn.ParameterDict({"w": T.ones(2), "b": T.nn.Parameter(T.zeros(1, 3))}),
    ],
)
def test_module_reprs_and_parameter_names_as_torch(torch, make):
    t, a = make(torch), make(ad)
    assert repr(a) == repr(t)
    assert [(n, tuple(p.shape)) for n, p in a.named_parameters()] == [
        (n, tuple(p.shape)) for n, p in t.named_parameters()
    ]


def test_silu_elu_modules_compute_as_torch(torch):
    x = np.linspace(-3, 3, 7)
    for make in (lambda T: T.nn.SiLU(), lambda T: T.nn.ELU(0.3)):
        t = make(torch)(torch.tensor(x)).numpy()
        a = make(ad)(ad.tensor(x)).numpy()
        np.testing.assert_allclose(a, t, rtol=1e-12)


def test_containers_behave_as_torch_containers(torch):
    for T in (torch, ad):
        md = T.nn.ModuleDict({"a": T.nn.ReLU()})
        md["b"] = T.nn.Tanh()
        assert list(md) == ["a", "b"] and "b" in md and len(md) == 2
        assert type(md.pop("a")).__name__ == "ReLU" and list(md.keys()) == ["b"]
        pl = T.nn.ParameterList()
        pl.append(T.ones(2))
        pl.extend([T.zeros(3)])
        assert len(pl) == 2 and type(pl[1]).__name__ == "Parameter" and pl[-1].shape == (3,)
        assert [n for n, _ in pl.named_parameters()] == ["0", "1"]
        pd = T.nn.ParameterDict()
        pd["w"] = T.ones(2)
        assert list(pd.keys()) == ["w"] and pd["w"].requires_grad
        assert len(list(T.nn.ModuleList([T.nn.Linear(1, 1)]).parameters())) == 2
