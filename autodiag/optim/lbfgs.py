"""L-BFGS (``torch.optim.LBFGS``), ported from PyTorch's ``lbfgs.py`` (itself after minFunc).

The algorithm works on one flat vector of all parameters. Here that vector and the history are
numpy arrays (0-d arrays for PyTorch's 0-d tensors, so float32 runs round as PyTorch's do); the
state keeps them as Tensors, under PyTorch's keys, so ``state_dict()`` has PyTorch's structure.
"""

from __future__ import annotations

import numpy as np

from autodiag.core import grad_mode
from autodiag.optim.optimizer import Optimizer, ParamWriter, _check_lr
from autodiag.tensor import Tensor

__all__ = ["LBFGS"]


def _cubic_interpolate(x1, f1, g1, x2, f2, g2, bounds=None):
    """Minimiser of the cubic through (x1, f1, g1) and (x2, f2, g2), clamped to ``bounds``."""
    if bounds is not None:
        xmin_bound, xmax_bound = bounds
    else:
        xmin_bound, xmax_bound = (x1, x2) if x1 <= x2 else (x2, x1)
    d1 = g1 + g2 - 3 * (f1 - f2) / (x1 - x2)
    d2_square = d1**2 - g1 * g2
    if d2_square >= 0:
        d2 = np.sqrt(d2_square)
        if x1 <= x2:
            min_pos = x2 - (x2 - x1) * ((g2 + d2 - d1) / (g2 - g1 + 2 * d2))
        else:
            min_pos = x1 - (x1 - x2) * ((g1 + d2 - d1) / (g1 - g2 + 2 * d2))
        return min(max(min_pos, xmin_bound), xmax_bound)
    return (xmin_bound + xmax_bound) / 2.0


def _strong_wolfe(obj_func, x, t, d, f, g, gtd, c1=1e-4, c2=0.9, tolerance_change=1e-9, max_ls=25):
    """Line search along ``d`` for a step ``t`` satisfying the strong Wolfe conditions
    (PyTorch's ``_strong_wolfe``, statement for statement)."""
    d_norm = np.abs(d).max()
    g = g.copy()
    f_new, g_new = obj_func(x, t, d)
    ls_func_evals = 1
    gtd_new = g_new.dot(d)

    # bracket an interval containing a point satisfying the Wolfe criteria
    t_prev, f_prev, g_prev, gtd_prev = 0, f, g, gtd
    done = False
    ls_iter = 0
    while ls_iter < max_ls:
        if f_new > (f + c1 * t * gtd) or (ls_iter > 1 and f_new >= f_prev):
            bracket = [t_prev, t]
            bracket_f = [f_prev, f_new]
            bracket_g = [g_prev, g_new.copy()]
            bracket_gtd = [gtd_prev, gtd_new]
            break
        if abs(gtd_new) <= -c2 * gtd:
            bracket, bracket_f, bracket_g = [t], [f_new], [g_new]
            done = True
            break
        if gtd_new >= 0:
            bracket = [t_prev, t]
            bracket_f = [f_prev, f_new]
            bracket_g = [g_prev, g_new.copy()]
            bracket_gtd = [gtd_prev, gtd_new]
            break
        # interpolate
        min_step = t + 0.01 * (t - t_prev)
        max_step = t * 10
        tmp = t
        t = _cubic_interpolate(
            t_prev, f_prev, gtd_prev, t, f_new, gtd_new, bounds=(min_step, max_step)
        )
        t_prev, f_prev, g_prev, gtd_prev = tmp, f_new, g_new.copy(), gtd_new
        f_new, g_new = obj_func(x, t, d)
        ls_func_evals += 1
        gtd_new = g_new.dot(d)
        ls_iter += 1

    # reached max number of iterations?
    if ls_iter == max_ls:
        bracket = [0, t]
        bracket_f = [f, f_new]
        bracket_g = [g, g_new]

    # zoom: refine the bracket until a point satisfies the criteria
    insuf_progress = False
    low_pos, high_pos = (0, 1) if bracket_f[0] <= bracket_f[-1] else (1, 0)
    while not done and ls_iter < max_ls:
        if abs(bracket[1] - bracket[0]) * d_norm < tolerance_change:
            break
        t = _cubic_interpolate(
            bracket[0], bracket_f[0], bracket_gtd[0], bracket[1], bracket_f[1], bracket_gtd[1]
        )
        # NOTE: (from PyTorch) make sure the step is not too close to the bracket's ends
        eps = 0.1 * (max(bracket) - min(bracket))
        if min(max(bracket) - t, t - min(bracket)) < eps:
            if insuf_progress or t >= max(bracket) or t <= min(bracket):
                if abs(t - max(bracket)) < abs(t - min(bracket)):
                    t = max(bracket) - eps
                else:
                    t = min(bracket) + eps
                insuf_progress = False
            else:
                insuf_progress = True
        else:
            insuf_progress = False
        f_new, g_new = obj_func(x, t, d)
        ls_func_evals += 1
        gtd_new = g_new.dot(d)
        ls_iter += 1
        if f_new > (f + c1 * t * gtd) or f_new >= bracket_f[low_pos]:
            bracket[high_pos] = t
            bracket_f[high_pos] = f_new
            bracket_g[high_pos] = g_new.copy()
            bracket_gtd[high_pos] = gtd_new
            low_pos, high_pos = (0, 1) if bracket_f[0] <= bracket_f[1] else (1, 0)
        else:
            if abs(gtd_new) <= -c2 * gtd:
                done = True
            elif gtd_new * (bracket[high_pos] - bracket[low_pos]) >= 0:
                bracket[high_pos] = bracket[low_pos]
                bracket_f[high_pos] = bracket_f[low_pos]
                bracket_g[high_pos] = bracket_g[low_pos]
                bracket_gtd[high_pos] = bracket_gtd[low_pos]
            bracket[low_pos] = t
            bracket_f[low_pos] = f_new
            bracket_g[low_pos] = g_new.copy()
            bracket_gtd[low_pos] = gtd_new

    t = bracket[low_pos]
    return bracket_f[low_pos], bracket_g[low_pos], t, ls_func_evals


def _to_state(v):
    """An array or numpy scalar as the Tensor PyTorch keeps in the state; lists item-wise."""
    if isinstance(v, list):
        return [_to_state(x) for x in v]
    if isinstance(v, (np.ndarray, np.generic)):
        return Tensor._make(np.asarray(v))
    return v


def _from_state(v):
    if isinstance(v, list):
        return [_from_state(x) for x in v]
    if isinstance(v, Tensor):
        d = v._data
        return d[()] if d.ndim == 0 else d
    return v


class LBFGS(Optimizer):
    """L-BFGS over all parameters as one vector; ``step(closure)`` re-evaluates the loss as
    often as it needs (``closure`` clears the gradients, computes the loss, backwards it and
    returns it). One parameter group only; ``line_search_fn`` is None or ``"strong_wolfe"``.

    >>> import autodiag as torch
    >>> w = torch.nn.Parameter(torch.tensor([3.0, -2.0]))
    >>> opt = torch.optim.LBFGS([w])
    >>> def closure():
    ...     opt.zero_grad(); loss = ((w - 1) ** 2).sum(); loss.backward(); return loss
    >>> _ = opt.step(closure)
    >>> w
    Parameter containing:
    tensor([1., 1.], requires_grad=True)
    """

    def __init__(
        self,
        params,
        lr: float = 1,
        max_iter: int = 20,
        max_eval: int | None = None,
        tolerance_grad: float = 1e-7,
        tolerance_change: float = 1e-9,
        history_size: int = 100,
        line_search_fn: str | None = None,
    ) -> None:
        _check_lr(lr)
        if max_eval is None:
            max_eval = max_iter * 5 // 4
        defaults = {
            "lr": lr,
            "max_iter": max_iter,
            "max_eval": max_eval,
            "tolerance_grad": tolerance_grad,
            "tolerance_change": tolerance_change,
            "history_size": history_size,
            "line_search_fn": line_search_fn,
        }
        super().__init__(params, defaults)
        if len(self.param_groups) != 1:
            raise ValueError("LBFGS doesn't support per-parameter options (parameter groups)")
        self._params = self.param_groups[0]["params"]
        self._numel_cache = None

    def _numel(self) -> int:
        if self._numel_cache is None:
            self._numel_cache = sum(p._data.size for p in self._params)
        return self._numel_cache

    def _gather_flat_grad(self) -> np.ndarray:
        views = [
            np.zeros(p._data.size, p._data.dtype) if p._grad is None else p._grad._data.ravel()
            for p in self._params
        ]
        return np.concatenate(views, 0)

    def _add_grad(self, step_size, update: np.ndarray, write: ParamWriter) -> None:
        offset = 0
        for p in self._params:
            d = p._data
            n = d.size
            d += step_size * update[offset : offset + n].reshape(d.shape)  # p.add_(u, alpha=t)
            write(p, "add_")
            offset += n
        assert offset == self._numel()

    def _clone_param(self) -> list:
        return [p._data.copy() for p in self._params]

    def _set_param(self, params_data: list, write: ParamWriter) -> None:
        for p, pdata in zip(self._params, params_data, strict=True):
            p._data[...] = pdata
            write(p, "copy_")

    def _directional_evaluate(self, closure, x, t, d, write):
        self._add_grad(t, d, write)
        loss = float(closure())
        flat_grad = self._gather_flat_grad()
        self._set_param(x, write)
        return loss, flat_grad

    def step(self, closure):
        """Up to ``max_iter`` L-BFGS iterations; returns the loss ``closure()`` gave first."""
        if closure is None:
            raise TypeError("LBFGS.step() missing 1 required positional argument: 'closure'")
        with grad_mode.no_grad():
            return self._step(closure)

    def _step(self, closure):
        def evaluate():
            with grad_mode.enable_grad():
                return closure()

        write = ParamWriter()
        group = self.param_groups[0]
        lr = group["lr"]
        if isinstance(lr, Tensor):
            lr = lr.item()  # an int lr stays an int, as in PyTorch (state["t"] keeps its type)
        max_iter, max_eval = group["max_iter"], group["max_eval"]
        tolerance_grad, tolerance_change = group["tolerance_grad"], group["tolerance_change"]
        line_search_fn, history_size = group["line_search_fn"], group["history_size"]

        # NOTE: the state lives under the first parameter, as in PyTorch
        state = self.state[self._params[0]]
        state.setdefault("func_evals", 0)
        state.setdefault("n_iter", 0)

        orig_loss = evaluate()
        loss = float(orig_loss)
        current_evals = 1
        state["func_evals"] += 1

        flat_grad = self._gather_flat_grad()
        if np.abs(flat_grad).max() <= tolerance_grad:
            return orig_loss

        d = _from_state(state.get("d"))
        t = _from_state(state.get("t"))
        old_dirs = _from_state(state.get("old_dirs"))
        old_stps = _from_state(state.get("old_stps"))
        ro = _from_state(state.get("ro"))
        H_diag = _from_state(state.get("H_diag"))
        prev_flat_grad = _from_state(state.get("prev_flat_grad"))
        prev_loss = state.get("prev_loss")
        al = _from_state(state.get("al"))

        n_iter = 0
        while n_iter < max_iter:
            n_iter += 1
            state["n_iter"] += 1

            # the descent direction
            if state["n_iter"] == 1:
                d = -flat_grad
                old_dirs, old_stps, ro = [], [], []
                H_diag = 1
            else:
                # update the memory
                y = flat_grad - prev_flat_grad
                s = d * t
                ys = y.dot(s)
                if ys > 1e-10:
                    if len(old_dirs) == history_size:
                        old_dirs.pop(0)
                        old_stps.pop(0)
                        ro.pop(0)
                    old_dirs.append(y)
                    old_stps.append(s)
                    ro.append(1.0 / ys)
                    H_diag = ys / y.dot(y)
                # two-loop recursion: d = -H g
                num_old = len(old_dirs)
                if al is None:
                    al = [None] * history_size
                    state["al"] = None  # PyTorch's key order; filled in below
                q = -flat_grad
                for i in range(num_old - 1, -1, -1):
                    al[i] = old_stps[i].dot(q) * ro[i]
                    q += -al[i] * old_dirs[i]  # q.add_(old_dirs[i], alpha=-al[i])
                d = r = q * H_diag
                for i in range(num_old):
                    be_i = old_dirs[i].dot(r) * ro[i]
                    r += (al[i] - be_i) * old_stps[i]

            prev_flat_grad = flat_grad.copy()
            prev_loss = loss

            # the step length
            if state["n_iter"] == 1:
                t = min(1.0, 1.0 / np.abs(flat_grad).sum()) * lr
            else:
                t = lr

            gtd = flat_grad.dot(d)
            if gtd > -tolerance_change:  # the directional derivative is below tolerance
                break

            ls_func_evals = 0
            if line_search_fn is not None:
                if line_search_fn != "strong_wolfe":
                    raise RuntimeError("only 'strong_wolfe' is supported")
                x_init = self._clone_param()

                def obj_func(x, t, d):
                    return self._directional_evaluate(evaluate, x, t, d, write)

                loss, flat_grad, t, ls_func_evals = _strong_wolfe(
                    obj_func, x_init, t, d, loss, flat_grad, gtd, max_ls=max_eval - current_evals
                )
                self._add_grad(t, d, write)
                opt_cond = np.abs(flat_grad).max() <= tolerance_grad
            else:
                # no line search: a fixed step
                self._add_grad(t, d, write)
                opt_cond = False
                if n_iter != max_iter:
                    loss = float(evaluate())
                    flat_grad = self._gather_flat_grad()
                    opt_cond = np.abs(flat_grad).max() <= tolerance_grad
                    ls_func_evals = 1

            current_evals += ls_func_evals
            state["func_evals"] += ls_func_evals

            # the stopping conditions
            if n_iter == max_iter or current_evals >= max_eval or opt_cond:
                break
            if np.abs(d * t).max() <= tolerance_change:
                break
            if abs(loss - prev_loss) < tolerance_change:
                break

        state["d"] = _to_state(d)
        state["t"] = _to_state(t)
        state["old_dirs"] = _to_state(old_dirs)
        state["old_stps"] = _to_state(old_stps)
        state["ro"] = _to_state(ro)
        state["H_diag"] = _to_state(H_diag)
        state["prev_flat_grad"] = _to_state(prev_flat_grad)
        state["prev_loss"] = prev_loss
        if al is not None:
            state["al"] = _to_state(al)
        return orig_loss
