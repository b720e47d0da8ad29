"""``Optimizer``: parameter groups, per-parameter state, ``zero_grad``, ``state_dict`` and step
hooks, as ``torch.optim.Optimizer``.

Updates are written into each parameter's array in place and bump its version counter, exactly
as PyTorch's in-place ``add_`` under ``no_grad`` does: parameters stay the same leaf tensors, and
a graph that saved a parameter before the step refuses to backward through the stale value
("modified by an inplace operation").
"""

from __future__ import annotations

import functools
from collections import defaultdict
from collections.abc import Iterable
from copy import deepcopy
from itertools import chain

import numpy as np

from autodiag import _warnings
from autodiag.core import grad_mode
from autodiag.core.graph import RemovableHandle, _add_hook, _HookDict
from autodiag.ops.views import write_version
from autodiag.tensor import Tensor, vc_of
from autodiag.trace import events
from autodiag.trace.sites import capture_stack, user_site

__all__ = ["Optimizer"]


class _RequiredParameter:
    def __repr__(self) -> str:
        return "<required parameter>"


required = _RequiredParameter()


def _typename(obj) -> str:
    if isinstance(obj, Tensor):
        return obj.dtype.legacy_type_name
    return type(obj).__qualname__


def _use_grad_for_differentiable(step):
    """Run ``step`` with grad mode set to the optimizer's ``differentiable`` default (off)."""

    @functools.wraps(step)
    def wrapper(self, *args, **kwargs):
        state = grad_mode._state
        prev = state.record
        state.record = bool(self.defaults.get("differentiable", False))
        try:
            return step(self, *args, **kwargs)
        finally:
            state.record = prev

    return wrapper


def _hooked_step(step):
    """Wrap a subclass's ``step``: pre-hooks, the step, post-hooks, then ``_step_done``. While
    they run, ``events.STEPPING`` counts the step in this thread: an in-place write the step
    makes (a custom optimizer's ``p.add_``) is an optimizer write, as on ``--engine torch``.

    Nested calls (a subclass's step calling ``super().step()``) report once, from the outermost.
    """

    @functools.wraps(step)
    def wrapper(self, *args, **kwargs):
        if self.__dict__.get("_in_step"):
            return step(self, *args, **kwargs)
        self._in_step = True
        stepping = events.STEPPING
        stepping.n += 1  # this thread's writes until the post hooks are the optimizer's
        try:
            for pre in list(self._optimizer_step_pre_hooks.values()):
                r = pre(self, args, kwargs)
                if r is not None:
                    if isinstance(r, tuple) and len(r) == 2:
                        args, kwargs = r
                    else:
                        raise RuntimeError(
                            f"{pre} must return None or a tuple of (new_args, "
                            f"new_kwargs), but got {r}."
                        )
            out = step(self, *args, **kwargs)
            for post in list(self._optimizer_step_post_hooks.values()):
                post(self, args, kwargs)
        finally:
            self._in_step = False
            stepping.n -= 1
        self._step_done()
        return out

    wrapper._autodiag_hooked = True
    return wrapper


def _same_layout(g: np.ndarray, d: np.ndarray) -> np.ndarray:
    """``g`` in ``d``'s memory order. NOTE: elementwise updates mixing a C-ordered parameter
    with a Fortran-ordered gradient (e.g. a weight's gradient through ``w.t()``) run ~20x slower
    than on matching layouts; one transposing copy is far cheaper than three such passes."""
    if g.flags.c_contiguous or not d.flags.c_contiguous:
        return g
    return np.ascontiguousarray(g)


class ParamWriter:
    """Records in-place updates of parameters, as PyTorch's in-place ``add_``/``mul_`` under
    ``no_grad`` do: each write bumps the version counter shared with the parameter's views and
    remembers (op, site) for the "modified by an inplace operation" message (NOTE [Version
    counters] in core/graph.py). The user's call site is captured once per step, not once
    per parameter (a frame walk each: the optimizer step's main overhead on small models).

    >>> import autodiag as torch
    >>> p = torch.nn.Parameter(torch.zeros(2))
    >>> w = ParamWriter()
    >>> w(p); p._version
    1
    """

    __slots__ = ("site", "stack")

    def __init__(self) -> None:
        self.site = user_site()
        self.stack = None

    def __call__(self, p: Tensor, op: str = "add_") -> None:
        write_version(vc_of(p), (op, self.site))
        watchers = events.LISTENERS["on_inplace"]
        if watchers:  # the in-place analysis sees optimizer writes as the user's own add_
            if self.stack is None:
                self.stack = capture_stack(2)
            for t in watchers:  # the in-place analysis tells them apart (NOTE [Retained saves])
                write = getattr(t, "on_param_write", None)
                if write is not None:
                    write(p, op, self.stack)
                else:
                    t.on_inplace(p, op, self.stack)


class Optimizer:
    """Base class of optimizers.

    >>> import autodiag as torch
    >>> w = torch.nn.Parameter(torch.ones(2))
    >>> opt = torch.optim.SGD([w], lr=0.1)
    >>> (w * w).sum().backward()
    >>> opt.step(); w
    Parameter containing:
    tensor([0.8000, 0.8000], requires_grad=True)
    """

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        step = cls.__dict__.get("step")
        if step is not None and not getattr(step, "_autodiag_hooked", False):
            cls.step = _hooked_step(step)

    def __init__(self, params, defaults: dict) -> None:
        self.defaults = defaults
        self._optimizer_step_pre_hooks = _HookDict()
        self._optimizer_step_post_hooks = _HookDict()
        if isinstance(params, Tensor):
            raise TypeError(
                "params argument given to the optimizer should be an iterable of "
                "Tensors or dicts, but got " + _typename(params)
            )
        self.state: defaultdict = defaultdict(dict)
        self.param_groups: list[dict] = []
        param_groups = list(params)
        if len(param_groups) == 0:
            raise ValueError("optimizer got an empty parameter list")
        if not isinstance(param_groups[0], dict):
            param_groups = [{"params": param_groups}]
        for group in param_groups:
            self.add_param_group(group)

    def _step_done(self) -> None:
        """Called at the end of every ``step()`` (after the post-hooks): the one place that
        reports ``on_optimizer_step(optimizer)`` to tracers, so every optimizer, built in or
        user-defined, reports its steps without touching its update code."""
        if events.TRACERS:
            events.emit_optimizer_step(self)

    # ------------------------------------------------------------------ groups

    def add_param_group(self, param_group: dict) -> None:
        """Add a group of parameters with its own options (defaults fill the rest)."""
        if not isinstance(param_group, dict):
            raise TypeError(f"param_group must be a dict, but got {type(param_group)}")
        params = param_group["params"]
        if isinstance(params, Tensor):
            param_group["params"] = [params]
        elif isinstance(params, set):
            raise TypeError(
                "optimizer parameters need to be organized in ordered collections, "
                "but the ordering of tensors in sets will change between runs. Please "
                "use a list instead."
            )
        else:
            param_group["params"] = list(params)
        names, tensors = [], []
        for p in param_group["params"]:
            if isinstance(p, tuple):
                names.append(p[0])
                tensors.append(p[1])
            else:
                tensors.append(p)
        param_group["params"] = tensors
        if names:
            if len(names) != len(tensors):
                raise ValueError(
                    "all optimizer params should be with/without names. Some param "
                    "names are missing"
                )
            param_group["param_names"] = names
        for p in tensors:
            if not isinstance(p, Tensor):
                raise TypeError(
                    "optimizer can only optimize Tensors, but one of the params is " + _typename(p)
                )
            if not self.defaults.get("differentiable", None) and not (p.is_leaf or p.retains_grad):
                raise ValueError("can't optimize a non-leaf Tensor")
        for name, default in self.defaults.items():
            if default is required and name not in param_group:
                raise ValueError(
                    f"parameter group didn't specify a value of required "
                    f"optimization parameter {name}"
                )
            param_group.setdefault(name, default)
        if len(tensors) != len({id(p) for p in tensors}):
            _warnings.warn(
                "optimizer contains a parameter group with duplicate parameters; in "
                "future, this will cause an error; see "
                "github.com/pytorch/pytorch/issues/40967 for more information"
            )
        seen = set()
        for group in self.param_groups:
            seen.update(id(p) for p in group["params"])
            if ("param_names" in param_group) != ("param_names" in group):
                txt = "with names" if "param_names" in param_group else "without names"
                raise ValueError(
                    f"all optimizer param groups should be with/without names. "
                    f"cannot add param group {txt} to the optimizer"
                )
        if seen & {id(p) for p in tensors}:
            raise ValueError("some parameters appear in more than one parameter group")
        self.param_groups.append(param_group)

    # ------------------------------------------------------------------ gradients

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Reset the gradients of all optimized parameters: to None (default) or to zeros."""
        for group in self.param_groups:
            for p in group["params"]:
                g = p._grad
                if g is not None:
                    if set_to_none:
                        p._grad = None
                    else:
                        if g.grad_fn is not None:
                            g.detach_()
                        else:
                            g.requires_grad_(False)
                        g.zero_()

    def step(self, closure=None):
        raise NotImplementedError

    # ------------------------------------------------------------------ hooks

    def register_step_pre_hook(self, hook) -> RemovableHandle:
        """``hook(optimizer, args, kwargs)`` runs before each ``step``."""
        return _add_hook(self._optimizer_step_pre_hooks, hook)

    def register_step_post_hook(self, hook) -> RemovableHandle:
        """``hook(optimizer, args, kwargs)`` runs after each ``step``."""
        return _add_hook(self._optimizer_step_post_hooks, hook)

    # ------------------------------------------------------------------ state dict

    def state_dict(self) -> dict:
        """``{'state': {index: {...}}, 'param_groups': [{..., 'params': [indices]}]}`` with
        parameters replaced by their position across groups (the tensors are not copied)."""
        mappings: dict = {}
        start = 0

        def pack_group(group):
            nonlocal start
            packed = {k: v for k, v in group.items() if k != "params"}
            mappings.update(
                {id(p): i for i, p in enumerate(group["params"], start) if id(p) not in mappings}
            )
            packed["params"] = [mappings[id(p)] for p in group["params"]]
            start += len(packed["params"])
            return packed

        param_groups = [pack_group(g) for g in self.param_groups]
        packed_state = {
            (mappings[id(k)] if isinstance(k, Tensor) else k): v for k, v in self.state.items()
        }
        return {"state": packed_state, "param_groups": param_groups}

    def load_state_dict(self, state_dict: dict) -> None:
        """Restore groups' options and per-parameter state saved by ``state_dict`` (tensors are
        cast to each parameter's dtype, ``step`` counters kept as they are)."""
        state_dict = state_dict.copy()
        groups = self.param_groups
        saved_groups = deepcopy(state_dict["param_groups"])
        if len(groups) != len(saved_groups):
            raise ValueError("loaded state dict has a different number of parameter groups")
        if any(len(g["params"]) != len(s["params"]) for g, s in zip(groups, saved_groups)):
            raise ValueError(
                "loaded state dict contains a parameter group that doesn't match the "
                "size of optimizer's group"
            )
        id_map = dict(
            zip(
                chain.from_iterable(g["params"] for g in saved_groups),
                chain.from_iterable(g["params"] for g in groups),
            )
        )

        def cast(param, value, key=None):
            if isinstance(value, Tensor):
                if key == "step":
                    return value
                return value.to(dtype=param.dtype) if param.is_floating_point() else value
            if isinstance(value, dict):
                return {k: cast(param, v, key=k) for k, v in value.items()}
            if isinstance(value, Iterable) and not isinstance(value, str):
                return type(value)(cast(param, v) for v in value)
            return value

        state: defaultdict = defaultdict(dict)
        for k, v in state_dict["state"].items():
            if k in id_map:
                param = id_map[k]
                state[param] = cast(param, v)
            else:
                state[k] = v
        for g, ng in zip(groups, saved_groups):
            ng["params"] = g["params"]
            if "param_names" in g and "param_names" not in ng:
                ng["param_names"] = g["param_names"]
        self.state = state
        self.param_groups = saved_groups

    def __getstate__(self) -> dict:
        return {"defaults": self.defaults, "state": self.state, "param_groups": self.param_groups}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self.__dict__.setdefault("_optimizer_step_pre_hooks", _HookDict())
        self.__dict__.setdefault("_optimizer_step_post_hooks", _HookDict())

    def __repr__(self) -> str:
        s = self.__class__.__name__ + " ("
        for i, group in enumerate(self.param_groups):
            s += f"\nParameter Group {i}\n"
            for key in sorted(group.keys()):
                if key != "params":
                    s += f"    {key}: {group[key]}\n"
        return s + ")"


def _closure_loss(closure):
    """``closure()``'s loss, computed with grad enabled (a step runs under no_grad), or None."""
    if closure is None:
        return None
    with grad_mode.enable_grad():
        return closure()


def _zeros_state(p) -> Tensor:
    """A state buffer for parameter ``p``: zeros of its shape and dtype, C-ordered."""
    return Tensor._make(np.zeros_like(p._data, order="C"))


def _scalar_step_dtype():
    """The dtype of PyTorch's 0-d ``step`` counters (``_get_scalar_dtype``): float64 under a
    float64 default dtype, float32 otherwise."""
    from autodiag.dtypes import float64, get_default_dtype

    return np.float64 if get_default_dtype() is float64 else np.float32


def _check_hyper(name: str, value, low: float = 0.0) -> None:
    """PyTorch's ``ValueError(f"Invalid {name}: {value}")`` for an argument below ``low``."""
    if not low <= value:
        raise ValueError(f"Invalid {name}: {value}")


def _check_lr(lr) -> None:
    if isinstance(lr, Tensor) and lr.numel() != 1:
        raise ValueError("Tensor lr must be 1-element")
    _check_hyper("learning rate", lr)


def _not_supported(opt: str, **flags) -> None:
    """NotImplementedError naming the optimizer and every unsupported flag that is set."""
    on = [k for k, v in flags.items() if v]
    if on:
        raise NotImplementedError(
            f"autodiag: {opt}({', '.join(f'{k}=True' for k in on)}) is not supported"
        )
