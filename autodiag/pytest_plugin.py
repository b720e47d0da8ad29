"""pytest plugin (entry point ``pytest11``): ``pytest --autodiag`` runs each test under NaN/Inf
and in-place detection and fails a test that produced a finding.

    pytest --autodiag                      # every test; the report is in the failure message

A test fails when, while its body ran (fixtures excluded), an autodiag op created NaN or ±inf
from finite inputs (forward or backward: ``nan_forward`` ... ``inf_backward``, as ``autodiag
anomaly --keep-going`` finds them) or wrote in place into a tensor that a pending backward saved
(``inplace_saved_tensor``, as ``autodiag inplace``) — even when the test asserts nothing about
it. A test that fails anyway gets the report as an extra section. Opt a test out::

    @pytest.mark.autodiag_ignore("inf_forward")   # these kinds; no argument: every kind
    def test_masked_softmax(): ...

The fixture ``autodiag_gradcheck`` is ``autodiag.testing.assert_gradcheck``; it works with or
without ``--autodiag``.

Without ``--autodiag`` the plugin only adds the option, the marker and the fixture: autodiag
itself is not even imported, and no hook runs per test.
"""

from __future__ import annotations

import pytest

MARKER = "autodiag_ignore"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("autodiag")
    group.addoption(
        "--autodiag",
        action="store_true",
        default=False,
        help="Fail tests whose body produces NaN/Inf (forward or backward) or an "
        "in-place write to a tensor saved for backward (autodiag).",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{MARKER}(*kinds): autodiag --autodiag ignores these "
        f"finding kinds in this test (every kind without arguments).",
    )
    if config.getoption("autodiag", default=False):
        # the per-test hooks exist only when asked for: the suite pays nothing otherwise
        config.pluginmanager.register(Watch(), "autodiag-watch")


@pytest.fixture
def autodiag_gradcheck():
    """``autodiag.testing.assert_gradcheck``: ``autodiag_gradcheck(MyFunction, (x,))``."""
    from autodiag.testing import assert_gradcheck

    return assert_gradcheck


_FINDINGS = pytest.StashKey[list]()


class Watch:
    """The hooks of ``--autodiag``: trace each test's call phase, judge it in its report."""

    def __init__(self):
        from autodiag.trace import sites

        try:
            # stack captures stop at the frame that calls the test function: pytest's own
            # frames are neither the user's code nor worth walking at every op
            from _pytest.python import pytest_pyfunc_call

            sites.STOP_CODES.add(pytest_pyfunc_call.__code__)
        except (ImportError, AttributeError):  # pragma: no cover - another pytest layout
            pass

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item):
        from autodiag.analysis.anomaly import AnomalyFinder
        from autodiag.analysis.inplace import InplaceWatcher
        from autodiag.trace import tracing

        # keep_going: a StopRun inside the test would end it as if it had passed
        finder, watcher = AnomalyFinder(keep_going=True), InplaceWatcher()
        # an observer: code under test that asks autodiag.trace.active() does not see them
        finder.internal = watcher.internal = True
        try:
            with tracing(finder, watcher):
                return (yield)
        finally:
            found = finder.findings() + watcher.findings()[0]
            item.stash[_FINDINGS] = _unignored(item, found)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo):
        report = yield
        found = item.stash.get(_FINDINGS, None) if call.when == "call" else None
        if found and not report.skipped:  # an xfail is a skip: its NaN may be the point
            text = _report(found)
            if report.passed:
                report.outcome = "failed"
                report.longrepr = text
            else:
                report.sections.append(("autodiag findings", text))
        return report


def _unignored(item: pytest.Item, found: list) -> list:
    for mark in item.iter_markers(MARKER):
        if not mark.args:
            return []
        found = [f for f in found if f.kind not in mark.args]
    return found


def _report(found: list) -> str:
    from autodiag.report.findings import plain_text

    n = len(found)
    kinds = ", ".join(sorted({f.kind for f in found}))
    return (
        f"autodiag: {n} finding{'s' if n != 1 else ''} in this test ({kinds}); "
        f"@pytest.mark.{MARKER}({kinds.split(', ')[0]!r}) opts out\n\n"
        f"{plain_text(found)}"
    )
