"""What public PyTorch programs (tutorials, micrograd's tests, minGPT, nanoGPT, pytorch/examples)
needed when run unchanged under the alias, against PyTorch (the oracle): comparisons with
``None`` (nanoGPT forks' ``assert probs != None``), ``torch.cuda.amp`` / ``torch.amp`` on a
machine without CUDA (minGPT's ``@autocast()`` forwards), and the gradient-health verdict on a
transformer's attention key bias (zero in exact arithmetic: not a vanishing gradient)."""

from __future__ import annotations

import json
import math
import textwrap
import warnings

import numpy as np
import pytest
from cli_helpers import cli

import autodiag as ad
from autodiag.analysis.health import GradHealth
from autodiag.trace import tracing

torch = pytest.importorskip("torch")


def both():
    return [("torch", torch), ("autodiag", ad)]


# --- comparisons with what is not a tensor, a number or an array ------------------------------

OPERANDS = [None, [1.0, 1.0, 1.0], (1,), "a", object()]
COMPARISONS = ["==", "!=", "<", "<=", ">", ">="]


def _compare(T, op: str, other, reflected: bool):
    t = T.ones(3)
    expr = f"other {op} t" if reflected else f"t {op} other"
    try:
        r = eval(expr, {"t": t, "other": other})  # noqa: S307 - fixed operator strings
    except Exception as e:  # noqa: BLE001 - the exception type is what is compared
        return ("raises", type(e).__name__)
    if isinstance(r, (T.Tensor,)):
        return ("tensor", r.tolist())
    return (type(r).__name__, r)


@pytest.mark.parametrize("reflected", [False, True])
@pytest.mark.parametrize("op", COMPARISONS)
@pytest.mark.parametrize("other", OPERANDS, ids=["None", "list", "tuple", "str", "object"])
def test_comparison_with_a_non_tensor_operand_falls_back_as_torch(op, other, reflected):
    # PyTorch returns NotImplemented: == / != fall back to identity (a bool), < raises TypeError
    assert _compare(ad, op, other, reflected) == _compare(torch, op, other, reflected)


@pytest.mark.parametrize(
    "other", [1, 1.0, True, np.float64(1.0), np.ones(3)], ids=["int", "float", "bool", "np", "arr"]
)
@pytest.mark.parametrize("op", COMPARISONS)
def test_comparison_with_numbers_and_arrays_stays_elementwise(op, other):
    assert _compare(ad, op, other, False) == _compare(torch, op, other, False)


def test_assert_probs_is_not_none_as_nanogpt_forks_write_it():
    for _, T in both():
        probs = T.softmax(T.tensor([[1.0, 2.0], [0.5, 0.1]]), dim=-1)
        assert (probs != None) is True  # noqa: E711 - the spelling under test
        assert (probs == None) is False  # noqa: E711


# --- torch.amp / torch.cuda.amp without CUDA ---------------------------------------------------


def _warned(fn):
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        out = fn()
    return out, sorted((x.category.__name__, str(x.message)) for x in w)


def test_cuda_autocast_is_disabled_with_torchs_warnings_and_numbers():
    results = {}
    for name, T in both():

        def run(T=T):
            lin = T.nn.Linear(3, 2)
            with T.no_grad():
                lin.weight.copy_(T.tensor([[0.1, -0.2, 0.3], [0.4, 0.5, -0.6]]))
                lin.bias.fill_(0.25)

            @T.cuda.amp.autocast()
            def forward(x):
                return lin(x)

            x = T.tensor([[1.0, 2.0, 3.0]])
            with T.autocast("cuda", dtype=T.float16):
                y = forward(x) * 2
            with T.amp.autocast("cuda", enabled=False):
                z = lin(x)
            return y.dtype == T.float32, y.tolist(), z.tolist()

        results[name] = _warned(run)
    assert results["autodiag"] == results["torch"]


def test_disabled_grad_scaler_is_a_pass_through_as_torch():
    results = {}
    for name, T in both():

        def run(T=T):
            w = T.tensor([1.0, -2.0], requires_grad=True)
            opt = T.optim.SGD([w], lr=0.1)
            scaler = T.cuda.amp.GradScaler(enabled=True)  # no CUDA: disabled
            scaler2 = T.amp.GradScaler("cuda", enabled=False)
            loss = (w * w).sum()
            scaled = scaler.scale(loss)
            scaled.backward()
            scaler.unscale_(opt)
            stepped = scaler.step(opt)
            scaler.update()
            scaler2.load_state_dict({})  # a no-op on a disabled scaler
            return (
                scaled is loss,
                stepped,
                scaler.is_enabled(),
                scaler.get_scale(),
                scaler.state_dict(),
                w.tolist(),
            )

        results[name] = _warned(run)
    assert results["autodiag"] == results["torch"]


def test_cpu_autocast_and_an_enabled_cpu_scaler_are_refused_by_name():
    # PyTorch would compute in bfloat16 / scale the loss: autodiag says so instead of ignoring it
    with pytest.raises(NotImplementedError, match=r"autocast\(device_type='cpu'\)"):
        ad.autocast("cpu", dtype=ad.float32)
    with pytest.raises(NotImplementedError, match=r"GradScaler\(device='cpu'\)"):
        ad.amp.GradScaler("cpu")
    with ad.autocast("cpu", enabled=False):  # disabled: nothing to refuse
        pass


def test_torch_cuda_amp_imports_under_the_alias(tmp_path):
    script = tmp_path / "amp_script.py"
    script.write_text(
        textwrap.dedent(
            """\
            import warnings
            warnings.simplefilter("ignore")
            import torch
            from torch.cuda.amp import autocast, GradScaler
            from torch.amp import GradScaler as G2

            @autocast()
            def f(x):
                return (x * x).sum()

            x = torch.tensor([1.0, 2.0], requires_grad=True)
            y = f(x)
            GradScaler(enabled=True).scale(y).backward()
            print("grad", x.grad.tolist(), G2 is torch.amp.GradScaler)
            """
        )
    )
    import contextlib
    import io

    from autodiag.run import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main([str(script)])
    assert code in (0, None) and out.getvalue().strip() == "grad [2.0, 4.0] True"


# --- gradient health: the attention key bias is zero, not vanishing ---------------------------

ATTENTION = """\
import math
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

class SelfAttention(nn.Module):
    # minGPT's CausalSelfAttention, in short: key, query and value projections with biases
    def __init__(self, C=16, T=8, H=2):
        super().__init__()
        self.key, self.query, self.value = nn.Linear(C, C), nn.Linear(C, C), nn.Linear(C, C)
        self.proj = nn.Linear(C, C)
        self.register_buffer("mask", torch.tril(torch.ones(T, T)).view(1, 1, T, T))
        self.n_head = H

    def forward(self, x):
        B, T, C = x.size()
        k = self.key(x).view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = self.query(x).view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = self.value(x).view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.mask[:, :, :T, :T] == 0, float("-inf"))
        y = F.softmax(att, dim=-1) @ v
        return self.proj(y.transpose(1, 2).contiguous().view(B, T, C))

torch.manual_seed(0)
model = SelfAttention().to(DTYPE)
x = torch.tensor(np.random.RandomState(0).randn(4, 8, 16)).to(DTYPE)
target = torch.tensor(np.random.RandomState(1).randn(4, 8, 16)).to(DTYPE)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
for _ in range(STEPS):
    loss = F.mse_loss(model(x), target)
    opt.zero_grad()
    loss.backward()
    opt.step()
key_bias_grad = model.key.bias.grad.norm().item()
query_bias_grad = model.query.bias.grad.norm().item()
"""


def _attention(T, dtype: str, steps: int = 4) -> dict:
    ns = {"__name__": "__main__"}
    src = ATTENTION.replace("DTYPE", f"torch.{dtype}").replace("STEPS", str(steps))
    if T is torch:
        exec(src, ns)  # noqa: S102 - the oracle runs the same program
        return ns
    from autodiag.torch_alias import torch_alias

    with torch_alias(), tracing(GradHealth()) as health:
        exec(src, ns)  # noqa: S102
    ns["findings"] = [f.to_json() for f in health.findings(ns)]
    return ns


def test_the_key_bias_gradient_is_zero_in_exact_arithmetic_per_torch():
    # the oracle: in float64 the key bias's gradient is ~1e-19 while the query bias's is ~1e-2;
    # in float32 it is the rounding noise of a cancelling sum, ~1e-10
    t64 = _attention(torch, "float64")
    assert t64["key_bias_grad"] < 1e-15 < 1e-3 < t64["query_bias_grad"]
    t32 = _attention(torch, "float32")
    assert t32["key_bias_grad"] < 1e-7  # under the vanishing threshold: the false alarm's cause


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_check_does_not_call_the_key_bias_gradient_vanishing(dtype):
    ad_run = _attention(ad, dtype)
    assert ad_run["key_bias_grad"] < 1e-7  # what the detector saw
    assert [f for f in ad_run["findings"] if f["kind"] == "vanishing_grad"] == []


def test_a_bias_whose_incoming_gradient_is_tiny_is_still_vanishing():
    # the same kind of node (a bias added) with a gradient that is small because what reaches
    # the layer is small: a true finding
    src = textwrap.dedent(
        """\
        import autodiag as torch
        w = torch.ones(3, 2, requires_grad=True)
        b = torch.zeros(2, requires_grad=True)
        x = torch.ones(5, 3)
        opt = torch.optim.SGD([w, b], lr=0.1)
        for _ in range(3):
            opt.zero_grad()
            (torch.addmm(b, x, w) * 1e-9).sum().backward()
            opt.step()
        """
    )
    ns: dict = {}
    with tracing(GradHealth()) as health:
        exec(compile(src, "snippet.py", "exec"), ns)  # noqa: S102
    vanishing = {f.to_json()["parameter"] for f in health.findings(ns)}
    assert {"w", "b"} <= vanishing
    assert math.isclose(ns["b"].grad.norm().item(), 5e-9 * math.sqrt(2), rel_tol=1e-6)


def test_check_on_a_mingpt_style_script_reports_no_vanishing_grad(tmp_path):
    script = tmp_path / "attn.py"
    script.write_text(ATTENTION.replace("DTYPE", "torch.float32").replace("STEPS", "3"))
    r = cli("check", str(script), "--format", "json")
    doc = json.loads(r.stdout)
    assert [f["kind"] for f in doc["findings"]] == [] and r.exit_code == 0, r.stdout


def test_an_empty_parameter_kept_for_its_device_is_not_a_none_grad():
    # pytorch/examples time_sequence_prediction: ``self.dummy_param = nn.Parameter(torch.empty(0))``
    # only to read ``.device``; torch trains the model with it (LBFGS), nothing to learn in it
    src = textwrap.dedent(
        """\
        import autodiag as torch
        class Seq(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.linear = torch.nn.Linear(2, 1)
                self.dummy_param = torch.nn.Parameter(torch.empty(0))
                self.unused = torch.nn.Parameter(torch.zeros(3))
            def forward(self, x):
                return self.linear(x.to(self.dummy_param.device))
        seq = Seq()
        opt = torch.optim.SGD(seq.parameters(), lr=0.1)
        for _ in range(2):
            opt.zero_grad()
            seq(torch.ones(4, 2)).sum().backward()
            opt.step()
        """
    )
    ns: dict = {}
    with tracing(GradHealth()) as health:
        exec(compile(src, "snippet.py", "exec"), ns)  # noqa: S102
    none_grad = [f.to_json()["parameter"] for f in health.findings(ns) if f.kind == "none_grad"]
    assert none_grad == ["seq.unused"]  # a parameter with elements is still reported
    p = torch.nn.Parameter(torch.empty(0))
    assert p.requires_grad and p.numel() == 0  # the oracle: a trainable parameter, no elements


def test_growth_of_a_gradient_that_is_only_rounding_noise_is_not_exploding():
    # the tutorials' polynomial_custom_function on ``--engine torch``: ``a`` of an odd fit gets
    # only the rounding noise of a cancelling sum (NOTE [Cancelled gradients]), which wandered
    # 1.8e-7 -> 1.7e-5 (4 strictly growing norms, 10x the first) under its floor, and was
    # called exploding on one engine and not the other
    from autodiag.analysis.health import Thresholds, _Norms

    th = Thresholds()
    noise, real = _Norms(), _Norms()
    for i, norm in enumerate([1.8e-7, 8.9e-8, 3.9e-7, 1.1e-6, 1.6e-6, 1.7e-5]):
        noise.add(norm, th, i, floor=6e-5)
        real.add(norm, th, i, floor=1e-9)
    assert noise.growth_at is None
    assert real.growth_at == 6  # the same series above its floor is growth


def test_polynomial_custom_function_has_no_finding_on_either_engine(tmp_path):
    torch = pytest.importorskip("torch")
    src = textwrap.dedent(
        """\
        import math
        import torch

        class LegendrePolynomial3(torch.autograd.Function):
            @staticmethod
            def forward(ctx, input):
                ctx.save_for_backward(input)
                return 0.5 * (5 * input ** 3 - 3 * input)

            @staticmethod
            def backward(ctx, grad_output):
                input, = ctx.saved_tensors
                return grad_output * 1.5 * (5 * input ** 2 - 1)

        x = torch.linspace(-math.pi, math.pi, 2000)
        y = torch.sin(x)
        a = torch.full((), 0.0, requires_grad=True)
        b = torch.full((), -1.0, requires_grad=True)
        c = torch.full((), 0.0, requires_grad=True)
        d = torch.full((), 0.3, requires_grad=True)
        for t in range(60):
            P3 = LegendrePolynomial3.apply
            y_pred = a + b * P3(c + d * x)
            loss = (y_pred - y).pow(2).sum()
            loss.backward()
            with torch.no_grad():
                for p in (a, b, c, d):
                    p -= 5e-6 * p.grad
                    p.grad = None
        """
    )
    path = tmp_path / "poly.py"
    path.write_text(src)
    for engine in ("autodiag", "torch"):
        r = cli("check", "--engine", engine, "-f", "json", str(path))
        doc = json.loads(r.stdout)
        assert [f["kind"] for f in doc["findings"]] == [], (engine, doc["findings"])
        assert r.exit_code == 0
    assert torch.__version__  # the oracle engine ran


# --- the legacy constructor torch.Tensor(...) (pytorch/tutorials advanced_tutorial.py:
# torch.Tensor(1, n).fill_(-10000.)) ----------------------------------------------------------

LEGACY_SIZES = [(2, 3), (3,), (0,), (1, 5), ()]


@pytest.mark.parametrize("args", LEGACY_SIZES)
def test_legacy_tensor_constructor_sizes_as_torch(args):
    got = ad.Tensor(*args)
    want = torch.Tensor(*args)
    assert tuple(got.shape) == tuple(want.shape)
    assert str(got.dtype) == str(want.dtype)
    assert not got.requires_grad and got.grad_fn is None


def test_legacy_tensor_constructor_from_a_size_and_from_data_as_torch():
    for T in (torch, ad):
        assert tuple(T.Tensor(T.Size([2, 3])).shape) == (2, 3)
    for data in ([1, 2], (2, 3), [[1.5, 2.0]], []):
        np.testing.assert_array_equal(ad.Tensor(data).numpy(), torch.Tensor(data).numpy())
        assert str(ad.Tensor(data).dtype) == str(torch.Tensor(data).dtype)
    filled = [T.Tensor(1, 5).fill_(-10000.0) for T in (torch, ad)]
    np.testing.assert_array_equal(filled[0].numpy(), filled[1].numpy())


@pytest.mark.parametrize("args", [(2.5,), (True,), (-1,), (2, "a"), (2, 3.0)])
def test_legacy_tensor_constructor_errors_as_torch(args):
    with pytest.raises(Exception) as want:
        torch.Tensor(*args)
    with pytest.raises(Exception) as got:
        ad.Tensor(*args)
    assert type(got.value) is type(want.value)
    assert str(got.value) == str(want.value)


def test_legacy_tensor_constructor_of_a_tensor_is_an_alias_as_torch():
    for T in (torch, ad):
        ints = T.tensor([1, 2])
        a = T.Tensor(ints)
        assert str(a.dtype) == str(ints.dtype)  # no conversion to float
        a[0] = 7
        assert ints.tolist() == [7, 2]  # same storage
        x = T.tensor([1.0, 2.0], requires_grad=True)
        y = T.Tensor(x)
        assert type(y.grad_fn).__name__ == "AliasBackward0"
        (y * 3).sum().backward()
        assert x.grad.tolist() == [3.0, 3.0]


# --- torch.nn.parallel on a CPU-only PyTorch (pytorch/examples dcgan: `import torch.nn.parallel`,
# `nn.parallel.data_parallel` behind `input.is_cuda`) ------------------------------------------


def test_data_parallel_wrapper_runs_the_module_as_torch_on_cpu():
    outs = {}
    for name, T in both():
        T.manual_seed(0)
        inner = T.nn.Linear(3, 2)
        model = T.nn.DataParallel(inner)
        assert model.module is inner and model.device_ids == []
        assert list(model.state_dict()) == ["module.weight", "module.bias"]
        y = model(T.ones(4, 3))
        assert type(y.grad_fn).__name__ == "AddmmBackward0"
        y.sum().backward()
        outs[name] = (y.detach().numpy(), inner.weight.grad.numpy())
    for a, b in zip(outs["torch"], outs["autodiag"]):
        np.testing.assert_array_equal(a, b)
    assert ad.nn.parallel.DataParallel is ad.nn.DataParallel


def test_data_parallel_function_refuses_as_torch_on_cpu():
    for _, T in both():
        with pytest.raises(RuntimeError, match="device type could not be determined"):
            T.nn.parallel.data_parallel(T.nn.Linear(2, 1), T.ones(3, 2))
    with pytest.raises(NotImplementedError, match="DistributedDataParallel"):
        ad.nn.parallel.DistributedDataParallel(ad.nn.Linear(2, 1))


def test_import_torch_nn_parallel_works_under_the_alias(tmp_path):
    src = textwrap.dedent(
        """\
        import torch
        import torch.nn as nn
        import torch.nn.parallel

        torch.manual_seed(0)
        net = nn.Sequential(nn.Linear(3, 2))
        x = torch.ones(4, 3)
        out = net(x) if not x.is_cuda else nn.parallel.data_parallel(net, x, range(2))
        print(round(out.sum().item(), 6))
        """
    )
    path = tmp_path / "par.py"
    path.write_text(src)
    r = cli("graph", str(path))
    assert r.exit_code == 0, r.stdout
    assert "AddmmBackward0" in r.stdout


# --- Tensor.unfold (vision_transformer's patches), nn.init's deprecated spellings, torch.hub ---

UNFOLD_CASES = [
    ((2, 5, 3), (1, 2, 2)),  # non-overlapping, a remainder dropped
    ((2, 6, 3), (1, 3, 1)),  # overlapping windows: the gradient adds them up
    ((4, 7), (-1, 3, 2)),
    ((2, 3, 8, 8), (2, 4, 4)),  # vision_transformer: unfold(2, p, p).unfold(3, p, p)
    ((5,), (0, 0, 1)),
    ((), (0, 1, 1)),
]


@pytest.mark.parametrize("shape,args", UNFOLD_CASES)
def test_tensor_unfold_values_node_and_gradients_as_torch(shape, args):
    rng = np.random.default_rng(0)
    data = rng.standard_normal(shape).astype(np.float32)
    out = {}
    for name, T in both():
        x = T.tensor(data, requires_grad=True)
        y = x.unfold(*args)
        w = T.tensor(np.arange(y.numel(), dtype=np.float32).reshape(tuple(y.shape)))
        (g,) = T.autograd.grad((y * y * w).sum(), x, create_graph=True)
        (gg,) = T.autograd.grad((g * g).sum(), x)
        out[name] = (y.detach().numpy(), tuple(y.shape), y.grad_fn.name(), y._base is x, g, gg)
        out[name] = out[name][:4] + (g.detach().numpy(), gg.numpy(), type(g.grad_fn).__name__)
    t, a = out["torch"], out["autodiag"]
    np.testing.assert_array_equal(a[0], t[0])
    assert a[1:4] == t[1:4]
    np.testing.assert_allclose(a[4], t[4], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(a[5], t[5], rtol=1e-5, atol=1e-5)
    assert a[6] == t[6]


@pytest.mark.parametrize(
    "shape, args", [((6,), (0, 3, 1)), ((6,), (0, 4, 2)), ((3, 5), (1, 3, 1)), ((5, 2), (0, 2, 1))]
)
def test_overlapping_windows_read_after_their_base_is_written_sum_their_gradients(shape, args):
    # the view is stale after the write: its regenerated AsStridedBackward0 adds the gradient of
    # every window an element is in (was: one window's gradient, the others overwritten)
    out = []
    for _, T in both():
        x = T.arange(float(np.prod(shape)), dtype=T.float64).reshape(shape).requires_grad_()
        z = x * 1
        y = z.unfold(*args)
        z.mul_(2)
        w = T.arange(float(y.numel()), dtype=T.float64).reshape(y.shape)
        (y * w).sum().backward()
        out.append((y.tolist(), x.grad.tolist(), type(y.grad_fn).__name__))
    assert out[1] == out[0]


def test_an_in_place_op_on_overlapping_windows_is_refused_unless_torchs_result_is_ours():
    # PyTorch writes an element shared by k windows k times, each write reading the last one
    # (mul_(3) multiplies it up to 27 times): computed out of place that is not reproducible,
    # so refused (was: each element multiplied once, silently unlike PyTorch)
    x = ad.arange(6.0)
    with pytest.raises(NotImplementedError, match="mul_: the view written has elements that"):
        x.unfold(0, 3, 1).mul_(3)
    assert x.tolist() == list(range(6))  # nothing written
    with pytest.raises(NotImplementedError, match="copy_: the view written"):
        x.unfold(0, 3, 1).copy_(ad.arange(12.0).reshape(4, 3))
    # where every shared element keeps its value, or gets one value, PyTorch's result is ours
    for write in [
        lambda y, T: y.add_(0),
        lambda y, T: y.zero_(),
        lambda y, T: y.fill_(2),
        lambda y, T: y.copy_(T.ones(4, 3)),
        lambda y, T: y.__setitem__(slice(None), 5.0),
        lambda y, T: y.clamp_(-1, 100),
        lambda y, T: y[0].mul_(3),
        lambda y, T: T.arange(6.0).unfold(0, 2, 2).mul_(3),
    ]:
        out = []
        for _, T in both():
            x = T.arange(6.0)
            write(x.unfold(0, 3, 1), T)
            out.append(x.tolist())
        assert out[1] == out[0]


def test_tensor_unfold_is_a_view_and_saves_torchs_arguments():
    for _, T in both():
        x = T.arange(6.0)
        x.unfold(0, 2, 2)[1].fill_(-1.0)
        assert x.tolist() == [0.0, 1.0, -1.0, -1.0, 4.0, 5.0]
    xs = [T.zeros(2, 5, 3, requires_grad=True).unfold(1, 2, 2) for _, T in both()]
    for attr in ("self_sym_sizes", "dimension", "size", "step"):
        assert getattr(xs[1].grad_fn, f"_saved_{attr}") == getattr(xs[0].grad_fn, f"_saved_{attr}")


@pytest.mark.parametrize("args", [(0, 4, 1), (0, 2, 0), (0, -1, 1), (1, 1, 1)])
def test_tensor_unfold_errors_as_torch(args):
    errors = []
    for _, T in both():
        with pytest.raises((RuntimeError, IndexError)) as e:
            T.zeros(3).unfold(*args)
        errors.append((e.type, str(e.value)))
    assert errors[1] == errors[0]


@pytest.mark.parametrize(
    "name",
    [
        "uniform",
        "normal",
        "constant",
        "xavier_uniform",
        "xavier_normal",
        "kaiming_uniform",
        "kaiming_normal",
    ],
)
def test_deprecated_init_spellings_warn_and_fill_as_torch(name):
    args = (0.5,) if name == "constant" else ()
    out = []
    for _, T in both():
        T.manual_seed(0)
        w = T.empty(4, 3)
        with warnings.catch_warnings(record=True) as rec:
            warnings.simplefilter("always")
            r = getattr(T.nn.init, name)(w, *args)
        assert r is w
        msgs = [(x.category, str(x.message), x.filename) for x in rec]
        out.append((w.numpy().copy(), msgs))
    np.testing.assert_array_equal(out[1][0], out[0][0])
    assert out[1][1] == out[0][1]
    assert out[0][1][0][2] == __file__


def test_torch_hub_tqdm_imports_under_the_alias(tmp_path):
    import autodiag.hub

    assert autodiag.hub.tqdm.__name__ == torch.hub.tqdm.__name__
    path = tmp_path / "hub.py"
    path.write_text(
        textwrap.dedent(
            """\
            import torch
            from torch.hub import tqdm

            bar = tqdm(total=4)
            bar.update(2)
            x = torch.ones(2, requires_grad=True)
            (x * bar.n).sum().backward()
            print(x.grad.tolist())
            """
        )
    )
    r = cli("check", str(path))
    assert r.exit_code == 0, r.stdout
    assert "no findings" in r.stdout and "1 backward call" in r.stdout  # x.grad is 2, not 0


# --- nn.LazyLinear (d2l's concise chapters) --------------------------------------------------


def test_lazy_linear_materialises_in_place_with_torchs_numbers_and_becomes_linear():
    out = []
    for _, T in both():
        T.manual_seed(0)
        net = T.nn.Sequential(T.nn.Flatten(), T.nn.LazyLinear(5), T.nn.ReLU(), T.nn.LazyLinear(2))
        before = repr(net)
        params = list(net.parameters())
        kinds = [type(p).__name__ for p in params]
        opt = T.optim.SGD(net.parameters(), lr=0.1)  # built before the shapes are known
        x = T.arange(24.0).reshape(2, 3, 4) / 10
        loss = net(x).pow(2).sum()
        loss.backward()
        opt.step()
        after = [p.detach().numpy().copy() for p in net.parameters()]
        assert [p is q for p, q in zip(params, net.parameters())] == [True] * 4
        out.append(
            (
                before,
                repr(net),
                kinds,
                [type(p).__name__ for p in params],
                after,
                type(net[1]).__name__,
                loss.grad_fn.name(),
            )
        )
    t, a = out
    assert a[0] == t[0] and a[1] == t[1]
    assert a[2] == t[2] == ["UninitializedParameter"] * 4
    assert a[3] == t[3] == ["Parameter"] * 4
    for x, y in zip(a[4], t[4]):
        np.testing.assert_allclose(x, y, rtol=1e-6, atol=1e-7)
    assert a[5:] == t[5:]


def test_uninitialized_parameter_refuses_its_shape_as_torch():
    for _, T in both():
        p = T.nn.parameter.UninitializedParameter()
        assert repr(p) == "<UninitializedParameter>"
        assert T.nn.UninitializedParameter is T.nn.parameter.UninitializedParameter
        with pytest.raises(RuntimeError, match="Can't access the shape of an uninitialized"):
            _ = p.shape
        with pytest.raises(ValueError, match="Attempted to use an uninitialized parameter"):
            p.numel()
        fc = T.nn.LazyLinear(3, bias=False)
        assert fc.bias is None
        fc(T.ones(1, 2))
        assert tuple(fc.weight.shape) == (3, 2) and type(fc).__name__ == "Linear"


def test_a_checkpoint_loads_into_a_lazy_linear_before_its_first_forward():
    # PyTorch's _lazy_load_hook: load_state_dict materialises the lazy parameters from the
    # checkpoint's shapes (was: "Can't access the shape of an uninitialized parameter")
    out = []
    for _, T in both():
        T.manual_seed(0)
        src = T.nn.Sequential(T.nn.Linear(3, 2))
        net = T.nn.Sequential(T.nn.LazyLinear(2))
        saved = {k: type(v).__name__ for k, v in net.state_dict().items()}
        keys = str(net.load_state_dict(src.state_dict()))
        loaded = (
            repr(net),
            tuple(net[0].weight.shape),
            bool((net[0].weight == src[0].weight).all()),
        )
        y = net(T.ones(1, 3)).tolist()
        with pytest.raises(AssertionError, match="in_features inferred from input: 4 is not"):
            lazy = T.nn.LazyLinear(2)
            lazy.load_state_dict(src[0].state_dict())
            lazy(T.ones(1, 4))
        a, b = T.nn.LazyLinear(2), T.nn.LazyLinear(2)  # lazy into lazy: nothing to copy
        both_lazy = (str(b.load_state_dict(a.state_dict())), b.has_uninitialized_params())
        out.append((saved, keys, loaded, y, repr(net), both_lazy))
    t, a = out
    assert a == t
    assert t[0] == {"0.weight": "UninitializedParameter", "0.bias": "UninitializedParameter"}


def test_lazy_linear_runs_under_the_alias(tmp_path):
    path = tmp_path / "lazy.py"
    path.write_text(
        textwrap.dedent(
            """\
            import torch
            from torch import nn

            torch.manual_seed(0)
            net = nn.Sequential(nn.LazyLinear(4), nn.ReLU(), nn.LazyLinear(1))
            opt = torch.optim.SGD(net.parameters(), lr=0.1)
            for _ in range(3):
                opt.zero_grad()
                loss = net(torch.ones(8, 3)).pow(2).mean()
                loss.backward()
                opt.step()
            """
        )
    )
    r = cli("check", str(path))
    assert r.exit_code == 0, r.stdout
    assert "3 backward calls, 3 optimizer steps" in r.stdout
