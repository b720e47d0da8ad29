"""The pytest plugin (``pytest --autodiag``) and ``autodiag.testing.assert_gradcheck``, run with
pytester in-process (one subprocess run checks the real thing)."""

from __future__ import annotations

import doctest
import os
import sys
import textwrap

import pytest

import autodiag as ad
import autodiag.analysis.check  # noqa: F401 - see below
import autodiag.torch  # noqa: F401
from autodiag.testing import assert_gradcheck

# pytester's in-process runs forget the modules first imported inside them: a later import makes
# a second copy (new classes) that objects of the first copy then meet (the health detector's
# GradNorms, looked up by class). The plugin's modules are imported here, outside those runs.

pytest_plugins = ["pytester"]

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The plugin is loaded by module name. Block the entry point's name too: once the package is
# installed, pytest would otherwise register the same module a second time, as "autodiag".
# Other installed plugins stay out of the inner runs (hypothesis's terminal summary alone costs
# ~1 s per run).
PLUGIN = (
    "-p",
    "no:autodiag",
    "-p",
    "autodiag.pytest_plugin",
    "-p",
    "no:hypothesispytest",
    "-p",
    "no:benchmark",
    "-p",
    "no:cacheprovider",
)

HIDDEN_NAN = """
    import autodiag as torch

    def test_hides_a_nan():
        x = torch.tensor([-1.0], requires_grad=True)
        torch.log(x).sum().backward()  # log(-1) is NaN; nobody looks at it
        assert x.grad is not None

    def test_clean():
        from autodiag.trace import active

        x = torch.tensor([1.0, 2.0], requires_grad=True)
        (x * x).sum().backward()
        assert x.grad.tolist() == [2.0, 4.0]
        assert active() == ()  # the plugin's tracers observe without showing up
"""

INPLACE = """
    import autodiag as torch

    def test_writes_a_saved_tensor():
        x = torch.tensor([0.5, -1.0], requires_grad=True)
        s = torch.sigmoid(x)
        s.mul_(2)  # SigmoidBackward0 saved s; no backward runs, so nothing raises
        assert s.shape == (2,)
"""


def run(pytester: pytest.Pytester, source: str, *args: str) -> pytest.RunResult:
    pytester.makepyfile(textwrap.dedent(source))
    return pytester.runpytest_inprocess(*PLUGIN, "-q", *args)


def test_hidden_nan_fails_with_the_report(pytester):
    result = run(pytester, HIDDEN_NAN, "--autodiag")
    result.assert_outcomes(passed=1, failed=1)
    out = result.stdout.str()
    assert "FAILED test_hidden_nan_fails_with_the_report.py::test_hides_a_nan" in out
    result.stdout.fnmatch_lines(
        [
            "*autodiag: 1 finding in this test (nan_forward)*",
            "*✗ nan_forward: log produced NaN from inputs without NaN",
            "*at test_hidden_nan_fails_with_the_report.py:5 in test_hides_a_nan",
            "*5 │ torch.log(x).sum().backward()*",
            "*hint: log of 0 is -inf*",
        ]
    )
    assert "test_clean" not in out.split("short test summary")[-1]


def test_without_the_option_nothing_changes(pytester):
    run(pytester, HIDDEN_NAN).assert_outcomes(passed=2)
    run(pytester, INPLACE).assert_outcomes(passed=1)


def test_inplace_on_a_saved_tensor_fails(pytester):
    result = run(pytester, INPLACE, "--autodiag")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*✗ inplace_saved_tensor: mul_ modified a tensor that SigmoidBackward0 saved*",
            "*at test_inplace_on_a_saved_tensor_fails.py:6 in test_writes_a_saved_tensor",
            "*hint: SigmoidBackward0 needs its own output*",
        ]
    )


def test_a_failing_test_gets_the_report_as_a_section(pytester):
    result = run(
        pytester,
        """
        import autodiag as torch

        def test_both():
            x = torch.tensor([0.0], requires_grad=True)
            y = torch.log(x)  # -inf
            assert y.item() > 0
        """,
        "--autodiag",
    )
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert "assert -inf > 0" in out  # the test's own failure comes first
    assert "autodiag findings" in out and "inf_forward: log produced" in out


def test_ignore_marker(pytester):
    result = run(
        pytester,
        """
        import pytest
        import autodiag as torch

        @pytest.mark.autodiag_ignore("nan_forward")
        def test_ignores_nan():
            torch.log(torch.tensor([-1.0], requires_grad=True))

        @pytest.mark.autodiag_ignore("inf_forward")
        def test_ignores_something_else():
            torch.log(torch.tensor([-1.0], requires_grad=True))

        @pytest.mark.autodiag_ignore
        def test_ignores_all():
            torch.log(torch.tensor([-1.0], requires_grad=True))
        """,
        "--autodiag",
        "--strict-markers",
    )
    result.assert_outcomes(passed=2, failed=1)
    assert "test_ignores_something_else" in result.stdout.str().split("short test summary")[-1]


def test_fixtures_are_not_watched_and_backward_nan_is(pytester):
    result = run(
        pytester,
        """
        import pytest
        import autodiag as torch

        @pytest.fixture
        def made_in_a_fixture():
            return torch.log(torch.tensor([-1.0]))  # a NaN set up on purpose

        def test_uses_it(made_in_a_fixture):
            assert torch.isnan(made_in_a_fixture).sum().item() == 1

        def test_sqrt_at_zero():
            x = torch.tensor([0.0, 1.0], requires_grad=True)
            x.sqrt().sum().backward()  # d sqrt at 0 is inf
        """,
        "--autodiag",
    )
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*inf_backward: SqrtBackward0 returned an infinite gradient*"])


def test_plugin_fixture_and_help(pytester):
    result = run(
        pytester,
        """
        import autodiag as torch

        class Square(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                ctx.save_for_backward(x)
                return x * x

            @staticmethod
            def backward(ctx, grad):
                (x,) = ctx.saved_tensors
                return x * grad  # forgot the factor 2

        def test_square(autodiag_gradcheck):
            x = torch.tensor([1.0, 2.0], dtype=torch.float64, requires_grad=True)
            autodiag_gradcheck(Square, (x,))
        """,
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*AssertionError: gradcheck of Square.apply failed*", "*constant_factor*factor of 0.5*"]
    )
    assert "def assert_gradcheck" not in result.stdout.str()  # __tracebackhide__: test's line
    helped = pytester.runpytest_inprocess(*PLUGIN, "--help")
    helped.stdout.fnmatch_lines(["*--autodiag*"])


def test_plugin_is_inert_without_the_option():
    """Loaded by every pytest run once installed: importing it pulls in neither the analyses
    nor the report layer (rich, typer), and without --autodiag pytest_configure registers no
    per-test hooks. (The package's __init__, the engine, is imported: the plugin lives in it.)"""
    import subprocess

    code = (
        "import sys; import autodiag.pytest_plugin; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('autodiag', 'rich', "
        "'typer')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=ROOT),
        check=True,
    ).stdout
    assert "'autodiag.pytest_plugin'" in out
    for heavy in ("autodiag.analysis", "autodiag.report", "autodiag.cli", "'rich", "'typer"):
        assert heavy not in out, out

    from autodiag import pytest_plugin

    class Config:
        registered = []
        lines = []

        def addinivalue_line(self, name, line):
            self.lines.append((name, line))

        def getoption(self, name, default=None):
            return False

        class pluginmanager:  # noqa: N801 - mimics the attribute
            @staticmethod
            def register(plugin, name):
                Config.registered.append(name)

    pytest_plugin.pytest_configure(Config())
    assert Config.registered == [] and Config.lines[0][0] == "markers"


def test_subprocess_run(pytester):
    """The real thing: a pytest subprocess loading the plugin with -p, as CI would."""
    pytester.makepyfile(textwrap.dedent(HIDDEN_NAN))
    pytester._monkeypatch.setenv("PYTHONPATH", ROOT)
    result = pytester.runpytest_subprocess(*PLUGIN, "--autodiag", "-q")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*nan_forward: log produced NaN*"])


def test_entry_point_is_declared():
    """pytest finds the plugin through the pytest11 entry point of the installed package; in
    this worktree the installed metadata may belong to another checkout, so read pyproject."""
    try:
        import tomllib
    except ModuleNotFoundError:  # pragma: no cover - Python 3.10
        pytest.skip("tomllib needs Python 3.11")
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        meta = tomllib.load(f)
    assert meta["project"]["entry-points"]["pytest11"] == {"autodiag": "autodiag.pytest_plugin"}
    import importlib

    module = importlib.import_module(meta["project"]["entry-points"]["pytest11"]["autodiag"])
    assert hasattr(module, "pytest_addoption") and hasattr(module, "pytest_configure")


# --- assert_gradcheck ---------------------------------------------------------------------------


class Cube(ad.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x**3

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return 3 * x**2 * grad


class WrongCube(Cube):  # samples/bad_backward.py's Cube
    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return 2 * x * grad  # BUG: the derivative of x**3 is 3 * x**2


class TwoGrads(ad.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        return grad * 2, grad


def leaf(*values):
    return ad.tensor(list(values), dtype=ad.float64, requires_grad=True)


def test_assert_gradcheck_passes():
    x = leaf(0.5, -1.5, 2.0)
    assert assert_gradcheck(Cube, (x,)) is None
    assert_gradcheck(Cube.apply, x, gradgrad=True)  # a bare tensor is one input
    assert_gradcheck(lambda a, b: (a * b).sin(), (x, leaf(1.0, 2.0, 3.0)), gradgrad=True)


def test_assert_gradcheck_reports_the_wrong_backward():
    with pytest.raises(AssertionError) as info:
        assert_gradcheck(WrongCube, (leaf(1.0, 2.0, 3.0),))
    text = str(info.value)
    assert text.startswith("gradcheck of WrongCube.apply failed: Jacobian mismatch")
    assert "worst element" in text and "numerical 27, analytical 6" in text


def test_assert_gradcheck_carries_the_diagnosis():
    with pytest.raises(
        AssertionError,
        match=r"(?s)incorrect number of gradients.*autodiag "
        r"diagnosis:.*\[wrong_grad_count\]",
    ):
        assert_gradcheck(TwoGrads, leaf(1.0))


def test_assert_gradcheck_second_order():
    class FirstOrderOnly(ad.autograd.Function):
        """Right first derivative of x**3, but its backward is not differentiable correctly:
        it hides x from the graph (detach), so second derivatives come out wrong."""

        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x**3

        @staticmethod
        def backward(ctx, grad):
            (x,) = ctx.saved_tensors
            return 3 * x.detach() ** 2 * grad

    x = leaf(0.5, 2.0)
    assert_gradcheck(FirstOrderOnly, (x,))
    with pytest.raises(
        AssertionError, match="gradgradcheck .second derivatives. of FirstOrderOnly.apply failed"
    ):
        assert_gradcheck(FirstOrderOnly, (x,), gradgrad=True)


def test_errors_of_the_function_itself_propagate():
    def broken(t):
        raise TypeError("not a gradient problem")

    with pytest.raises(TypeError, match="not a gradient problem"):
        assert_gradcheck(broken, (leaf(1.0),))


def test_doctests():
    from autodiag import testing
    from autodiag.report import annotations, findings

    for module in (testing, annotations, findings):
        assert doctest.testmod(module).failed == 0, module.__name__
