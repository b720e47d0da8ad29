"""``torch.func``'s derivative transforms: ``grad``, ``grad_and_value``, ``vjp``, ``jvp``,
``jacrev``, ``jacfwd``, ``hessian``, built on the engine's reverse mode (``autograd.grad``).

How a transform runs: the arguments it differentiates are replaced by tracked stand-ins (a
fresh leaf for a tensor that does not require grad; a view, so history is kept, for one that
does), the function runs in grad mode, and ``autograd.grad`` gives the derivatives.

NOTE [Levels without levels]: PyTorch's functorch keeps one "level" per nested transform.
Here a transform only asks, with an iterative walk of the result's graph, whether the function's
result reaches a leaf that requires grad other than its own fresh leaves (a tensor of an
enclosing transform, or a parameter the caller will ``backward`` through). If it does, the
derivatives are built with ``create_graph=True`` and keep their history, so ``grad(grad(f))``,
``vmap(grad(f))``, ``jacrev(jacrev(f))`` and ``grad(f)(w).sum().backward()`` compose. If it does
not, the results are detached, as PyTorch returns them at the outermost level. Inputs are only
ever differentiated through the stand-in, so a transform never confuses its own variable with an
enclosing transform's (``grad(lambda x: grad(lambda y: x * y)(c))``).

NOTE: ``jvp`` and ``jacfwd`` use reverse mode (autodiag has no forward-mode AD): ``jvp`` by the
double-vjp trick (``uᵀJ`` is linear in ``u``; its gradient with respect to ``u`` along ``v`` is
``Jv``), ``jacfwd`` as ``jacrev`` (same numbers, one backward pass per output element).
"""

from __future__ import annotations

import functools

import numpy as np

from autodiag.core import grad_mode
from autodiag.core.graph import AccumulateGrad, children
from autodiag.func._pytree import flatten, unflatten
from autodiag.tensor import Tensor

__all__ = ["grad", "grad_and_value", "vjp", "jvp", "jacrev", "jacfwd", "hessian"]


# ---------------------------------------------------------------------------------------------
# Tracked inputs and the question "does this result reach outside the transform?"
# ---------------------------------------------------------------------------------------------


def _track(t, outer: bool, fresh: set):
    """The stand-in the function sees for input ``t`` (PyTorch's checks and messages)."""
    if not isinstance(t, Tensor):
        raise ValueError(f"Thing passed to transform API must be Tensor, got {type(t)}")
    if not t.is_floating_point():
        raise RuntimeError("only Tensors of floating point dtype can require gradients")
    if outer and t.requires_grad:
        return t.view_as(t)  # keeps the caller's history: the result stays differentiable
    leaf = t.detach().requires_grad_(True)
    fresh.add(id(leaf))
    return leaf


def _track_all(leaves: list, outer: bool) -> tuple[list, set]:
    fresh: set = set()
    return [_track(t, outer, fresh) for t in leaves], fresh


def _reaches_outside(tensors, fresh: set) -> bool:
    """Does any of ``tensors`` depend on a leaf requiring grad that is not one of ``fresh``?
    (iterative walk of the graph; NOTE [Levels without levels])"""
    seen: set = set()
    stack = []
    for t in tensors:
        if not isinstance(t, Tensor) or not t.requires_grad:
            continue
        if t.grad_fn is None:
            if id(t) not in fresh:
                return True
            continue
        stack.append(t.grad_fn)
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, AccumulateGrad):
            if id(node.variable) not in fresh:
                return True
            continue
        stack.extend(c for c in children(node) if c is not None)
    return False


def _finish(tree, fresh: set, outer: bool):
    """The tensors of ``tree`` as the transform returns them: detached unless they depend on
    something outside the transform that the caller may differentiate."""
    leaves, spec = flatten(tree)
    out = []
    for t in leaves:
        if isinstance(t, Tensor) and t.requires_grad:
            if not (outer and _reaches_outside([t], fresh)):
                t = t.detach()
        out.append(t)
    return unflatten(out, spec)


def _zeros_like(t: Tensor) -> Tensor:
    from autodiag.ops.factories import zeros_like

    return zeros_like(t)


def _grads(outputs, inputs, grad_outputs, create_graph: bool, retain_graph=None) -> list:
    """d(outputs)/d(inputs), zeros (never None) where an input is unused. The graph is freed
    unless ``retain_graph`` (or ``create_graph``) asks otherwise, as in ``autograd.grad``: a
    transform that needs it again (jacrev's rows, a vjp_fn called twice) says so."""
    from autodiag.autograd import grad as autograd_grad

    pairs = [(o, g) for o, g in zip(outputs, grad_outputs) if o.requires_grad]
    if not pairs:
        return [_zeros_like(t) for t in inputs]
    outs, gos = zip(*pairs)
    res = autograd_grad(
        outs,
        inputs,
        gos,
        retain_graph=retain_graph,
        create_graph=create_graph,
        allow_unused=True,
    )
    return [_zeros_like(t) if g is None else g for g, t in zip(res, inputs)]


# ---------------------------------------------------------------------------------------------
# argnums and has_aux
# ---------------------------------------------------------------------------------------------


def _argnums(argnums, nargs: int):
    """argnums normalised to non-negative positions (an int stays an int)."""

    def one(n):
        if not -nargs <= n < nargs:
            raise RuntimeError(f"Got argnum={n}, but only {nargs} positional inputs")
        return n % nargs

    if isinstance(argnums, int) and not isinstance(argnums, bool):
        return one(argnums)
    if not isinstance(argnums, tuple) or not all(
        isinstance(n, int) and not isinstance(n, bool) for n in argnums
    ):
        raise RuntimeError(f"argnums must be int or Tuple[int, ...], got: {type(argnums)}")
    if not argnums:
        raise RuntimeError("argnums must be non-empty")
    if len(set(argnums)) != len(argnums):
        raise RuntimeError(f"argnums elements must be unique, got {argnums}")
    return tuple(one(n) for n in argnums)


def _diff_args(args: tuple, nums):
    return args[nums] if isinstance(nums, int) else tuple(args[n] for n in nums)


def _replace_args(args: tuple, nums, new) -> tuple:
    args = list(args)
    if isinstance(nums, int):
        args[nums] = new
    else:
        for n, value in zip(nums, new):
            args[n] = value
    return tuple(args)


def _split_aux(output, has_aux: bool, api: str):
    if not has_aux:
        return output, None
    if not (isinstance(output, tuple) and len(output) == 2):
        raise RuntimeError(
            f"{api}: output of function f should be a tuple: (output, aux) if has_aux is True"
        )
    return output


def _traced_call(func, args: tuple, kwargs: dict, argnums, outer: bool):
    """Run ``func`` (in grad mode) with the differentiated arguments tracked; ``outer`` is the
    caller's grad mode. Returns (output, tracked leaves, their spec, fresh ids, outer)."""
    nums = _argnums(argnums, len(args))
    leaves, spec = flatten(_diff_args(args, nums))
    tracked, fresh = _track_all(leaves, outer)
    output = func(*_replace_args(args, nums, unflatten(tracked, spec)), **kwargs)
    return output, tracked, spec, fresh, outer


# ---------------------------------------------------------------------------------------------
# grad, grad_and_value
# ---------------------------------------------------------------------------------------------


def grad_and_value(func, argnums=0, has_aux: bool = False):
    """``grad_and_value(f)(*args)`` is ``(grad(f)(*args), f(*args))``, in one run of ``f``.

    >>> import autodiag as torch
    >>> from autodiag.func import grad_and_value
    >>> grad_and_value(lambda x: (x ** 2).sum())(torch.tensor([1.0, 2.0]))
    (tensor([2., 4.]), tensor(5.))
    """
    api = "grad_and_value(f)(*args)"

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        outer = grad_mode.is_grad_enabled()
        with grad_mode.enable_grad():
            output, tracked, spec, fresh, outer = _traced_call(func, args, kwargs, argnums, outer)
            output, aux = _split_aux(output, has_aux, api)
            if not isinstance(output, Tensor):
                raise RuntimeError(
                    f"{api}: Expected f(*args) to return a Tensor, got {type(output)}"
                )
            if output.dim() != 0:
                raise RuntimeError(
                    f"{api}: Expected f(*args) to return a scalar Tensor, got tensor with "
                    f"{output.dim()} dims. Maybe you wanted to use the vjp or jacrev APIs "
                    "instead?"
                )
            create = outer and _reaches_outside([output], fresh)
            # an aux the caller may backward through can share nodes with the output's graph
            keep = has_aux and outer and _reaches_outside(flatten(aux)[0], fresh)
            grads = _grads([output], tracked, [None], create, retain_graph=True if keep else None)
        grads = _finish(unflatten(grads, spec), fresh, outer)
        value = _finish(output, fresh, outer)
        if has_aux:
            return grads, (value, _finish(aux, fresh, outer))
        return grads, value

    return wrapper


def grad(func, argnums=0, has_aux: bool = False):
    """The gradient of a scalar function with respect to its argument(s) ``argnums``.

    >>> import autodiag as torch
    >>> from autodiag.func import grad
    >>> grad(lambda x: (x ** 3).sum())(torch.tensor([1.0, 2.0]))
    tensor([ 3., 12.])
    >>> grad(grad(lambda x: x ** 3))(torch.tensor(2.0))
    tensor(12.)
    """
    gv = grad_and_value(func, argnums, has_aux)

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        g, value = gv(*args, **kwargs)
        return (g, value[1]) if has_aux else g

    return wrapper


# ---------------------------------------------------------------------------------------------
# vjp, jvp
# ---------------------------------------------------------------------------------------------


def _tensor_outputs(output, api: str) -> tuple[list, object]:
    leaves, spec = flatten(output)
    for t in leaves:
        if not isinstance(t, Tensor):
            raise RuntimeError(
                f"{api}: expected f(*primals) to return only tensors, got unsupported "
                f"type {type(t)}"
            )
    return leaves, spec


def vjp(func, *primals, has_aux: bool = False):
    """``(func(*primals), vjp_fn)``; ``vjp_fn(cotangents)`` gives ``vᵀJ`` for every primal, as a
    tuple. It can be called many times (the graph is kept while ``vjp_fn`` lives).

    >>> import autodiag as torch
    >>> from autodiag.func import vjp
    >>> out, vjp_fn = vjp(torch.sin, torch.tensor([0.0, 1.0]))
    >>> vjp_fn(torch.tensor([1.0, 1.0]))
    (tensor([1.0000, 0.5403]),)
    """
    api = "vjp(f, *primals)"
    outer = grad_mode.is_grad_enabled()
    with grad_mode.enable_grad():
        output, tracked, spec, fresh, outer = _traced_call(
            func, primals, {}, tuple(range(len(primals))) or 0, outer
        )
        output, aux = _split_aux(output, has_aux, api)
        out_leaves, out_spec = _tensor_outputs(output, api)

    def vjp_fn(cotangents, *, retain_graph: bool = True, create_graph=None):
        ct_leaves, ct_spec = flatten(cotangents)
        if ct_spec != out_spec:
            raise RuntimeError(
                "Expected pytree structure of cotangents to be the same as pytree structure "
                f"of outputs to the function. cotangents: {_short(ct_spec)}, primal output: "
                f"{_short(out_spec)}"
            )
        now = grad_mode.is_grad_enabled()
        create = create_graph
        if create is None:
            create = now and _reaches_outside(list(out_leaves) + list(ct_leaves), fresh)
        with grad_mode.enable_grad():
            grads = _grads(out_leaves, tracked, ct_leaves, create, retain_graph=retain_graph)
        return _finish(unflatten(grads, spec), fresh, now)

    value = _finish(output, fresh, outer)
    if has_aux:
        return value, vjp_fn, _finish(aux, fresh, outer)
    return value, vjp_fn


def _short(spec) -> str:
    """PyTorch's compact spec form in vjp's message: ``*`` for a leaf, ``(*,)`` for a tuple."""
    if spec.is_leaf():
        return "*"
    inner = ", ".join(_short(c) for c in spec.children)
    if spec.kind is tuple:
        return f"({inner},)" if len(spec.children) == 1 else f"({inner})"
    if spec.kind is list:
        return f"[{inner}]"
    return repr(spec)


def jvp(func, primals, tangents, *, strict: bool = False, has_aux: bool = False):
    """``(func(*primals), J·tangents)``: the Jacobian-vector product.

    NOTE: computed in reverse mode by the double-vjp trick (two backward passes), not by
    forward-mode AD; the numbers are the same.

    >>> import autodiag as torch
    >>> from autodiag.func import jvp
    >>> jvp(torch.sin, (torch.tensor([0.0, 1.0]),), (torch.tensor([1.0, 1.0]),))
    (tensor([0.0000, 0.8415]), tensor([1.0000, 0.5403]))
    """
    api = "jvp(f, primals, tangents)"
    if not isinstance(primals, tuple):
        raise RuntimeError(
            f"{api}: Expected primals to be a tuple. E.g. it should be valid to call f(*primals)."
        )
    p_leaves, p_spec = flatten(primals)
    t_leaves, t_spec = flatten(tangents)
    if p_spec != t_spec:
        raise RuntimeError(
            f"{api}: Expected primals and tangents to have the same python structure. For "
            "example, if primals is a tuple of 3 tensors, tangents also must be. Got primals "
            f"with structure {p_spec} and tangents with structure {t_spec}"
        )
    for p, t in zip(p_leaves, t_leaves):
        if isinstance(p, Tensor) and isinstance(t, Tensor) and p.shape != t.shape:
            raise RuntimeError(
                "Trying to set a forward gradient that has a different size than that of the "
                "original Tensor, this is not supported. Tensor is of size "
                f"{list(p.shape)} while the given forward gradient is of size {list(t.shape)}."
            )
    outer = grad_mode.is_grad_enabled()
    with grad_mode.enable_grad():
        output, tracked, spec, fresh, outer = _traced_call(
            func, primals, {}, tuple(range(len(primals))) or 0, outer
        )
        output, aux = _split_aux(output, has_aux, api)
        out_leaves, out_spec = _tensor_outputs(output, api)
        if strict and not all(o.requires_grad for o in out_leaves):
            raise RuntimeError(
                "jvp(f, primals, tangents, strict=True): The output of f is independent of "
                "the inputs. This is not allowed with strict=True."
            )
        # uᵀJ is linear in u: its value at u = 0 is irrelevant, only its derivative in u
        us = [_zeros_like(o).requires_grad_(o.is_floating_point()) for o in out_leaves]
        u_j = _grads(out_leaves, tracked, us, create_graph=True)
        create = outer and _reaches_outside(list(out_leaves) + list(t_leaves), fresh)
        tangents_cast = [
            t.to(p.dtype) if t.dtype != p.dtype else t for t, p in zip(t_leaves, tracked)
        ]
        pairs = [(g, t) for g, t in zip(u_j, tangents_cast) if g.requires_grad]
        if pairs and any(u.requires_grad for u in us):
            jv = _grads([g for g, _ in pairs], us, [t for _, t in pairs], create)
        else:
            jv = [_zeros_like(o) for o in out_leaves]
    value = _finish(output, fresh, outer)
    jv = _finish(unflatten(jv, out_spec), fresh, outer)
    if has_aux:
        return value, jv, _finish(aux, fresh, outer)
    return value, jv


# ---------------------------------------------------------------------------------------------
# jacrev, jacfwd, hessian
# ---------------------------------------------------------------------------------------------


def _jacobian_rows(out: Tensor, tracked: list, create: bool, free_last: bool) -> list:
    """d(out)/d(each tracked input), shaped ``out.shape + input.shape``: one backward pass per
    element of ``out`` (a one-hot cotangent each); the last pass frees the graph if
    ``free_last``."""
    from autodiag.ops.factories import tensor as make_tensor
    from autodiag.ops.shape import stack

    n = out.numel()
    if n == 0 or not out.requires_grad:
        return [t.new_zeros(tuple(out.shape) + tuple(t.shape)) for t in tracked]
    rows: list[list] = [[] for _ in tracked]
    for k in range(n):
        onehot = np.zeros(n, dtype=out.dtype.np)
        onehot[k] = 1
        e_k = make_tensor(onehot.reshape(tuple(out.shape)), dtype=out.dtype)
        last = k == n - 1 and free_last
        for j, g in enumerate(
            _grads([out], tracked, [e_k], create, retain_graph=None if last else True)
        ):
            rows[j].append(g)
    return [stack(r, 0).reshape(tuple(out.shape) + tuple(t.shape)) for r, t in zip(rows, tracked)]


def jacrev(func, argnums=0, *, has_aux: bool = False, chunk_size=None, _preallocate_and_copy=False):
    """The Jacobian of ``func`` with respect to argument(s) ``argnums``, by reverse mode: for an
    output of shape ``O`` and an input of shape ``I``, a tensor of shape ``O + I``. Nested
    outputs and inputs give nested results (output-major), as PyTorch's.

    NOTE: one backward pass per output element (``chunk_size`` is accepted and changes nothing).

    >>> import autodiag as torch
    >>> from autodiag.func import jacrev
    >>> jacrev(lambda x: x ** 2)(torch.tensor([1.0, 2.0]))
    tensor([[2., 0.],
            [0., 4.]])
    """
    if chunk_size is not None and not (isinstance(chunk_size, int) and chunk_size > 0):
        raise ValueError("jacrev: `chunk_size` should be greater than 0.")

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        outer = grad_mode.is_grad_enabled()
        with grad_mode.enable_grad():
            output, tracked, spec, fresh, outer = _traced_call(func, args, kwargs, argnums, outer)
            output, aux = _split_aux(output, has_aux, "vjp(f, *primals)")
            out_leaves, out_spec = _tensor_outputs(output, "vjp(f, *primals)")
            create = outer and _reaches_outside(out_leaves, fresh)
            # outputs may share a graph: only the last output's last pass may free it, and
            # not if an aux the caller may backward through can share its nodes
            keep = has_aux and outer and _reaches_outside(flatten(aux)[0], fresh)
            last = -1 if keep else len(out_leaves) - 1
            per_output = [
                unflatten(_jacobian_rows(o, tracked, create, i == last), spec)
                for i, o in enumerate(out_leaves)
            ]
        jac = _finish(unflatten(per_output, out_spec), fresh, outer)
        if has_aux:
            return jac, _finish(aux, fresh, outer)
        return jac

    return wrapper


def jacfwd(func, argnums=0, has_aux: bool = False, *, randomness: str = "error"):
    """The Jacobian of ``func``, as ``jacrev`` computes it (PyTorch uses forward mode; the
    numbers are the same). Random operations in ``func`` follow vmap's ``randomness``.

    >>> import autodiag as torch
    >>> from autodiag.func import jacfwd
    >>> jacfwd(lambda x: x.sin())(torch.tensor([0.0]))
    tensor([[1.]])
    """
    from autodiag.func._vmap import check_randomness, randomness_mode

    check_randomness(randomness)

    @functools.wraps(func)
    def guarded(*args, **kwargs):
        with randomness_mode(randomness):
            return func(*args, **kwargs)

    return functools.wraps(func)(jacrev(guarded, argnums, has_aux=has_aux))


def hessian(func, argnums=0):
    """The Hessian of a scalar function: ``jacfwd(jacrev(func, argnums), argnums)``.

    >>> import autodiag as torch
    >>> from autodiag.func import hessian
    >>> hessian(lambda x: (x ** 3).sum())(torch.tensor([1.0, 2.0]))
    tensor([[ 6.,  0.],
            [ 0., 12.]])
    """
    return jacfwd(jacrev(func, argnums), argnums)
