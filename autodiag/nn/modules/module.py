"""``Module``: the base class of layers, as ``torch.nn.Module``.

Attribute assignment registers parameters, buffers and submodules (``__setattr__``); the
traversals (``named_parameters``, ``named_modules`` ...), ``state_dict``/``load_state_dict``,
``train``/``eval``, ``zero_grad``, dtype conversion and ``repr`` follow PyTorch's code paths so
that names, orders, messages and reprs are the same.

NOTE [Module backward hooks]
``register_full_backward_hook`` works as in PyTorch: when a module with such hooks is called,
its tensor inputs and outputs are passed through ``BackwardHookFunction`` (an identity custom
Function, nodes named ``BackwardHookFunctionBackward``). A post-hook on the output-side node
captures ``grad_output``; a post-hook on the input-side node then calls the user hooks with
``(module, grad_input, grad_output)`` and lets them replace ``grad_input``. The engine's
ordinary node hooks do the rest, so the firing order is PyTorch's.
"""

from __future__ import annotations

import itertools
from collections import OrderedDict, namedtuple

from autodiag import _device, _warnings, dtypes
from autodiag.core import grad_mode
from autodiag.core.graph import RemovableHandle
from autodiag.nn.parameter import Buffer, Parameter
from autodiag.tensor import Tensor
from autodiag.trace import events

__all__ = ["Module"]

_grad_state = grad_mode._state


class _IncompatibleKeys(namedtuple("IncompatibleKeys", ["missing_keys", "unexpected_keys"])):
    __slots__ = ()

    def __repr__(self) -> str:
        if not self.missing_keys and not self.unexpected_keys:
            return "<All keys matched successfully>"
        return super().__repr__()

    __str__ = __repr__


def _addindent(s_: str, num_spaces: int) -> str:
    s = s_.split("\n")
    if len(s) == 1:
        return s_
    first = s.pop(0)
    s = [(num_spaces * " ") + line if line.strip() else "" for line in s]
    return first + "\n" + "\n".join(s)


def _typename(obj) -> str:
    if isinstance(obj, Tensor):
        return obj.dtype.legacy_type_name  # torch.typename: "torch.FloatTensor"
    module = type(obj).__module__
    name = type(obj).__qualname__
    return name if module in ("builtins", None) else f"{module}.{name}"


class _ExtraDictHandle(RemovableHandle):
    """A hook handle that also clears the hook's flags (with_kwargs, always_call)."""

    __slots__ = ("_extras",)

    def __init__(self, hooks_dict, extras=()):
        super().__init__(hooks_dict)
        self._extras = extras

    def remove(self) -> None:
        super().remove()
        for d in self._extras:
            d.pop(self.id, None)


class _Hooks(OrderedDict):
    """An OrderedDict that hook handles can reference weakly."""


def _add(d: _Hooks, hook, prepend: bool, extras=()) -> RemovableHandle:
    h = _ExtraDictHandle(d, extras)
    d[h.id] = hook
    if prepend:
        d.move_to_end(h.id, last=False)
    return h


class Module:
    """Base class for all neural network modules.

    >>> import autodiag as torch
    >>> class Net(torch.nn.Module):
    ...     def __init__(self):
    ...         super().__init__()
    ...         self.fc = torch.nn.Linear(3, 2)
    ...     def forward(self, x):
    ...         return self.fc(x).relu()
    >>> net = Net()
    >>> [name for name, _ in net.named_parameters()]
    ['fc.weight', 'fc.bias']
    >>> net
    Net(
      (fc): Linear(in_features=3, out_features=2, bias=True)
    )
    """

    training: bool
    _version: int = 1
    call_super_init: bool = False

    def __init__(self, *args, **kwargs) -> None:
        if kwargs:
            raise TypeError(
                f"{type(self).__name__}.__init__() got an unexpected keyword argument "
                f"'{next(iter(kwargs))}'"
            )
        if args:
            raise TypeError(
                f"{type(self).__name__}.__init__() takes 1 positional argument but "
                f"{len(args) + 1} were given"
            )
        # object.__setattr__ skips our __setattr__ (which needs these dicts to exist)
        sa = object.__setattr__
        sa(self, "training", True)
        sa(self, "_parameters", {})
        sa(self, "_buffers", {})
        sa(self, "_non_persistent_buffers_set", set())
        sa(self, "_backward_pre_hooks", _Hooks())
        sa(self, "_backward_hooks", _Hooks())
        sa(self, "_is_full_backward_hook", None)
        sa(self, "_forward_hooks", _Hooks())
        sa(self, "_forward_hooks_with_kwargs", {})
        sa(self, "_forward_hooks_always_called", {})
        sa(self, "_forward_pre_hooks", _Hooks())
        sa(self, "_forward_pre_hooks_with_kwargs", {})
        sa(self, "_state_dict_hooks", _Hooks())
        sa(self, "_load_state_dict_post_hooks", _Hooks())
        sa(self, "_modules", {})

    def forward(self, *input):
        raise NotImplementedError(
            f'Module [{type(self).__name__}] is missing the required "forward" function'
        )

    # ------------------------------------------------------------------ registration

    def _check_new_name(self, kind: str, table: str, name) -> None:
        """PyTorch's checks, in its order, before registering a buffer or a parameter."""
        if table not in self.__dict__:
            raise AttributeError(f"cannot assign {kind} before Module.__init__() call")
        if not isinstance(name, str):
            raise TypeError(f"{kind} name should be a string. Got {_typename(name)}")
        if "." in name:
            raise KeyError(f'{kind} name can\'t contain "."')
        if name == "":
            raise KeyError(f'{kind} name can\'t be empty string ""')
        if hasattr(self, name) and name not in self.__dict__[table]:
            raise KeyError(f"attribute '{name}' already exists")

    def register_buffer(self, name: str, tensor: Tensor | None, persistent: bool = True) -> None:
        """Add a tensor that is module state but not a parameter (saved in ``state_dict`` when
        ``persistent``)."""
        self._check_new_name("buffer", "_buffers", name)
        if tensor is not None and not isinstance(tensor, Tensor):
            raise TypeError(
                f"cannot assign '{_typename(tensor)}' object to buffer '{name}' "
                "(torch Tensor or None required)"
            )
        if isinstance(tensor, Buffer):
            tensor = Tensor._make(tensor._data, None, tensor.requires_grad, tensor._vc)
        self._buffers[name] = tensor
        if persistent:
            self._non_persistent_buffers_set.discard(name)
        else:
            self._non_persistent_buffers_set.add(name)

    def register_parameter(self, name: str, param: Parameter | None) -> None:
        """Add a parameter, reachable as an attribute of the given name."""
        self._check_new_name("parameter", "_parameters", name)
        if param is None:
            self._parameters[name] = None
        elif not isinstance(param, Parameter):
            raise TypeError(
                f"cannot assign '{_typename(param)}' object to parameter '{name}' "
                "(torch.nn.Parameter or None required)"
            )
        elif param.grad_fn is not None:
            raise ValueError(
                f"Cannot assign non-leaf Tensor to parameter '{name}'. Model "
                f"parameters must be created explicitly. To express '{name}' as a "
                "function of another Tensor, compute the value in the forward() "
                "method."
            )
        else:
            self._parameters[name] = param

    def add_module(self, name: str, module: Module | None) -> None:
        """Add a child module, reachable as an attribute of the given name."""
        if not isinstance(module, Module) and module is not None:
            raise TypeError(f"{_typename(module)} is not a Module subclass")
        if not isinstance(name, str):
            raise TypeError(f"module name should be a string. Got {_typename(name)}")
        if hasattr(self, name) and name not in self._modules:
            raise KeyError(f"attribute '{name}' already exists")
        if "." in name:
            raise KeyError(f'module name can\'t contain ".", got: {name}')
        if name == "":
            raise KeyError('module name can\'t be empty string ""')
        self._modules[name] = module

    register_module = add_module

    def get_submodule(self, target: str) -> Module:
        if target == "":
            return self
        mod = self
        for item in target.split("."):
            if not hasattr(mod, item):
                raise AttributeError(mod._get_name() + " has no attribute `" + item + "`")
            mod = getattr(mod, item)
            if not isinstance(mod, Module):
                raise AttributeError("`" + item + "` is not an nn.Module")
        return mod

    def get_parameter(self, target: str) -> Parameter:
        module_path, _, param_name = target.rpartition(".")
        mod = self.get_submodule(module_path)
        if not hasattr(mod, param_name):
            raise AttributeError(mod._get_name() + " has no attribute `" + param_name + "`")
        param = getattr(mod, param_name)
        if not isinstance(param, Parameter):
            raise AttributeError("`" + param_name + "` is not an nn.Parameter")
        return param

    def __getattr__(self, name: str):
        d = self.__dict__
        if "_parameters" in d:
            p = d["_parameters"]
            if name in p:
                return p[name]
        if "_buffers" in d:
            b = d["_buffers"]
            if name in b:
                return b[name]
        if "_modules" in d:
            m = d["_modules"]
            if name in m:
                return m[name]
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def __setattr__(self, name: str, value) -> None:
        def remove_from(*dicts_or_sets):
            for d in dicts_or_sets:
                if name in d:
                    if isinstance(d, dict):
                        del d[name]
                    else:
                        d.discard(name)

        params = self.__dict__.get("_parameters")
        if isinstance(value, Parameter):
            if params is None:
                raise AttributeError("cannot assign parameters before Module.__init__() call")
            remove_from(
                self.__dict__, self._buffers, self._modules, self._non_persistent_buffers_set
            )
            self.register_parameter(name, value)
        elif params is not None and name in params:
            if value is not None:
                raise TypeError(
                    f"cannot assign '{_typename(value)}' as parameter '{name}' "
                    "(torch.nn.Parameter or None expected)"
                )
            self.register_parameter(name, value)
        else:
            modules = self.__dict__.get("_modules")
            if isinstance(value, Module):
                if modules is None:
                    raise AttributeError("cannot assign module before Module.__init__() call")
                remove_from(
                    self.__dict__, self._parameters, self._buffers, self._non_persistent_buffers_set
                )
                modules[name] = value
            elif modules is not None and name in modules:
                if value is not None:
                    raise TypeError(
                        f"cannot assign '{_typename(value)}' as child module "
                        f"'{name}' (torch.nn.Module or None expected)"
                    )
                modules[name] = value
            else:
                buffers = self.__dict__.get("_buffers")
                if isinstance(value, Buffer) or (buffers is not None and name in buffers):
                    if value is not None and not isinstance(value, Tensor):
                        raise TypeError(
                            f"cannot assign '{_typename(value)}' as buffer '{name}' "
                            "(torch.nn.Buffer, torch.Tensor or None expected)"
                        )
                    persistent = (
                        value.persistent
                        if isinstance(value, Buffer)
                        else name not in self._non_persistent_buffers_set
                    )
                    self.register_buffer(name, value, persistent)
                else:
                    object.__setattr__(self, name, value)

    def __delattr__(self, name: str) -> None:
        if name in self._parameters:
            del self._parameters[name]
        elif name in self._buffers:
            del self._buffers[name]
            self._non_persistent_buffers_set.discard(name)
        elif name in self._modules:
            del self._modules[name]
        else:
            object.__delattr__(self, name)

    def __dir__(self):
        keys = (
            dir(self.__class__)
            + list(self.__dict__)
            + list(self._parameters)
            + list(self._modules)
            + list(self._buffers)
        )
        return sorted(k for k in keys if not k[0].isdigit())

    # ------------------------------------------------------------------ traversal

    def _named_members(self, get_members_fn, prefix="", recurse=True, remove_duplicate=True):
        memo = set()
        modules = (
            self.named_modules(prefix=prefix, remove_duplicate=remove_duplicate)
            if recurse
            else [(prefix, self)]
        )
        for module_prefix, module in modules:
            for k, v in get_members_fn(module):
                if v is None or v in memo:
                    continue
                if remove_duplicate:
                    memo.add(v)
                yield module_prefix + ("." if module_prefix else "") + k, v

    def parameters(self, recurse: bool = True):
        """The parameters of this module and (with ``recurse``) its submodules, each once."""
        for _, p in self.named_parameters(recurse=recurse):
            yield p

    def named_parameters(
        self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True
    ):
        yield from self._named_members(
            lambda m: m._parameters.items(),
            prefix=prefix,
            recurse=recurse,
            remove_duplicate=remove_duplicate,
        )

    def buffers(self, recurse: bool = True):
        for _, b in self.named_buffers(recurse=recurse):
            yield b

    def named_buffers(self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True):
        yield from self._named_members(
            lambda m: m._buffers.items(),
            prefix=prefix,
            recurse=recurse,
            remove_duplicate=remove_duplicate,
        )

    def children(self):
        for _, m in self.named_children():
            yield m

    def named_children(self):
        memo = set()
        for name, m in self._modules.items():
            if m is not None and m not in memo:
                memo.add(m)
                yield name, m

    def modules(self, remove_duplicate: bool = True):
        for _, m in self.named_modules(remove_duplicate=remove_duplicate):
            yield m

    def named_modules(
        self, memo: set | None = None, prefix: str = "", remove_duplicate: bool = True
    ):
        """(qualified name, module) for this module and every submodule, depth first."""
        # NOTE: iterative (an explicit stack), same pre-order as PyTorch's recursive generator
        if memo is None:
            memo = set()
        stack = [(prefix, self)]
        while stack:
            pre, mod = stack.pop()
            if mod in memo:
                continue
            if remove_duplicate:
                memo.add(mod)
            yield pre, mod
            kids = [
                (pre + ("." if pre else "") + name, m)
                for name, m in mod._modules.items()
                if m is not None
            ]
            stack.extend(reversed(kids))

    def apply(self, fn) -> Module:
        """Call ``fn`` on every submodule (children first) and then on self."""
        for m in self.children():
            m.apply(fn)
        fn(self)
        return self

    # ------------------------------------------------------------------ modes and grads

    def train(self, mode: bool = True) -> Module:
        if not isinstance(mode, bool):
            raise ValueError("training mode is expected to be boolean")
        self.training = mode
        for m in self.children():
            m.train(mode)
        return self

    def eval(self) -> Module:
        return self.train(False)

    def requires_grad_(self, requires_grad: bool = True) -> Module:
        for p in self.parameters():
            p.requires_grad_(requires_grad)
        return self

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Reset the gradients of all parameters: to None (default), or to zeros in place."""
        for p in self.parameters():
            if p._grad is not None:
                if set_to_none:
                    p.grad = None
                else:
                    g = p._grad
                    if g.grad_fn is not None:
                        g.detach_()
                    else:
                        g.requires_grad_(False)
                    g.zero_()

    # ------------------------------------------------------------------ dtype conversion

    def _apply(self, fn) -> Module:
        for m in self.children():
            m._apply(fn)
        for param in self._parameters.values():
            if param is None:
                continue
            with grad_mode.no_grad():
                applied = fn(param)
            # PyTorch's set_data path: the Parameter object stays, its data changes
            param._data = applied._data
            g = param._grad
            if g is not None:
                with grad_mode.no_grad():
                    g_applied = fn(g)
                g._data = g_applied._data
        for key, buf in self._buffers.items():
            if buf is not None:
                self._buffers[key] = fn(buf)
        return self

    def to(self, *args, **kwargs) -> Module:
        """Cast floating-point parameters and buffers to a dtype (``to(torch.float64)``);
        devices other than cpu are refused."""
        dtype = kwargs.pop("dtype", None)
        for a in args:
            if isinstance(a, dtypes.dtype):
                dtype = a
            elif isinstance(a, Tensor):
                dtype = a.dtype
            elif isinstance(a, (str, _device.device, int)) and not isinstance(a, bool):
                _device.check(a)  # the CPU (a string or torch.device), or a clear error
            elif a is not None and not isinstance(a, bool):  # bools: non_blocking
                raise TypeError(f"to() received an invalid combination of arguments: {a!r}")
        _device.check(kwargs.get("device"))
        if dtype is not None and not dtype.is_floating_point:
            raise TypeError(
                f"nn.Module.to only accepts floating point or complex dtypes, but got "
                f"desired dtype={dtype}"
            )
        if dtype is None:
            return self
        return self._apply(lambda t: t.to(dtype) if t.is_floating_point() else t)

    def float(self) -> Module:
        return self._apply(lambda t: t.float() if t.is_floating_point() else t)

    def double(self) -> Module:
        return self._apply(lambda t: t.double() if t.is_floating_point() else t)

    def type(self, dst_type) -> Module:
        return self._apply(lambda t: t.to(dst_type))

    def cpu(self) -> Module:
        return self

    # ------------------------------------------------------------------ state dict

    def _save_to_state_dict(self, destination, prefix, keep_vars) -> None:
        for name, param in self._parameters.items():
            if param is not None:
                destination[prefix + name] = param if keep_vars else param.detach()
        for name, buf in self._buffers.items():
            if buf is not None and name not in self._non_persistent_buffers_set:
                destination[prefix + name] = buf if keep_vars else buf.detach()

    def state_dict(self, *, destination=None, prefix: str = "", keep_vars: bool = False):
        """An OrderedDict of parameters and persistent buffers by qualified name (detached
        tensors sharing storage, unless ``keep_vars``)."""
        if destination is None:
            destination = OrderedDict()
            destination._metadata = OrderedDict()
        local_metadata = {"version": self._version}
        if hasattr(destination, "_metadata"):
            destination._metadata[prefix[:-1]] = local_metadata
        self._save_to_state_dict(destination, prefix, keep_vars)
        for name, module in self._modules.items():
            if module is not None:
                module.state_dict(
                    destination=destination, prefix=prefix + name + ".", keep_vars=keep_vars
                )
        for hook in self._state_dict_hooks.values():
            r = hook(self, destination, prefix, local_metadata)
            if r is not None:
                destination = r
        return destination

    def _load_from_state_dict(
        self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
    ) -> None:
        persistent = {
            k: v for k, v in self._buffers.items() if k not in self._non_persistent_buffers_set
        }
        local_state = {
            k: v
            for k, v in itertools.chain(self._parameters.items(), persistent.items())
            if v is not None
        }
        assign = local_metadata.get("assign_to_params_buffers", False)
        for name, param in local_state.items():
            key = prefix + name
            if key in state_dict:
                input_param = state_dict[key]
                if not isinstance(input_param, Tensor):
                    error_msgs.append(
                        f'While copying the parameter named "{key}", expected '
                        f"torch.Tensor or Tensor-like object from checkpoint but "
                        f"received {type(input_param)}"
                    )
                    continue
                if (
                    len(param.shape) == 0
                    and len(input_param.shape) == 1
                    and input_param.shape[0] == 1
                ):
                    input_param = input_param[0]
                if input_param.shape != param.shape:
                    error_msgs.append(
                        f"size mismatch for {key}: copying a param with shape "
                        f"{input_param.shape} from checkpoint, the shape in current "
                        f"model is {param.shape}."
                    )
                    continue
                try:
                    with grad_mode.no_grad():
                        if assign:
                            if isinstance(param, Parameter) and not isinstance(
                                input_param, Parameter
                            ):
                                input_param = Parameter(input_param, param.requires_grad)
                            setattr(self, name, input_param)
                        else:
                            param.copy_(input_param)
                except Exception as ex:
                    error_msgs.append(
                        f'While copying the parameter named "{key}", whose '
                        f"dimensions in the model are {param.size()} and whose "
                        f"dimensions in the checkpoint are {input_param.size()}, "
                        f"an exception occurred : {ex.args}."
                    )
            elif strict:
                missing_keys.append(key)
        if strict:
            for key in state_dict:
                if key.startswith(prefix):
                    input_name = key[len(prefix) :].split(".", 1)
                    if len(input_name) > 1:
                        if input_name[0] not in self._modules:
                            unexpected_keys.append(key)
                    elif input_name[0] not in local_state:
                        unexpected_keys.append(key)

    def load_state_dict(self, state_dict, strict: bool = True, assign: bool = False):
        """Copy parameters and buffers from ``state_dict`` (in place, under no_grad). With
        ``strict``, missing or unexpected keys raise PyTorch's "Error(s) in loading
        state_dict" RuntimeError. Returns ``(missing_keys, unexpected_keys)``."""
        from collections.abc import Mapping

        if not isinstance(state_dict, Mapping):
            raise TypeError(f"Expected state_dict to be dict-like, got {type(state_dict)}.")
        missing_keys: list = []
        unexpected_keys: list = []
        error_msgs: list = []
        metadata = getattr(state_dict, "_metadata", None)
        state_dict = OrderedDict(state_dict)
        # iterative walk in PyTorch's order (parent before children)
        stack = [(self, state_dict, "")]
        while stack:
            module, local_sd, prefix = stack.pop()
            local_metadata = {} if metadata is None else dict(metadata.get(prefix[:-1], {}))
            if assign:
                local_metadata["assign_to_params_buffers"] = assign
            module._load_from_state_dict(
                local_sd, prefix, local_metadata, True, missing_keys, unexpected_keys, error_msgs
            )
            kids = []
            for name, child in module._modules.items():
                if child is not None:
                    cp = prefix + name + "."
                    kids.append(
                        (child, {k: v for k, v in local_sd.items() if k.startswith(cp)}, cp)
                    )
            stack.extend(reversed(kids))
            incompatible = _IncompatibleKeys(missing_keys, unexpected_keys)
            for hook in module._load_state_dict_post_hooks.values():
                hook(module, incompatible)
        if strict:
            if unexpected_keys:
                error_msgs.insert(
                    0,
                    "Unexpected key(s) in state_dict: {}. ".format(
                        ", ".join(f'"{k}"' for k in unexpected_keys)
                    ),
                )
            if missing_keys:
                error_msgs.insert(
                    0,
                    "Missing key(s) in state_dict: {}. ".format(
                        ", ".join(f'"{k}"' for k in missing_keys)
                    ),
                )
        if error_msgs:
            raise RuntimeError(
                "Error(s) in loading state_dict for {}:\n\t{}".format(
                    self.__class__.__name__, "\n\t".join(error_msgs)
                )
            )
        return _IncompatibleKeys(missing_keys, unexpected_keys)

    def register_load_state_dict_post_hook(self, hook) -> RemovableHandle:
        return _add(self._load_state_dict_post_hooks, hook, False)

    # ------------------------------------------------------------------ hooks

    def register_forward_pre_hook(
        self, hook, *, prepend: bool = False, with_kwargs: bool = False
    ) -> RemovableHandle:
        """``hook(module, args)`` runs before ``forward``; it may return new args (a single value
        is wrapped in a tuple). With ``with_kwargs``: ``hook(module, args, kwargs)`` returns
        ``(args, kwargs)`` or None."""
        h = _add(self._forward_pre_hooks, hook, prepend, (self._forward_pre_hooks_with_kwargs,))
        if with_kwargs:
            self._forward_pre_hooks_with_kwargs[h.id] = True
        return h

    def register_forward_hook(
        self, hook, *, prepend: bool = False, with_kwargs: bool = False, always_call: bool = False
    ) -> RemovableHandle:
        """``hook(module, args, output)`` runs after ``forward``; it may return a new output."""
        h = _add(
            self._forward_hooks,
            hook,
            prepend,
            (self._forward_hooks_with_kwargs, self._forward_hooks_always_called),
        )
        if with_kwargs:
            self._forward_hooks_with_kwargs[h.id] = True
        if always_call:
            self._forward_hooks_always_called[h.id] = True
        return h

    def register_full_backward_pre_hook(self, hook, prepend: bool = False) -> RemovableHandle:
        """``hook(module, grad_output)`` runs when the gradients of the module's outputs are
        known; it may return new ``grad_output``."""
        return _add(self._backward_pre_hooks, hook, prepend)

    def register_full_backward_hook(self, hook, prepend: bool = False) -> RemovableHandle:
        """``hook(module, grad_input, grad_output)`` runs when the gradients with respect to the
        module's inputs are computed (see NOTE [Module backward hooks]); it may return a new
        ``grad_input``.

        >>> import autodiag as torch
        >>> lin = torch.nn.Linear(2, 1)
        >>> h = lin.register_full_backward_hook(
        ...     lambda m, gi, go: print([tuple(g.shape) for g in gi], [tuple(g.shape) for g in go]))
        >>> lin(torch.ones(3, 2, requires_grad=True)).sum().backward()
        [(3, 2)] [(3, 1)]
        """
        if self._is_full_backward_hook is False:
            raise RuntimeError(
                "Cannot use both regular backward hooks and full backward hooks on "
                "a single Module. Please use only one of them."
            )
        self._is_full_backward_hook = True
        return _add(self._backward_hooks, hook, prepend)

    def register_backward_hook(self, hook) -> RemovableHandle:
        raise NotImplementedError(
            "autodiag: register_backward_hook (deprecated in PyTorch, with "
            "per-node semantics) is not supported; use "
            "register_full_backward_hook"
        )

    def register_state_dict_post_hook(self, hook) -> RemovableHandle:
        return _add(self._state_dict_hooks, hook, False)

    # ------------------------------------------------------------------ calling

    def __call__(self, *args, **kwargs):
        if events.TRACERS:  # analyses name what a module's ops did by its path (model.3)
            calls = events.MODULES.stack  # this thread's
            calls.append(self)
            try:
                return self._call(args, kwargs)
            finally:
                calls.pop()
        return self._call(args, kwargs)

    def _call(self, args, kwargs):
        if not (
            self._forward_pre_hooks
            or self._forward_hooks
            or self._backward_hooks
            or self._backward_pre_hooks
        ):
            return self.forward(*args, **kwargs)
        return self._call_with_hooks(args, kwargs)

    def _call_with_hooks(self, args, kwargs):
        """PyTorch's ``_call_impl``: pre-hooks, backward-hook plumbing, forward, hooks."""
        result = None
        called_always = set()
        try:
            for hook_id, hook in list(self._forward_pre_hooks.items()):
                if hook_id in self._forward_pre_hooks_with_kwargs:
                    r = hook(self, args, kwargs)
                    if r is not None:
                        if isinstance(r, tuple) and len(r) == 2:
                            args, kwargs = r
                        else:
                            raise RuntimeError(
                                f"forward pre-hook must return None or a tuple of "
                                f"(new_args, new_kwargs), but got {r}."
                            )
                else:
                    r = hook(self, args)
                    if r is not None:
                        args = r if isinstance(r, tuple) else (r,)
            bw_hook = None
            full_hooks = list(self._backward_hooks.values()) if self._is_full_backward_hook else []
            pre_hooks = list(self._backward_pre_hooks.values())
            if full_hooks or pre_hooks:
                from autodiag.nn.modules._functions import BackwardHook

                bw_hook = BackwardHook(self, full_hooks, pre_hooks)
                args = bw_hook.setup_input_hook(args)
            result = self.forward(*args, **kwargs)
            for hook_id, hook in list(self._forward_hooks.items()):
                if hook_id in self._forward_hooks_always_called:
                    called_always.add(hook_id)
                if hook_id in self._forward_hooks_with_kwargs:
                    r = hook(self, args, kwargs, result)
                else:
                    r = hook(self, args, result)
                if r is not None:
                    result = r
            if bw_hook is not None:
                if not isinstance(result, (Tensor, tuple)):
                    _warnings.warn(
                        "For backward hooks to be called, module output should be a "
                        f"Tensor or a tuple of Tensors but received {type(result)}"
                    )
                result = bw_hook.setup_output_hook(result)
            return result
        except Exception:
            for hook_id, hook in self._forward_hooks.items():
                if hook_id in self._forward_hooks_always_called and hook_id not in called_always:
                    try:
                        if hook_id in self._forward_hooks_with_kwargs:
                            r = hook(self, args, kwargs, result)
                        else:
                            r = hook(self, args, result)
                        if r is not None:
                            result = r
                    except Exception as e:
                        _warnings.warn(
                            "module forward hook with ``always_call=True`` raised an "
                            f"exception that was silenced as another error was raised "
                            f"in forward: {e}"
                        )
            raise

    # ------------------------------------------------------------------ repr

    def _get_name(self) -> str:
        return self.__class__.__name__

    def extra_repr(self) -> str:
        """Extra text inside the parentheses of this module's repr (override in layers)."""
        return ""

    def __repr__(self) -> str:
        extra_lines = []
        extra = self.extra_repr()
        if extra:
            extra_lines = extra.split("\n")
        child_lines = []
        for key, module in self._modules.items():
            child_lines.append("(" + key + "): " + _addindent(repr(module), 2))
        lines = extra_lines + child_lines
        main = self._get_name() + "("
        if lines:
            if len(extra_lines) == 1 and not child_lines:
                main += extra_lines[0]
            else:
                main += "\n  " + "\n  ".join(lines) + "\n"
        return main + ")"

    def __getstate__(self):
        return self.__dict__.copy()

    def __setstate__(self, state):
        self.__dict__.update(state)
