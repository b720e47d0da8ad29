"""Shared test setup: the PyTorch oracle.

Differential tests take the ``torch`` fixture (or are marked ``oracle``). Without torch they skip,
except when ``AUTODIAG_REQUIRE_ORACLE=1`` (set by .ci/run): then a missing oracle is a failure,
so a skipped oracle can never look green.
"""

from __future__ import annotations

import os
import sys
import textwrap

import pytest

try:
    import torch as _torch
except Exception as e:  # pragma: no cover - depends on the machine
    _torch = None
    _TORCH_ERROR = repr(e)
else:
    _TORCH_ERROR = ""

REQUIRE_ORACLE = os.environ.get("AUTODIAG_REQUIRE_ORACLE") == "1"


def pytest_configure(config):
    if REQUIRE_ORACLE and _torch is None:
        raise pytest.UsageError(
            f"AUTODIAG_REQUIRE_ORACLE=1 but torch failed to import: {_TORCH_ERROR}"
        )
    if _torch is not None:
        _torch.set_num_threads(1)  # deterministic sums; the machine has 2 cores


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "torch" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.oracle)


@pytest.fixture(scope="session")
def torch():
    """The PyTorch module (the oracle); skips the test when torch is not installed."""
    if _torch is None:
        pytest.skip(f"torch not installed: {_TORCH_ERROR}")
    return _torch


def _oracle_skips(config) -> int:
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None:
        return 0
    return sum("torch not installed" in str(r.longrepr) for r in reporter.stats.get("skipped", []))


def pytest_sessionfinish(session, exitstatus):
    n = _oracle_skips(session.config)
    if n and REQUIRE_ORACLE and session.exitstatus == 0:
        print(f"\nautodiag: {n} differential tests were skipped but the oracle is required")
        session.exitstatus = 1


@pytest.fixture
def script(tmp_path):
    """``script(source, name="s.py")``: write a dedented script into the test's folder, return
    its path (a test module may define its own ``script`` for a common header)."""

    def make(source: str, name: str = "s.py") -> str:
        p = tmp_path / name
        p.write_text(textwrap.dedent(source))
        return str(p)

    return make


@pytest.fixture
def switch_often():
    """Threads switch every microsecond: a race between two bytecodes shows at once."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(before)
