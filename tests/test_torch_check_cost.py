"""What ``check --engine torch`` leaves out of a training step's way (tests/perf/
bench_torch_engine.py measures it): no global module hook (the modules running are read from
the frames at the relu ops that need them: NOTE [Modules from frames] in engines/torch/hooks.py),
and no walk up the frames at each backward call to tell a closure's (every optimizer step is
counted while the observer's step hooks are installed: ``_in_optimizer_step``)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")


def _observed_check():
    from autodiag.analysis import check
    from autodiag.engines.torch.observe import observing, register
    from autodiag.trace import tracing

    register()
    tracers = [d.make() for d in check.on_torch()]
    return tracing(*tracers), observing()


def test_check_installs_no_global_module_hook():
    from torch.nn.modules import module

    traced, observed = _observed_check()
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 1))
    with traced, observed:
        hooks = (
            module._global_forward_pre_hooks,
            module._global_forward_hooks,
            module._global_backward_hooks,
            module._global_backward_pre_hooks,
        )
        assert not any(hooks), hooks
        model(torch.randn(2, 3)).sum().backward()


def test_a_closure_is_known_under_the_observer():
    from autodiag.analysis.health import _in_optimizer_step
    from autodiag.trace import events

    w = torch.ones(2, requires_grad=True)
    seen = []

    def closure():
        seen.append((_in_optimizer_step(), events.FOREIGN_STEPS_COUNTED[0] > 0))
        return (w * w).sum()

    traced, observed = _observed_check()
    with traced, observed:
        closure()
        torch.optim.LBFGS([w], max_iter=1).step(closure)
    assert seen == [(False, True), (True, True)]
    assert events.FOREIGN_STEPS_COUNTED[0] == 0  # the hooks are gone with the observer
