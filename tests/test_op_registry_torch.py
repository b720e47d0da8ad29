"""An op is declared once: its registration (``ops/_core.register``) says where PyTorch has it,
and ``autodiag.*``, the Tensor methods, the in-place twins and the CLI's expression allow-list
derive from it. Differential: every registered op is reachable exactly where PyTorch has it."""

from __future__ import annotations

import inspect
import json

import pytest
from test_cli import cli

import autodiag as ad
from autodiag.ops import OPS, REGISTRY
from autodiag.target import expression

# ``torch.<name>`` for these is the ATen binding, whose arguments differ from
# ``torch.nn.functional.<name>``'s (``torch.embedding(weight, input)``, ``torch.dropout(input,
# p, train)`` without defaults, an int ``reduction``): exporting F's op under that name would
# be silently wrong, so ``autodiag.<name>`` does not exist.
ATEN_BINDINGS = {
    "binary_cross_entropy_with_logits",
    "dropout",
    "embedding",
    "layer_norm",
    "batch_norm",
}
ATEN_BINDINGS |= {"kl_div", "cosine_embedding_loss", "margin_ranking_loss"}  # int reduction


# ``torch.<name>`` ops whose name is an autodiag module (``autodiag.trace`` is the tracing API):
# the op is the Tensor method and, through the ``import torch`` alias, ``torch.<name>``.
SHADOWED = {"trace"}


def test_every_op_is_registered_once_with_one_record():
    assert list(OPS) == list(REGISTRY)
    assert all(OPS[n].op is REGISTRY[n] for n in OPS)


@pytest.mark.parametrize("name", sorted(OPS))
def test_registered_op_is_where_torch_has_it(torch, name):
    info = OPS[name]
    in_torch = hasattr(torch, name) and name not in ATEN_BINDINGS
    assert in_torch == (info.home == "torch"), f"torch.{name}: {in_torch}, registered {info}"
    assert hasattr(ad, name) == in_torch, f"autodiag.{name}"
    if in_torch and name in SHADOWED:
        from autodiag.torch_alias import torch_alias

        with torch_alias():
            import torch as aliased

            assert getattr(aliased, name) is info.op
    elif in_torch:
        assert getattr(ad, name) is info.op
    assert hasattr(torch.Tensor, name) == (info.method is not None), f"Tensor.{name}"
    assert hasattr(ad.Tensor, name) == (info.method is not None), f"autodiag Tensor.{name}"
    if info.home == "nn.functional":
        assert hasattr(torch.nn.functional, name)
        assert hasattr(ad.nn.functional, name)
    if name in ATEN_BINDINGS:
        assert hasattr(torch, name) and info.home == "nn.functional"


@pytest.mark.parametrize("name", sorted(n for n in OPS if OPS[n].inplace))
def test_declared_inplace_twin_is_torchs(torch, name):
    twin = OPS[name].inplace
    assert twin == name + "_" and hasattr(torch.Tensor, twin)
    assert getattr(ad.Tensor, twin).__name__ == twin
    x = ad.tensor([0.5, 0.25], dtype=ad.float64)
    if name in ("tril", "triu"):  # matrices only
        x = x.reshape(1, 2)
    if name in ("acosh", "arccosh"):  # defined from 1 up
        x = x + 1
    y = ad.tensor([1.0, 2.0], dtype=ad.float64)
    args = _cover16a_twin_args(name, y)  # cover16a's indexing and product ops
    if name in ("addr", "addbmm"):  # matrices only
        x = x.reshape(1, 2)
    args = {
        "clamp": (0.3,),
        "clip": (0.3,),
        "clamp_min": (0.3,),
        "clamp_max": (0.3,),
        "pow": (2,),
        "lerp": (ad.tensor([1.0, 2.0], dtype=ad.float64), 0.25),
        "masked_fill": (ad.tensor([True, False]), -1.0),
        "tril": (-1,),
        "triu": (1,),
        "atan2": (y,),
        "arctan2": (y,),
        "hypot": (y,),
        "xlogy": (y,),
        "addcmul": (y, y),
        "addcdiv": (y, y),
    }.get(
        name,
        args
        or (
            (2.0,)
            if OPS[name].method in ("add", "sub", "mul", "div", "subtract", "multiply", "divide")
            else ()
        ),
    )
    expected = getattr(ad, name)(x.clone(), *args)
    vc = x._version
    assert getattr(x, twin)(*args) is x
    assert x._version == vc + 1
    assert ad.equal(x, expected)


def _cover16a_twin_args(name, y) -> tuple:
    one, three = ad.tensor([1]), ad.tensor([3.0], dtype=ad.float64)
    return {
        "index_add": (0, one, three),
        "index_copy": (0, one, three),
        "index_fill": (0, one, -1.0),
        "index_put": ((one,), three),
        "masked_scatter": (ad.tensor([True, False]), y),
        "put": (one, three),
        "scatter": (0, one, three),
        "scatter_add": (0, one, three),
        "scatter_reduce": (0, ad.tensor([1, 1]), y, "prod"),
        "addmv": (ad.ones(2, 2, dtype=ad.float64), y),
        "addr": (ad.tensor([2.0], dtype=ad.float64), y),
        "addbmm": (ad.ones(3, 1, 2, dtype=ad.float64), ad.ones(3, 2, 2, dtype=ad.float64)),
    }.get(name, ())


def test_expression_functions_are_the_registered_pure_ops():
    assert expression.FUNCTIONS == tuple(sorted(n for n, i in OPS.items() if i.expr))
    for name in expression.FUNCTIONS:
        info = OPS[name]
        # expression mode evaluates untrusted text: no factory (random state), no in-place write
        assert info.home in ("torch", "nn.functional") and not name.endswith("_"), name
        assert inspect.unwrap(info.op).__module__ != "autodiag.ops.factories", name


@pytest.mark.parametrize(
    "expr", ["gelu(x)", "softplus(x, beta=2)", "leaky_relu(x, negative_slope=0.2)"]
)
def test_expression_calls_nn_functional_ops(expr):
    # allowed before, but evaluated as autodiag.<name>, which they are not (torch has no
    # torch.gelu): exit 3, "module 'autodiag' has no attribute 'gelu'"
    r = cli("graph", "-e", expr, "--var", "x=[-1.0, 2.0]", "-f", "json")
    assert r.exit_code == 0, r.stdout + r.stderr
    doc = json.loads(r.stdout)
    assert doc["status"] == "ok"
    name = expr.split("(")[0]
    want = {
        "gelu": "GeluBackward0",
        "softplus": "SoftplusBackward0",
        "leaky_relu": "LeakyReluBackward0",
    }[name]
    assert [n["name"] for n in doc["nodes"]][0] == want
