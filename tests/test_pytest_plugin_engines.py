"""The pytest plugin on both engines: ``pytest --autodiag`` (tests on autodiag's engine) and
``pytest --autodiag-engine torch`` (tests on real PyTorch). The same test file, with ``import
torch`` or ``import autodiag as torch``, plants a NaN, an in-place write to a saved tensor and a
leaked graph; each fails with the test's line, the clean test passes, and a test that ran no op
of the engine is listed as not checked (never a pass)."""

from __future__ import annotations

import textwrap

import pytest
from test_pytest_plugin import PLUGIN, ROOT

pytest_plugins = ["pytester"]

torch = pytest.importorskip("torch")


@pytest.fixture(scope="module", autouse=True)
def _torch_imported_outside_the_inner_runs():
    """pytester's in-process runs forget the modules first imported inside them, and some of
    torch's cannot be imported twice (an optimizer's step imports ``torch._dynamo``, which
    registers operator libraries once per process): import them here first."""
    import autodiag.torch

    w = torch.nn.Parameter(torch.ones(2))
    opt = torch.optim.SGD([w], lr=0.1)
    with autodiag.torch.observe():
        (w * 2).sum().backward()
        opt.step()


BUGS = """
    import torch


    def test_planted_nan():
        x = torch.tensor([-1.0, 4.0], requires_grad=True)
        y = torch.sqrt(x) * 3
        y.sum().backward()
        assert x.grad is not None


    def test_inplace_write_to_a_saved_tensor():
        x = torch.tensor([0.5, -1.0], requires_grad=True)
        s = torch.sigmoid(x)
        s.mul_(2)
        assert s.shape == (2,)


    def test_leaked_graph():
        torch.manual_seed(0)
        w = torch.nn.Parameter(torch.ones(4))
        opt = torch.optim.SGD([w], lr=0.01)
        history = []
        for _ in range(6):
            loss = (w * torch.randn(4)).pow(2).sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
            history.append(loss)
        assert len(history) == 6


    def test_clean():
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1))
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(3):
            loss = model(torch.randn(8, 3)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        assert loss.item() >= 0


    def test_no_tensor_at_all():
        assert sum([1, 2]) == 3
"""
# the engine's option, and the import that gives the test file that engine
ENGINES = {
    "autodiag": (("--autodiag",), "import autodiag as torch"),
    "torch": (("--autodiag-engine", "torch"), "import torch"),
}


def source(engine: str, text: str = BUGS) -> str:
    return textwrap.dedent(text).replace("import torch\n", ENGINES[engine][1] + "\n", 1)


@pytest.mark.parametrize("engine", list(ENGINES))
def test_each_bug_fails_with_the_tests_line(pytester, engine):
    """A real pytest subprocess, loading the plugin with -p as CI would."""
    pytester.makepyfile(test_bugs=source(engine))
    pytester._monkeypatch.setenv("PYTHONPATH", ROOT)
    result = pytester.runpytest_subprocess(*PLUGIN, *ENGINES[engine][0], "-q")
    result.assert_outcomes(failed=3, passed=2)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        [
            "*_ test_planted_nan _*",
            "*autodiag: 1 finding in this test (nan_forward)*",
            "*✗ nan_forward: sqrt produced NaN from inputs without NaN",
            "*at test_bugs.py:6 in test_planted_nan",
            "*6 │ y = torch.sqrt(x) * 3",
            "*_ test_inplace_write_to_a_saved_tensor _*",
            "*✗ inplace_saved_tensor: mul_ modified a tensor that SigmoidBackward0 saved*",
            "*at test_bugs.py:14 in test_inplace_write_to_a_saved_tensor",
            "*_ test_leaked_graph _*",
            "*✗ graph_leak: list `history` in test_leaked_graph() (test_bugs.py:22) holds "
            "tensors with grad_fn, created at test_bugs.py:24*",
            "*autodiag: 1 test not checked*",
            "test_bugs.py::test_no_tensor_at_all: it ran no * op*",
        ]
    )
    failed = result.stdout.str().split("short test summary")[-1]
    assert "test_clean" not in failed and "test_no_tensor_at_all" not in failed


@pytest.mark.parametrize("engine", list(ENGINES))
def test_a_clean_suite_passes(pytester, engine):
    clean = (
        BUGS.split("def test_planted_nan")[0] + "def test_clean" + BUGS.split("def test_clean")[1]
    )
    clean = clean.split("def test_no_tensor_at_all")[0]
    pytester.makepyfile(test_clean=source(engine, clean))
    result = pytester.runpytest_inprocess(*PLUGIN, *ENGINES[engine][0], "-q")
    result.assert_outcomes(passed=1)
    assert result.ret == pytest.ExitCode.OK
    assert "not checked" not in result.stdout.str()


@pytest.mark.parametrize("engine", list(ENGINES))
def test_nothing_analysed_is_never_a_pass(pytester, engine):
    pytester.makepyfile(
        test_plain="""
        def test_arithmetic():
            assert 1 + 1 == 2
        """
    )
    result = pytester.runpytest_inprocess(*PLUGIN, *ENGINES[engine][0], "-q")
    result.assert_outcomes(passed=1)  # the test itself passed ...
    assert result.ret == pytest.ExitCode.TESTS_FAILED  # ... but the check did not
    result.stdout.fnmatch_lines(["*autodiag: nothing analysed: no test computed with *"])


def test_the_other_engines_tests_are_not_checked(pytester):
    pytester.makepyfile(
        test_mixed="""
        import autodiag
        import torch

        def test_on_autodiag():
            x = autodiag.tensor([-1.0], requires_grad=True)
            autodiag.log(x).sum().backward()  # a NaN PyTorch's observers cannot see

        def test_on_torch():
            torch.log(torch.tensor([2.0], requires_grad=True)).sum().backward()
        """
    )
    result = pytester.runpytest_inprocess(*PLUGIN, "--autodiag-engine", "torch", "-q")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(
        [
            "*autodiag: 1 test not checked*",
            "test_mixed.py::test_on_autodiag: it computed with autodiag's engine (run it "
            "without --autodiag-engine torch)",
        ]
    )
    assert result.ret == pytest.ExitCode.OK  # test_on_torch was checked


def test_markers_and_sections_on_torch(pytester):
    pytester.makepyfile(
        test_marked="""
        import pytest
        import torch

        @pytest.mark.autodiag_ignore("inf_forward")
        def test_ignored():
            torch.log(torch.zeros(1))

        def test_fails_anyway():
            y = torch.log(torch.zeros(1))
            assert y.item() > 0
        """
    )
    result = pytester.runpytest_inprocess(*PLUGIN, "--autodiag-engine", "torch", "-q")
    result.assert_outcomes(passed=1, failed=1)
    out = result.stdout.str()
    assert "assert -inf > 0" in out and "autodiag findings" in out
    assert "at test_marked.py:9 in test_fails_anyway" in out


def test_observe_inside_a_watched_test_says_why_it_cannot(pytester):
    pytester.makepyfile(
        test_nested="""
        import pytest
        import torch
        import autodiag.torch

        def test_observes_itself():
            with pytest.raises(RuntimeError, match="already observing the code of test "):
                with autodiag.torch.observe():
                    pass
            torch.ones(1) + 1
        """
    )
    result = pytester.runpytest_inprocess(*PLUGIN, "--autodiag-engine", "torch", "-q")
    result.assert_outcomes(passed=1)


def test_torch_engine_without_pytorch_is_a_usage_error(pytester, monkeypatch):
    from autodiag.engines import torch as torch_engine

    monkeypatch.setattr(torch_engine, "available", lambda: False)
    pytester.makepyfile(test_x="def test_x():\n    pass\n")
    result = pytester.runpytest_inprocess(*PLUGIN, "--autodiag-engine", "torch")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--autodiag-engine torch needs PyTorch*autodiag[[]torch[]]*"])


def test_a_deep_graph_does_not_crash_pytorchs_teardown(pytester):
    """NOTE [Deep graphs on PyTorch]: once Python touched a graph's nodes (the observer tags
    each), freeing a chain of more than ~45k nodes overflows an 8 MB stack; the plugin lets the
    main thread's stack grow (``threads.grow_main_stack``), where pytest frees a test's graph."""
    pytester.makepyfile(
        test_deep="""
        import torch

        def test_chain():
            x = torch.ones(1, requires_grad=True)
            y = x
            for _ in range(60_000):
                y = y * 1.0
            y.sum().backward()
            assert x.grad.item() == 1.0
        """
    )
    pytester._monkeypatch.setenv("PYTHONPATH", ROOT)
    result = pytester.runpytest_subprocess(*PLUGIN, "--autodiag-engine", "torch", "-q")
    result.assert_outcomes(passed=1)
    assert result.ret == pytest.ExitCode.OK
