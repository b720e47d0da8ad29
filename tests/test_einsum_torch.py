"""einsum (and the diagonal/movedim views it uses) against PyTorch: values, the recorded graph
node for node, first and second gradients, gradients' requires_grad, and errors."""

from __future__ import annotations

import numpy as np
import pytest

import autodiag as ad

CASES = [
    ("ij,jk->ik", [(2, 3), (3, 4)]),
    ("ij,jk", [(2, 3), (3, 4)]),
    ("ij->ji", [(2, 3)]),
    ("ij->", [(2, 3)]),
    ("ii->i", [(3, 3)]),
    ("ii", [(3, 3)]),
    ("i,i->", [(3,), (3,)]),
    ("i,j->ij", [(3,), (4,)]),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("...j,jk->...k", [(2, 3), (3, 4)]),
    ("ij,ij->ij", [(2, 3), (2, 3)]),
    ("ij,j->i", [(2, 3), (3,)]),
    ("ij", [(2, 3)]),
    ("ji", [(2, 3)]),
    ("i,i,i->i", [(3,), (3,), (3,)]),
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 2)]),
    ("ij,kj->ki", [(2, 3), (4, 3)]),  # operands swapped inside the contraction (PyTorch's)
    ("iij->j", [(2, 2, 3)]),
    ("iji->ij", [(2, 3, 2)]),
    ("...ii->...i", [(4, 3, 3)]),
    ("a...,...b->...ab", [(2, 3, 1), (1, 4)]),
    ("ij,ij->", [(2, 1), (1, 3)]),
    ("bn,anm,bm->ba", [(2, 5), (3, 5, 4), (2, 4)]),
    ("i->", [(0,)]),
    ("ij,jk->ik", [(2, 0), (0, 3)]),
    ("", [()]),
    (",->", [(), ()]),
    ("i,->i", [(3,), ()]),
    ("ab,ba->", [(3, 3), (3, 3)]),
    ("iijj->", [(2, 2, 3, 3)]),
    ("ij,jk->ki", [(2, 3), (3, 4)]),
    ("abc,cd->abd", [(2, 1, 3), (3, 2)]),
    ("...,...->...", [(2, 3), (3,)]),
    ("Ab,bA->A", [(2, 3), (3, 2)]),
    ("i j , j k -> i k", [(2, 3), (3, 4)]),
]


def _graph(t):
    """The graph below t breadth first: (node name, names of its next functions)."""
    out, seen, queue = [], set(), [t.grad_fn]
    while queue:
        f = queue.pop(0)
        if f is None or id(f) in seen:
            continue
        seen.add(id(f))
        out.append(
            (
                type(f).__name__,
                tuple(None if n is None else type(n).__name__ for n, _ in f.next_functions),
            )
        )
        queue += [n for n, _ in f.next_functions]
    return out


def _arr(t):
    return None if t is None else np.asarray(t.detach().numpy())


def _run(m, eq, values):
    xs = [m.from_numpy(v.copy()).requires_grad_() for v in values]
    r = m.einsum(eq, *xs)
    w = m.arange(1.0, r.numel() + 1, dtype=m.float64).reshape(tuple(r.shape))
    g = m.autograd.grad(r, xs, w, create_graph=True, allow_unused=True)
    live = [x for x in g if x is not None and x.requires_grad]
    g2 = m.autograd.grad(sum((x * x).sum() for x in live), xs, allow_unused=True) if live else []
    return (
        tuple(r.shape),
        _arr(r),
        _graph(r),
        [_arr(x) for x in g],
        [x is not None and x.requires_grad for x in g],
        [_arr(x) for x in g2],
    )


def _same(a, b):
    if a is None or b is None:
        return a is None and b is None
    return a.shape == b.shape and np.allclose(a, b, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("eq,shapes", CASES, ids=[c[0] or "empty" for c in CASES])
def test_einsum_matches_torch(torch, eq, shapes):
    rng = np.random.default_rng(0)
    values = [np.asarray(rng.standard_normal(s)) for s in shapes]
    a, t = _run(ad, eq, values), _run(torch, eq, values)
    assert a[0] == t[0]
    assert _same(a[1], t[1])
    assert a[2] == t[2]  # the same nodes, edges and order as PyTorch records
    assert all(_same(x, y) for x, y in zip(a[3], t[3]))
    assert a[4] == t[4]
    assert len(a[5]) == len(t[5]) and all(_same(x, y) for x, y in zip(a[5], t[5]))


def test_einsum_call_forms(torch):
    for m in (ad, torch):
        a = m.arange(6.0).reshape(2, 3)
        b = m.arange(3.0)
        want = m.einsum("ij,j->i", a, b).tolist()
        assert m.einsum("ij,j->i", [a, b]).tolist() == want  # operands as one list
        assert m.einsum(a, [0, 1], b, [1], [0]).tolist() == want  # the sublist form
        assert m.einsum(a, [..., 1], b, [1]).tolist() == want


ERRORS = [
    ("ij,jk", [(2, 3)]),
    ("ij", [(2, 3), (2,)]),
    ("ij->k", [(2, 3)]),
    ("ij->ii", [(2, 3)]),
    ("i1", [(2, 3)]),
    ("ij->i1", [(2, 3)]),
    ("ijk", [(2, 3)]),
    ("i..j", [(2, 3)]),
    ("......", [(2, 3)]),
    ("ii", [(2, 3)]),
    ("i,i", [(2,), (3,)]),
    ("...,...", [(2,), (3,)]),
    ("ij->j.", [(2, 3)]),
    ("ij,jk->ik", [(2, 3), (3,)]),
]


@pytest.mark.parametrize("eq,shapes", ERRORS)
def test_einsum_errors_match_torch(torch, eq, shapes):
    msgs = []
    for m in (ad, torch):
        with pytest.raises(RuntimeError) as e:
            m.einsum(eq, *[m.ones(s) for s in shapes])
        msgs.append(str(e.value))
    assert msgs[0] == msgs[1]


def test_einsum_without_operands_and_bad_sublists(torch):
    for m in (ad, torch):
        with pytest.raises(ValueError, match="must specify the equation string"):
            m.einsum("ij")
        with pytest.raises(ValueError, match=r"within the valid range \[0, 52\)"):
            m.einsum(m.ones(2, 3), [0, 60])


def test_einsum_mixed_dtypes_as_torch(torch):
    # the mul path promotes, the bmm path refuses: PyTorch's composite behaves so too
    for m in (ad, torch):
        assert m.einsum("i,i->i", m.ones(2), m.ones(2, dtype=m.float64)).dtype == m.float64
        with pytest.raises(RuntimeError, match="expected scalar type Float but found Double"):
            m.einsum("ij,jk", m.ones(2, 3), m.ones(3, 2, dtype=m.float64))
        r = m.einsum("ij,jk", m.ones(2, 3, dtype=m.int64), m.ones(3, 2, dtype=m.int64))
        assert r.dtype == m.int64 and r.tolist() == [[3, 3], [3, 3]]


# ---- diagonal and movedim --------------------------------------------------------------------


@pytest.mark.parametrize("args", [(0, 0, 1), (1, 0, 2), (-1, -1, 0), (7, 0, 2), (-2, 2, 1)])
def test_diagonal_matches_torch(torch, args):
    out = {}
    for m in (ad, torch):
        z = m.arange(60.0, dtype=m.float64).reshape(3, 4, 5).requires_grad_()
        d = z.diagonal(*args)
        w = m.arange(1.0, d.numel() + 1, dtype=m.float64).reshape(tuple(d.shape))
        w.requires_grad_()
        (g,) = m.autograd.grad(d, z, w, create_graph=True)
        (gw,) = m.autograd.grad((g * g).sum(), w)
        out[m] = (d.tolist(), type(d.grad_fn).__name__, d._base is z, g.tolist(), gw.tolist())
    assert out[ad] == out[torch]


def test_diagonal_is_a_writable_view(torch):
    for m in (ad, torch):
        x = m.zeros(3, 3)
        x.diagonal().fill_(1.0)
        assert x.tolist() == m.eye(3).tolist()


def test_diagonal_errors(torch):
    for m in (ad, torch):
        with pytest.raises(RuntimeError, match="diagonal dimensions cannot be identical 1, 1"):
            m.ones(2, 3).diagonal(0, 1, 1)
        with pytest.raises(IndexError, match="Dimension out of range"):
            m.ones(2, 3).diagonal(0, 0, 2)


@pytest.mark.parametrize("src,dst", [(0, 2), (-1, 0), (1, 1), ((0, 1), (2, 0)), ((2, 0), (0, 1))])
def test_movedim_matches_torch(torch, src, dst):
    out = {}
    for m in (ad, torch):
        x = m.arange(24.0).reshape(2, 3, 4).requires_grad_()
        y = x.movedim(src, dst)
        assert m.moveaxis(x, src, dst).tolist() == y.tolist()
        out[m] = (tuple(y.shape), y.tolist(), type(y.grad_fn).__name__, y.grad_fn._saved_dims)
    assert out[ad] == out[torch]


def test_movedim_errors(torch):
    for m in (ad, torch):
        x = m.ones(2, 3, 4)
        for args, msg in [
            (((0, 1), (2,)), "should contain the same number of dims"),
            (((0, 0), (1, 2)), "repeated dim in `source`"),
            (((0, 1), (2, 2)), "repeated dim in `destination`"),
        ]:
            with pytest.raises(RuntimeError, match=msg):
                x.movedim(*args)
