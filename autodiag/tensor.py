"""``Tensor``: a numpy array plus the autograd state PyTorch keeps on a tensor.

Operators and most methods are attached by the op modules (``autodiag/ops``) when they register;
this file holds storage, identity, autograd attributes and printing.
"""

from __future__ import annotations

import weakref

import numpy as np

from autodiag import _device, _warnings, dtypes
from autodiag.core import bindings, grad_mode
from autodiag.core.graph import AccumulateGrad, _add_hook, _HookDict
from autodiag.size import wrap_dim
from autodiag.trace.events import traced

_grad_state = grad_mode._state

NONLEAF_GRAD_WARNING = (
    "The .grad attribute of a Tensor that is not a leaf Tensor is being accessed. Its .grad "
    "attribute won't be populated during autograd.backward(). If you indeed want the .grad field "
    "to be populated for a non-leaf Tensor, use .retain_grad() on the non-leaf Tensor. If you "
    "access the non-leaf Tensor by mistake, make sure you access the leaf Tensor instead. See "
    "github.com/pytorch/pytorch/pull/30531 for more informations."
)


# PyTorch's message from factories (requires_grad=True) and Parameter
REQUIRES_GRAD_DTYPE_ERROR = "Only Tensors of floating point and complex dtype can require gradients"


class Tensor:
    """A multi-dimensional array that records the operations applied to it.

    >>> import autodiag as torch
    >>> x = torch.tensor([1.0, 2.0], requires_grad=True)
    >>> y = (x * x).sum()
    >>> y.backward()
    >>> x.grad
    tensor([2., 4.])
    """

    # Hot-path state lives in slots; rarely set state falls back to the class defaults below,
    # so creating a tensor sets four attributes.
    __slots__ = ("_data", "grad_fn", "requires_grad", "_vc", "__weakref__", "__dict__")
    _output_nr = 0  # which output of grad_fn this tensor is
    _grad = None
    _base = None  # the tensor this one is a view of
    _acc = None  # weakref to the leaf's AccumulateGrad
    _hooks = None  # leaf tensor hooks
    _post_acc_hooks = None  # register_post_accumulate_grad_hook
    _retains_grad = False
    _inference = False  # created under inference_mode
    _creation = 0  # a view's CreationMeta, as PyTorch's (ops/views.py: 0 is DEFAULT)

    # numpy must hand binary operators back to Tensor (ndarray * Tensor -> Tensor.__rmul__).
    __array_ufunc__ = None

    def __new__(cls, *args, **kwargs):
        # torch.Tensor(t) is PyTorch's t.alias(): same storage, dtype and version counter,
        # AliasBackward0 when t requires grad (__init__ then leaves the alias as it is).
        if cls is Tensor and len(args) == 1 and isinstance(args[0], Tensor) and not kwargs:
            return _alias_of(args[0])  # bound by ops/shape.py (NOTE [Layers]: no upward import)
        return _new(cls)

    def __init__(self, *args, requires_grad: bool = False, device=None):
        # PyTorch's legacy constructor: Tensor(data) copies a sequence as the default float
        # dtype; Tensor(2, 3), Tensor(torch.Size) and Tensor(3) are uninitialised tensors of
        # that size (zeros here); Tensor() is empty. A number alone is not data (TypeError).
        if len(args) == 1 and isinstance(args[0], Tensor):
            return  # made by __new__
        _device.check(device)
        arr = _legacy_array(args)
        _init(self, arr, None, False, None, 0)
        if requires_grad:
            self.requires_grad_(True)

    # ------------------------------------------------------------------ construction (internal)

    @staticmethod
    def _make(
        data: np.ndarray, grad_fn=None, requires_grad: bool = False, vc=None, output_nr: int = 0
    ) -> Tensor:
        t = _new(Tensor)
        _init(t, data, grad_fn, requires_grad, vc, output_nr)
        return t

    # ------------------------------------------------------------------ attributes

    @property
    def data(self) -> Tensor:
        """The same storage, detached from the graph and with its own version counter."""
        t = Tensor._make(self._data)
        if self._inference:
            t._inference = True
        return t

    @data.setter
    def data(self, value: Tensor) -> None:
        self._data = value._data if isinstance(value, Tensor) else np.asarray(value)

    @property
    def grad(self):
        if self.grad_fn is not None and not self._retains_grad and self.requires_grad:
            _warnings.warn(NONLEAF_GRAD_WARNING, UserWarning)
        return self._grad

    @grad.setter
    def grad(self, value) -> None:
        if value is not None:
            if not isinstance(value, Tensor):
                raise TypeError(
                    f"assigned grad expected to be a Tensor or None but got grad of "
                    f"type {type(value).__name__}"
                )
            if value._data.shape != self._data.shape:
                raise RuntimeError(
                    f"assigned grad has data of a different size: grad is "
                    f"{_size_str(value._data.shape)} but self is {_size_str(self._data.shape)}"
                )
            if value._data.dtype != self._data.dtype:
                raise RuntimeError("assigned grad has data of a different type")
        self._grad = value

    @property
    def is_leaf(self) -> bool:
        return self.grad_fn is None

    @property
    def shape(self):
        from autodiag.size import Size

        return Size(self._data.shape)

    def size(self, dim: int | None = None):
        if dim is None:
            return self.shape
        return self._data.shape[wrap_dim(dim, self._data.ndim)]

    @property
    def dtype(self) -> dtypes.dtype:
        return dtypes.from_numpy_dtype(self._data.dtype)

    @property
    def ndim(self) -> int:
        return self._data.ndim

    def dim(self) -> int:
        return self._data.ndim

    def ndimension(self) -> int:
        return self._data.ndim

    def numel(self) -> int:
        return self._data.size

    nelement = numel

    def element_size(self) -> int:
        return self._data.itemsize

    @property
    def device(self):
        return _device.CPU

    @property
    def is_cpu(self) -> bool:
        return True

    @property
    def is_cuda(self) -> bool:
        return False

    @property
    def _version(self) -> int:
        vc = self._vc
        return vc[0] if vc is not None else 0

    @property
    def retains_grad(self) -> bool:
        return self._retains_grad

    def is_inference(self) -> bool:
        return self._inference

    def is_floating_point(self) -> bool:
        return self._data.dtype.kind == "f"

    def is_contiguous(self) -> bool:
        return self._data.flags.c_contiguous

    def stride(self, dim: int | None = None):
        st = tuple(s // self._data.itemsize for s in self._data.strides)
        return st if dim is None else st[wrap_dim(dim, self._data.ndim)]

    def data_ptr(self) -> int:
        return self._data.__array_interface__["data"][0]

    def untyped_storage(self):
        return _Storage(self)

    def __len__(self) -> int:
        if self._data.ndim == 0:
            raise TypeError("len() of a 0-d tensor")
        return self._data.shape[0]

    def __hash__(self) -> int:
        return id(self)

    # ------------------------------------------------------------------ autograd

    def requires_grad_(self, requires_grad: bool = True) -> Tensor:
        if self.grad_fn is not None:
            if requires_grad:  # a non-leaf already requires grad: a no-op, as in PyTorch
                return self
            raise RuntimeError(
                "you can only change requires_grad flags of leaf variables. If "
                "you want to use a computed variable in a subgraph that doesn't "
                "require differentiation use var_no_grad = var.detach()."
            )
        if requires_grad and self._inference and not _grad_state.inference:
            raise RuntimeError(
                "Setting requires_grad=True on inference tensor outside "
                "InferenceMode is not allowed."
            )
        if requires_grad and self._data.dtype.kind not in "fc":
            # NOTE: PyTorch words this differently per entry point: requires_grad_() says
            # "floating point dtype", factories and Parameter "Only ... and complex dtype",
            # the attribute "only ... and complex dtype" (REQUIRES_GRAD_DTYPE_ERROR)
            raise RuntimeError("only Tensors of floating point dtype can require gradients")
        self.requires_grad = bool(requires_grad)
        return self

    def _grad_accumulator(self) -> AccumulateGrad:
        """The leaf's shared AccumulateGrad node (created on first use, held weakly)."""
        ref = self._acc
        acc = ref() if ref is not None else None
        if acc is None:
            if self._data.dtype.kind not in "fc":
                # ``t.requires_grad = True`` on an integer tensor: PyTorch refuses the
                # assignment; a slot cannot check it without slowing every read of the flag,
                # so the leaf is refused when it first enters a graph, with PyTorch's message
                raise RuntimeError(
                    REQUIRES_GRAD_DTYPE_ERROR[0].lower() + REQUIRES_GRAD_DTYPE_ERROR[1:]
                )
            acc = AccumulateGrad(self)
            self._acc = weakref.ref(acc)
        return acc

    def detach(self) -> Tensor:
        """A tensor sharing storage and version counter, cut from the graph."""
        t = Tensor._make(self._data, None, False, vc_of(self))
        if self._inference:
            t._inference = True
        return t

    def detach_(self) -> Tensor:
        if self._base is not None and self._base.requires_grad:
            raise RuntimeError(
                "Can't detach views in-place. Use detach() instead. If you are "
                "using DistributedDataParallel (DDP) for training, and "
                "gradient_as_bucket_view is set as True, gradients are views of "
                "DDP buckets, and hence detach_() cannot be called on these "
                "gradients. To fix this error, please refer to the "
                "Optimizer.zero_grad() function in torch/optim/optimizer.py as "
                "the solution."
            )
        self.grad_fn = None
        self.requires_grad = False
        return self

    def retain_grad(self) -> None:
        """Keep ``.grad`` for a non-leaf tensor after backward (a no-op on leaves)."""
        if not self.requires_grad:
            raise RuntimeError("can't retain_grad on Tensor that has requires_grad=False")
        if self.grad_fn is None or self._retains_grad:
            return
        self._retains_grad = True
        self.grad_fn._hook_table().retain[self._output_nr] = weakref.ref(self)

    def register_hook(self, hook):
        """``hook(grad) -> Tensor | None`` runs when this tensor's gradient is computed.

        Returning a Tensor replaces the gradient. Returns a handle with ``.remove()``.

        >>> import autodiag as torch
        >>> x = torch.ones(2, requires_grad=True)
        >>> h = x.register_hook(lambda g: g * 10)
        >>> (x * 3).sum().backward()
        >>> x.grad
        tensor([30., 30.])
        """
        if not self.requires_grad:
            raise RuntimeError("cannot register a hook on a tensor that doesn't require gradient")
        if self.grad_fn is None:
            if self._hooks is None:
                self._hooks = _HookDict()
            return _add_hook(self._hooks, hook)
        table = self.grad_fn._hook_table().tensor_pre
        d = table.get(self._output_nr)
        if d is None:
            d = table[self._output_nr] = _HookDict()
        return _add_hook(d, hook)

    def register_post_accumulate_grad_hook(self, hook):
        """``hook(tensor)`` runs after the leaf's ``.grad`` was updated."""
        if self.grad_fn is not None:
            raise RuntimeError(
                "post accumulate grad hooks cannot be registered on non-leaf tensors"
            )
        if not self.requires_grad:
            raise RuntimeError("cannot register a hook on a tensor that doesn't require gradient")
        if self._post_acc_hooks is None:
            self._post_acc_hooks = _HookDict()
        return _add_hook(self._post_acc_hooks, hook)

    def backward(self, gradient=None, retain_graph=None, create_graph=False, inputs=None):
        """Accumulate the gradient of this tensor into the ``.grad`` of the leaves."""
        bindings.backward(self, gradient, retain_graph, create_graph, inputs=inputs)

    # ------------------------------------------------------------------ conversion

    def item(self):
        if self._data.size != 1:
            raise RuntimeError(
                f"a Tensor with {self._data.size} elements cannot be converted to Scalar"
            )
        return self._data.reshape(()).item()

    def tolist(self):
        return self._data.tolist()

    def numpy(self, *, force: bool = False) -> np.ndarray:
        if self.requires_grad and _grad_state.record and not force:
            raise RuntimeError(
                "Can't call numpy() on Tensor that requires grad. Use "
                "tensor.detach().numpy() instead."
            )
        return self._data

    def __array__(self, dtype=None, copy=None):
        if self.requires_grad and _grad_state.record:
            raise RuntimeError(
                "Can't call numpy() on Tensor that requires grad. Use "
                "tensor.detach().numpy() instead."
            )
        return self._data if dtype is None else self._data.astype(dtype)

    def __float__(self) -> float:
        return float(self.item())

    def __int__(self) -> int:
        return int(self.item())

    def __index__(self) -> int:
        if self._data.dtype.kind not in "iu" or self._data.size != 1:
            raise TypeError("only integer tensors of a single element can be converted to an index")
        return int(self.item())

    def __bool__(self) -> bool:
        if self._data.size != 1:
            raise RuntimeError("Boolean value of Tensor with more than one value is ambiguous")
        return bool(self._data.reshape(()).item())

    def __iter__(self):
        if self._data.ndim == 0:
            raise TypeError("iteration over a 0-d tensor")
        return (self[i] for i in range(self._data.shape[0]))

    def __reduce_ex__(self, protocol):
        return (_rebuild, (self._data.copy(), self.requires_grad))

    def __deepcopy__(self, memo):
        if self.grad_fn is not None:
            raise RuntimeError(
                "Only Tensors created explicitly by the user (graph leaves) "
                "support the deepcopy protocol at the moment.  If you were "
                "attempting to deepcopy a module, this may be because of a "
                "torch.nn.utils.weight_norm usage, see "
                "https://github.com/pytorch/pytorch/pull/103001"
            )
        t = type(self).__new__(type(self))
        _init(t, self._data.copy(), None, self.requires_grad, None, 0)
        if self._grad is not None:
            t._grad = self._grad.__deepcopy__(memo)
        memo[id(self)] = t
        return t

    # ------------------------------------------------------------------ printing

    def __repr__(self) -> str:
        from autodiag.printing import tensor_repr

        return tensor_repr(self)

    def __format__(self, spec: str) -> str:
        if self._data.ndim == 0 and spec:
            return format(self._data.item(), spec)
        return repr(self)


_new = object.__new__


def _alias_of(t: Tensor) -> Tensor:
    """``t.alias()``: ops/shape.py, which defines AliasBackward0, binds the real one."""
    raise RuntimeError("autodiag: torch.Tensor(tensor) needs autodiag.ops (import autodiag first)")


def bind_alias(fn) -> None:
    """Make ``fn`` the ``t.alias()`` of ``torch.Tensor(t)`` (ops/shape.py, at import)."""
    global _alias_of
    _alias_of = fn


def _legacy_array(args: tuple) -> np.ndarray:
    """The array of ``torch.Tensor(*args)`` (see ``Tensor.__init__``)."""
    from autodiag.size import Size

    dt = dtypes.get_default_dtype().np
    if not args:
        return np.zeros((0,), dtype=dt)
    if len(args) == 1 and (
        isinstance(args[0], (bool, np.bool_)) or not isinstance(args[0], (int, np.integer, Size))
    ):
        data = args[0]
        if isinstance(data, (bool, float, complex, np.bool_, np.floating, np.complexfloating)):
            raise TypeError(f"new(): data must be a sequence (got {type(data).__name__})")
        return np.array(data, dtype=dt)
    size = tuple(args[0]) if len(args) == 1 and isinstance(args[0], Size) else args
    for pos, n in enumerate(size):
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)):
            raise TypeError(
                f"new(): argument 'size' failed to unpack the object at pos {pos + 1} with "
                f'error "type must be tuple of ints,but got {type(n).__name__}"'
            )
    if any(n < 0 for n in size):
        bad = next(n for n in size if n < 0)
        raise RuntimeError(
            f"Trying to create tensor with negative dimension {bad}: [{', '.join(map(str, size))}]"
        )
    return np.zeros(tuple(int(n) for n in size), dtype=dt)


bindings.bind_tensor_type(Tensor)  # NOTE [Layers]: the core rebuilds saved outputs as Tensors


def vc_of(t) -> list:
    """The tensor's version counter, created on first need (NOTE [Version counters])."""
    vc = t._vc
    if vc is None:
        vc = t._vc = [0]
    return vc


def _init(t, data, grad_fn, requires_grad, vc, output_nr) -> None:
    t._data = data
    t.grad_fn = grad_fn
    t.requires_grad = requires_grad
    t._vc = vc
    if output_nr:
        t._output_nr = output_nr
    if _grad_state.inference:
        t._inference = True


def _rebuild(data, requires_grad):
    t = Tensor._make(data)
    t.requires_grad = requires_grad
    return t


class _Storage:
    """Minimal ``untyped_storage()``: identity of the underlying buffer."""

    def __init__(self, t: Tensor):
        base = t._data
        while base.base is not None and isinstance(base.base, np.ndarray):
            base = base.base
        self._buf = base

    def data_ptr(self) -> int:
        return self._buf.__array_interface__["data"][0]

    def nbytes(self) -> int:
        return self._buf.nbytes


# Tensor methods that leave the graph (a detached copy, a Python number, a numpy array) are
# reported to tracers as ops: "why is my gradient None" analyses look for them.
for _name in ("detach", "detach_", "item", "tolist", "numpy"):
    setattr(Tensor, _name, traced(_name, getattr(Tensor, _name)))


def _size_str(shape) -> str:
    return "[" + ", ".join(str(s) for s in shape) + "]"
