"""Custom differentiable operations: ``autograd.Function`` with PyTorch's ctx API.

As in PyTorch, the ``ctx`` handed to ``forward`` *is* the graph node (``y.grad_fn``), an
instance of a class named ``<YourFunction>Backward`` made when the Function is defined.
"""

from __future__ import annotations

import functools

import numpy as np

from autodiag.core import grad_mode
from autodiag.core.graph import Freed, Node, SavedTensor, raise_freed
from autodiag.ops._core import NO_EDGE, edge, wrap
from autodiag.ops.views import write_version
from autodiag.tensor import Tensor, vc_of
from autodiag.trace import events
from autodiag.trace.sites import note_saver

_state = grad_mode._state


class FunctionCtx:
    """The ctx API shared by backward nodes of custom Functions."""

    def save_for_backward(self, *tensors) -> None:
        for i, t in enumerate(tensors):
            if t is not None and not isinstance(t, Tensor):
                raise TypeError(
                    "save_for_backward can only save variables, but argument "
                    f"{i} is of type {type(t).__name__}"
                )
        self.to_save = tensors

    def mark_dirty(self, *tensors) -> None:
        self._dirty = tensors

    def mark_non_differentiable(self, *tensors) -> None:
        self._non_differentiable = tensors

    def set_materialize_grads(self, value: bool) -> None:
        self.materialize_grads = value

    @property
    def saved_tensors(self) -> tuple:
        saved = self._saved
        if saved.__class__ is Freed:
            raise_freed(self)
        if saved is None:
            return ()
        return tuple(None if s is None else s.unpack_tensor(self) for s in saved)

    saved_variables = saved_tensors


class _CtxAttribute:
    """Hides a name of the backward vocabulary on a custom Function's ctx, whose attributes
    are the user's: ``ctx.needs_grad = ...`` sets a plain attribute instead of the node's
    edges (Node.needs_grad is the ``_next`` slot), and reading it unset is an AttributeError."""

    def __init__(self, name: str):
        self.name = name

    def __get__(self, obj, cls=None):
        if obj is None:
            return self
        raise AttributeError(f"'{type(obj).__name__}' object has no attribute '{self.name}'")


class BackwardCFunction(Node, FunctionCtx):
    """Base of every ``<Name>Backward`` node class."""

    __slots__ = ("__dict__",)
    _forward_cls = None
    _unpacks_saved = False  # ctx.saved_tensors is version-checked when read
    needs_grad = _CtxAttribute("needs_grad")

    def __init__(self):
        super().__init__()
        self.materialize_grads = True
        self.to_save = ()
        self._dirty = ()
        self._non_differentiable = ()
        self.needs_input_grad = ()
        self._arg_is_tensor = ()
        self._out_meta = ()

    def _apply(self, xp, grads):
        cls = self._forward_cls
        gs = []
        for g, meta in zip(grads, self._out_meta):
            if g is None:
                if self.materialize_grads and meta is not None:
                    g = np.zeros(meta[0], dtype=meta[1])
                else:
                    gs.append(None)
                    continue
            gs.append(g if isinstance(g, Tensor) else wrap(g))
        out = cls.backward(self, *gs)
        if not isinstance(out, tuple):
            out = (out,)
        n = len(self._arg_is_tensor)
        name = self.name()
        if len(out) != n:
            if len(out) > n and all(o is None for o in out[n:]):
                out = out[:n]
            else:
                raise RuntimeError(
                    f"function {name} returned an incorrect number of gradients "
                    f"(expected {n}, got {len(out)})"
                )
        result = []
        for i, (g, is_t) in enumerate(zip(out, self._arg_is_tensor)):
            if not is_t:
                if g is not None:
                    raise RuntimeError(
                        f"function {name} returned a gradient different than None "
                        f"at position {i + 1}, but the corresponding forward "
                        f"input was not a Variable"
                    )
                continue
            if g is None:
                result.append(None)
                continue
            if not isinstance(g, Tensor):
                raise RuntimeError(f"expected Variable or None (got {type(g).__name__})")
            shape, dt = self._input_meta[len(result)]
            gshape = g._data.shape
            if gshape != shape:
                if not _expandable(shape, gshape):
                    raise RuntimeError(
                        f"Function {name} returned an invalid gradient at index "
                        f"{len(result)} - got [{', '.join(map(str, gshape))}] but "
                        f"expected shape compatible with "
                        f"[{', '.join(map(str, shape))}]"
                    )
            result.append(g if not xp.arrays else g._data)
        return tuple(result)

    def _release(self, freed: Freed) -> None:
        if self._saved is not None:
            self._saved = freed


def _check_dirty(t: Tensor) -> None:
    """A Function may not modify a leaf that requires grad (or a view of one) in place."""
    if t.requires_grad and t.grad_fn is None and t._base is None:
        raise RuntimeError(
            "a leaf Variable that requires grad has been used in an in-place operation."
        )
    base = t._base
    if base is not None and base.requires_grad and base.grad_fn is None:
        raise RuntimeError(
            "a view of a leaf Variable that requires grad is being used in an in-place operation."
        )


def _expandable(shape, gshape) -> bool:
    """Can a gradient of ``gshape`` be summed down to ``shape`` (PyTorch's maybe_reduce)?"""
    if len(gshape) < len(shape):
        return False
    lead = len(gshape) - len(shape)
    return all(s == g or s == 1 for s, g in zip(shape, gshape[lead:]))


class FunctionMeta(type):
    def __init__(cls, name, bases, attrs):
        backward_cls = type(name + "Backward", (BackwardCFunction,), {"_forward_cls": cls})
        cls._backward_cls = backward_cls
        super().__init__(name, bases, attrs)


class Function(metaclass=FunctionMeta):
    """Base class of custom differentiable operations.

    >>> import autodiag as torch
    >>> class Cube(torch.autograd.Function):
    ...     @staticmethod
    ...     def forward(ctx, x):
    ...         ctx.save_for_backward(x)
    ...         return x ** 3
    ...     @staticmethod
    ...     def backward(ctx, g):
    ...         (x,) = ctx.saved_tensors
    ...         return 3 * x ** 2 * g
    >>> x = torch.tensor(2.0, requires_grad=True)
    >>> Cube.apply(x).backward(); x.grad
    tensor(12.)
    """

    @staticmethod
    def forward(ctx, *args, **kwargs):
        raise NotImplementedError(
            "You must implement the forward function for custom autograd.Function."
        )

    @staticmethod
    def backward(ctx, *grad_outputs):
        raise NotImplementedError(
            "You must implement either the backward or vjp method for "
            "your custom autograd.Function to use it with backward mode "
            "AD."
        )

    vjp = backward

    @classmethod
    def apply(cls, *args, **kwargs):
        """Run ``forward`` and record one ``<Name>Backward`` node for its outputs."""
        if not events.TRACERS:
            out = cls._record(*args, **kwargs)
            node = getattr(out[0] if isinstance(out, tuple) and out else out, "grad_fn", None)
            if node is not None and node._saved is not None:
                note_saver(node)  # NOTE [Saving sites] in core/graph.py
            return out
        if events._depth.n:
            return cls._record(*args, **kwargs)
        # the ops inside forward are not recorded, and not reported either: the Function is the op
        return events.call_traced(cls.__name__, cls._record, args, kwargs)

    @classmethod
    def _record(cls, *args, **kwargs):
        node = cls._backward_cls()
        is_tensor = tuple(isinstance(a, Tensor) for a in args)
        recording = _state.record and any(t and a.requires_grad for a, t in zip(args, is_tensor))
        node._arg_is_tensor = is_tensor
        node.needs_input_grad = tuple(
            t and a.requires_grad and _state.record for a, t in zip(args, is_tensor)
        )
        prev = _state.record
        _state.record = False
        try:
            if _has_setup_context(cls):
                outputs = cls.forward(*args, **kwargs)
                cls.setup_context(node, args, outputs)
            else:
                outputs = cls.forward(node, *args, **kwargs)
        finally:
            _state.record = prev
        single = not isinstance(outputs, tuple)
        outs = (outputs,) if single else outputs
        if not recording:
            return outputs
        node.next_functions = tuple(edge(a) if t else NO_EDGE for a, t in zip(args, is_tensor) if t)
        node._input_meta = tuple(
            (a._data.shape, a._data.dtype) for a, t in zip(args, is_tensor) if t
        )
        dirty = {id(t) for t in node._dirty}
        nondiff = {id(t) for t in node._non_differentiable}
        input_ids = {id(a) for a, t in zip(args, is_tensor) if t}
        wrapped, metas = [], []
        for i, o in enumerate(outs):
            if not isinstance(o, Tensor):
                wrapped.append(o)
                metas.append(None)
                continue
            rebase = False
            if id(o) in dirty:
                _check_dirty(o)
                t = o
                write_version(vc_of(t))
                # a modified view: its base's history is rebased on this node, as PyTorch's
                # rebase_history, which runs the node on the view's region of the gradient
                rebase = t._base is not None
                if rebase and (len(outs) != 1 or args[0] is not o):
                    raise NotImplementedError(
                        f"autodiag: {cls.__name__}.apply modified in place (mark_dirty) a view "
                        f"that is not its only output and first input; clone() the view "
                        f"before passing it"
                    )
            elif id(o) in input_ids:
                vc = vc_of(o)
                t = Tensor._make(o._data, None, False, vc)  # an input returned as-is
                t._base = o._base if o._base is not None else o
                from autodiag.ops import views

                t._creation = views.IN_CUSTOM_FUNCTION  # PyTorch refuses to write it in place
                views.register_view(vc, t)
            else:
                t = o
            metas.append((t._data.shape, t._data.dtype))
            if id(o) in nondiff or t._data.dtype.kind != "f":
                t.requires_grad = False
                t.grad_fn = None
            elif rebase:
                from autodiag.ops.inplace import _rebase

                _rebase(t, t._base, node)
            else:
                t.grad_fn = node
                t.requires_grad = True
                t._output_nr = i
            wrapped.append(t)
        node._out_meta = tuple(metas)
        node._num_outputs = len(outs)
        # saved outputs are kept as outputs (array + counter): no node -> tensor -> node cycle
        wrapped_of = {id(o): w for o, w in zip(outs, wrapped)}
        saved = []
        for t in node.to_save or ():
            if t is None:
                saved.append(None)
            elif isinstance(wrapped_of.get(id(t)), Tensor) and wrapped_of[id(t)].grad_fn is node:
                saved.append(SavedTensor(wrapped_of[id(t)], True))
            else:
                saved.append(SavedTensor(t, False))
        node._saved = tuple(saved)
        node.to_save = ()
        return wrapped[0] if single else tuple(wrapped)


def _has_setup_context(cls) -> bool:
    return (
        "setup_context" in {k for c in cls.__mro__ if c is not Function for k in vars(c)}
        and cls.setup_context is not None
    )


ONCE_DIFFERENTIABLE_ERROR = (
    "trying to differentiate twice a function that was marked with @once_differentiable"
)


class Error(Node):
    """PyTorch's ``DelayedError`` node: differentiating through it raises its message."""

    __slots__ = ("msg", "_num_outputs")

    def name(self) -> str:
        return "torch::autograd::Error"

    def _apply(self, xp, grads):
        raise RuntimeError(self.msg)


def once_differentiable(fn):
    """Run ``backward`` without recording; its result cannot be differentiated again.

    Under ``create_graph=True`` the gradients still require grad (as in PyTorch), but a backward
    through them raises "trying to differentiate twice ..." instead of a wrong (zero) gradient.
    """

    @functools.wraps(fn)
    def wrapper(ctx, *args):
        with grad_mode.no_grad():
            outputs = fn(ctx, *args)
        if not _state.record or not any(isinstance(a, Tensor) and a.requires_grad for a in args):
            return outputs
        single = not isinstance(outputs, tuple)
        outs = (outputs,) if single else outputs
        fakes = [None if o is None else Tensor._make(o._data, None, True, vc_of(o)) for o in outs]
        err = Error(tuple(NO_EDGE if f is None else edge(f) for f in fakes))
        err.msg = ONCE_DIFFERENTIABLE_ERROR
        err._num_outputs = len(outs)
        wrapped = tuple(
            None if f is None else Tensor._make(f._data, err, True, vc_of(f), i)
            for i, f in enumerate(fakes)
        )
        return wrapped[0] if single else wrapped

    return wrapper
