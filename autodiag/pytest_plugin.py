"""pytest plugin (entry point ``pytest11``): ``pytest --autodiag`` runs each test under NaN/Inf,
in-place and graph-leak detection and fails a test that produced a finding.

    pytest --autodiag                          # tests on autodiag's engine (import autodiag)
    pytest --autodiag-engine torch             # tests on real PyTorch, observed as by
                                               # `autodiag check --engine torch`

A test fails when, while its body ran (fixtures excluded), an op created NaN or ±inf from
finite inputs (forward or backward: ``nan_forward`` ... ``inf_backward``, as ``autodiag anomaly
--keep-going`` finds them), wrote in place into a tensor that a pending backward saved
(``inplace_saved_tensor``, as ``autodiag inplace``), or kept graphs alive across its training
steps (``graph_leak``, as ``autodiag leaks``) — even when the test asserts nothing about it.
The failure names the test's line. Warnings (``retained_graph``) do not fail a test; a test that
fails anyway gets every finding as an extra section. Opt a test out::

    @pytest.mark.autodiag_ignore("inf_forward")   # these kinds; no argument: every kind
    def test_masked_softmax(): ...

Nothing analysed is never a pass (DESIGN §4): a test that ran no op of the chosen engine (a
test of autodiag's engine under ``--autodiag-engine torch``, or of PyTorch without it) was not
checked, and the terminal summary lists it; a session in which no test was checked fails.

The fixture ``autodiag_gradcheck`` is ``autodiag.testing.assert_gradcheck``; it works with or
without ``--autodiag``.

Without ``--autodiag``/``--autodiag-engine`` the plugin only adds the options, the marker and
the fixture: autodiag itself is not even imported, and no hook runs per test.
"""

from __future__ import annotations

import pytest

MARKER = "autodiag_ignore"
ENGINES = ("autodiag", "torch")
# What a test is checked for: the detectors of ``autodiag check`` that read one test's ops.
CHECKS = ("inplace", "leaks", "anomaly")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("autodiag")
    group.addoption(
        "--autodiag",
        action="store_true",
        default=False,
        help="Fail tests whose body produces NaN/Inf (forward or backward), an "
        "in-place write to a tensor saved for backward, or a graph leak (autodiag).",
    )
    group.addoption(
        "--autodiag-engine",
        choices=ENGINES,
        default=None,
        help="The engine the tests compute with: autodiag (the default) or torch (real "
        "PyTorch, observed through its extension points). Implies --autodiag.",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{MARKER}(*kinds): autodiag --autodiag ignores these "
        f"finding kinds in this test (every kind without arguments).",
    )
    engine = config.getoption("autodiag_engine", default=None)
    if config.getoption("autodiag", default=False) or engine:
        # the per-test hooks exist only when asked for: the suite pays nothing otherwise
        config.pluginmanager.register(Watch(engine or "autodiag"), "autodiag-watch")


@pytest.fixture
def autodiag_gradcheck():
    """``autodiag.testing.assert_gradcheck``: ``autodiag_gradcheck(MyFunction, (x,))``."""
    from autodiag.testing import assert_gradcheck

    return assert_gradcheck


_FINDINGS = pytest.StashKey[list]()


class Watch:
    """The hooks of ``--autodiag``: observe each test's call phase on ``engine``
    (``autodiag.torch._session``), judge it in its report, list what was not checked."""

    def __init__(self, engine: str = "autodiag"):
        from autodiag.trace import sites

        if engine == "torch":
            from autodiag.engines import torch as torch_engine

            if not torch_engine.available():
                raise pytest.UsageError(
                    f"--autodiag-engine torch needs PyTorch, which is not installed. "
                    f"{torch_engine.INSTALL_HINT}"
                )
        self.engine = engine
        self.stack_limit = None
        if engine == "torch":
            from autodiag.engines.torch.threads import grow_main_stack

            # a test's graph is freed in pytest's main thread: deep ones need a large stack
            self.stack_limit = grow_main_stack()
        self.checked = 0
        self.unchecked: list = []  # (nodeid, why) of tests that ran but were not checked
        try:
            # stack captures stop at the frame that calls the test function: pytest's own
            # frames are neither the user's code nor worth walking at every op
            from _pytest.python import pytest_pyfunc_call

            sites.STOP_CODES.add(pytest_pyfunc_call.__code__)
        except (ImportError, AttributeError):  # pragma: no cover - another pytest layout
            pass

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item):
        from autodiag.torch._session import Session, claim, release

        label = f"test {item.nodeid}"
        try:
            claim(label, "pytest --autodiag")
        except RuntimeError as e:  # the test runs inside another observation (a fixture's)
            self.unchecked.append((item.nodeid, str(e)))
            return (yield)
        session = Session(self.engine, CHECKS, label=label)
        try:
            session.start()
        except BaseException:
            release()
            raise
        error = None
        try:
            return (yield)
        except BaseException as e:
            error = e
            raise
        finally:
            try:
                scopes = [vars(item.module)] if getattr(item, "module", None) else []
                run = session.stop(error, scopes)
                found = session.findings(run)
                if session.analysed:
                    self.checked += 1
                    every = found["inplace"][0] + found["leaks"] + found["anomaly"]
                    item.stash[_FINDINGS] = _unignored(item, every)
                else:
                    self.unchecked.append((item.nodeid, self._why(session)))
            finally:
                release()

    def _why(self, session) -> str:
        if session.wrong_engine:
            return "it computed with autodiag's engine (run it without --autodiag-engine torch)"
        if self.engine == "torch":
            return "it ran no PyTorch op in the test's thread"
        return "it ran no autodiag op (for a test on real PyTorch: --autodiag-engine torch)"

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo):
        report = yield
        found = item.stash.get(_FINDINGS, None) if call.when == "call" else None
        if found and not report.skipped:  # an xfail is a skip: its NaN may be the point
            text = _report(found)
            if report.passed and any(f.severity == "error" for f in found):
                report.outcome = "failed"
                report.longrepr = text
            elif not report.passed:
                report.sections.append(("autodiag findings", text))
        return report

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if not self.unchecked:
            return
        tr = terminalreporter
        what = "PyTorch" if self.engine == "torch" else "autodiag"
        n = len(self.unchecked)
        tr.write_sep("-", f"autodiag: {n} test{'s' if n != 1 else ''} not checked")
        shown = self.unchecked if tr.verbosity > 0 else self.unchecked[:10]
        for nodeid, why in shown:
            tr.write_line(f"{nodeid}: {why}")
        if len(shown) < len(self.unchecked):
            tr.write_line(f"... and {len(self.unchecked) - len(shown)} more (-v lists them)")
        if not self.checked:
            tr.write_line(
                f"autodiag: nothing analysed: no test computed with {what}, so nothing was "
                f"checked; this run is not a pass of --autodiag.",
                red=True,
                bold=True,
            )

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        from autodiag.engines.torch.threads import restore_main_stack

        restore_main_stack(self.stack_limit)

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus) -> None:
        # DESIGN §4: a run in which the chosen engine recorded nothing is never a pass
        if self.unchecked and not self.checked and exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED


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
