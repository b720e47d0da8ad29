"""What every op shares: operand coercion, graph recording, the op registry, and the two
vocabularies backward formulas are written in.

An op is a function that computes its result with numpy and, when grad mode is on and an input
requires grad, records a Node subclass whose ``backward(xp, grad)`` is the chain rule. ``xp`` is
``ARRAY`` (numpy arrays: plain, fast backward) or ``TENSOR`` (autodiag Tensors: the backward is
itself recorded, which is how ``create_graph=True`` gives derivatives of any order). A formula
written with operators and ``xp.*`` serves both.
"""

from __future__ import annotations

import functools
import inspect
import numbers

import numpy as np

from autodiag import dtypes
from autodiag.core import grad_mode
from autodiag.core.graph import Node, SavedTensor, _saved_hooks_stack
from autodiag.core.zeros import ZeroArray
from autodiag.core.zeros import zeros_like as zero_array_like
from autodiag.ops._cascade import cascade_sum
from autodiag.ops._erf import erf_array
from autodiag.ops._products import matmul_array
from autodiag.size import normalize_dims, wrap_dim  # noqa: F401 - the ops import them from here
from autodiag.tensor import Tensor, _init, _new
from autodiag.trace.events import traced

_state = grad_mode._state
NO_EDGE = None  # an input that needs no gradient (NOTE [Compact edges] in graph.py)

# name -> function, for every public op (the CLI's expression mode and the tests enumerate it)
REGISTRY: dict[str, object] = {}

# Where PyTorch has an op: ``torch.<name>``; a Tensor method only (``x.view``); or
# ``torch.nn.functional.<name>`` (which ``autodiag.nn.functional`` exports, some with a wrapper).
HOMES = ("torch", "Tensor", "nn.functional")


class OpInfo:
    """What one registration declares; the namespaces and tables derive from it
    (``autodiag.<name>``, the in-place twins, the CLI's expression allow-list)."""

    __slots__ = ("name", "op", "method", "home", "expr", "inplace", "hot")

    def __init__(self, name, op, method, home, expr, inplace, hot):
        self.name = name
        self.op = op  # the traced function: what REGISTRY, autodiag.<name> and Tensor hold
        self.method = method  # its Tensor method's name, or None
        self.home = home  # one of HOMES
        self.expr = expr  # callable in expression mode (``autodiag graph -e``)
        self.inplace = inplace  # its in-place twin's Tensor method name (``add_``), or None
        self.hot = hot  # built by unary_op/binary_op: it reports itself (NOTE [Hot path])

    def __repr__(self) -> str:
        return f"<op {self.name}: {self.home}>"


# name -> OpInfo, in registration order
OPS: dict[str, OpInfo] = {}


def register(
    name: str | None = None,
    method: bool | str = True,
    *,
    home: str = "torch",
    expr: bool = False,
    inplace: bool = False,
):
    """Register an op: everything that names it derives from this one declaration.

    ``name``: its public name (default: the function's). ``method``: also a Tensor method (or
    the method's name). ``home``: where PyTorch has it (``HOMES``); ``"torch"`` makes it
    ``autodiag.<name>``. ``expr``: callable in the CLI's expression mode, which evaluates
    untrusted text: only for pure math (no I/O, no random state, no write into an input).
    ``inplace``: also the in-place twin ``Tensor.<name>_`` (ops/inplace.py makes it).

    The function is wrapped so that tracers see its calls (NOTE [Tracing cost] in
    trace/events.py); the wrapper is what the module, the registry and Tensor hold.
    """
    if home not in HOMES:
        raise ValueError(f"register: home must be one of {HOMES}, not {home!r}")

    def deco(fn):
        n = name or fn.__name__
        hot = getattr(fn, "__autodiag_op__", None) == n and not hasattr(fn, "__wrapped__")
        if hot:
            op = fn  # it reports itself (trace.events.self_traced)
        else:
            # an alias of a registered op is wrapped once, under its own name
            op = traced(n, _numpy_names(inspect.unwrap(fn)))
        meth = None if not method else n if method is True else method
        if inplace and not meth:
            raise ValueError(f"register: {n} has no Tensor method, so no in-place twin")
        REGISTRY[n] = op
        OPS[n] = OpInfo(n, op, meth, home, expr, n + "_" if inplace else None, hot)
        if meth:
            setattr(Tensor, meth, op)
        return op

    return deco


# ``torch.<name>`` functions that are not ops of their own (the function forms of in-place
# methods, ``torch.exp_(x)``; settings such as ``set_num_threads``): name -> function
TORCH_FUNCTIONS: dict[str, object] = {}


def torch_namespace() -> dict:
    """name -> op for every op PyTorch has as ``torch.<name>``: the ops of ``autodiag.*``."""
    ops = {n: info.op for n, info in OPS.items() if info.home == "torch"}
    return {**TORCH_FUNCTIONS, **ops}


def _parameter_names(fn):
    """The names ``fn`` takes, or None when it has no signature. A plain function's come from
    its code object: ``inspect.signature`` for each of the ~200 ops was a sixth of the import."""
    code = getattr(fn, "__code__", None)
    if code is not None and not hasattr(fn, "__signature__") and "__wrapped__" not in vars(fn):
        n = code.co_argcount + code.co_kwonlyargcount
        flags = code.co_flags
        n += bool(flags & inspect.CO_VARARGS) + bool(flags & inspect.CO_VARKEYWORDS)
        return code.co_varnames[:n]
    try:
        return inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return None


def _numpy_names(fn):
    """``fn`` taking numpy's argument names too, as PyTorch's argument parser does: ``axis`` for
    ``dim`` and ``keepdims`` for ``keepdim`` (``x.sum(axis=0)``, ``x.argmax(axis=1)``). Only ops
    with a ``dim``/``keepdim`` parameter get the extra call."""
    params = _parameter_names(fn)
    if params is None:
        return fn
    pairs = tuple(
        (alias, real)
        for alias, real in (("axis", "dim"), ("keepdims", "keepdim"))
        if real in params and alias not in params
    )
    if not pairs:
        return fn

    @functools.wraps(fn)
    def op(*args, **kwargs):
        if kwargs:
            for alias, real in pairs:
                if alias in kwargs:
                    if real in kwargs:
                        raise TypeError(
                            f"{fn.__name__}() got multiple values for argument '{real}'"
                        )
                    kwargs[real] = kwargs.pop(alias)
        return fn(*args, **kwargs)

    return op


# ---------------------------------------------------------------------------------------------
# Tensors in and out
# ---------------------------------------------------------------------------------------------


def wrap(data: np.ndarray, grad_fn=None, requires_grad: bool = False) -> Tensor:
    """A new Tensor owning ``data`` (numpy scalars are turned into 0-d arrays)."""
    if data.__class__ is not np.ndarray and data.__class__ is not ZeroArray:
        data = np.asarray(data)
    t = _new(Tensor)
    _init(t, data, grad_fn, requires_grad, None, 0)
    return t


def as_tensor_operand(x, like: Tensor | None = None) -> Tensor:
    """Coerce an op argument to a Tensor (Python scalars take PyTorch's dtype rules)."""
    if isinstance(x, Tensor):
        return x
    if isinstance(x, np.ndarray):
        return wrap(x)
    if isinstance(x, (bool, np.bool_)):
        return wrap(np.array(x, dtype=np.bool_))
    if isinstance(x, numbers.Integral):
        return wrap(np.array(x, dtype=np.int64))
    if isinstance(x, numbers.Real):
        return wrap(np.array(x, dtype=dtypes.get_default_dtype().np))
    from autodiag.ops.factories import tensor

    return tensor(x)


def edge(t: Tensor):
    """The edge through which gradient reaches ``t``: its node (a pair for outputs > 0 of a
    multi-output node), or None when it needs no gradient (NOTE [Compact edges])."""
    if not t.requires_grad:
        return None
    fn = t.grad_fn
    if fn is not None:
        nr = t._output_nr
        return fn if nr == 0 else (fn, nr)
    return t._grad_accumulator()


def save(t: Tensor):
    """Save an input for backward (version-stamped; see NOTE [Compact saves] in graph.py)."""
    if t._inference:
        raise RuntimeError(INFERENCE_SAVE_ERROR)
    vc = t._vc
    if (vc is None or vc[0] == 0) and not _saved_hooks_stack:
        return t
    return SavedTensor(t, False)


def save_output(t: Tensor) -> SavedTensor:
    """Save the op's own output for backward (kept as array + counter: no reference cycle)."""
    return SavedTensor(t, True)


INFERENCE_SAVE_ERROR = (
    "Inference tensors cannot be saved for backward. Please do not use Tensors created in "
    "inference mode in computation tracked by autograd. To work around this, you can make a clone "
    "to get a normal tensor and use it in autograd, or use `torch.no_grad()` instead of "
    "`torch.inference_mode()`."
)


def result(data: np.ndarray, node: Node | None) -> Tensor:
    """The op's output tensor; ``node`` None means nothing is recorded."""
    if data.__class__ is not np.ndarray and data.__class__ is not ZeroArray:
        data = np.asarray(data)
    t = _new(Tensor)
    _init(t, data, node, node is not None, None, 0)
    return t


def set_broadcast_meta(node: Node, out: np.ndarray, *inputs) -> None:
    """Record input shapes/dtypes when they differ from the output's.

    The engine then sums each gradient back to its input's shape and casts it to the input's
    dtype (PyTorch's ``validate_outputs``), so elementwise formulas never unbroadcast by hand.
    """
    shape, dt = out.shape, out.dtype
    for t in inputs:
        if t.__class__ is Tensor or isinstance(t, Tensor):
            d = t._data
            if d.shape != shape or d.dtype != dt:
                node._input_meta = tuple(
                    (i._data.shape, i._data.dtype) if isinstance(i, Tensor) else None
                    for i in inputs
                )
                return


def broadcast_error(sa: tuple, sb: tuple) -> str:
    """PyTorch's message for shapes that do not broadcast: the last dimension that clashes."""
    n = max(len(sa), len(sb))
    pa, pb = (1,) * (n - len(sa)) + tuple(sa), (1,) * (n - len(sb)) + tuple(sb)
    for i in range(n - 1, -1, -1):
        if pa[i] != pb[i] and pa[i] != 1 and pb[i] != 1:
            return (
                f"The size of tensor a ({pa[i]}) must match the size of tensor b ({pb[i]}) "
                f"at non-singleton dimension {i}"
            )
    return f"shapes {tuple(sa)} and {tuple(sb)} do not broadcast"


def check_broadcast(*shapes) -> None:
    """Raise PyTorch's RuntimeError if ``shapes`` do not broadcast, naming the first clash in
    PyTorch's order (the shape so far is "tensor a", the next operand's "tensor b")."""
    acc: tuple = ()
    for s in shapes:
        try:
            acc = np.broadcast_shapes(acc, s)
        except ValueError:
            raise RuntimeError(broadcast_error(acc, s)) from None


def broadcasting(fn, *args):
    """``fn(*args)`` (a numpy function that broadcasts its operands), with numpy's ValueError for
    operands that do not broadcast turned into PyTorch's RuntimeError. The check runs only
    after numpy failed: the common path pays one call."""
    try:
        return fn(*args)
    except ValueError:
        check_broadcast(*(np.shape(a) for a in args))
        raise


class IdentityBackward(Node):
    """Base of nodes whose gradient passes through unchanged (clone, dtype copies, ...); the
    engine still sums it to the input's shape and casts it to the input's dtype."""

    __slots__ = ()

    def backward(self, xp, g):
        return (g,)


class FusedBackwardLink(Node):
    """Links a gradient to the inputs of the one differentiable op PyTorch computes it with
    (NOTE [Fused backward ops]); no gradient flows through the link."""

    __slots__ = ()

    def backward(self, xp, g):
        return (None,) * len(self.needs_grad)


# NOTE [Fused backward ops]
# Some PyTorch backward formulas are one differentiable op over several tensors
# (``native_layer_norm_backward(grad, input, mean, rstd, weight, bias)``): under create_graph
# each gradient it returns requires grad when any of those tensors does, also the ones whose
# value does not depend on it (layer_norm's bias gradient is ``grad.sum()``). Our formulas are
# written with separate ops, so such a gradient would not require grad; ``fused_gradients``
# links it to those tensors, with a zero derivative (the one PyTorch's double backward gives).


def fused_gradients(outs: tuple, deps: tuple, cls=FusedBackwardLink) -> tuple:
    """``outs`` (Tensors or None) each requiring grad when one of ``deps`` does."""
    live = [d for d in deps if d is not None and d.requires_grad]
    if not live or not _state.record:
        return outs
    fixed = []
    for o in outs:
        if o is not None and not o.requires_grad:
            o = result(o._data, cls(tuple(edge(d) for d in live)))
        fixed.append(o)
    return tuple(fixed)


# ---------------------------------------------------------------------------------------------
# The backward vocabularies
# ---------------------------------------------------------------------------------------------


def sum_to_array(g: np.ndarray, shape: tuple) -> np.ndarray:
    """Sum ``g`` over the dims that broadcasting added or expanded to reach ``shape``."""
    if g.shape == shape:
        return g
    lead = g.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(
        i + lead for i, s in enumerate(shape) if s == 1 and g.shape[i + lead] != 1
    )
    if axes:
        g = cascade_sum(g, axes, keepdims=True)  # PyTorch's order (NOTE [Cascade sums])
    return g.reshape(shape)


def scan_array(fn, a: np.ndarray, dim: int) -> np.ndarray:
    """``np.cumsum``/``np.cumprod`` along ``dim`` as PyTorch's CPU kernels compute them: float32
    and float16 accumulate in float64 (``[-1.5, 3e38, 0.]``'s cumprod ends in -0., not nan), and
    cumsum's running sum starts at 0., so that no sum is -0. (numpy's starts at the first
    element: ``cumsum([-0.])`` is ``[-0.]`` there, ``[0.]`` in PyTorch)."""
    low = a.dtype.kind == "f" and a.dtype.itemsize < 8
    out = fn(a.astype(np.float64) if low else a, axis=dim)
    if fn is np.cumsum and out.dtype.kind in "fc":
        out += 0.0
    return out.astype(a.dtype) if low else out


def sign_array(a: np.ndarray) -> np.ndarray:
    """PyTorch's sign: numpy's, except that NaN has sign 0 (and bools are their own sign)."""
    if a.dtype.kind == "b":
        return a.copy()  # numpy has no bool loop
    if a.dtype.kind == "f":
        return np.where(np.isnan(a), a.dtype.type(0), np.sign(a))
    return np.sign(a)


# NOTE [float32 transcendentals]
# numpy's float32 tanh is its own SIMD approximation; PyTorch's (SLEEF's u10 kernel) is within
# an ulp of the exact value, and so is the float64 result rounded once to float32: measured on
# 100,000 normal(0, 3) float32 values, tanh differs from torch 2.13 in 124 of them computed this
# way and in 32,297 with np.tanh in float32. An ulp matters where tanh saturates: tanh(9.15) is
# 1.0 in PyTorch, so the gradient 1 - y^2 is 0 there, and 1.2e-7 from numpy's float32 tanh. It
# costs 4x numpy's float32 time, so only tanh takes it: exp (40% of values an ulp apart, 1% this
# way), log, log1p, sin and cos (8-17%, 1-8%) stay numpy's, as float64 tanh (21% an ulp apart;
# 0.7% through long double, at 4x the time).
def rounded_once(fn):
    """``fn`` computed in float64 for a float32 array and rounded once to float32."""

    def f(a):
        if a.dtype == np.float32:
            return fn(a, dtype=np.float64).astype(np.float32)
        return fn(a)

    f.__name__ = fn.__name__
    return f


# NOTE [Masked gradients]
# Where PyTorch's backward formula *selects* (``where(mask, grad, 0)``, ``masked_fill``,
# ``zeros_like(grad)``), ours must select too: ``grad * mask`` and ``grad * 0`` turn an inf or
# NaN incoming gradient into NaN where PyTorch gives 0 (relu followed by sqrt at 0, floor
# followed by ``/ 0``, ``max() * inf``). ``xp.mask(keep, grad)`` is the one way to write "zero
# where not selected", for both vocabularies; ``xp.zeros_like(grad)`` is PyTorch's
# ``zeros_like(grad)``. Where PyTorch's formula really multiplies (``amax``: ``grad / count *
# mask``, ``abs``: ``grad * sgn(x)``) we multiply too, so inf * 0 = NaN there as in PyTorch.


class _ArrayOps:
    """Backward vocabulary on numpy arrays (first-order backward)."""

    arrays = True
    # as the forward ops compute them (NOTE [float32 transcendentals])
    tanh = staticmethod(rounded_once(np.tanh))  # as the forward (NOTE [float32 transcendentals])
    exp, log, sin, cos, abs, floor, isnan = (
        np.exp,
        np.log,
        np.sin,
        np.cos,
        np.abs,
        np.floor,
        np.isnan,
    )
    sign = sgn = staticmethod(sign_array)  # sgn: sign of a real tensor, for PyTorch's formulas
    where = staticmethod(np.where)

    @staticmethod
    def mask(keep, g):
        """``g`` where ``keep``, else 0: a select, never ``g * keep`` (NOTE [Masked gradients])."""
        return np.where(keep, g, np.zeros((), dtype=g.dtype))

    @staticmethod
    def zeros_like(g):
        return np.zeros_like(g)

    @staticmethod
    def efficient_zeros_like(g):
        """PyTorch's ``_efficientzerotensor``: zeros that stay zero through later products and
        quotients (NOTE [Efficient zero gradients] in core/zeros.py)."""
        return zero_array_like(g)

    @staticmethod
    def div_floor(a, b):
        """``div(a, b, rounding_mode="floor")`` (values only: its gradient is zero)."""
        from autodiag.ops.pointwise import div_floor_array

        return div_floor_array(a, b)

    erf = staticmethod(erf_array)  # numpy has no erf (ops/_erf.py)

    sum_to = staticmethod(sum_to_array)
    matmul = staticmethod(matmul_array)  # PyTorch's non-finite sums (NOTE [Plain products])

    @staticmethod
    def flip(a, dims):
        return np.flip(a, dims)

    @staticmethod
    def cumsum(a, dim):
        return scan_array(np.cumsum, a, dim)

    @staticmethod
    def cumprod(a, dim):
        return scan_array(np.cumprod, a, dim)

    @staticmethod
    def mT(a):
        return np.swapaxes(a, -1, -2)

    @staticmethod
    def sum(a, dims, keepdim=False):
        return cascade_sum(a, dims, keepdim)

    @staticmethod
    def expand_dims_to(g, dims, shape):
        """Undo a reduction over ``dims`` (without keepdim): reinsert them, then broadcast."""
        if dims:
            g = np.expand_dims(g, dims)
        return np.broadcast_to(g, shape, subok=True)  # subok: an efficient zero stays one

    @staticmethod
    def broadcast_to(g, shape):
        return np.broadcast_to(g, shape, subok=True)

    @staticmethod
    def reshape(g, shape):
        return g.reshape(shape)

    @staticmethod
    def permute(g, perm):
        return g.transpose(perm)

    @staticmethod
    def zeros(shape, like):
        return np.zeros(shape, dtype=like.dtype)


ARRAY = _ArrayOps()


class _TensorOps:
    """Backward vocabulary on Tensors: each call is a recorded op (double backward)."""

    arrays = False

    def __getattr__(self, name):
        # exp, log, sin, ..., where, matmul: the public differentiable ops of the same name.
        # Any other name is an AttributeError, as Python's protocols (hasattr, doctest's
        # ``__wrapped__`` probe, copy, pickle) expect of a missing attribute.
        try:
            fn = REGISTRY[name]
        except KeyError:
            raise AttributeError(f"the backward vocabulary has no op {name!r}") from None
        setattr(self, name, fn)
        return fn

    def mask(self, keep, g):
        """``g`` where ``keep``, else 0, recorded (NOTE [Masked gradients])."""
        return self.where(keep, g, 0.0)

    @staticmethod
    def zeros_like(g):
        # PyTorch's zeros_like(grad): a constant, so nothing flows back through it
        return wrap(np.zeros_like(g._data))

    @staticmethod
    def efficient_zeros_like(g):
        return wrap(zero_array_like(g._data))

    def div_floor(self, a, b):
        return self.div(a, b, rounding_mode="floor")

    @staticmethod
    def sum_to(g, shape):
        from autodiag.ops.reduction import sum_to

        return sum_to(g, shape)

    @staticmethod
    def mT(a):
        return a.transpose(-1, -2)

    @staticmethod
    def sum(a, dims, keepdim=False):
        return a.sum(dims, keepdim=keepdim)

    @staticmethod
    def expand_dims_to(g, dims, shape):
        for d in dims:
            g = g.unsqueeze(d)
        return g.expand(shape)

    @staticmethod
    def broadcast_to(g, shape):
        return g.expand(shape)

    @staticmethod
    def reshape(g, shape):
        return g.reshape(shape)

    @staticmethod
    def permute(g, perm):
        return g.permute(perm)

    @staticmethod
    def zeros(shape, like):
        return wrap(np.zeros(shape, dtype=like._data.dtype))


TENSOR = _TensorOps()


def fix_shapes(node, outs, meta, xp):
    """Sum gradients back over broadcast dims and cast to the input dtype (validate_outputs)."""
    fixed = list(outs)
    for i, m in enumerate(meta):
        g = fixed[i]
        if m is None or g is None:
            continue
        shape, dt = m
        if xp.arrays:
            if shape is not None and g.shape != shape:
                g = sum_to_array(g, shape)
            if g.dtype != dt:
                g = g.astype(dt)
        else:
            if shape is not None and tuple(g._data.shape) != shape:
                g = xp.sum_to(g, shape)
            if g._data.dtype != dt:
                g = g.to(dtypes.from_numpy_dtype(dt))
        fixed[i] = g
    return tuple(fixed)
