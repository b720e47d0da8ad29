"""The minimal COO sparse tensor (ops/sparse_coo.py) against PyTorch: what pytorch/examples gcn
does with one (``to_sparse``, ``sparse_coo_tensor``, ``dense + sparse``, ``sparse @ dense``,
``dense @ sparse``, ``torch.mm``/``spmm``/``sparse.mm``), its parts and layout, the dense
operand's gradients (first and second order) and nodes, and a clear NotImplementedError
naming the op for everything else (NOTE [Sparse refusals])."""

from __future__ import annotations

import json
import textwrap
import warnings

import numpy as np
import pytest
from test_cli import cli

import autodiag as ad

A = np.array([[0.0, 2.0, 0.0], [3.0, 0.0, -1.5], [0.0, 0.0, 0.0], [0.5, 0.0, 4.0]])
IDX = np.array([[0, 2, 1, 0, 3], [1, 0, 2, 1, 3]], dtype=np.int32)  # (0, 1) twice
VAL = np.array([1.0, 2.0, -3.0, 0.5, 4.0])


def _np(x):
    return np.asarray(x.detach().numpy())


def _same(a, t, where="value"):
    if isinstance(t, (tuple, list)):
        assert len(a) == len(t), where
        for k, (ai, ti) in enumerate(zip(a, t)):
            _same(ai, ti, f"{where}[{k}]")
        return
    if isinstance(t, (bool, int, str)) or t is None:
        assert a == t, f"{where}: {a!r} vs torch {t!r}"
        return
    assert str(a.dtype).rsplit(".")[-1] == str(t.dtype).rsplit(".")[-1], f"{where}: dtype"
    assert tuple(a.shape) == tuple(t.shape), f"{where}: shape"
    np.testing.assert_allclose(_np(a), _np(t), rtol=1e-6, atol=1e-7, err_msg=where)


def _coo(T, dtype=None):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch: "Sparse invariant checks are implicitly disabled"
        return T.sparse_coo_tensor(IDX, T.tensor(VAL), (4, 4), dtype=dtype)


CASTS = ("float", "double", "half", "long", "int", "short", "bool")

PARTS = [
    (
        "to_sparse",
        lambda T: (lambda s: (s.indices(), s.values(), s.is_coalesced()))(T.tensor(A).to_sparse()),
    ),
    (
        "layout",
        lambda T: (
            repr(T.tensor(A).to_sparse().layout),
            repr(T.ones(2).layout),
            T.tensor(A).to_sparse().is_sparse,
            T.ones(2).is_sparse,
        ),
    ),
    (
        "shape",
        lambda T: (
            tuple(T.tensor(A).to_sparse().shape),
            T.tensor(A).to_sparse().size(1),
            T.tensor(A).to_sparse().dim(),
            T.tensor(A).to_sparse()._nnz(),
        ),
    ),
    ("coo_uncoalesced", lambda T: (_coo(T)._indices(), _coo(T)._values(), _coo(T).is_coalesced())),
    ("coalesce", lambda T: (_coo(T).coalesce().indices(), _coo(T).coalesce().values())),
    ("to_dense_sums_duplicates", lambda T: _coo(T).to_dense()),
    ("coo_dtype", lambda T: _coo(T, T.int64).to_dense()),
    ("coo_inferred_size", lambda T: tuple(T.sparse_coo_tensor(IDX, T.tensor(VAL)).shape)),
    ("to_cpu", lambda T: T.tensor(A).to_sparse().to("cpu").to_dense()),
    ("to_dtype", lambda T: T.tensor(A).to_sparse().to(T.float32).values()),
    (
        "casts",
        lambda T: (
            tuple(getattr(_coo(T), n)().to_dense() for n in CASTS)
            + tuple(str(getattr(_coo(T), n)().layout) for n in CASTS)
        ),
    ),
    ("dense_plus_sparse", lambda T: T.eye(4) + _coo(T, T.int64)),
    ("sparse_at_dense", lambda T: T.tensor(A).to_sparse() @ T.ones(3, 2, dtype=T.float64)),
    ("dense_at_sparse", lambda T: T.ones(2, 4, dtype=T.float64) @ T.tensor(A).to_sparse()),
    ("matmul", lambda T: T.matmul(T.tensor(A).to_sparse(), T.ones(3, 2, dtype=T.float64))),
    ("repr", lambda T: repr(T.tensor(A).to_sparse())),
    ("repr_int", lambda T: repr(_coo(T, T.int64))),
]


@pytest.mark.parametrize("fn", [p[1] for p in PARTS], ids=[p[0] for p in PARTS])
def test_sparse_parts_match_torch(torch, fn):
    _same(fn(ad), fn(torch))


PRODUCTS = [
    ("mm", lambda T, s, d: T.mm(s, d)),
    ("spmm", lambda T, s, d: T.spmm(s, d)),
    ("sparse.mm", lambda T, s, d: T.sparse.mm(s, d)),
    ("matmul_op", lambda T, s, d: s @ d),
    ("matmul_fn", lambda T, s, d: T.matmul(s, d)),
    ("dense_at_sparse", lambda T, s, d: d.t() @ s.t()),
    ("mm_dense_sparse", lambda T, s, d: T.mm(d.t(), s.t())),
]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("fn", [p[1] for p in PRODUCTS], ids=[p[0] for p in PRODUCTS])
def test_product_value_node_and_gradients_match_torch(torch, fn, dtype):
    rng = np.random.default_rng(3)
    dd, g = rng.standard_normal((3, 2)), rng.standard_normal((4, 2))

    def run(T):
        dt = getattr(T, dtype)
        s = T.tensor(A, dtype=dt).to_sparse()
        d = T.tensor(dd, dtype=dt, requires_grad=True)
        out = fn(T, s, d)
        gout = T.tensor(g if out.shape[0] == 4 else g.T, dtype=dt)
        nodes = (
            out.grad_fn.name(),
            tuple(None if n is None else n.name() for n, _ in out.grad_fn.next_functions),
        )
        (gd,) = T.autograd.grad(out, d, gout, create_graph=True)
        (gg,) = (
            T.autograd.grad((gd * gd).sum(), d, allow_unused=True) if gd.requires_grad else (None,)
        )
        out2 = fn(T, s, d)
        out2.backward(gout)
        return out.detach(), out.layout == T.strided, nodes, d.grad, gd.requires_grad, gg

    a, t = run(ad), run(torch)
    assert a[2] == t[2], f"nodes {a[2]} vs torch {t[2]}"
    _same(a[:2] + a[3:], t[:2] + t[3:])


def test_double_backward_through_the_dense_operand(torch):
    """d/dg of (S^T g): create_graph through spmm's backward, against torch."""

    def run(T):
        s = T.tensor(A, dtype=T.float64).to_sparse()
        d = T.tensor(np.arange(6.0).reshape(3, 2) / 7, dtype=T.float64, requires_grad=True)
        g = T.ones(4, 2, dtype=T.float64, requires_grad=True)
        (gd,) = T.autograd.grad(T.spmm(s, d * d), d, g, create_graph=True)
        (gg,) = T.autograd.grad(gd.pow(2).sum(), g)
        return gd.detach(), gg

    _same(run(ad), run(torch))


REFUSED = [
    ("relu", lambda T, s: T.relu(s)),
    ("sum", lambda T, s: s.sum(1)),
    ("mul", lambda T, s: s * 2),
    ("exp", lambda T, s: s.exp()),
    ("acos", lambda T, s: s.acos()),
    ("linear", lambda T, s: T.nn.functional.linear(s, T.ones(2, 3))),
    ("mean", lambda T, s: s.mean()),
    ("clone", lambda T, s: s.clone()),
    ("cat", lambda T, s: T.cat([s, s])),
]


@pytest.mark.parametrize("name, fn", REFUSED, ids=[r[0] for r in REFUSED])
def test_every_other_op_is_refused_naming_it(name, fn):
    s = ad.tensor(A).to_sparse()
    with pytest.raises(NotImplementedError, match=rf"^{name}: autodiag does not support sparse"):
        fn(ad, s)


def test_refusals_and_errors_of_the_supported_ops(torch):
    s = ad.tensor(A).to_sparse()
    with pytest.raises(TypeError, match="to_dense"):
        torch.tensor(A).to_sparse().numpy()
    with pytest.raises(NotImplementedError, match="numpy"):
        s.numpy()
    for T in (ad, torch):
        with pytest.raises(RuntimeError, match="add\\(sparse, dense\\) is not supported"):
            T.tensor(A).to_sparse() + T.ones(4, 3, dtype=T.float64)
        with pytest.raises(RuntimeError, match="uncoalesced"):
            _coo(T).values()
        with pytest.raises(RuntimeError, match="Expected dim 0 size 3, got 4"):
            T.mm(T.tensor(A).to_sparse(), T.ones(4, 2, dtype=T.float64))
    with pytest.raises(NotImplementedError, match="carry no gradient"):
        ad.ones(2, 2, requires_grad=True).to_sparse()


GCN_LIKE = """
import numpy as np
import torch
from torch import nn

class GraphConv(nn.Module):
    def __init__(self, n_in, n_out):
        super().__init__()
        self.kernel = nn.Parameter(torch.Tensor(n_in, n_out))
        nn.init.xavier_normal_(self.kernel)

    def forward(self, x, adj):
        return torch.spmm(adj, torch.mm(x, self.kernel))

def main():
    torch.manual_seed(0)
    V = 6
    edges = np.array([[0, 1], [1, 2], [2, 3], [4, 5], [5, 0]], dtype=np.int32)
    adj = torch.sparse_coo_tensor(edges.T, torch.ones(len(edges)), (V, V), dtype=torch.int64)
    adj = torch.eye(V) + adj
    deg = torch.sqrt(1 / torch.sum(adj, dim=1))
    deg = torch.diag(deg).to_sparse()
    adj = (deg @ adj @ deg).to_sparse()
    feats = torch.diag(torch.arange(1.0, V + 1)).to_sparse()
    layer = GraphConv(V, 3)
    opt = torch.optim.Adam(layer.parameters(), lr=0.1)
    for _ in range(3):
        opt.zero_grad()
        out = torch.log_softmax(layer(feats, adj), dim=1)
        loss = -out[:, 0].mean()
        loss.backward()
        opt.step()
    print("loss", round(loss.item(), 6))

main()
"""


def test_a_gcn_like_script_runs_and_is_inspected_on_both_engines(torch, tmp_path):
    p = tmp_path / "gcn_like.py"
    p.write_text(textwrap.dedent(GCN_LIKE))
    outs = {}
    for engine in ("autodiag", "torch"):
        r = cli("graph", str(p), "-f", "json", "--engine", engine)
        assert r.exit_code == 0, r.stdout + r.stderr
        outs[engine] = [n["name"] for n in json.loads(r.stdout)["nodes"]]
    assert outs["autodiag"] == outs["torch"]
    assert outs["autodiag"].count("MmBackward0") == 2
    # the whole printed graph, the saved sparse operand's bytes included
    texts = {e: cli("graph", str(p), "--engine", e).stdout for e in ("autodiag", "torch")}
    assert texts["autodiag"] == texts["torch"]
    assert "saved tensors 412 B" in texts["autodiag"]
    r = cli("check", str(p))
    assert r.exit_code == 0, r.stdout + r.stderr


def test_a_sparse_op_outside_the_supported_set_is_exit_2_naming_it(tmp_path):
    p = tmp_path / "sparse_relu.py"
    p.write_text("import torch\ns = torch.eye(3).to_sparse()\ny = torch.relu(s)\n")
    r = cli("graph", str(p))
    assert r.exit_code == 2, r.stdout + r.stderr
    assert "sparse_relu.py:3 uses `relu on a sparse COO tensor`, which autodiag's engine" in (
        r.stderr
    )


SPARSE_PRODUCTS = [
    ("sparse_at_dense", lambda T, s, d: s @ d),
    ("mm", lambda T, s, d: T.mm(s, d)),
    ("sparse.mm", lambda T, s, d: T.sparse.mm(s, d)),
    ("dense_at_sparse", lambda T, s, d: d.t() @ s.t()),
]


def _saved_view(node, names):
    """A node's ``_saved_*`` attributes: sparse/dense tensors by layout and dense values."""
    out = {}
    for name in names:
        v = getattr(node, name)
        if hasattr(v, "layout"):
            v = (str(v.layout), v.to_dense().tolist() if v.is_sparse else v.tolist())
        out[name] = v
    return out


@pytest.mark.parametrize("fn", [p[1] for p in SPARSE_PRODUCTS], ids=[p[0] for p in SPARSE_PRODUCTS])
def test_the_sparse_operand_is_saved_and_freed_as_pytorch(torch, fn):
    """A sparse product saves its sparse operand (``_saved_self``/``_mat2``/``_mat1``, the
    sizes and strides) and frees it: a second backward raises PyTorch's error (it ran)."""
    seen, names = {}, None
    for T in (torch, ad):
        s = T.tensor(A).to_sparse()
        d = T.ones(3, 2, dtype=T.float64, requires_grad=True)
        out = fn(T, s, d)
        if names is None:  # PyTorch's, then autodiag's node read by the same names
            names = [n for n in dir(out.grad_fn) if n.startswith("_saved_")]
        saved = _saved_view(out.grad_fn, names)
        out.sum().backward()
        with pytest.raises(RuntimeError, match="backward through the graph a second time"):
            out.sum().backward()
        seen[T.__name__] = saved
    assert seen["autodiag"] == seen["torch"]


SPARSE_GRAPH = """\
import torch
s = torch.tensor([[0., 2., 0.], [3., 0., 1.]]).to_sparse()
d = torch.ones(3, 4, requires_grad=True)
w = torch.ones(5, 2, requires_grad=True)
out = (w @ (s @ d)).sum() + torch.sparse.mm(s, d).sum() + (d.t() @ s.t()).sum()
out.backward()
"""


def test_sparse_products_show_their_line_and_saved_bytes_on_both_engines(torch, tmp_path):
    p = tmp_path / "sparse_graph.py"
    p.write_text(SPARSE_GRAPH)
    outs = {engine: cli("graph", str(p), "--engine", engine) for engine in ("autodiag", "torch")}
    for r in outs.values():
        assert r.exit_code == 0, r.stdout + r.stderr
    assert outs["autodiag"].stdout == outs["torch"].stdout
    # the path as the CLI shows it (relative to the working directory when it is shorter)
    line = next(ln for ln in outs["autodiag"].stdout.splitlines() if "SparseAddmmBackward0" in ln)
    assert "sparse_graph.py:5" in line
    assert "saved tensors 252 B" in outs["autodiag"].stdout  # the sparse one: 48 + 12 bytes


def test_listing_a_saved_sparse_operand_does_not_densify_it(monkeypatch):
    """The graph's saved-tensor list reads a sparse operand's size and dtype, not a dense copy
    (a 1,600 x 1,600 adjacency is ~10 MB per read); values only when asked for."""
    from autodiag import inspect
    from autodiag.ops import sparse_coo

    s = ad.tensor(A).to_sparse()
    node = (s @ ad.ones(3, 2, dtype=ad.float64, requires_grad=True)).grad_fn
    real = sparse_coo._to_dense_array

    def refuse(t):
        raise AssertionError("densified")

    monkeypatch.setattr(sparse_coo, "_to_dense_array", refuse)
    (entry,) = inspect.saved_entries(node)
    assert (entry.name, entry.shape, entry.dtype, entry.nbytes) == ("self", (4, 3), "float64", 120)
    monkeypatch.setattr(sparse_coo, "_to_dense_array", real)
    (entry,) = inspect.saved_entries(node, values=True)
    np.testing.assert_array_equal(entry.value, A)
