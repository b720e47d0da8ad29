"""``torch.func.vmap``: map a function over a batch dimension of its inputs.

NOTE [vmap is a loop]: autodiag has no batched tensors. ``vmap(f)(x)`` calls ``f`` once per
index of the mapped dimension on ``x.select(in_dim, i)`` and stacks the results along
``out_dims``, all through engine ops (``select``, ``stack``), so results are differentiable and
compose with the other transforms (``vmap(grad(f))`` is the per-sample-gradient recipe). The
numbers are PyTorch's; the cost is ``B`` calls of ``f``. What a loop cannot tell from batched
execution:

- an output with ``out_dims=None`` must be the same in every call (PyTorch refuses any output
  that depends on the batch; here an output that varies across the batch is refused);
- ``.item()`` and data-dependent control flow inside ``f`` work (PyTorch refuses them);
- an empty batch (size 0) raises ``NotImplementedError``: ``f`` would never run, so the
  output's shape is unknown.

Randomness (``randomness=``): ``'error'`` (default) makes a random operation inside ``f`` raise
PyTorch's error, ``'different'`` draws independently per call, ``'same'`` restarts the random
stream at the same state for every call, so each call draws the same numbers.
"""

from __future__ import annotations

import contextlib
import functools
import threading

import numpy as np

from autodiag.func._pytree import broadcast_prefix, flatten, unflatten
from autodiag.tensor import Tensor

__all__ = ["vmap", "randomness_mode", "check_randomness"]

_RANDOMNESS = ("error", "different", "same")
_RANDOM_ERROR = (
    "vmap: called random operation while in randomness error mode. Please either use the "
    "'same' or 'different' randomness flags on vmap or perform the randomness operation out "
    "of vmap"
)


def check_randomness(randomness) -> None:
    if randomness not in _RANDOMNESS:
        raise RuntimeError(
            "Only allowed values for randomness are 'error', 'different', or 'same'. "
            f"Got {randomness}"
        )


# Threads inside an ``'error'`` block (thread id -> nesting depth), under ``_error_lock``. One
# guard stands in for the stream while any thread is inside such a block; it is taken out when
# the last one leaves, whatever order the threads leave in (a guard per thread, each restoring
# what it replaced, would leave a stale guard behind when blocks end out of order).
_error_threads: dict[int, int] = {}
_error_lock = threading.Lock()


class _RandomGuard:
    """Stands in for the global random stream (``factories._rng[0]``) while a vmap in
    ``'error'`` mode runs: any draw from a thread running such a vmap raises PyTorch's error;
    other threads draw from the real stream as usual."""

    __slots__ = ("_real",)

    def __init__(self, real) -> None:
        self._real = real

    def __getattr__(self, name):
        if threading.get_ident() in _error_threads:
            raise RuntimeError(_RANDOM_ERROR)
        return getattr(self._real, name)


@contextlib.contextmanager
def randomness_mode(randomness: str):
    """Random draws inside the block follow vmap's ``randomness`` (``'error'`` refuses them)."""
    from autodiag.ops import factories

    if randomness != "error":
        yield
        return
    me = threading.get_ident()
    with _error_lock:
        _error_threads[me] = _error_threads.get(me, 0) + 1
        if not isinstance(factories._rng[0], _RandomGuard):
            factories._rng[0] = _RandomGuard(factories._rng[0])
    try:
        yield
    finally:
        with _error_lock:
            _error_threads[me] -= 1
            if not _error_threads[me]:
                del _error_threads[me]
            guard = factories._rng[0]
            # a manual_seed inside a block replaced the guard: keep the new stream
            if not _error_threads and isinstance(guard, _RandomGuard):
                factories._rng[0] = guard._real


def _fn_name(func) -> str:
    return getattr(func, "__name__", repr(func))


def _is_dim(d) -> bool:
    return isinstance(d, int) and not isinstance(d, bool)


def _in_dims_per_leaf(func, in_dims, args: tuple):
    """(leaves of args, their spec, one in_dim per leaf), with PyTorch's checks."""
    name = _fn_name(func)
    head = f"vmap({name}, in_dims={in_dims}, ...)(<inputs>)"
    if not (_is_dim(in_dims) or isinstance(in_dims, tuple)):
        raise ValueError(
            f"{head}: expected `in_dims` to be int or a (potentially nested) tuple matching "
            f"the structure of inputs, got: {type(in_dims)}."
        )
    leaves, spec = flatten(args)
    if _is_dim(in_dims):
        dims = [in_dims] * len(leaves)
    else:
        dims = broadcast_prefix(
            in_dims, spec, is_leaf=lambda x: x is None or not isinstance(x, (tuple, list, dict))
        )
        if dims is None or len(in_dims) != len(args):
            raise ValueError(
                f"{head}: in_dims is not compatible with the structure of `inputs`. in_dims "
                f"has structure {flatten(in_dims)[1]} but inputs has structure {spec}."
            )
    for d, x in zip(dims, leaves):
        if d is None:
            continue
        if not _is_dim(d):
            raise ValueError(
                f"{head}: Got in_dim={d} for an input but in_dim must be either an integer "
                "dimension or None."
            )
        if not isinstance(x, Tensor):
            raise ValueError(
                f"{head}: Got in_dim={d} for an input but the input is of type {type(x)}. "
                "We cannot vmap over non-Tensor arguments, please use None as the "
                "respective in_dim"
            )
        n = x.dim()
        if not -n <= d < n:
            raise ValueError(
                f"{head}: Got in_dim={d} for some input, but that input is a Tensor of "
                f"dimensionality {n} so expected in_dim to satisfy -{n} <= in_dim < {n}."
            )
    return leaves, spec, dims


def _batch_size(leaves, dims) -> int:
    sizes = [x.shape[d] for x, d in zip(leaves, dims) if d is not None]
    if not sizes:
        raise ValueError("vmap: Expected at least one Tensor to vmap over")
    if any(s != sizes[0] for s in sizes):
        raise ValueError(
            "vmap: Expected all tensors to have the same size in the mapped dimension, got "
            f"sizes {sizes} for the mapped dimension"
        )
    return sizes[0]


def _unbatched(func, outputs: list, i: int):
    """The output ``i`` of every call when its out_dim is None: it must not vary."""
    first = outputs[0][i]
    for call in outputs[1:]:
        other = call[i]
        same = (
            np.array_equal(first.detach().numpy(), other.detach().numpy())
            if isinstance(first, Tensor) and isinstance(other, Tensor)
            else first is other or first == other
        )
        if not same:
            name = _fn_name(func)
            raise ValueError(
                f"vmap({name}, ...): `{name}` can not return a BatchedTensor when out_dim is None"
            )
    return first


def _stacked(func, values: list, out_dim: int) -> Tensor:
    from autodiag.ops.shape import stack

    for v in values:
        if not isinstance(v, Tensor):
            name = _fn_name(func)
            raise ValueError(
                f"vmap({name}, ...): `{name}` must only return Tensors, got type {type(v)}. "
                "Did you mean to set out_dims= to None for output?"
            )
    n = values[0].dim() + 1
    if not -n <= out_dim < n:
        raise IndexError(
            f"Dimension out of range (expected to be in range of [{-n}, {n - 1}], but got "
            f"{out_dim})"
        )
    return stack(values, out_dim)


def vmap(func, in_dims=0, out_dims=0, randomness: str = "error", *, chunk_size=None):
    """``vmap(f, in_dims, out_dims)(*args)``: ``f`` applied to every slice of the mapped
    dimension of ``args``, the results stacked along ``out_dims`` (NOTE [vmap is a loop]).

    ``in_dims``: an int for every argument, or a tuple matching the arguments (nested tuples,
    lists and dicts for nested arguments; ``None`` for an argument that is not mapped).
    Keyword arguments are passed unmapped. ``chunk_size`` is accepted and changes nothing.

    >>> import autodiag as torch
    >>> from autodiag.func import vmap, grad
    >>> vmap(torch.dot)(torch.ones(2, 3), torch.arange(6.0).reshape(2, 3))
    tensor([ 3., 12.])
    >>> vmap(grad(lambda w, x: (w * x).sum()), in_dims=(None, 0))(torch.ones(2), torch.eye(2))
    tensor([[1., 0.],
            [0., 1.]])
    """
    check_randomness(randomness)
    if chunk_size is not None and not (_is_dim(chunk_size) and chunk_size > 0):
        raise ValueError(f"vmap: chunk_size should be None or greater than 0. (got {chunk_size})")

    @functools.wraps(func)
    def wrapped(*args, **kwargs):
        from autodiag.ops import factories

        leaves, spec, dims = _in_dims_per_leaf(func, in_dims, args)
        size = _batch_size(leaves, dims)
        if size == 0:
            raise NotImplementedError(
                f"vmap({_fn_name(func)}): autodiag's vmap calls the function once per batch "
                "element (a loop) and cannot map over an empty batch (size 0)"
            )
        calls = []
        with randomness_mode(randomness):
            start = None
            if randomness == "same" and not isinstance(factories._rng[0], _RandomGuard):
                start = factories.get_rng_state()  # under an enclosing 'error' vmap draws raise
            for i in range(size):
                if start is not None:
                    factories.set_rng_state(start)
                sliced = [x if d is None else x.select(d, i) for x, d in zip(leaves, dims)]
                calls.append(func(*unflatten(sliced, spec), **kwargs))
        return _combine(func, calls, out_dims)

    return wrapped


def _combine(func, calls: list, out_dims):
    """Stack the per-call outputs along ``out_dims`` (a prefix of the output structure)."""
    flat = [flatten(c) for c in calls]
    out_spec = flat[0][1]
    name = _fn_name(func)
    for _, s in flat[1:]:
        if s != out_spec:
            raise ValueError(
                f"vmap({name}, ...): `{name}` returned outputs of different structure for "
                f"different batch elements: {out_spec} and {s}"
            )
    per_leaf = broadcast_prefix(
        out_dims,
        out_spec,
        is_leaf=lambda x: x is None or not isinstance(x, (tuple, list, dict)),
    )
    if per_leaf is None:
        raise ValueError(
            f"vmap({name}, ..., out_dims={out_dims})(<inputs>): out_dims is not compatible "
            f"with the structure of `outputs`. out_dims has structure "
            f"{flatten(out_dims)[1]} but outputs has structure {out_spec}."
        )
    leaves_per_call = [leaves for leaves, _ in flat]
    out = []
    for i, d in enumerate(per_leaf):
        if d is None:
            out.append(_unbatched(func, leaves_per_call, i))
        else:
            if not _is_dim(d):
                raise ValueError(
                    f"vmap({name}, ..., out_dims={out_dims}): `{name}` must have out_dims "
                    f"that are integers or None, got {d!r}"
                )
            out.append(_stacked(func, [leaves[i] for leaves in leaves_per_call], d))
    return unflatten(out, out_spec)
