"""The runnable examples in public docstrings run (a module list: the package as a whole does not
collect under --doctest-modules, because the op registry wraps functions)."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [
    "autodiag.trace",
    "autodiag.trace.sites",
    "autodiag.inspect",
    "autodiag.analysis.summary",
    "autodiag.analysis.referrers",
    "autodiag.analysis.check",
    "autodiag.analysis.health",
    "autodiag.report.leaks",
    "autodiag.report.annotations",
    "autodiag.report.junit",
    "autodiag.autograd.graph",
    "autodiag.generator",
    "autodiag.utils.data",
    "autodiag.utils.data.dataset",
    "autodiag.utils.data.sampler",
    "autodiag.utils.data.dataloader",
    "autodiag.utils.data._collate",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0, f"{name} has no examples"
    assert result.failed == 0
