"""The runnable examples in docstrings: plain ``pytest`` collects them (``--doctest-modules``
over ``autodiag/``, configured in pyproject.toml); these tests keep that collection possible."""

from __future__ import annotations

import doctest
import importlib
import pkgutil
import sys
from pathlib import Path

import pytest

import autodiag

ROOT = Path(__file__).resolve().parent.parent


def _modules():
    out = []
    for info in pkgutil.walk_packages(autodiag.__path__, "autodiag."):
        out.append(info.name)
    return sorted(out)


def test_backward_vocabulary_has_no_phantom_attributes():
    # doctest's finder (and hasattr, copy, pickle) probe ``__wrapped__``: a missing name must be
    # an AttributeError, never the registry's KeyError
    from autodiag.ops._core import TENSOR

    assert not hasattr(TENSOR, "__wrapped__")
    with pytest.raises(AttributeError, match="no_such_op"):
        TENSOR.no_such_op  # noqa: B018
    assert TENSOR.exp is autodiag.exp


def test_every_module_yields_its_examples():
    finder = doctest.DocTestFinder()
    examples = {}
    for name in _modules():
        module = importlib.import_module(name)
        examples[name] = sum(len(t.examples) for t in finder.find(module))
    # the modules whose examples a hand-kept list ran before pytest collected the package
    for name in (
        "autodiag.trace",
        "autodiag.autograd.graph",
        "autodiag.analysis.check",
        "autodiag.utils.data.dataloader",
    ):
        assert examples[name] > 0, name
    assert sum(examples.values()) > 100


@pytest.mark.skipif(sys.version_info < (3, 11), reason="tomllib")
def test_plain_pytest_collects_the_package_doctests():
    import tomllib

    conf = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    assert "autodiag" in conf["testpaths"]
    assert "--doctest-modules" in conf["addopts"].split()
