"""Differential tests of cover16a's indexing, scatter and shape ops (issue 20):
ops/indexing2.py (``nonzero argwhere masked_select take take_along_dim index_add index_copy
index_fill index_put scatter scatter_add scatter_reduce masked_scatter put`` and their in-place
twins) and ops/shape2.py.

Each differentiable row goes through ``test_ops_torch.check_case`` (values and dtypes in
float32 and float64, node names and ``next_functions`` to the leaves, first and second
derivatives); ``test_ops_torch.test_registry_is_covered`` counts these rows too. Errors (type
and phrase), integer results, views, version counters and an ``import torch`` script through
the CLI are checked against torch below.
"""

from __future__ import annotations

import json
import textwrap
import warnings

import numpy as np
import pytest
from test_cli import cli
from test_ops_torch import Case, I, _np, check_case

import autodiag as ad


def _x(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


def _i(data):
    """An index input (no gradient)."""
    return I(data=np.array(data, dtype=np.int64), grad=False)


def _b(data):
    return I(data=np.array(data, dtype=bool), grad=False)


X43 = I(data=_x((4, 3)))
S23 = I(data=_x((2, 3), 1))
IX = _i([[0, 1, 2], [3, 0, 1]])  # scatter index into (4, 3) along 0, from a (2, 3) src
IX_DUP = _i([[0, 0, 2], [0, 0, 2]])  # repeated targets
# ties for amax/amin and zeros for prod: values the reductions treat specially
TIES = I(data=np.array([[1.0, 2.0, 0.0], [3.0, 2.0, 5.0], [1.0, 0.0, -1.0], [2.0, 2.0, 0.5]]))
TIES_SRC = I(data=np.array([[3.0, 2.0, 0.0], [3.0, 0.0, 5.0]]))

CASES = [
    # masked_select
    Case("c16a-masked_select", lambda T, x, m: x.masked_select(m), (X43, _b(_x((4, 3), 3) > 0))),
    Case(
        "c16a-masked_select_bcast_input",
        lambda T, x, m: T.masked_select(x, m),
        (I(data=_x((3,))), _b(_x((4, 3), 4) > 0)),
        op=("masked_select",),
    ),
    Case(
        "c16a-masked_select_bcast_mask",
        lambda T, x, m: x.masked_select(m),
        (X43, _b([True, False, True])),
    ),
    Case("c16a-masked_select_0d", lambda T, x, m: x.masked_select(m), (I(()), _b(True))),
    Case("c16a-masked_select_none", lambda T, x, m: x.masked_select(m), (X43, _b(np.zeros(3)))),
    # take
    Case("c16a-take", lambda T, x, i: x.take(i), (X43, _i([[0, 5], [11, -1]])), op=("take",)),
    Case("c16a-take_dup", lambda T, x, i: T.take(x, i), (X43, _i([2, 2, -10, 2]))),
    Case("c16a-take_0d", lambda T, x, i: x.take(i), (I(()), _i(0))),
    # take_along_dim
    Case(
        "c16a-take_along_dim",
        lambda T, x, i: T.take_along_dim(x, i, dim=1),
        (X43, _i([[0], [2], [1], [1]])),
        op=("take_along_dim",),
    ),
    Case(
        "c16a-take_along_dim_bcast",
        lambda T, x, i: x.take_along_dim(i, 0),
        (X43, _i([[3, 0, 1]])),
    ),
    Case("c16a-take_along_dim_flat", lambda T, x, i: x.take_along_dim(i), (X43, _i([11, 0, 4]))),
    Case(
        "c16a-take_along_dim_argsort",
        lambda T, x: T.take_along_dim(x, x.argsort(dim=-1), dim=-1),
        (X43,),
    ),
    # index_add
    Case(
        "c16a-index_add",
        lambda T, x, i, s: x.index_add(0, i, s),
        (X43, _i([0, 2]), S23),
        op=("index_add",),
    ),
    Case(
        "c16a-index_add_dup_alpha",
        lambda T, x, i, s: T.index_add(x, 1, i, s, alpha=2),
        (X43, _i([2, 2, 0, 2]), I(data=_x((4, 4), 2))),
    ),
    Case("c16a-index_add_0d", lambda T, x, i, s: x.index_add(0, i, s), (I(()), _i([0]), I(()))),
    Case(
        "c16a-index_copy_1d_from_0d",
        lambda T, x, i, s: x.index_copy(0, i, s),
        (I((3,)), _i(1), I(())),
    ),
    Case(
        "c16a-index_add_inplace",
        lambda T, x, i, s: x.clone().index_add_(-1, i, s),
        (X43, _i([1]), I(data=_x((4, 1)))),
        op=("index_add",),
    ),
    # index_copy
    Case(
        "c16a-index_copy",
        lambda T, x, i, s: x.index_copy(0, i, s),
        (X43, _i([3, 1]), S23),
        op=("index_copy",),
    ),
    Case(
        "c16a-index_copy_inplace",
        lambda T, x, i, s: (x * 2).index_copy_(1, i, s),
        (X43, _i([2, 0]), I(data=_x((4, 2)))),
    ),
    # index_fill
    Case(
        "c16a-index_fill",
        lambda T, x, i: x.index_fill(1, i, -1.5),
        (X43, _i([0, -1])),
        op=("index_fill",),
    ),
    Case(
        "c16a-index_fill_tensor_value",
        lambda T, x, i, v: T.index_fill(x, 0, i, v),
        (X43, _i([1, 3, 1]), I(())),
    ),
    Case(
        "c16a-index_fill_inplace",
        lambda T, x, i: (x * 2).index_fill_(0, i, 0.0),
        (X43, _i([2])),
    ),
    # index_put
    Case(
        "c16a-index_put",
        lambda T, x, i, v: x.index_put((i,), v),
        (X43, _i([0, 2]), S23),
        op=("index_put",),
    ),
    Case(
        "c16a-index_put_accumulate",
        lambda T, x, i, v: T.index_put(x, (i,), v, accumulate=True),
        (X43, _i([1, 1, 3]), I(data=_x((3, 3), 2))),
    ),
    Case(
        "c16a-index_put_pairs_bcast",
        lambda T, x, i, j, v: x.index_put([i, j], v, True),
        (X43, _i([0, 3, 0]), _i([2, 1, 2]), I(())),
    ),
    Case(
        "c16a-index_put_mask",
        lambda T, x, m, v: x.index_put((m,), v),
        (X43, _b(_x((4, 3), 5) > 0), I(())),
    ),
    Case(
        "c16a-index_put_inplace",
        lambda T, x, i, v: x.clone().index_put_((i,), v, accumulate=True),
        (X43, _i([1, 1]), I((3,))),
        op=("index_put",),
    ),
    Case(
        "c16a-torch_index_put_",
        lambda T, x, i, v: T.index_put_(x.clone(), (i,), v),
        (X43, _i([2]), I((1, 3))),
        op=("index_put_",),
    ),
    # scatter
    Case("c16a-scatter", lambda T, x, i, s: x.scatter(0, i, s), (X43, IX, S23), op=("scatter",)),
    Case(
        "c16a-scatter_src_larger",
        lambda T, x, i, s: T.scatter(x, 1, i, s),
        (X43, _i([[2], [0], [1], [2]]), I(data=_x((5, 4), 6), grad=False)),
    ),
    Case("c16a-scatter_value", lambda T, x, i: x.scatter(0, i, 2.5), (X43, IX)),
    Case(
        "c16a-scatter_value_kw",
        lambda T, x, i: T.scatter(x, -1, i, value=-1.0),
        (X43, _i([[0], [1], [2], [0]])),
    ),
    Case(
        "c16a-scatter_inplace",
        lambda T, x, i, s: (x + 1).scatter_(0, i, s),
        (X43, IX, S23),
    ),
    Case("c16a-scatter_0d", lambda T, x, i, s: x.scatter(0, i, s), (I(()), _i(0), I(()))),
    # scatter_add
    Case(
        "c16a-scatter_add",
        lambda T, x, i, s: x.scatter_add(0, i, s),
        (X43, IX_DUP, S23),
        op=("scatter_add",),
    ),
    Case(
        "c16a-scatter_add_dim1",
        lambda T, x, i, s: T.scatter_add(x, 1, i, s),
        (X43, _i([[0, 0], [2, 1], [1, 1], [0, 2]]), I(data=_x((4, 2), 7))),
    ),
    Case(
        "c16a-scatter_add_inplace",
        lambda T, x, i, s: x.clone().scatter_add_(0, i, s),
        (X43, IX_DUP, S23),
    ),
]
# scatter_reduce: every reduction, with and without the input's own values, on data with
# ties (amax/amin share the gradient) and zeros (prod's special cases)
for _red in ("sum", "prod", "mean", "amax", "amin"):
    for _inc in (True, False):
        CASES.append(
            Case(
                f"c16a-scatter_reduce_{_red}_{_inc}",
                lambda T, x, i, s, r=_red, inc=_inc: x.scatter_reduce(0, i, s, r, include_self=inc),
                (TIES, IX_DUP if _red != "prod" else _i([[0, 0, 2], [3, 0, 2]]), TIES_SRC),
                op=("scatter_reduce",),
                # prod's gradient divides: float32 differs in the last bits
                rtol=1e-5,
            )
        )
CASES += [
    Case(
        "c16a-scatter_reduce_random_prod",
        lambda T, x, i, s: T.scatter_reduce(x, 1, i, s, "prod"),
        (X43, _i([[0, 0], [2, 1], [1, 1], [0, 2]]), I(data=_x((4, 2), 8))),
        op=("scatter_reduce",),
    ),
    Case(
        "c16a-scatter_reduce_inplace",
        lambda T, x, i, s: x.clone().scatter_reduce_(0, i, s, "amax", include_self=False),
        (X43, IX_DUP, S23),
    ),
    # masked_scatter
    Case(
        "c16a-masked_scatter",
        lambda T, x, m, s: x.masked_scatter(m, s),
        (X43, _b(_x((4, 3), 9) > 0), I(data=_x((15,), 10))),
        op=("masked_scatter",),
    ),
    Case(
        "c16a-masked_scatter_bcast",
        lambda T, x, m, s: T.masked_scatter(x, m, s),
        (I((3,)), _b([[True, False, True], [False, False, True]]), I((2, 2))),
    ),
    Case(
        "c16a-masked_scatter_inplace",
        lambda T, x, m, s: x.clone().masked_scatter_(m, s),
        (X43, _b([False, True, True]), I((3, 3))),
    ),
    # put
    Case("c16a-put", lambda T, x, i, s: x.put(i, s), (X43, _i([0, -1, 5]), I((3,))), op=("put",)),
    Case(
        "c16a-put_accumulate",
        lambda T, x, i, s: T.put(x, i, s, accumulate=True),
        (X43, _i([[1, 1], [7, 1]]), I((4,))),
    ),
    Case(
        "c16a-put_inplace",
        lambda T, x, i, s: x.clone().put_(i, s, True),
        (X43, _i([3, 3]), I((2, 1))),
    ),
]

# --- shape2.py: composites (PyTorch's parts recorded) and their own nodes --------------------
X46 = I(data=_x((4, 6), 11))
V3 = I(data=_x((3,), 12))


def _outs(ts):
    """The pieces of a split, as separate outputs (check_case compares each)."""
    return tuple(ts)


CASES += [
    Case("c16a-tile", lambda T, x: x.tile(2), (X46,), op=("tile",)),
    Case("c16a-tile_more_dims", lambda T, x: T.tile(x, (2, 1, 3)), (V3,)),
    Case("c16a-tile_0d", lambda T, x: x.tile((2,)), (I(()),)),
    Case("c16a-hstack", lambda T, x, y: T.hstack([x, y]), (X46, I((4, 2))), op=("hstack",)),
    Case("c16a-hstack_1d", lambda T, x, y: T.hstack((x, y)), (V3, I(()))),
    Case("c16a-vstack", lambda T, x, y: T.vstack([x, y]), (V3, V3), op=("vstack",)),
    Case(
        "c16a-row_stack", lambda T, x, y: T.row_stack([x, y]), (X46, I((1, 6))), op=("row_stack",)
    ),
    Case("c16a-dstack", lambda T, x, y: T.dstack([x, y]), (X46, X46), op=("dstack",)),
    Case("c16a-dstack_1d", lambda T, x, y: T.dstack([x, y]), (V3, V3)),
    Case(
        "c16a-column_stack",
        lambda T, x, y, z: T.column_stack([x, y, z]),
        (V3, I((3, 2)), V3),
        op=("column_stack",),
    ),
    Case(
        "c16a-tensor_split_n",
        lambda T, x: _outs(x.tensor_split(3, 1)),
        (I((2, 7)),),
        op=("tensor_split",),
    ),
    Case(
        "c16a-tensor_split_idx", lambda T, x: _outs(T.tensor_split(x, [1, 5, 2, 9])), (I((6, 2)),)
    ),
    Case(
        "c16a-tensor_split_tensor",
        lambda T, x: _outs(x.tensor_split(T.tensor([2]), dim=-1)),
        (X46,),
    ),
    Case("c16a-hsplit", lambda T, x: _outs(x.hsplit(3)), (X46,), op=("hsplit",)),
    Case("c16a-hsplit_1d", lambda T, x: _outs(T.hsplit(x, [1])), (V3,)),
    Case("c16a-vsplit", lambda T, x: _outs(x.vsplit([1, 3])), (X46,), op=("vsplit",)),
    Case("c16a-dsplit", lambda T, x: _outs(x.dsplit(2)), (I((2, 1, 4)),), op=("dsplit",)),
    Case(
        "c16a-split_with_sizes",
        lambda T, x: _outs(x.split_with_sizes([1, 3])),
        (X46,),
        op=("split_with_sizes",),
    ),
    Case(
        "c16a-split_with_sizes_dim", lambda T, x: _outs(T.split_with_sizes(x, (4, 2), -1)), (X46,)
    ),
    Case("c16a-fliplr", lambda T, x: x.fliplr(), (X46,), op=("fliplr",)),
    Case("c16a-flipud", lambda T, x: T.flipud(x), (V3,), op=("flipud",)),
    Case("c16a-rot90", lambda T, x: x.rot90(), (X46,), op=("rot90",)),
    Case("c16a-rot90_k", lambda T, x: T.rot90(x, 3, (2, 0)), (I((2, 3, 4)),)),
    Case("c16a-rot90_neg", lambda T, x: x.rot90(-2, [1, 0]), (X46,)),
    Case("c16a-ravel", lambda T, x: x.ravel(), (X46,), op=("ravel",)),
    Case("c16a-ravel_t", lambda T, x: T.ravel(x.t()), (X46,)),
    Case("c16a-atleast_1d", lambda T, x: T.atleast_1d(x), (I(()),), op=("atleast_1d",)),
    Case("c16a-atleast_2d", lambda T, x, y: T.atleast_2d(x, y), (V3, I(())), op=("atleast_2d",)),
    Case(
        "c16a-atleast_3d",
        lambda T, x, y, z: T.atleast_3d([x, y, z]),
        (V3, X46, I(())),
        op=("atleast_3d",),
    ),
    Case(
        "c16a-broadcast_tensors",
        lambda T, x, y: T.broadcast_tensors(x * 1, y),
        (X46, I((1, 6))),
        op=("broadcast_tensors",),
    ),
    Case(
        "c16a-meshgrid_ij",
        lambda T, x, y: T.meshgrid(x, y, indexing="ij"),
        (V3, I((4,))),
        op=("meshgrid",),
    ),
    Case(
        "c16a-meshgrid_xy",
        lambda T, x, y, z: T.meshgrid([x, y, z], indexing="xy"),
        (V3, I((4,)), I((2,))),
    ),
    Case(
        "c16a-cartesian_prod",
        lambda T, x, y: T.cartesian_prod(x, y),
        (V3, I((2,))),
        op=("cartesian_prod",),
    ),
    Case("c16a-combinations", lambda T, x: T.combinations(x), (I((4,)),), op=("combinations",)),
    Case(
        "c16a-combinations_r3_repl", lambda T, x: T.combinations(x, 3, with_replacement=True), (V3,)
    ),
    Case(
        "c16a-block_diag",
        lambda T, x, y, z: T.block_diag(x, y, z),
        (I((2, 3)), V3, I(())),
        op=("block_diag",),
    ),
    Case("c16a-diff", lambda T, x: x.diff(), (X46,), op=("diff",)),
    Case("c16a-diff_n2_dim0", lambda T, x: T.diff(x, n=2, dim=0), (X46,)),
    Case(
        "c16a-diff_prepend_append",
        lambda T, x, p, a: x.diff(prepend=p, append=a),
        (X46, I((4, 1)), I((4, 2))),
    ),
    Case("c16a-diff_n_too_big", lambda T, x: x.diff(5), (V3,)),
    Case("c16a-sum_to_size", lambda T, x: x.sum_to_size(1, 6), (X46,), op=("sum_to_size",)),
    Case("c16a-sum_to_size_lead", lambda T, x: x.sum_to_size((3, 1)), (I((2, 3, 4)),)),
    Case("c16a-kron", lambda T, x, y: T.kron(x, y), (I((2, 3)), I((2, 2))), op=("kron",)),
    Case("c16a-kron_dims", lambda T, x, y: x.kron(y), (V3, I((2, 1, 2)))),
    Case("c16a-inner", lambda T, x, y: T.inner(x, y), (X46, I((2, 6))), op=("inner",)),
    Case("c16a-inner_1d", lambda T, x, y: x.inner(y), (V3, V3)),
    Case("c16a-inner_0d", lambda T, x, y: T.inner(x, y), (I(()), V3)),
    Case(
        "c16a-tensordot",
        lambda T, x, y: T.tensordot(x, y, dims=([1, 0], [0, 2])),
        (I((3, 2, 4)), I((2, 5, 3))),
        op=("tensordot",),
    ),
    Case("c16a-tensordot_int", lambda T, x, y: T.tensordot(x, y, 1), (X46, I((6, 2)))),
    Case("c16a-vdot", lambda T, x, y: T.vdot(x, y), (V3, V3), op=("vdot",)),
    Case("c16a-addmv", lambda T, b, m, v: T.addmv(b, m, v), (I((4,)), X46, I((6,))), op=("addmv",)),
    Case(
        "c16a-addmv_scaled_bcast",
        lambda T, b, m, v: b.addmv(m, v, beta=0.5, alpha=2.0),
        (I(()), X46, I((6,))),
    ),
    Case(
        "c16a-addmv_",
        lambda T, b, m, v: (b * 1).addmv_(m, v, alpha=3),
        (I((4,)), X46, I((6,))),
        op=("addmv",),
    ),
    Case("c16a-addr", lambda T, b, u, v: T.addr(b, u, v), (X46, I((4,)), I((6,))), op=("addr",)),
    Case(
        "c16a-addr_scaled",
        lambda T, b, u, v: b.addr(u, v, beta=-1, alpha=0.5),
        (I((1, 6)), I((4,)), I((6,))),
    ),
    Case(
        "c16a-addbmm",
        lambda T, b, x, y: T.addbmm(b, x, y),
        (I((4, 5)), I((3, 4, 2)), I((3, 2, 5))),
        op=("addbmm",),
    ),
    Case(
        "c16a-addbmm_scaled",
        lambda T, b, x, y: b.addbmm(x, y, beta=2, alpha=-1.5),
        (I((5,)), I((2, 4, 3)), I((2, 3, 5))),
    ),
    Case(
        "c16a-pixel_shuffle",
        lambda T, x: T.pixel_shuffle(x, 2),
        (I((2, 8, 3, 2)),),
        op=("pixel_shuffle",),
    ),
    Case(
        "c16a-pixel_shuffle_3d",
        lambda T, x: T.nn.functional.pixel_shuffle(x, 3) if hasattr(T, "nn") else None,
        (I((9, 1, 2)),),
    ),
    Case(
        "c16a-pixel_unshuffle",
        lambda T, x: T.pixel_unshuffle(x, 2),
        (I((1, 2, 4, 6)),),
        op=("pixel_unshuffle",),
    ),
    Case(
        "c16a-pixel_modules",
        lambda T, x: T.nn.PixelUnshuffle(3)(T.nn.PixelShuffle(3)(x)),
        (I((1, 1, 9, 2, 2)),),
    ),
]

# in-place view ops: the tensor itself, reshaped, with a node of its own
CASES += [
    Case("c16a-t_", lambda T, x: (x * 1).t_(), (X46,)),
    Case("c16a-transpose_", lambda T, x: (x + 0).transpose_(0, -1), (I((2, 3, 4)),)),
    Case("c16a-swapaxes_", lambda T, x: (x * 2).swapaxes_(1, 0), (X46,)),
    Case("c16a-swapdims_", lambda T, x: (x * 2).swapdims_(1, 2).exp(), (I((2, 3, 4)),)),
    Case("c16a-squeeze_", lambda T, x: (x * 1).squeeze_(), (I((2, 1, 3, 1)),)),
    Case("c16a-squeeze_dim", lambda T, x: (x * 1).squeeze_(1).sin(), (I((2, 1, 3)),)),
    Case("c16a-squeeze_dims", lambda T, x: (x * 1).squeeze_((0, 2)), (I((1, 3, 1)),)),
    Case("c16a-unsqueeze_", lambda T, x: (x * 1).unsqueeze_(-1) * x.unsqueeze(-1), (X46,)),
]

# values only (integer or bool results): VALUES below
NO_GRADIENT = {"nonzero", "argwhere", "broadcast_shapes", "tril_indices", "triu_indices"}
NO_GRADIENT |= {"unravel_index", "isin", "searchsorted", "bucketize", "index_put_"}
COVERED = {n for c in CASES for n in c.op} | NO_GRADIENT


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_case_matches_torch(torch, case):
    check_case(torch, case)


# ---------------------------------------------------------------------------------------------
# Integer results, values without a gradient
# ---------------------------------------------------------------------------------------------

VALUES = [
    ("nonzero", lambda T: T.tensor([[0.0, 1.0, 2.0], [3.0, 0.0, 0.0]]).nonzero()),
    ("nonzero_tuple", lambda T: T.nonzero(T.tensor([[0, 1], [1, 1]]), as_tuple=True)),
    ("nonzero_0d", lambda T: T.tensor(3.0).nonzero()),
    ("nonzero_0d_zero", lambda T: T.nonzero(T.tensor(0.0))),
    ("nonzero_0d_tuple", lambda T: T.tensor(3.0).nonzero(as_tuple=True)),
    ("nonzero_0d_zero_tuple", lambda T: T.tensor(0).nonzero(as_tuple=True)),
    ("nonzero_empty", lambda T: T.zeros(2, 0).nonzero()),
    ("nonzero_bool", lambda T: T.tensor([True, False, True]).nonzero(as_tuple=True)),
    ("nonzero_nan", lambda T: T.tensor([float("nan"), 0.0, -0.0]).nonzero()),
    ("argwhere", lambda T: T.argwhere(T.tensor([[0, 2], [3, 0]]))),
    ("argwhere_method", lambda T: T.tensor([0.0, 1.0]).argwhere()),
    ("take_int", lambda T: T.arange(6).take(T.tensor([5, 0]))),
    (
        "index_add_int",
        lambda T: T.zeros(3, dtype=T.long).index_add(
            0, T.tensor([0, 0]), T.tensor([2, 3]), alpha=2
        ),
    ),
    (
        "index_add_int32_index",
        lambda T: T.zeros(3).index_add(0, T.tensor([2], dtype=T.int32), T.ones(1)),
    ),
    (
        "scatter_int32_index",
        lambda T: T.zeros(3).scatter(0, T.tensor([2], dtype=T.int32), T.ones(1)),
    ),
    (
        "scatter_reduce_mean_int",
        lambda T: T.tensor([1, 2, 3]).scatter_reduce(
            0, T.tensor([0, 0, 1]), T.tensor([4, 7, 2]), "mean"
        ),
    ),
    (
        "scatter_reduce_amax_int_excl",
        lambda T: T.zeros(3, dtype=T.long).scatter_reduce(
            0, T.tensor([0, 0]), T.tensor([-4, -7]), "amax", include_self=False
        ),
    ),
    (
        "scatter_reduce_amin_nan",
        lambda T: T.tensor([1.0, 2.0]).scatter_reduce(
            0, T.tensor([0, 1]), T.tensor([float("nan"), 3.0]), "amin"
        ),
    ),
    (
        "scatter_reduce_max_alias",
        lambda T: T.tensor([1.0, 2.0]).scatter_reduce(
            0, T.tensor([1, 1]), T.tensor([5.0, 3.0]), "max"
        ),
    ),
    (
        "scatter_reduce_min_alias",
        lambda T: T.tensor([1.0, 2.0]).scatter_reduce(
            0, T.tensor([1, 1]), T.tensor([5.0, 3.0]), "min"
        ),
    ),
    (
        "scatter_reduce_bool",
        lambda T: T.tensor([True, False]).scatter_reduce(
            0, T.tensor([1]), T.tensor([True]), "amax"
        ),
    ),
    (
        "scatter_reduce_add",
        lambda T: T.ones(3).scatter(0, T.tensor([1, 1]), T.tensor([5.0, 3.0]), reduce="add"),
    ),
    (
        "scatter_reduce_mul_value",
        lambda T: T.full((3,), 2.0).scatter(0, T.tensor([1, 1]), 3.0, reduce="multiply"),
    ),
    (
        "scatter_empty_index",
        lambda T: T.ones(2, 2).scatter(0, T.zeros(0, dtype=T.long), T.ones(2, 2)),
    ),
    (
        "index_put_bool_tensor_mask",
        lambda T: T.zeros(2, 2).index_put((T.tensor([True, False]),), T.tensor(1.0)),
    ),
    (
        "index_put_int32",
        lambda T: T.zeros(3).index_put((T.tensor([1], dtype=T.int32),), T.tensor(1.0)),
    ),
    ("index_fill_bool", lambda T: T.zeros(3, dtype=T.bool).index_fill(0, T.tensor([1]), True)),
    (
        "masked_scatter_noncontig",
        lambda T: (
            T.zeros(3, 2)
            .t()
            .masked_scatter(T.tensor([True, False, True]), T.arange(6.0).reshape(3, 2).t())
        ),
    ),
    (
        "scatter_noncontig",
        lambda T: T.zeros(3, 3).t().scatter(1, T.tensor([[2], [0]]), T.ones(3, 3).t()),
    ),
    ("take_noncontig", lambda T: T.arange(6).reshape(2, 3).t().take(T.tensor([1, 2]))),
    ("put_noncontig", lambda T: T.zeros(2, 3).t().put(T.tensor([1, 2]), T.tensor([1.0, 2.0]))),
    (
        "index_add_noncontig",
        lambda T: T.zeros(3, 2).t().index_add(1, T.tensor([2]), T.ones(3, 2).t()[:, :1]),
    ),
    ("take_along_dim_empty", lambda T: T.ones(2, 3).take_along_dim(T.zeros(2, 0, dtype=T.long), 1)),
    ("masked_select_empty", lambda T: T.ones(0, 3).masked_select(T.ones(0, 3, dtype=T.bool))),
    ("broadcast_shapes", lambda T: tuple(T.broadcast_shapes((3, 1), (4,), 1, (2, 1, 1)))),
    ("broadcast_shapes_none", lambda T: tuple(T.broadcast_shapes())),
    ("tril_indices", lambda T: T.tril_indices(3, 4)),
    ("tril_indices_offset", lambda T: T.tril_indices(4, 3, -1)),
    ("triu_indices", lambda T: T.triu_indices(3, 4, 1)),
    ("triu_indices_int32", lambda T: T.triu_indices(3, 3, dtype=T.int32)),
    ("tril_indices_empty", lambda T: T.tril_indices(0, 3)),
    ("unravel_index", lambda T: T.unravel_index(T.tensor([5, 7, -1]), (3, 4))),
    ("unravel_index_int", lambda T: T.unravel_index(T.tensor(13), (2, 3, 4))),
    ("isin", lambda T: T.isin(T.tensor([[1, 2], [3, 4]]), T.tensor([2, 3]))),
    (
        "isin_invert",
        lambda T: T.isin(
            T.tensor([1.0, 2.0, float("nan")]), T.tensor([2.0, float("nan")]), invert=True
        ),
    ),
    (
        "searchsorted",
        lambda T: T.searchsorted(T.tensor([1.0, 3.0, 3.0, 5.0]), T.tensor([3.0, 0.0, 9.0])),
    ),
    (
        "searchsorted_right",
        lambda T: T.searchsorted(T.tensor([1, 3, 3, 5]), T.tensor([3, 4]), right=True),
    ),
    (
        "searchsorted_side_int32",
        lambda T: T.searchsorted(T.tensor([1, 3, 5]), T.tensor([3]), side="right", out_int32=True),
    ),
    (
        "searchsorted_batched",
        lambda T: T.searchsorted(
            T.tensor([[1.0, 2.0, 3.0], [2.0, 4.0, 6.0]]), T.tensor([[2.5], [2.5]])
        ),
    ),
    (
        "searchsorted_sorter",
        lambda T: T.searchsorted(
            T.tensor([5.0, 1.0, 3.0]), T.tensor([2.0, 4.0]), sorter=T.tensor([1, 2, 0])
        ),
    ),
    (
        "bucketize",
        lambda T: T.bucketize(T.tensor([[3.0, 6.0], [0.0, 9.0]]), T.tensor([1.0, 3.0, 5.0, 7.0])),
    ),
    ("bucketize_right", lambda T: T.bucketize(T.tensor([3, 5]), T.tensor([1, 3, 5]), right=True)),
    (
        "nbytes_itemsize",
        lambda T: (
            T.ones(4, 3).nbytes,
            T.ones(2, dtype=T.float64).itemsize,
            T.ones(3, dtype=T.int16).nbytes,
        ),
    ),
    (
        "storage_offset",
        lambda T: (
            T.ones(4, 3)[1:].storage_offset(),
            T.ones(4, 3)[:, 2].storage_offset(),
            T.ones(4, 3).t().storage_offset(),
            T.ones(2).storage_offset(),
        ),
    ),
    (
        "storage_offset_split",
        lambda T: [t.storage_offset() for t in T.arange(10.0).view(2, 5).tensor_split(3, 1)],
    ),
    ("combinations_r0", lambda T: T.combinations(T.tensor([1.0, 2.0]), 0)),
    ("combinations_int", lambda T: T.combinations(T.tensor([1, 2, 3]), 2, True)),
    ("diff_bool", lambda T: T.tensor([True, False, False, True]).diff()),
    ("diff_int", lambda T: T.tensor([1, 4, 9]).diff(prepend=T.tensor([0]))),
    ("block_diag_ints", lambda T: T.block_diag(T.tensor([1, 2]), T.tensor([[3], [4]]))),
    ("block_diag_mixed", lambda T: T.block_diag(T.tensor([1, 2]), T.ones(1, 1))),
    ("kron_int", lambda T: T.kron(T.tensor([[1, 2]]), T.tensor([[1], [10]]))),
    ("pixel_shuffle_int", lambda T: T.pixel_shuffle(T.arange(16).view(1, 4, 2, 2), 2)),
]


@pytest.mark.parametrize("fn", [v[1] for v in VALUES], ids=[v[0] for v in VALUES])
def test_value_matches_torch(torch, fn):
    from differential import assert_same

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert_same(fn(ad), fn(torch))


# ---------------------------------------------------------------------------------------------
# Errors: PyTorch's type and key phrase
# ---------------------------------------------------------------------------------------------


def _x43(T):
    return T.arange(12.0).reshape(4, 3)


def _ix(T):
    return T.tensor([[0, 1, 2], [3, 0, 1]])


ERRORS = [
    (
        "masked_select_float_mask",
        lambda T: _x43(T).masked_select(_x43(T)),
        RuntimeError,
        "expected BoolTensor for mask",
    ),
    (
        "masked_select_shape",
        lambda T: _x43(T).masked_select(T.tensor([True, False])),
        RuntimeError,
        "must match the size of tensor b",
    ),
    (
        "masked_scatter_float_mask",
        lambda T: _x43(T).masked_scatter(_x43(T), T.ones(12)),
        RuntimeError,
        "only supports boolean masks",
    ),
    (
        "masked_scatter_few",
        lambda T: _x43(T).masked_scatter(_x43(T) >= 0, T.ones(5)),
        RuntimeError,
        "Number of elements of source < number of ones in mask",
    ),
    (
        "masked_scatter_dtype",
        lambda T: _x43(T).masked_scatter(_x43(T) > 0, T.ones(12).double()),
        RuntimeError,
        "expected self and source to have same dtypes",
    ),
    (
        "take_float_index",
        lambda T: _x43(T).take(T.tensor([1.0])),
        RuntimeError,
        "take(): Expected a long tensor for index, but got Float",
    ),
    (
        "take_int32_index",
        lambda T: _x43(T).take(T.tensor([1], dtype=T.int32)),
        RuntimeError,
        "but got Int",
    ),
    (
        "take_out_of_range",
        lambda T: _x43(T).take(T.tensor([12])),
        IndexError,
        "out of range: tried to access index 12 on a tensor of 12 elements.",
    ),
    (
        "take_out_of_range_neg",
        lambda T: _x43(T).take(T.tensor([-13])),
        IndexError,
        "tried to access index -13",
    ),
    (
        "put_numel",
        lambda T: _x43(T).put(T.tensor([0, 1]), T.ones(3)),
        IndexError,
        "source.numel() = 3, index.numel() = 2",
    ),
    (
        "put_out_of_range",
        lambda T: _x43(T).put(T.tensor([12]), T.ones(1)),
        IndexError,
        "out of range: tried to access index 12",
    ),
    (
        "put_float_index",
        lambda T: _x43(T).put(T.tensor([1.0]), T.ones(1)),
        RuntimeError,
        "put_(): Expected a long tensor for index",
    ),
    (
        "put_dtype",
        lambda T: _x43(T).put(T.tensor([1]), T.ones(1).double()),
        RuntimeError,
        "self and source expected to have the same dtype",
    ),
    (
        "take_along_dim_dims",
        lambda T: _x43(T).take_along_dim(T.tensor([0]), 0),
        RuntimeError,
        "input and indices should have the same number of dimensions",
    ),
    (
        "take_along_dim_float",
        lambda T: _x43(T).take_along_dim(T.tensor([0.0])),
        RuntimeError,
        "Expected dtype int32/int64 for index",
    ),
    (
        "take_along_dim_noncontig",
        lambda T: _x43(T).t().take_along_dim(T.tensor([0])),
        RuntimeError,
        "view size is not compatible",
    ),
    (
        "index_add_float_index",
        lambda T: _x43(T).index_add(0, T.tensor([0.0]), T.ones(1, 3)),
        RuntimeError,
        "index_add_(): Expected dtype int32/int64 for index but got: Float",
    ),
    (
        "index_add_2d_index",
        lambda T: _x43(T).index_add(0, T.tensor([[0]]), T.ones(1, 3)),
        IndexError,
        "Index is supposed to be a vector",
    ),
    (
        "index_add_out_of_range",
        lambda T: _x43(T).index_add(0, T.tensor([0, 7]), T.ones(2, 3)),
        RuntimeError,
        "index 7 is out of bounds for dimension 0 with size 4",
    ),
    (
        "index_add_negative",
        lambda T: _x43(T).index_add(0, T.tensor([-1]), T.ones(1, 3)),
        RuntimeError,
        "index -1 is out of bounds",
    ),
    (
        "index_add_source_shape",
        lambda T: _x43(T).index_add(0, T.tensor([0]), T.ones(1, 4)),
        RuntimeError,
        "source tensor shape must match self tensor shape",
    ),
    (
        "index_add_count",
        lambda T: _x43(T).index_add(0, T.tensor([0, 1]), T.ones(3, 3)),
        RuntimeError,
        "Number of indices (2) should be equal to source.size(dim): (3)",
    ),
    (
        "index_add_0d_source",
        lambda T: T.ones(3).index_add(0, T.tensor(1), T.tensor(2.0)),
        RuntimeError,
        "Got self.shape = [3] source.shape = []",
    ),
    (
        "index_add_dtype",
        lambda T: _x43(T).index_add(0, T.tensor([0]), T.ones(1, 3).double()),
        RuntimeError,
        "must have the same scalar type",
    ),
    (
        "index_copy_out_of_range",
        lambda T: _x43(T).index_copy(0, T.tensor([7]), T.ones(1, 3)),
        IndexError,
        "index 7 is out of bounds for dimension 0 with size 4",
    ),
    (
        "index_copy_int32",
        lambda T: _x43(T).index_copy(0, T.tensor([0], dtype=T.int32), T.ones(1, 3)),
        RuntimeError,
        "Expected a long tensor for index, but got Int",
    ),
    (
        "index_fill_out_of_range",
        lambda T: _x43(T).index_fill(0, T.tensor([4]), 1.0),
        IndexError,
        "index 4 is out of bounds for dimension 0 with size 4",
    ),
    (
        "index_fill_int32",
        lambda T: _x43(T).index_fill(0, T.tensor([0], dtype=T.int32), 1.0),
        IndexError,
        "Expected dtype int64 for index",
    ),
    (
        "index_fill_1d_value",
        lambda T: _x43(T).index_fill(0, T.tensor([0]), T.ones(1)),
        RuntimeError,
        "only supports a 0-dimensional value tensor",
    ),
    (
        "index_put_out_of_range",
        lambda T: _x43(T).index_put((T.tensor([0, 7]),), T.ones(2, 3)),
        IndexError,
        "index 7 is out of bounds for dimension 0 with size 4",
    ),
    (
        "index_put_float_index",
        lambda T: _x43(T).index_put((T.tensor([0.0]),), T.ones(3)),
        IndexError,
        "tensors used as indices must be long, int, byte or bool tensors",
    ),
    (
        "index_put_dtype",
        lambda T: _x43(T).index_put((T.tensor([0]),), T.ones(3).double()),
        RuntimeError,
        "Index put requires the source and destination dtypes match",
    ),
    (
        "index_put_shape",
        lambda T: _x43(T).index_put((T.tensor([0, 1]),), T.ones(3, 3)),
        RuntimeError,
        "shape mismatch: value tensor of shape [3, 3] cannot be broadcast to indexing result "
        "of shape [2, 3]",
    ),
    (
        "index_put_none",
        lambda T: _x43(T).index_put((None, T.tensor([0])), T.ones(4)),
        TypeError,
        "expected Tensor as element 0",
    ),
    (
        "scatter_float_index",
        lambda T: _x43(T).scatter(0, _ix(T).float(), T.ones(2, 3)),
        RuntimeError,
        "scatter(): Expected dtype int32/int64 for index",
    ),
    (
        "scatter_out_of_range",
        lambda T: _x43(T).scatter(0, _ix(T) + 2, T.ones(2, 3)),
        RuntimeError,
        "index 4 is out of bounds for dimension 0 with size 4",
    ),
    (
        "scatter_negative",
        lambda T: _x43(T).scatter(0, _ix(T) - 1, T.ones(2, 3)),
        RuntimeError,
        "index -1 is out of bounds",
    ),
    (
        "scatter_dtype",
        lambda T: _x43(T).scatter(0, _ix(T), T.ones(2, 3).double()),
        RuntimeError,
        "Expected self.dtype to be equal to src.dtype",
    ),
    (
        "scatter_dims",
        lambda T: _x43(T).scatter(0, T.tensor([0]), T.ones(2, 3)),
        RuntimeError,
        "Index tensor must have the same number of dimensions as self tensor",
    ),
    (
        "scatter_src_dims",
        lambda T: _x43(T).scatter(0, _ix(T), T.tensor(2.0)),
        RuntimeError,
        "Index tensor must have the same number of dimensions as src tensor",
    ),
    (
        "scatter_index_too_big",
        lambda T: _x43(T).scatter(0, T.zeros(2, 4, dtype=T.long), T.ones(2, 3)),
        RuntimeError,
        "Expected index [2, 4] to be no larger than self [4, 3] apart from dimension 0 and to "
        "be no larger size than src [2, 3]",
    ),
    (
        "scatter_bad_reduce",
        lambda T: _x43(T).scatter(0, _ix(T), T.ones(2, 3), reduce="max"),
        RuntimeError,
        "reduce argument must be either add or multiply.",
    ),
    (
        "scatter_add_out_of_range",
        lambda T: _x43(T).scatter_add(0, _ix(T) + 2, T.ones(2, 3)),
        RuntimeError,
        "index 4 is out of bounds",
    ),
    (
        "scatter_reduce_bad",
        lambda T: _x43(T).scatter_reduce(0, _ix(T), T.ones(2, 3), "add"),
        RuntimeError,
        "reduce argument must be either sum, prod, mean, amax or amin, got add",
    ),
    (
        "hsplit_divisible",
        lambda T: T.ones(2, 6).hsplit(4),
        RuntimeError,
        "is not divisible by the split_size 4",
    ),
    (
        "vsplit_1d",
        lambda T: T.ones(6).vsplit(2),
        RuntimeError,
        "torch.vsplit requires a tensor with at least 2 dimension",
    ),
    (
        "dsplit_2d",
        lambda T: T.ones(2, 6).dsplit(2),
        RuntimeError,
        "requires a tensor with at least 3 dimension",
    ),
    (
        "tensor_split_0d",
        lambda T: T.tensor(1.0).tensor_split(2),
        RuntimeError,
        "tensor_split expected at least a 1-dimensional tensor",
    ),
    (
        "tensor_split_zero",
        lambda T: T.ones(3).tensor_split(0),
        RuntimeError,
        "number of sections must be larger than 0, got 0",
    ),
    (
        "split_with_sizes_sum",
        lambda T: T.ones(4).split_with_sizes([1, 2]),
        RuntimeError,
        "split_with_sizes expects split_sizes to sum exactly to 4",
    ),
    ("fliplr_1d", lambda T: T.ones(3).fliplr(), RuntimeError, "Input must be >= 2-d."),
    ("flipud_0d", lambda T: T.tensor(1.0).flipud(), RuntimeError, "Input must be >= 1-d."),
    (
        "rot90_1d",
        lambda T: T.ones(3).rot90(),
        RuntimeError,
        "expected total dims >= 2, but got total dims = 1",
    ),
    (
        "rot90_same_dims",
        lambda T: T.ones(3, 3).rot90(1, [1, 1]),
        RuntimeError,
        "expected rotation dims to be different",
    ),
    (
        "rot90_three_dims",
        lambda T: T.ones(3, 3).rot90(1, [0, 1, 0]),
        RuntimeError,
        "expected total rotation dims == 2",
    ),
    (
        "broadcast_tensors_shape",
        lambda T: T.broadcast_tensors(T.ones(2), T.ones(3)),
        RuntimeError,
        "The size of tensor a (2) must match the size of tensor b (3)",
    ),
    (
        "broadcast_shapes_clash",
        lambda T: T.broadcast_shapes((2,), (3,)),
        RuntimeError,
        "Attempting to broadcast a dimension of length 3 at -1! Mismatching argument at index 1",
    ),
    (
        "meshgrid_indexing",
        lambda T: T.meshgrid(T.ones(2), indexing="yx"),
        RuntimeError,
        "indexing must be one of",
    ),
    (
        "meshgrid_2d",
        lambda T: T.meshgrid(T.ones(2, 2), indexing="ij"),
        RuntimeError,
        "Expected 0D or 1D tensor in the tensor list",
    ),
    (
        "cartesian_prod_2d",
        lambda T: T.cartesian_prod(T.ones(2, 2), T.ones(2)),
        RuntimeError,
        "Expect a 1D vector",
    ),
    (
        "combinations_2d",
        lambda T: T.combinations(T.ones(2, 2)),
        RuntimeError,
        "Expect a 1D vector, but got shape [2, 2]",
    ),
    (
        "block_diag_3d",
        lambda T: T.block_diag(T.ones(2), T.ones(1, 1, 1)),
        RuntimeError,
        "Input tensors must have 2 or fewer dimensions. Input 1 has 3 dimensions",
    ),
    (
        "diff_0d",
        lambda T: T.tensor(1.0).diff(),
        RuntimeError,
        "diff expects input to be at least one-dimensional",
    ),
    (
        "diff_negative_n",
        lambda T: T.ones(3).diff(-1),
        RuntimeError,
        "order must be non-negative but got -1",
    ),
    (
        "sum_to_size_bad",
        lambda T: T.ones(2, 3).sum_to_size(2),
        RuntimeError,
        "is not expandable to size",
    ),
    (
        "tensordot_mismatch",
        lambda T: T.tensordot(T.ones(2, 3), T.ones(2, 3), 1),
        RuntimeError,
        "contracted dimensions need to match",
    ),
    (
        "tensordot_lists",
        lambda T: T.tensordot(T.ones(2, 3), T.ones(3, 2), ([1], [0, 1])),
        RuntimeError,
        "both dimension lists should have same length",
    ),
    (
        "inner_mismatch",
        lambda T: T.inner(T.ones(2), T.ones(3)),
        RuntimeError,
        "inner() the last dimension must match on both input tensors",
    ),
    (
        "vdot_2d",
        lambda T: T.vdot(T.ones(2, 2), T.ones(2, 2)),
        RuntimeError,
        "1D tensors expected, but got 2D and 2D tensors",
    ),
    (
        "vdot_dtype",
        lambda T: T.vdot(T.ones(2), T.ones(2).double()),
        RuntimeError,
        "expected both vectors to have same dtype",
    ),
    (
        "addmv_sizes",
        lambda T: T.addmv(T.ones(2), T.ones(2, 3), T.ones(4)),
        RuntimeError,
        "size mismatch",
    ),
    (
        "addr_2d",
        lambda T: T.addr(T.ones(2, 2), T.ones(2, 1), T.ones(2)),
        RuntimeError,
        "addr: Expected 1-D argument vec1, but got 2-D",
    ),
    (
        "addbmm_batches",
        lambda T: T.addbmm(T.ones(2, 2), T.ones(3, 2, 1), T.ones(2, 1, 2)),
        RuntimeError,
        "batch1 and batch2 must have same number of batches, got 3 and 2",
    ),
    (
        "pixel_shuffle_channels",
        lambda T: T.pixel_shuffle(T.ones(1, 3, 2, 2), 2),
        RuntimeError,
        "is not divisible by 4",
    ),
    (
        "pixel_shuffle_2d",
        lambda T: T.pixel_shuffle(T.ones(4, 2), 2),
        RuntimeError,
        "pixel_shuffle expects input to have at least 3 dimensions",
    ),
    (
        "pixel_unshuffle_width",
        lambda T: T.pixel_unshuffle(T.ones(1, 1, 4, 3), 2),
        RuntimeError,
        "pixel_unshuffle expects width to be divisible by downscale_factor",
    ),
    (
        "bucketize_2d",
        lambda T: T.bucketize(T.ones(2), T.ones(2, 2)),
        RuntimeError,
        "boundaries tensor must be 1 dimension",
    ),
    (
        "searchsorted_side",
        lambda T: T.searchsorted(T.ones(2), T.ones(2), side="middle"),
        RuntimeError,
        "side can only be 'left' or 'right'",
    ),
    (
        "searchsorted_opposites",
        lambda T: T.searchsorted(T.ones(2), T.ones(2), side="left", right=True),
        RuntimeError,
        "side and right can't be set to opposites",
    ),
    (
        "scatter_reduce_float_index",
        lambda T: _x43(T).scatter_reduce(0, _ix(T).float(), T.ones(2, 3), "sum"),
        RuntimeError,
        "scatter(): Expected dtype int32/int64 for index",
    ),
]


@pytest.mark.parametrize("fn, exc, phrase", [e[1:] for e in ERRORS], ids=[e[0] for e in ERRORS])
def test_error_matches_torch(torch, fn, exc, phrase):
    from differential import same_error

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        same_error(fn, torch, phrase)
    with pytest.raises(exc):
        fn(ad)


# ---------------------------------------------------------------------------------------------
# Gradients PyTorch refuses
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("src", [True, False], ids=["src", "value"])
def test_scatter_reduce_argument_has_no_derivative(torch, src):
    from differential import names, same_error

    def graph(T):
        x = T.ones(4, 3, requires_grad=True)
        s = T.ones(2, 3, requires_grad=True) if src else 2.0
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return x.scatter(0, _ix(T), s, reduce="multiply")

    assert names(graph(ad).grad_fn) == names(graph(torch).grad_fn)
    same_error(lambda T: graph(T).sum().backward(), torch, "derivative for aten::scatter")


def test_scatter_reduce_max_alias_backward_refused(torch):
    from differential import same_error

    def run(T):
        x = T.ones(3, requires_grad=True)
        x.scatter_reduce(0, T.tensor([1]), T.ones(1), "max").sum().backward()

    same_error(run, torch, "Expected 'reduce' to be one of 'sum', 'prod', 'mean', 'amax', 'amin'")


def test_scatter_src_larger_than_index_has_no_gradient(torch):
    """PyTorch's src gradient is ``grad.gather(dim, index)``: the index's shape, which its
    engine refuses for a larger src. So does ours, in its words."""
    from differential import same_error

    ops = [
        (lambda T, x, i, s: x.scatter(1, i, s), "ScatterBackward0 returned an invalid gradient"),
        (lambda T, x, i, s: x.scatter_add(1, i, s), "ScatterAddBackward0 returned an invalid"),
        (lambda T, x, i, s: x.scatter_reduce(1, i, s, "mean"), "got [4, 1] but expected"),
        (lambda T, x, i, s: x.scatter_reduce(1, i, s, "amin"), "size of tensor a (5) must"),
    ]
    for op, phrase in ops:

        def run(T, op=op):
            x = T.ones(4, 3, requires_grad=True)
            s = T.ones(5, 4, requires_grad=True)
            op(T, x, T.tensor([[2], [0], [1], [2]]), s).sum().backward()

        same_error(run, torch, phrase)


def test_scatter_tensor_src_reduce_warns_once():
    """PyTorch's deprecation warning for ``scatter(src, reduce=...)`` is a TORCH_WARN_ONCE."""
    import subprocess
    import sys

    code = textwrap.dedent(
        """\
        import warnings
        import autodiag as T
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            for _ in range(2):
                T.zeros(3).scatter(0, T.tensor([1]), T.ones(1), reduce="add")
        print(len(w), w[0].filename == "<string>", *str(w[0].message).split()[:5])
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["1", "True", "The", "reduce", "argument", "of", "torch.scatter"]


# ---------------------------------------------------------------------------------------------
# In place: version counters, saved tensors, views
# ---------------------------------------------------------------------------------------------

INPLACE = [
    ("index_add_", lambda T, y: y.index_add_(0, T.tensor([1]), T.ones(1, 3))),
    ("index_copy_", lambda T, y: y.index_copy_(0, T.tensor([1]), T.ones(1, 3))),
    ("index_fill_", lambda T, y: y.index_fill_(1, T.tensor([1]), 0.5)),
    ("index_put_", lambda T, y: y.index_put_((T.tensor([1]),), T.ones(3))),
    ("scatter_", lambda T, y: y.scatter_(0, _ix(T)[:, :1], T.ones(2, 1))),
    ("scatter_add_", lambda T, y: y.scatter_add_(0, _ix(T), T.ones(2, 3))),
    ("scatter_reduce_", lambda T, y: y.scatter_reduce_(0, _ix(T), T.ones(2, 3), "prod")),
    ("masked_scatter_", lambda T, y: y.masked_scatter_(y > 0, T.ones(12))),
    ("put_", lambda T, y: y.put_(T.tensor([4]), T.ones(1))),
]


@pytest.mark.parametrize("fn", [f for _, f in INPLACE], ids=[n for n, _ in INPLACE])
def test_inplace_on_saved_tensor_fails_at_backward(torch, fn):
    """``y = x.exp()`` saves its result: writing into it in place fails the backward's version
    check, in PyTorch's words."""
    from differential import same_error

    def run(T):
        x = _x43(T).div(10).requires_grad_()
        y = x.exp()
        before = y._version
        fn(T, y)
        assert y._version == before + 1
        y.sum().backward()

    same_error(
        run, torch, "modified by an inplace operation", "is at version 1; expected version 0"
    )


@pytest.mark.parametrize("fn", [f for _, f in INPLACE], ids=[n for n, _ in INPLACE])
def test_inplace_through_a_view_writes_the_base(torch, fn):
    from differential import assert_same

    def run(T):
        x = _x43(T).div(10).requires_grad_()
        base = x * 1
        view = base[:, :].view(4, 3)
        fn(T, view)
        (base * base).sum().backward()
        return base, base.grad_fn.name(), view.grad_fn.name(), base._version, x.grad

    assert_same(run(ad), run(torch))


@pytest.mark.parametrize("fn", [f for _, f in INPLACE], ids=[n for n, _ in INPLACE])
def test_inplace_on_leaf_refused(torch, fn):
    from differential import same_error

    same_error(lambda T: fn(T, T.ones(4, 3, requires_grad=True)), torch, "a leaf Variable")


VIEWS = [
    ("ravel", lambda T, x: x.ravel()),
    ("hsplit", lambda T, x: x.hsplit(2)[1]),
    ("vsplit", lambda T, x: T.vsplit(x, [1])[1]),
    ("tensor_split", lambda T, x: x.tensor_split(3, 1)[2]),
    ("split_with_sizes", lambda T, x: x.split_with_sizes([3, 1])[0]),
    ("atleast_3d", lambda T, x: T.atleast_3d(x)),
    ("meshgrid", lambda T, x: T.meshgrid(x[0], x[1], indexing="ij")[0]),
    ("broadcast_tensors", lambda T, x: T.broadcast_tensors(x[:1], x)[0]),
]


@pytest.mark.parametrize("fn", [f for _, f in VIEWS], ids=[n for n, _ in VIEWS])
def test_views_share_memory_and_version(torch, fn):
    """A view in PyTorch is one here: a write into the base shows through it, and the two
    share a version counter."""
    from differential import assert_same

    def run(T):
        x = T.arange(16.0).view(4, 4)
        v = fn(T, x)
        before = v._version
        x.mul_(2)
        return v.clone(), v._base is x, v._version - before, v.is_contiguous()

    assert_same(run(ad), run(torch))


def test_ravel_write_reaches_the_base(torch):
    from differential import assert_same

    def run(T):
        x = T.zeros(2, 3)
        x.ravel()[4] = 7.0
        y = x.t().ravel()  # not contiguous: a copy, as in PyTorch
        y[0] = 5.0
        return x, y._base is None

    assert_same(run(ad), run(torch))


INPLACE_VIEWS = [
    ("t_", lambda y: y.t_()),
    ("transpose_", lambda y: y.transpose_(0, 1)),
    ("swapaxes_", lambda y: y.swapaxes_(0, 1)),
    ("squeeze_", lambda y: y.squeeze_()),
    ("unsqueeze_", lambda y: y.unsqueeze_(0)),
]


@pytest.mark.parametrize("fn", [f for _, f in INPLACE_VIEWS], ids=[n for n, _ in INPLACE_VIEWS])
def test_inplace_view_ops_bump_the_version(torch, fn):
    """The shape changes in place: the same tensor, its version bumped, and a tensor saved for
    backward before then fails the check; on a leaf that requires grad, PyTorch's error."""
    from differential import same_error

    for T in (ad, torch):
        y = T.ones(3, 2) * 1
        assert fn(y) is y and y._version == 1

    def saved(T):
        x = T.ones(3, 2, requires_grad=True)
        y = x.exp()
        fn(y)
        y.sum().backward()

    same_error(saved, torch, "modified by an inplace operation")
    same_error(lambda T: fn(T.ones(3, 2, requires_grad=True)), torch, "a leaf Variable")


def test_inplace_view_op_on_a_view_that_requires_grad_is_refused():
    x = ad.ones(3, 2, requires_grad=True) * 1
    with pytest.raises(NotImplementedError, match="t_: an in-place view op"):
        x[0:2].t_()
    v = ad.ones(3, 2)[1:]
    assert v.t_().shape == (2, 2) and v._version == 1  # no gradient: allowed


def test_cli_expression_takes_the_products(tmp_path):
    r = cli(
        "graph",
        "-e",
        "sum(kron(x, y)) + inner(x, y) + vdot(x, y)",
        "--var",
        "x=[1,2]",
        "--var",
        "y=[3,4]",
        "-f",
        "json",
    )
    assert r.exit_code == 0, r.stdout + r.stderr
    names = {n["name"] for n in json.loads(r.stdout)["nodes"]}
    assert {"VdotBackward0", "DotBackward0", "UnsafeViewBackward0"} <= names, names


def test_index_put_torch_function_is_inplace(torch):
    for T in (ad, torch):
        x = T.zeros(3)
        out = T.index_put_(x, (T.tensor([1]),), T.tensor(5.0))
        assert out is x and x.tolist() == [0.0, 5.0, 0.0] and x._version == 1


# ---------------------------------------------------------------------------------------------
# Through the CLI: an ``import torch`` script
# ---------------------------------------------------------------------------------------------


def test_cli_graph_names_the_indexing_nodes(tmp_path):
    script = tmp_path / "net.py"
    script.write_text(
        textwrap.dedent(
            """\
            import torch


            class Pool:
                def __call__(self, h, batch):
                    out = torch.zeros(2, h.shape[1])
                    return out.index_add(0, batch, h)


            def main():
                x = torch.ones(4, 3, requires_grad=True)
                batch = torch.tensor([0, 0, 1, 1])
                pooled = Pool()(x * 2, batch)
                idx = torch.tensor([[0, 1, 0]])
                s = pooled.scatter_add(0, idx, x[:1]).scatter_reduce(0, idx, x[1:2], "amax")
                picked = x.masked_select(x > 0).sum() + x.take(torch.tensor([0, 5])).sum()
                loss = s.sum() + picked + x.index_put((torch.tensor([1]),), x[0]).sum()
                loss.backward()
                print(x.grad.sum().item())


            main()
            """
        )
    )
    r = cli("graph", str(script), "-f", "json")
    assert r.exit_code == 0, r.stdout + r.stderr
    names = {n["name"] for n in json.loads(r.stdout)["nodes"]}
    want = {
        "IndexAddBackward0",
        "ScatterAddBackward0",
        "ScatterReduceBackward0",
        "MaskedSelectBackward0",
        "TakeBackward0",
        "IndexPutBackward0",
    }
    assert want <= names, names


def test_indexing_ops_need_no_torch():
    """The values on autodiag alone (a run that cannot skip)."""
    x = ad.tensor([[1.0, -2.0], [3.0, 0.0]], requires_grad=True)
    y = x.scatter_add(0, ad.tensor([[1, 1]]), ad.tensor([[10.0, 20.0]]))
    assert _np(y).tolist() == [[1.0, -2.0], [13.0, 20.0]]
    y.sum().backward()
    assert _np(x.grad).tolist() == [[1.0, 1.0], [1.0, 1.0]]


def test_index_add_saves_source_as_pytorch():
    """PyTorch saves ``source`` when it needs a gradient (listed in the graph's saved tensors,
    version-checked at backward); not when it does not."""
    torch = pytest.importorskip("torch")
    seen = {}
    for T in (torch, ad):
        idx = T.tensor([0, 0, 1])
        src = T.ones(3, 2, requires_grad=True)
        s = T.zeros(3, 2, requires_grad=True)
        n = s.index_add(0, idx, src * 1, alpha=2).grad_fn
        facts = [n._saved_source_dim, n._saved_alpha, n._saved_dim, tuple(n._saved_source.shape)]
        facts.append(s.index_add(0, idx, src.detach()).grad_fn._saved_source is None)
        m = src * 1
        y = s.index_add(0, idx, m)
        with T.no_grad():
            m.add_(1)
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            y.sum().backward()
        seen[T.__name__] = facts
    assert seen["autodiag"] == seen["torch"]
