"""Activation checkpointing: trade compute for memory by recomputing a forward in backward.

``checkpoint(fn, *args, use_reentrant=...)`` runs ``fn`` without keeping the tensors its ops save
for backward, and runs it again when backward needs them. Both PyTorch variants are here:

- **use_reentrant=False** (recommended): the forward runs under ``saved_tensors_hooks`` whose pack
  hook keeps a small placeholder instead of each saved tensor. The first unpack in backward
  re-runs ``fn`` (RNG state restored) and fills every placeholder with the recomputed tensor, in
  save order. The graph is the ordinary one (``MulBackward0`` ...); ``autograd.grad``,
  ``backward(inputs=...)`` and double backward work.
- **use_reentrant=True** (PyTorch's default when ``use_reentrant`` is omitted, with its
  warning): a custom Function, ``CheckpointFunctionBackward`` in the graph, runs ``fn`` under
  ``no_grad`` and, in backward, re-runs it with grad enabled and calls ``backward`` inside
  backward. As in PyTorch it refuses ``autograd.grad`` and ``backward(inputs=...)``.

>>> import autodiag as torch
>>> from autodiag.utils.checkpoint import checkpoint
>>> x = torch.tensor([0.5, 1.0], requires_grad=True)
>>> y = checkpoint(lambda t: (t.sin() * t).sum(), x, use_reentrant=False)
>>> y.backward(); x.grad
tensor([0.9182, 1.3818])
"""

from __future__ import annotations

import sys
import weakref

from autodiag import _warnings
from autodiag.autograd.function import Function
from autodiag.core import grad_mode
from autodiag.core.graph import SavedTensor, saved_tensors_hooks
from autodiag.ops.factories import get_rng_state, set_rng_state
from autodiag.tensor import Tensor

__all__ = [
    "checkpoint",
    "checkpoint_sequential",
    "CheckpointError",
    "CheckpointFunction",
    "detach_variable",
]


class CheckpointError(RuntimeError):
    """The recomputed forward did not save the same tensors as the original one."""


class _rng_restored:
    """Run a block with the RNG state ``state`` (None: untouched), then restore the caller's."""

    def __init__(self, state):
        self.state = state

    def __enter__(self):
        if self.state is not None:
            self.outer = get_rng_state()
            set_rng_state(self.state)

    def __exit__(self, *exc):
        if self.state is not None:
            set_rng_state(self.outer)
        return False


def detach_variable(inputs: tuple) -> tuple:
    """Detached copies of the tensors in ``inputs`` that keep their ``requires_grad``."""
    if not isinstance(inputs, tuple):
        raise RuntimeError(
            f"Only tuple of tensors is supported. Got Unsupported input type: "
            f"{type(inputs).__name__}"
        )
    out = []
    for a in inputs:
        if isinstance(a, Tensor):
            d = a.detach()
            d.requires_grad = a.requires_grad
            a = d
        out.append(a)
    return tuple(out)


def _warn_if_no_input_requires_grad(args) -> None:
    if not any(a.requires_grad for a in args if isinstance(a, Tensor)):
        # stacklevel: this, CheckpointFunction.forward, Function.apply, checkpoint, its caller
        _warnings.warn(
            "None of the inputs have requires_grad=True. Gradients will be None", UserWarning
        )


_USE_REENTRANT_WARNING = (
    "torch.utils.checkpoint: the use_reentrant parameter should be passed explicitly. Starting "
    "in PyTorch 2.9, calling checkpoint without use_reentrant will raise an exception. "
    "use_reentrant=False is recommended, but if you need to preserve the current default "
    "behavior, you can pass use_reentrant=True. Refer to docs for more details on the "
    "differences between the two variants."
)


def checkpoint(
    function,
    *args,
    use_reentrant: bool | None = None,
    context_fn=None,
    determinism_check: str = "default",
    debug: bool = False,
    early_stop: bool = True,
    **kwargs,
):
    """``function(*args, **kwargs)``, with its saved tensors recomputed in backward.

    ``preserve_rng_state=True`` (a keyword, as in PyTorch) replays the RNG state of the forward
    during recomputation, so random ops (dropout masks) draw the same numbers. ``context_fn`` and
    ``debug`` are not supported (NotImplementedError). ``determinism_check`` is ``"default"``
    (recomputed tensors must have the saved shapes and dtypes) or ``"none"``. ``early_stop`` is
    accepted; the recomputation always runs ``function`` to its end (see ``_Frame._recompute``).

    >>> import autodiag as torch
    >>> from autodiag.utils.checkpoint import checkpoint
    >>> x = torch.tensor([1.0, 2.0], requires_grad=True)
    >>> checkpoint(lambda t: t * t, x, use_reentrant=True).grad_fn.name()
    'CheckpointFunctionBackward'
    """
    if use_reentrant is None:
        _warnings.warn(_USE_REENTRANT_WARNING, UserWarning)
        use_reentrant = True
    preserve = kwargs.pop("preserve_rng_state", True)
    if kwargs and use_reentrant:
        raise ValueError("Unexpected keyword arguments: " + ",".join(kwargs))
    if use_reentrant:
        if context_fn is not None or debug is not False:
            raise ValueError(
                "Passing `context_fn` or `debug` is only supported when use_reentrant=False."
            )
        return CheckpointFunction.apply(function, preserve, *args)
    if context_fn is not None or debug:
        raise NotImplementedError(
            "autodiag: torch.utils.checkpoint's context_fn and debug options are not supported"
        )
    if determinism_check not in ("default", "none"):
        raise ValueError(
            f"determinism_check should be one of ['default', 'none'], but got {determinism_check}"
        )
    if not grad_mode.is_grad_enabled():
        return function(*args, **kwargs)
    frame = _Frame(
        function,
        args,
        kwargs,
        get_rng_state() if preserve else None,
        check_metadata=determinism_check == "default",
    )
    with saved_tensors_hooks(frame.pack, frame.unpack):
        out = function(*args, **kwargs)
    frame.forward_done = True
    return out


def checkpoint_sequential(
    functions, segments: int, input, use_reentrant: bool | None = None, **kwargs
):
    """Run ``functions`` (a list, or a module with ``children()``) in ``segments`` chunks, each
    but the last checkpointed.

    >>> import autodiag as torch
    >>> from autodiag.utils.checkpoint import checkpoint_sequential
    >>> x = torch.tensor([1.0, 2.0], requires_grad=True)
    >>> fs = [torch.sin, torch.exp, torch.tanh, torch.sigmoid]
    >>> y = checkpoint_sequential(fs, 2, x, use_reentrant=False)
    """
    if use_reentrant is None:
        _warnings.warn(
            "torch.utils.checkpoint.checkpoint_sequential: the use_reentrant parameter "
            "should be passed explicitly. In version 2.9 we will raise an exception if "
            "use_reentrant is not passed. use_reentrant=False is recommended, but if "
            "you need to preserve the current default behavior, you can pass "
            "use_reentrant=True. Refer to docs for more details on the differences "
            "between the two variants.",
            UserWarning,
        )
        use_reentrant = True
    preserve = kwargs.pop("preserve_rng_state", True)
    if kwargs:
        raise ValueError("Unexpected keyword arguments: " + ",".join(kwargs))
    if hasattr(functions, "children") and not isinstance(functions, (list, tuple)):
        functions = list(functions.children())

    def run(start: int, end: int):
        def forward(x):
            for j in range(start, end + 1):
                x = functions[j](x)
            return x

        return forward

    size = len(functions) // segments
    end = -1
    for start in range(0, size * (segments - 1), size):
        end = start + size - 1
        input = checkpoint(
            run(start, end), input, use_reentrant=use_reentrant, preserve_rng_state=preserve
        )
    return run(end + 1, len(functions) - 1)(input)


# ---------------------------------------------------------------------------------------------
# Non-reentrant: saved_tensors_hooks and recomputation
# ---------------------------------------------------------------------------------------------


class _Holder:
    """What the graph keeps instead of a saved tensor: filled by recomputation, emptied by the
    unpack that uses it (a second backward recomputes again, as PyTorch does)."""

    __slots__ = ("value", "__weakref__")

    def __init__(self):
        self.value = None


class _Frame:
    """One checkpointed call: its inputs, RNG state and the placeholders of its saved tensors."""

    def __init__(self, fn, args, kwargs, rng_state, check_metadata: bool):
        self.fn, self.kwargs, self.rng_state = fn, kwargs, rng_state
        # inputs are kept with their versions: an in-place write before backward is an error
        self.args = [(a, a._version) if isinstance(a, Tensor) else a for a in args]
        self.holders: list = []  # weakrefs, in save order
        self.metas: list = []  # (shape, dtype) of each saved tensor
        self.check_metadata = check_metadata
        self.forward_done = False

    def pack(self, t: Tensor) -> _Holder:
        h = _Holder()
        self.holders.append(weakref.ref(h))
        self.metas.append((t._data.shape, t._data.dtype))
        return h

    def unpack(self, h: _Holder) -> Tensor:
        if h.value is None:
            self._recompute()
        v, h.value = h.value, None
        return v

    def _inputs(self) -> list:
        out = []
        for a in self.args:
            if isinstance(a, tuple):
                t, version = a
                if t._version != version:
                    _raise_modified_input(t, version)
                a = t
            out.append(a)
        return out

    def _recompute(self) -> None:
        holders, count = self.holders, [0]

        def pack(t):
            i = count[0]
            count[0] += 1
            if i >= len(holders):
                raise CheckpointError(
                    "torch.utils.checkpoint: trying to save more tensors "
                    "during recomputation than during the original forward "
                    "pass."
                )
            h = holders[i]()
            if h is not None:  # the node that saved it may be gone (partial graph freed)
                if self.check_metadata and (t._data.shape, t._data.dtype) != self.metas[i]:
                    raise CheckpointError(_metadata_message(i, self.metas[i], t))
                # NOTE: the recomputed tensor keeps its history (not detached): under
                # create_graph the gradient then flows through the recomputed ops back to the
                # inputs, which is how double backward through a checkpoint stays correct.
                h.value = t
            return _Packed(t)

        # NOTE: no early stop (PyTorch raises out of the pack hook once every placeholder is
        # filled). Raising there would leave the op being recorded half-built, and a recomputed
        # tensor saved as that op's output would carry the broken node into double backward.
        args = self._inputs()
        with (
            _rng_restored(self.rng_state),
            saved_tensors_hooks(pack, _Packed.unpack),
            grad_mode.enable_grad(),
        ):
            self.fn(*args, **self.kwargs)
        if count[0] != len(holders):
            raise CheckpointError(
                f"torch.utils.checkpoint: A different number of tensors was "
                f"saved during the original forward and recomputation.\n"
                f"Number of tensors saved during forward: {len(holders)}\n"
                f"Number of tensors saved during recomputation: {count[0]}."
            )


class _Packed:
    """A tensor saved by the recomputed graph itself, without a reference cycle: an output of
    the saving node is kept as array + weak node reference (the node owns the saved tensor)."""

    __slots__ = ("tensor", "data", "vc", "node", "output_nr")

    def __init__(self, t: Tensor):
        if t.grad_fn is None:
            self.tensor = t  # a leaf or a constant: it owns no graph, so no cycle
            return
        self.tensor = None
        self.data, self.vc, self.output_nr = t._data, t._vc, t._output_nr
        self.node = weakref.ref(t.grad_fn)

    def unpack(self) -> Tensor:
        if self.tensor is not None:
            return self.tensor
        node = self.node()
        return Tensor._make(self.data, node, node is not None, self.vc, self.output_nr)


def _metadata_message(i: int, saved, t: Tensor) -> str:
    def meta(shape, dtype):
        from autodiag import dtypes

        return (
            f"{{'shape': torch.Size([{', '.join(map(str, shape))}]), 'dtype': "
            f"torch.{dtypes.from_numpy_dtype(dtype).name}, 'device': device(type='cpu')}}"
        )

    return (
        "torch.utils.checkpoint: Recomputed values for the following tensors have different "
        f"metadata than during the forward pass.\ntensor at position {i}:\nsaved metadata: "
        f"{meta(*saved)}\nrecomputed metadata: {meta(t._data.shape, t._data.dtype)}\n"
    )


class _CheckpointNode:
    """Names the checkpoint in the in-place error (no graph node owns the frame's inputs)."""

    @staticmethod
    def name() -> str:
        return "torch.utils.checkpoint"


def _raise_modified_input(t: Tensor, version: int) -> None:
    from autodiag.core import errors

    saved = SavedTensor.compact(t)
    saved.version = version
    raise RuntimeError(errors.inplace_modified_message(saved, _CheckpointNode()))


# ---------------------------------------------------------------------------------------------
# Reentrant: a custom Function whose backward runs backward
# ---------------------------------------------------------------------------------------------


def _checkpoint_valid() -> bool:
    """False inside a backward started by ``autograd.grad`` or ``backward(inputs=...)``.

    PyTorch asks its engine whether the current graph task has an execution filter. autodiag's
    engine keeps the task as a local of ``execute``, so the innermost running ``execute`` frame
    is read (tests/test_checkpoint_torch.py pins this against PyTorch's error).
    """
    from autodiag.autograd.engine import execute

    code = execute.__code__
    f = sys._getframe(1)
    while f is not None:
        if f.f_code is code:
            task = f.f_locals.get("task")
            return task is None or task.needed is None
        f = f.f_back
    return True


class CheckpointFunction(Function):
    """PyTorch's reentrant checkpoint: ``CheckpointFunctionBackward`` in the graph."""

    @staticmethod
    def forward(ctx, run_function, preserve_rng_state, *args):
        _warn_if_no_input_requires_grad(args)
        ctx.run_function = run_function
        ctx.fwd_rng_state = get_rng_state() if preserve_rng_state else None
        ctx.inputs = [None if isinstance(a, Tensor) else a for a in args]
        ctx.tensor_indices = [i for i, a in enumerate(args) if isinstance(a, Tensor)]
        ctx.save_for_backward(*(a for a in args if isinstance(a, Tensor)))
        with grad_mode.no_grad():
            return run_function(*args)

    @staticmethod
    def backward(ctx, *grads):
        from autodiag.autograd import backward

        if not _checkpoint_valid():
            raise RuntimeError(
                "When use_reentrant=True, torch.utils.checkpoint is incompatible "
                "with .grad() or passing an `inputs` parameter to .backward(). To "
                "resolve this error, you can either set use_reentrant=False, or "
                "call .backward() without passing the `inputs` argument."
            )
        inputs = list(ctx.inputs)
        for i, t in zip(ctx.tensor_indices, ctx.saved_tensors):
            inputs[i] = t
        with _rng_restored(ctx.fwd_rng_state):
            detached = detach_variable(tuple(inputs))
            with grad_mode.enable_grad():
                outputs = ctx.run_function(*detached)
        if isinstance(outputs, Tensor):
            outputs = (outputs,)
        pairs = [
            (o, g) for o, g in zip(outputs, grads) if isinstance(o, Tensor) and o.requires_grad
        ]
        if not pairs:
            raise RuntimeError(
                "none of output has requires_grad=True, this checkpoint() is not necessary"
            )
        backward([o for o, _ in pairs], [g for _, g in pairs])
        return (None, None) + tuple(a.grad if isinstance(a, Tensor) else None for a in detached)
