"""``torch.func.functional_call``: call a module with some of its parameters and buffers
replaced by given tensors, for the duration of the call.

The replacement is done in the modules' own ``_parameters`` / ``_buffers`` dicts and undone
afterwards, whatever the call raises; the module's own tensors are never written (a BatchNorm
updates the running statistics it was given, as in PyTorch).
"""

from __future__ import annotations

__all__ = ["functional_call", "stack_module_state"]

_MISSING = object()


def _merged(parameter_and_buffer_dicts) -> dict:
    if isinstance(parameter_and_buffer_dicts, dict):
        return dict(parameter_and_buffer_dicts)
    if not isinstance(parameter_and_buffer_dicts, (list, tuple)):
        raise ValueError(
            "Expected parameter_and_buffer_dicts to be a dict, or a list/tuple of dicts, "
            f"but got {type(parameter_and_buffer_dicts)}"
        )
    if not all(isinstance(d, dict) for d in parameter_and_buffer_dicts):
        raise ValueError("Expected all elements of parameter_and_buffer_dicts to be dictionaries")
    merged: dict = {}
    repeated: list = []
    for d in parameter_and_buffer_dicts:
        for k, v in d.items():
            if k in merged and k not in repeated:
                repeated.append(k)
            merged[k] = v
    if repeated:
        raise ValueError(
            f"{repeated} appeared in multiple dictionaries; behavior of functional call is "
            "ambiguous"
        )
    return merged


def _tied_names(module) -> dict:
    """name -> every name of the same tensor (parameters and buffers shared under two names)."""
    by_id: dict = {}
    members = list(module.named_parameters(remove_duplicate=False)) + list(
        module.named_buffers(remove_duplicate=False)
    )
    for name, t in members:
        by_id.setdefault(id(t), []).append(name)
    return {name: names for names in by_id.values() for name in names}


class _Swap:
    """Put ``value`` in place of the tensor called ``name`` (dotted) under ``module``."""

    def __init__(self, module, name: str, value) -> None:
        prefix, _, attr = name.rpartition(".")
        self.owner = module.get_submodule(prefix) if prefix else module
        self.attr = attr
        d = self.owner.__dict__
        for store in ("_parameters", "_buffers"):
            if attr in d[store]:
                self.store = d[store]
                break
        else:  # a name the module does not have (strict=False): a plain attribute for the call
            self.store = d
        self.old = self.store.get(attr, _MISSING)
        self.store[attr] = value

    def undo(self) -> None:
        if self.old is _MISSING:
            self.store.pop(self.attr, None)
        else:
            self.store[self.attr] = self.old


def functional_call(
    module,
    parameter_and_buffer_dicts,
    args=None,
    kwargs=None,
    *,
    tie_weights: bool = True,
    strict: bool = False,
):
    """``module(*args, **kwargs)`` with the named parameters/buffers replaced by the given
    tensors (a dict, or a tuple of dicts with distinct keys).

    ``strict=True`` requires exactly the module's names; ``tie_weights`` replaces a tensor that
    the module shares under several names under all of them.

    >>> import autodiag as torch
    >>> from autodiag.func import functional_call
    >>> lin = torch.nn.Linear(2, 1)
    >>> params = {"weight": torch.ones(1, 2), "bias": torch.zeros(1)}
    >>> functional_call(lin, params, (torch.tensor([1.0, 2.0]),))
    tensor([3.])
    """
    values = _merged(parameter_and_buffer_dicts)
    tied = _tied_names(module)
    if strict:
        unexpected = [k for k in values if k not in tied]
        missing = [k for k in tied if k not in values]
        if unexpected or missing:
            lines = []
            if unexpected:
                lines.append("Unexpected key(s): " + ", ".join(repr(k) for k in unexpected) + ".")
            if missing:
                lines.append("Missing key(s): " + ", ".join(repr(k) for k in missing) + ".")
            raise RuntimeError(
                f"Error(s) in reparametrizing for {type(module).__name__}:\n\t" + "\n\t".join(lines)
            )
    if tie_weights:
        for name, value in list(values.items()):
            for other in tied.get(name, ()):
                values.setdefault(other, value)
    if args is None:
        args = ()
    elif not isinstance(args, tuple):
        args = (args,)
    swaps: list = []
    try:
        for name, value in values.items():
            swaps.append(_Swap(module, name, value))
        return module(*args, **(kwargs or {}))
    finally:
        for s in reversed(swaps):
            s.undo()


def _stacked_leaf(tensors: tuple, name: str):
    from autodiag.ops.shape import stack

    all_rg = all(t.requires_grad for t in tensors)
    if not all_rg and any(t.requires_grad for t in tensors):
        raise RuntimeError(f"Expected {name} from each model to have the same .requires_grad")
    result = stack(tensors)
    return result.detach().requires_grad_() if all_rg else result


def stack_module_state(models) -> tuple[dict, dict]:
    """``(params, buffers)``: the parameters and buffers of ``models`` (same class, same
    train/eval mode) stacked along a new first dimension, by name; the stacked parameters are
    new leaves (optimizable). With ``vmap(..., in_dims=(0, 0, None))`` over
    ``functional_call`` this runs an ensemble.

    >>> import autodiag as torch
    >>> from autodiag.func import stack_module_state
    >>> params, buffers = stack_module_state([torch.nn.Linear(3, 2) for _ in range(4)])
    >>> {k: tuple(v.shape) for k, v in params.items()}
    {'weight': (4, 2, 3), 'bias': (4, 2)}
    """
    models = list(models)
    if len(models) == 0:
        raise RuntimeError("stack_module_state: Expected at least one model, got 0.")
    if not (all(m.training for m in models) or all(not m.training for m in models)):
        raise RuntimeError(
            "stack_module_state: Expected all models to have the same training/eval mode."
        )
    if not all(type(m) is type(models[0]) for m in models):
        raise RuntimeError("stack_module_state: Expected all models to be of the same class.")
    all_params = [dict(m.named_parameters()) for m in models]
    params = {k: _stacked_leaf(tuple(p[k] for p in all_params), k) for k in all_params[0]}
    all_buffers = [dict(m.named_buffers()) for m in models]
    buffers = {k: _stacked_leaf(tuple(b[k] for b in all_buffers), k) for k in all_buffers[0]}
    return params, buffers
