"""Plumbing of module backward hooks (NOTE [Module backward hooks] in module.py), as
``torch.nn.modules._functions.BackwardHookFunction`` and ``torch.utils.hooks.BackwardHook``."""

from __future__ import annotations

from autodiag import _warnings
from autodiag.autograd.function import Function
from autodiag.core import grad_mode
from autodiag.tensor import Tensor


class BackwardHookFunction(Function):
    """Identity on its tensor arguments; its node (``BackwardHookFunctionBackward``) is where
    module backward hooks attach."""

    @staticmethod
    def forward(ctx, *args):
        ctx.mark_non_differentiable(*[a for a in args if not a.requires_grad])
        return args

    @staticmethod
    def backward(ctx, *args):
        return args


class BackwardHook:
    """Links a module's output gradients to its input gradients and calls the user hooks."""

    def __init__(self, module, user_hooks, user_pre_hooks) -> None:
        self.user_hooks = user_hooks
        self.user_pre_hooks = user_pre_hooks
        self.module = module
        self.grad_outputs = None
        self.n_outputs = -1
        self.output_tensors_index = None
        self.n_inputs = -1
        self.input_tensors_index = None

    @staticmethod
    def _pack_with_none(indices, values, size) -> tuple:
        res = [None] * size
        for idx, val in zip(indices, values):
            res[idx] = val
        return tuple(res)

    @staticmethod
    def _unpack_none(indices, values) -> tuple:
        return tuple(values[idx] for idx in indices)

    def _set_user_hook(self, grad_fn) -> None:
        def hook(grad_input, _):
            if self.grad_outputs is None:
                # the gradient reached the inputs without passing through the outputs
                # (e.g. double backward): nothing to report, as in PyTorch
                return None
            res = self._pack_with_none(self.input_tensors_index, grad_input, self.n_inputs)
            for user_hook in self.user_hooks:
                out = user_hook(self.module, res, self.grad_outputs)
                if out is None:
                    continue
                if len(out) != len(res):
                    raise RuntimeError(
                        f"Backward hook returned an invalid number of grad_input, "
                        f"got {len(out)}, but expected {len(res)}"
                    )
                res = out
            self.grad_outputs = None
            return self._unpack_none(self.input_tensors_index, res)

        grad_fn.register_hook(hook)

    def _apply_on_tensors(self, fn, args):
        tensors_idx, tensors = [], []
        requires_grad = False
        for i, a in enumerate(args):
            if isinstance(a, Tensor):
                tensors_idx.append(i)
                tensors.append(a)
                requires_grad |= a.requires_grad
        if not (requires_grad and grad_mode.is_grad_enabled()):
            return args, None
        new_tensors = BackwardHookFunction.apply(*tensors)
        if len(new_tensors) == 0:
            raise RuntimeError(
                "Cannot set Module backward hook for a Module with no input Tensors."
            )
        grad_fns = [
            t.grad_fn
            for t in new_tensors
            if t.grad_fn is not None and t.grad_fn.name() == "BackwardHookFunctionBackward"
        ]
        if not grad_fns:
            raise RuntimeError(
                "Error while setting up backward hooks. Please open an issue with "
                "a code sample to reproduce this."
            )
        fn(grad_fns[0])
        arg_list = list(args)
        for idx, val in zip(tensors_idx, new_tensors):
            arg_list[idx] = val
        return (tuple(arg_list) if type(args) is tuple else type(args)(*arg_list)), tensors_idx

    def setup_input_hook(self, args):
        res, input_idx = self._apply_on_tensors(self._set_user_hook, args)
        self.n_inputs = len(args)
        self.input_tensors_index = input_idx
        return res

    def setup_output_hook(self, args):
        def fn(grad_fn):
            def hook(_, grad_output):
                self.grad_outputs = self._pack_with_none(
                    self.output_tensors_index, grad_output, self.n_outputs
                )
                if self.user_pre_hooks:
                    expected = len(self.grad_outputs)
                    for pre in self.user_pre_hooks:
                        r = pre(self.module, self.grad_outputs)
                        if r is None:
                            continue
                        if len(r) != expected:
                            raise RuntimeError(
                                f"Backward pre hook returned an invalid number of "
                                f"grad_output, got {len(r)}, but expected "
                                f"{expected}"
                            )
                        self.grad_outputs = r
                local = self.grad_outputs
                if self.input_tensors_index is None:
                    # no input requires grad: the hooks fire now, with grad_input all None
                    _warnings.warn(
                        "Full backward hook is firing when gradients are computed with "
                        "respect to module outputs since no inputs require gradients. "
                        "See https://docs.pytorch.org/docs/main/generated/torch.nn."
                        "Module.html#torch.nn.Module.register_full_backward_hook for "
                        "more details."
                    )
                    grad_inputs = self._pack_with_none([], [], self.n_inputs)
                    for user_hook in self.user_hooks:
                        r = user_hook(self.module, grad_inputs, self.grad_outputs)
                        if r is not None and not (
                            isinstance(r, tuple) and all(e is None for e in r)
                        ):
                            raise RuntimeError(
                                "Backward hook for Modules where no input requires "
                                "gradient should always return None or None for "
                                "all gradients."
                            )
                    self.grad_outputs = None
                if local is not None:
                    return tuple(local[i] for i in self.output_tensors_index)
                return None

            grad_fn.register_hook(hook)

        is_tuple = isinstance(args, tuple)
        if not is_tuple:
            args = (args,)
        res, output_idx = self._apply_on_tensors(fn, args)
        self.n_outputs = len(args)
        self.output_tensors_index = output_idx
        return res if is_tuple else res[0]
