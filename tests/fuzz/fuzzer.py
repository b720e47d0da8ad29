"""A differential fuzzer of autodiag against PyTorch: generate, run, compare, shrink, classify.

A *program* is a list of input tensors (shape, dtype, values, requires_grad) and a list of steps;
a step is one line of Python over earlier names (``t3 = torch.maximum(x0, t1)``) drawn from the
op table in ``ops.py``. The same program runs on both libraries step by step (``torch`` bound to
autodiag, then to PyTorch, in lock-step); after each step value, dtype, shape, requires_grad,
grad_fn name, aliasing and exceptions are compared. Then the first gradients of every output that
requires grad w.r.t. every leaf (``autograd.grad(..., create_graph=True)``, weighted
grad_outputs) and the second gradients (the gradients of those weighted first gradients) are
compared the same way. The first difference is the program's verdict.

A failing program is shrunk (drop steps, inputs, requires_grad, dims, values) to a minimal one
with the same difference, and classified by the ops left and what differed (``relu | grad
value: nan vs 0``). An autodiag ``NotImplementedError`` that names the op, where PyTorch
succeeds, is a *refusal*: counted per op, not a difference.

Usage: ``tests/fuzz/run.py`` (long runs), ``tests/test_fuzz_torch.py`` (the CI budget).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field, replace

import numpy as np

try:
    from . import ops as _ops
except ImportError:  # run as a top-level module (tests/ on sys.path)
    import fuzz.ops as _ops  # type: ignore[no-redef]

OPS = _ops.OPS

# ---------------------------------------------------------------------------------------------
# Programs
# ---------------------------------------------------------------------------------------------

FLOAT_DTYPES = ("float32", "float64")
# Special values of each float dtype (denormal and large are scaled per dtype).
SPECIALS = {
    "float32": (0.0, -0.0, math.inf, -math.inf, math.nan, 1e-40, -1e-40, 1e30, -3e38),
    "float64": (0.0, -0.0, math.inf, -math.inf, math.nan, 1e-310, -1e-310, 1e300, -1e300),
}
TIED = (-1.0, 0.0, 1.0, 2.0, 0.5)
SCALARS = (0.0, -0.0, 1.0, -1.0, 2.5, 0.5, -3.0, 2.0)
SPECIAL_SCALARS = (math.inf, -math.inf, math.nan)


@dataclass(frozen=True)
class Input:
    name: str
    dtype: str  # "float32" | "float64" | "bool"
    values: np.ndarray  # float64 (short literals) or bool, in the input's shape
    requires_grad: bool
    vclass: str = "ordinary"  # ordinary | tied | special

    @property
    def shape(self) -> tuple:
        return self.values.shape


@dataclass(frozen=True)
class Step:
    op: str
    out: str
    code: str
    refs: tuple  # the pool names the code reads


@dataclass(frozen=True)
class Program:
    inputs: tuple
    steps: tuple
    seed: tuple = ()

    def ops(self) -> list[str]:
        return [s.op for s in self.steps]


def make_tensor(m, inp: Input):
    dtype = getattr(m, inp.dtype)
    if inp.values.size == 0:
        return m.empty(inp.shape, dtype=dtype, requires_grad=inp.requires_grad)
    return m.tensor(inp.values.tolist(), dtype=dtype, requires_grad=inp.requires_grad)


def lit(v) -> str:
    """Python source for a scalar literal (inf, nan, -0.0 included)."""
    if v is None or isinstance(v, (bool, np.bool_)):
        return repr(None if v is None else bool(v))
    if isinstance(v, (int, np.integer)):
        return repr(int(v))
    v = float(v)
    if math.isnan(v):
        return "float('nan')"
    if math.isinf(v):
        return "float('inf')" if v > 0 else "-float('inf')"
    return repr(v)


def _nested(a: np.ndarray) -> str:
    if a.ndim == 0:
        return lit(a.item())
    return "[" + ", ".join(_nested(x) for x in a) + "]"


def input_source(inp: Input) -> str:
    rg = ", requires_grad=True" if inp.requires_grad else ""
    if inp.values.size == 0:
        return f"{inp.name} = torch.empty({inp.shape!r}, dtype=torch.{inp.dtype}{rg})"
    return f"{inp.name} = torch.tensor({_nested(inp.values)}, dtype=torch.{inp.dtype}{rg})"


# ---------------------------------------------------------------------------------------------
# Generation (against a PyTorch pool, so that ops see real shapes)
# ---------------------------------------------------------------------------------------------


class GenFailed(Exception):
    """An op generator found nothing it can build here; another op is drawn."""


class Gen:
    """What op generators see: the random stream, the pool and helpers to pick arguments."""

    def __init__(self, torch, rng: np.random.Generator):
        self.torch = torch
        self.rng = rng
        self.dtype = str(rng.choice(FLOAT_DTYPES))
        self.inputs: list[Input] = []
        self.pool: dict = {}  # name -> torch tensor
        self.ns = {"torch": torch, "F": torch.nn.functional}

    # ---- shapes -------------------------------------------------------------------------------
    def shape(self, min_nd=0, max_nd=3, min_size=0) -> tuple:
        nd = int(self.rng.integers(min_nd, max_nd + 1))
        sizes = [0, 1, 2, 3, 2, 3, 4] if min_size == 0 else [1, 2, 3, 4]
        return (
            tuple(
                int(self.rng.choice(sizes)) if self.rng.random() > 0.1 or min_size else 0
                for _ in range(nd)
            )
            if nd
            else ()
        )

    def ndim(self, name) -> int:
        return self.pool[name].ndim

    def shape_of(self, name) -> tuple:
        return tuple(self.pool[name].shape)

    def size_at(self, name, d) -> int:
        shape = self.shape_of(name)
        if not shape:
            return 1
        return shape[d] if -len(shape) <= d < len(shape) else 1

    def dim(self, nd) -> int:
        """A dim for an nd tensor; rarely an invalid one (errors are compared too)."""
        if self.rng.random() < 0.03:
            return int(max(nd, 1)) if self.rng.random() < 0.5 else -int(max(nd, 1)) - 1
        if nd == 0:
            return int(self.rng.choice([0, -1]))
        return int(self.rng.integers(-nd, nd))

    def scalar(self):
        if self.rng.random() < 0.1:
            return float(self.rng.choice(SPECIAL_SCALARS))
        return float(self.rng.choice(SCALARS))

    lit = staticmethod(lit)

    # ---- values -------------------------------------------------------------------------------
    def values(self, shape, dtype) -> tuple[np.ndarray, str]:
        if dtype == "bool":
            return self.rng.random(shape) < 0.5, "ordinary"
        vclass = str(self.rng.choice(["ordinary", "ordinary", "tied", "special"]))
        a = np.round(self.rng.standard_normal(shape) * 2, 2)
        if vclass == "tied":
            a = self.rng.choice(TIED, shape)
        elif vclass == "special":
            mask = self.rng.random(shape) < 0.35
            a = np.where(mask, self.rng.choice(SPECIALS[dtype], shape), a)
        return np.asarray(a, dtype=np.float64), vclass

    def new(self, shape, kind="float", requires_grad=None) -> str:
        """A fresh input of this shape; its name."""
        name = f"x{len(self.inputs)}"
        if kind == "bool":
            dtype, rg = "bool", False
        else:
            dtype = (
                self.dtype
                if self.rng.random() > 0.08
                else ("float64" if self.dtype == "float32" else "float32")
            )
            rg = bool(self.rng.random() < 0.75) if requires_grad is None else requires_grad
        values, vclass = self.values(tuple(shape), dtype)
        inp = Input(name, dtype, values, rg, vclass)
        self.inputs.append(inp)
        self.pool[name] = make_tensor(self.torch, inp)
        return name

    # ---- picking ------------------------------------------------------------------------------
    def _floats(self, pred=None, inplace=False):
        torch = self.torch
        out = []
        for name, t in self.pool.items():
            try:
                if not t.is_floating_point() or (pred is not None and not pred(t)):
                    continue
                leaf_rg = t.is_leaf and t.requires_grad
            except RuntimeError:
                # a view PyTorch invalidated (a multi-output view's base modified in place):
                # even reading is_leaf raises, so no later step can use it
                continue
            if inplace and leaf_rg and self.rng.random() < 0.9:
                continue
            out.append(name)
        del torch
        return out

    def pick(self, pred=None, shape=None, inplace=False) -> str:
        """A float tensor of the pool satisfying pred, or a fresh input (shape, or drawn)."""
        names = self._floats(pred, inplace)
        if names and self.rng.random() > 0.15:
            # favour recent values: programs then compose rather than fan out from inputs
            weights = np.arange(1, len(names) + 1, dtype=float) ** 1.5
            return names[int(self.rng.choice(len(names), p=weights / weights.sum()))]
        if shape is None:
            for _ in range(30):
                shape = self.shape()
                if pred is None or pred(self.torch.empty(shape)):
                    break
            else:
                raise GenFailed
        return self.new(shape, requires_grad=False if inplace else None)

    def _bcast_variant(self, shape) -> tuple:
        s = [1 if self.rng.random() < 0.25 else d for d in shape]
        while s and self.rng.random() < 0.25:
            s.pop(0)
        if self.rng.random() < 0.1:
            s.insert(0, int(self.rng.integers(1, 3)))
        return tuple(s)

    def partner(self, x, how, kind="float", at=None) -> str:
        """A second argument for an op on x: from the pool if one fits, else a fresh input."""
        sx = self.shape_of(x)
        nd = len(sx)
        r = self.rng
        if how == "bcast":
            want, ok = self._bcast_variant(sx), lambda s: _broadcastable(s, sx)
        elif how == "within":
            want = self._bcast_variant(sx)[-nd:] if nd else ()
            want = tuple(w if w in (1, d) else d for w, d in zip(want, sx[-len(want) :]))
            ok = lambda s: _broadcastable(s, sx) and np.broadcast_shapes(s, sx) == sx
        elif how == "same":
            want, ok = sx, lambda s: s == sx
        elif how == "scalar_tensor":
            want, ok = (() if r.random() < 0.7 else (1,)), lambda s: s in ((), (1,))
        elif how == "vector":
            want, ok = self.shape(1, 1), lambda s: len(s) == 1
        elif how == "cat":
            d = at % nd if nd else 0
            want = sx[:d] + (int(r.integers(0, 3)),) + sx[d + 1 :]
            ok = lambda s: (
                len(s) == nd and all(a == b for i, (a, b) in enumerate(zip(s, sx)) if i != d)
            )
        elif how == "expand_target":
            want = tuple(int(r.integers(1, 4)) if d == 1 else d for d in sx)
            if r.random() < 0.4:
                want = (int(r.integers(0, 3)),) + want
            ok = lambda s: _broadcastable(sx, s) and np.broadcast_shapes(sx, s) == s
        elif how in ("matmul", "mm", "bmm", "mv"):
            k = sx[-1] if nd else 1
            m = int(r.choice([0, 1, 2, 3])) if r.random() > 0.1 else int(r.integers(1, 4))
            if how == "mv" or (how == "matmul" and r.random() < 0.3):
                want = (k,)
            elif how == "bmm":
                want = (sx[0] if nd else 1, k, m)
            elif how == "mm" or nd <= 2:
                want = (k, m)
            else:
                want = self._bcast_variant(sx[:-2]) + (k, m)
            ok = lambda s: s == want
        else:
            raise ValueError(how)
        if kind == "float":
            names = [n for n in self._floats() if ok(self.shape_of(n))]
            if names and r.random() < 0.5:
                return names[int(r.integers(len(names)))]
        return self.new(want, kind=kind)


def _broadcastable(a, b) -> bool:
    try:
        np.broadcast_shapes(a, b)
    except ValueError:
        return False
    return True


_OP_NAMES = sorted(n for n in OPS if n not in _ops.EXTENDED)  # by name or --extended only
_OP_WEIGHTS = np.array([OPS[n].weight for n in _OP_NAMES], dtype=float)
_OP_WEIGHTS /= _OP_WEIGHTS.sum()


def generate(torch, seed, max_steps=8, op_names=None) -> Program:
    """A random program (deterministic in seed), its steps checked to run on PyTorch's pool."""
    rng = np.random.default_rng(seed)
    g = Gen(torch, rng)
    names, weights = _OP_NAMES, _OP_WEIGHTS
    if op_names is not None:
        # from every op (EXTENDED ones too: they are drawn by name or with --extended)
        names = [n for n in sorted(OPS) if n in op_names]
        weights = np.array([OPS[n].weight for n in names], dtype=float)
        weights /= weights.sum()
    for _ in range(int(rng.integers(1, 4))):
        g.new(g.shape())
    steps = []
    n_steps = int(rng.integers(1, max_steps + 1))
    while len(steps) < n_steps:
        op = OPS[names[int(rng.choice(len(names), p=weights))]]
        try:
            code = op.gen(g)
        except GenFailed:
            continue
        out = f"t{len(steps)}"
        refs = tuple(n for n in list(g.pool) if _mentions(code, n))
        step = Step(op.name, out, code, refs)
        steps.append(step)
        ok, value = _exec(step, g.ns | g.pool, g.pool)
        if ok and isinstance(value, torch.Tensor):
            g.pool[out] = value
    return Program(tuple(g.inputs), tuple(steps), seed if isinstance(seed, tuple) else (seed,))


def _mentions(code: str, name: str) -> bool:
    import re

    return re.search(rf"\b{re.escape(name)}\b", code) is not None


# ---------------------------------------------------------------------------------------------
# Running one step
# ---------------------------------------------------------------------------------------------

_CODE_CACHE: dict = {}


def _compiled(code: str, mode: str):
    key = (code, mode)
    c = _CODE_CACHE.get(key)
    if c is None:
        if len(_CODE_CACHE) > 50_000:
            _CODE_CACHE.clear()
        c = _CODE_CACHE[key] = compile(code, "<fuzz>", mode)
    return c


def _exec(step: Step, ns: dict, pool: dict):
    """Run a step in namespace ns (pool names + torch/F); returns (ok, value or exception)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            if OPS[step.op].stmt:
                exec(_compiled(step.code, "exec"), ns)
                value = ns[step.refs[0]]
                pool[step.refs[0]] = value
            else:
                value = eval(_compiled(step.code, "eval"), ns)
        except Exception as e:  # noqa: BLE001 - exceptions are compared
            return False, e
    return True, value


# ---------------------------------------------------------------------------------------------
# Comparing
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Diff:
    stage: str  # forward | grad | grad2
    what: str  # value | dtype | shape | requires_grad | grad_fn | alias | exception | none | type
    detail: str
    op: str = ""  # the step's op (forward); the program's ops once classified
    where: str = ""  # the step's output name or the leaf's name

    def key(self) -> tuple:
        return (self.stage, self.what, self.detail, self.op if self.stage == "forward" else "")

    def describe(self) -> str:
        return f"{self.stage} {self.what}: {self.detail}"


TOL = {"float32": (1e-4, 1e-6), "float64": (1e-8, 1e-12), "float16": (1e-2, 1e-3)}


def _kind(v) -> str:
    if isinstance(v, (bool, np.bool_)):
        return str(bool(v))
    if np.issubdtype(type(v), np.integer):
        return "int"
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    if v == 0:
        return "-0" if math.copysign(1.0, v) < 0 else "0"
    return "finite"


def compare_arrays(a: np.ndarray, t: np.ndarray, dtype: str, scale: float) -> str | None:
    """None when equal (NaN-aware, signed zeros, dtype tolerance); else 'kind vs kind'."""
    if a.dtype.kind in "biu" or t.dtype.kind in "biu":
        bad = a != t
    else:
        rtol, atol = TOL.get(dtype, (1e-4, 1e-6))
        an, tn = np.isnan(a), np.isnan(t)
        with np.errstate(all="ignore"):
            close = np.abs(a - t) <= atol + rtol * (np.abs(t) + scale)
            exact = a == t
        zero = exact & (a == 0)
        signs = np.signbit(a) != np.signbit(t)
        inf = np.isinf(a) | np.isinf(t)
        bad = (an != tn) | (~an & ~tn & ((inf & ~exact) | (~inf & ~close) | (zero & signs)))
    if not bad.any():
        return None
    i = np.flatnonzero(bad)[0]
    ka, kt = _kind(a.reshape(-1)[i]), _kind(t.reshape(-1)[i])
    if ka == kt == "finite":
        return "different finite values"
    return f"{ka} vs {kt}"


def _dtype_name(dt) -> str:
    return str(dt).rsplit(".", 1)[-1]


def _scale(*arrays) -> float:
    s = 0.0
    for x in arrays:
        if x.dtype.kind == "f" and x.size:
            f = np.abs(x[np.isfinite(x)])
            if f.size:
                s = max(s, float(f.max()))
    return s


def compare_tensors(
    a, t, torch, ad, *, grad_fn=True, scale_from=(), tol_dtype=None
) -> tuple | None:
    """(what, detail) of the first difference between autodiag's a and torch's t, or None.

    Values are compared with the tolerance of t's dtype, or of ``tol_dtype`` when that is less
    precise (a float64 result computed from float32 values carries float32 rounding)."""
    if isinstance(t, torch.Tensor) != isinstance(a, ad.Tensor):
        return "type", f"{type(a).__name__} vs {type(t).__name__}"
    if not isinstance(t, torch.Tensor):
        if a != t and not (a != a and t != t):
            return "value", f"{a!r} vs {t!r}"
        return None
    if tuple(a.shape) != tuple(t.shape):
        # coarse, so that one bug over many shapes is one class
        if a.ndim != t.ndim:
            return "shape", f"{a.ndim}-d vs {t.ndim}-d"
        return "shape", "different sizes"
    if _dtype_name(a.dtype) != _dtype_name(t.dtype):
        return "dtype", f"{_dtype_name(a.dtype)} vs {_dtype_name(t.dtype)}"
    if a.requires_grad != t.requires_grad:
        return "requires_grad", f"{a.requires_grad} vs {t.requires_grad}"
    if grad_fn:
        na, nt = _grad_fn_name(a), _grad_fn_name(t)
        if na != nt:
            return "grad_fn", f"{na} vs {nt}"
    an = np.asarray(a.detach().numpy())
    tn = torch_array(t)
    dtype = _dtype_name(t.dtype)
    if tol_dtype is not None and TOL.get(tol_dtype, (0,))[0] > TOL.get(dtype, (0,))[0]:
        dtype = tol_dtype
    d = compare_arrays(an, tn, dtype, _scale(tn, *scale_from))
    return None if d is None else ("value", d)


def _grad_fn_name(x) -> str | None:
    """The class name of x's grad_fn; "Invalid" when reading it raises (a written view that
    PyTorch refuses to rebase), as PyTorch's repr says."""
    try:
        fn = x.grad_fn
    except RuntimeError:
        return "Invalid"
    return None if fn is None else type(fn).__name__


def torch_array(t) -> np.ndarray:
    """A PyTorch tensor's values as a numpy array.

    NOTE: PyTorch's second-order gradients can be ZeroTensors (efficient zeros); a view of one
    (SliceBackward0 of a ZeroTensor: cat's double backward) has no real storage behind it, and
    ``numpy(force=True)`` reads garbage or segfaults (PyTorch 2.13). Its values are zeros.
    """
    t = t.detach()
    if t._is_zerotensor():
        return np.zeros(tuple(t.shape), dtype=np.dtype(_dtype_name(t.dtype)))
    return t.numpy(force=True)


def _exc_name(e) -> str:
    return type(e).__name__


# ---------------------------------------------------------------------------------------------
# Running a program on both libraries
# ---------------------------------------------------------------------------------------------


@dataclass
class Outcome:
    diff: Diff | None = None
    refusals: list = field(default_factory=list)  # op names autodiag refused clearly
    steps_run: int = 0


def _is_refusal(e, names) -> bool:
    if not isinstance(e, NotImplementedError):
        return False
    msg = str(e).lower()
    return any(n.lower() in msg for n in names)


def weights_for(m, t):
    """The grad_outputs weight for output t: 0.5, 1, 1.5, 0.5, ... in t's shape and dtype."""
    return m.tensor([0.5 + 0.5 * (i % 3) for i in range(t.numel())], dtype=t.dtype).reshape(
        tuple(t.shape)
    )


def run_program(program: Program, torch, ad) -> Outcome:
    """Run on both libraries in lock-step; the first difference (or refusal) ends the run."""
    out = Outcome()
    pools = {"ad": {}, "t": {}}
    ns = {
        "ad": {"torch": ad, "F": ad.nn.functional},
        "t": {"torch": torch, "F": torch.nn.functional},
    }
    for inp in program.inputs:
        pools["ad"][inp.name] = make_tensor(ad, inp)
        pools["t"][inp.name] = make_tensor(torch, inp)
    for step in program.steps:
        if any(r not in pools["t"] for r in step.refs):
            continue  # an earlier step of a shrunk program failed on both sides
        oka, va = _exec(step, ns["ad"] | pools["ad"], pools["ad"])
        okt, vt = _exec(step, ns["t"] | pools["t"], pools["t"])
        out.steps_run += 1
        op = OPS[step.op]
        if not oka and not okt:
            if type(va) is not type(vt) and not _same_error_family(va, vt):
                out.diff = Diff(
                    "forward", "exception", f"{_exc_name(va)} vs {_exc_name(vt)}", step.op, step.out
                )
                return out
            continue
        if not oka:
            if _is_refusal(va, op.refusal_names):
                out.refusals.append(step.op)
                return out
            out.diff = Diff("forward", "exception", f"{_exc_name(va)} vs ok", step.op, step.out)
            return out
        if not okt:
            out.diff = Diff("forward", "exception", f"ok vs {_exc_name(vt)}", step.op, step.out)
            return out
        scale = [
            torch_array(pools["t"][r]) for r in step.refs if isinstance(pools["t"][r], torch.Tensor)
        ]
        try:
            d = compare_tensors(va, vt, torch, ad, scale_from=scale, tol_dtype=_tol_dtype(program))
        except Exception as e:  # noqa: BLE001 - e.g. numpy() on a broken tensor
            d = ("exception", f"{_exc_name(e)} while comparing")
        if d is None:
            alias_a = [r for r in step.refs if va is pools["ad"][r]]
            alias_t = [r for r in step.refs if vt is pools["t"][r]]
            if alias_a != alias_t:
                d = ("alias", f"result is {alias_a} vs {alias_t}")
        if d is not None:
            out.diff = Diff("forward", *d, step.op, step.out)
            return out
        if isinstance(vt, torch.Tensor):
            pools["ad"][step.out] = va
            pools["t"][step.out] = vt
    out.diff = _compare_grads(program, pools, torch, ad, out)
    return out


def _tol_dtype(program: Program) -> str | None:
    """float32 when any input is: the libraries' float32 math functions differ in the last bit
    (numpy's exp(1) is 2.718282, PyTorch's 2.7182817), which float64 results computed from them
    keep."""
    return "float32" if any(i.dtype == "float32" for i in program.inputs) else None


def _same_error_family(a, b) -> bool:
    # Otherwise autodiag is held to PyTorch's exact type; but where both refuse the program, a
    # NotImplementedError refusal is a RuntimeError, which is what PyTorch raised.
    return isinstance(a, NotImplementedError) and isinstance(a, type(b))


def _grad_targets(program, pools, torch):
    leaves = [i.name for i in program.inputs if i.requires_grad and pools["t"][i.name].is_leaf]
    outs, seen = [], set()
    for s in program.steps:
        t = pools["t"].get(s.out)
        if t is None or not t.requires_grad or id(t) in seen or s.out not in pools["ad"]:
            continue
        seen.add(id(t))
        outs.append(s.out)
    return leaves, outs


def _grad(m, outs, leaves, create_graph):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return True, m.autograd.grad(
                outs,
                leaves,
                [weights_for(m, o) for o in outs],
                create_graph=create_graph,
                allow_unused=True,
            )
        except Exception as e:  # noqa: BLE001
            return False, e


def _compare_grad_lists(stage, ga, gt, leaves, torch, ad, program, out):
    oka, va = ga
    okt, vt = gt
    if not oka or not okt:
        if not oka and not okt:
            if type(va) is type(vt) or _same_error_family(va, vt):
                return None
            return Diff(stage, "exception", f"{_exc_name(va)} vs {_exc_name(vt)}")
        if not oka:
            if isinstance(va, NotImplementedError) and _is_refusal(
                va, [n for s in program.steps for n in OPS[s.op].refusal_names]
            ):
                out.refusals.append(f"{stage}:" + "+".join(sorted(set(program.ops()))))
                return Diff(stage, "refusal", "")  # ends the run; not counted as a difference
            return Diff(stage, "exception", f"{_exc_name(va)} vs ok")
        return Diff(stage, "exception", f"ok vs {_exc_name(vt)}")
    for name, a, t in zip(leaves, va, vt):
        if (a is None) != (t is None):
            return Diff(
                stage,
                "none",
                f"{'None' if a is None else 'tensor'} vs {'None' if t is None else 'tensor'}",
                where=name,
            )
        if a is None:
            continue
        try:
            d = compare_tensors(a, t, torch, ad, grad_fn=False, tol_dtype=_tol_dtype(program))
        except Exception as e:  # noqa: BLE001
            d = ("exception", f"{_exc_name(e)} while comparing")
        if d is not None:
            return Diff(stage, *d, where=name)
    return None


def _compare_grads(program, pools, torch, ad, out) -> Diff | None:
    leaves, outs = _grad_targets(program, pools, torch)
    if not leaves or not outs:
        return None
    la, lt = [pools["ad"][n] for n in leaves], [pools["t"][n] for n in leaves]
    ga = _grad(ad, [pools["ad"][n] for n in outs], la, True)
    gt = _grad(torch, [pools["t"][n] for n in outs], lt, True)
    d = _compare_grad_lists("grad", ga, gt, leaves, torch, ad, program, out)
    if d is not None or not ga[0]:
        return None if d is not None and d.what == "refusal" else d
    both = [
        i
        for i, (a, t) in enumerate(zip(ga[1], gt[1]))
        if a is not None and t is not None and a.requires_grad and t.requires_grad
    ]
    if not both:
        return None
    g2a = _grad(ad, [ga[1][i] for i in both], la, False)
    g2t = _grad(torch, [gt[1][i] for i in both], lt, False)
    d = _compare_grad_lists("grad2", g2a, g2t, leaves, torch, ad, program, out)
    return None if d is not None and d.what == "refusal" else d


# ---------------------------------------------------------------------------------------------
# Shrinking
# ---------------------------------------------------------------------------------------------


def _drop_steps(program: Program, drop: set) -> Program:
    """Without the steps named in drop and (transitively) the steps that read them."""
    gone = set(drop)
    steps = []
    for s in program.steps:
        if s.out in gone or any(r in gone for r in s.refs):
            gone.add(s.out)
            continue
        steps.append(s)
    used = {r for s in steps for r in s.refs}
    inputs = tuple(i for i in program.inputs if i.name in used or not steps)
    return replace(program, inputs=inputs, steps=tuple(steps))


def shrink(program: Program, diff: Diff, torch, ad, budget: int = 250) -> tuple[Program, Diff]:
    """A smaller program with a difference of the same key (greedy, within budget runs)."""
    calls = [0]
    best = [program, diff]

    def still_fails(p: Program) -> bool:
        if calls[0] >= budget or not p.steps:
            return False
        calls[0] += 1
        o = run_program(p, torch, ad)
        if o.diff is not None and o.diff.key() == diff.key():
            best[0], best[1] = p, o.diff
            return True
        return False

    # 1. a forward difference: nothing after its step matters
    if diff.stage == "forward":
        idx = [s.out for s in program.steps].index(diff.where)
        p = replace(program, steps=program.steps[: idx + 1])
        still_fails(p)
    # 2. drop steps, last first (each with its dependents)
    changed = True
    while changed and calls[0] < budget:
        changed = False
        for s in reversed(best[0].steps):
            if s.out in {x.out for x in best[0].steps} and still_fails(
                _drop_steps(best[0], {s.out})
            ):
                changed = True
    # 3. inputs: unused ones, then no requires_grad, smaller dims, simpler values
    used = {r for s in best[0].steps for r in s.refs}
    unused = [inp for inp in best[0].inputs if inp.name not in used]
    if unused:
        still_fails(replace(best[0], inputs=tuple(i for i in best[0].inputs if i.name in used)))
    for i in range(len(best[0].inputs)):
        inp = best[0].inputs[i]
        if inp.requires_grad:
            _try_input(best, i, replace(inp, requires_grad=False), still_fails)
        for d in range(len(best[0].inputs[i].shape)):
            inp = best[0].inputs[i]
            if inp.shape[d] > 1:
                sl = tuple(slice(0, 1) if k == d else slice(None) for k in range(len(inp.shape)))
                _try_input(best, i, replace(inp, values=inp.values[sl].copy()), still_fails)
        inp = best[0].inputs[i]
        if inp.dtype != "bool" and inp.values.size <= 16:
            flat = inp.values.reshape(-1)
            for k in range(flat.size):
                for simple in (1.0, 0.0):
                    cur = best[0].inputs[i]
                    v = cur.values.reshape(-1)
                    if v[k] == simple and math.copysign(1, v[k]) > 0:
                        break
                    nv = v.copy()
                    nv[k] = simple
                    if _try_input(best, i, replace(cur, values=nv.reshape(cur.shape)), still_fails):
                        break
    return best[0], best[1]


def _try_input(best, i, new_input, still_fails) -> bool:
    p = best[0]
    inputs = p.inputs[:i] + (new_input,) + p.inputs[i + 1 :]
    return still_fails(replace(p, inputs=inputs))


# ---------------------------------------------------------------------------------------------
# Classifying and reporting
# ---------------------------------------------------------------------------------------------


def classify(program: Program, diff: Diff) -> str:
    """'ops | stage what: detail' for a (shrunk) program; forward differences name one op."""
    if diff.stage == "forward":
        ops = diff.op
    else:
        ops = "+".join(sorted(set(program.ops())))
    return f"{ops} | {diff.describe()}"


def repro(program: Program, diff: Diff | None = None) -> str:
    """A runnable snippet: the program as a function of the library, run on both."""
    lines = [
        "import torch",
        "import autodiag",
        "",
        "",
        "def w(torch, t):  # grad_outputs weights",
        "    return torch.tensor([0.5 + 0.5 * (i % 3) for i in range(t.numel())], "
        "dtype=t.dtype).reshape(tuple(t.shape))",
        "",
        "",
        "def run(torch):",
        "    F = torch.nn.functional",
    ]
    lines += ["    " + input_source(i) for i in program.inputs]
    for s in program.steps:
        lines.append(
            f"    {s.code}; {s.out} = {s.refs[0]}" if OPS[s.op].stmt else f"    {s.out} = {s.code}"
        )
    if diff is None or diff.stage != "forward":
        leaves = [i.name for i in program.inputs if i.requires_grad]
        outs = [s.out for s in program.steps]
        lines += [
            f"    leaves = [{', '.join(leaves)}]",
            f"    outs = list({{id(o): o for o in [{', '.join(outs)}]"
            " if o.requires_grad}.values())",
            "    g = torch.autograd.grad(outs, leaves, [w(torch, o) for o in outs], "
            "create_graph=True, allow_unused=True)",
        ]
        if diff is not None and diff.stage == "grad2":
            lines += [
                "    g1 = [x for x in g if x is not None and x.requires_grad]",
                "    return torch.autograd.grad(g1, leaves, [w(torch, x) for x in g1], "
                "allow_unused=True)",
            ]
        else:
            lines.append("    return g")
    else:
        lines.append(f"    return {diff.where}")
    lines += [
        "",
        "",
        "for lib in (torch, autodiag):",
        "    try:",
        "        print(lib.__name__, run(lib))",
        "    except Exception as e:",
        "        print(lib.__name__, type(e).__name__, e)",
    ]
    return "\n".join(lines)
