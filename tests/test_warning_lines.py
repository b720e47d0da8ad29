"""Warnings autodiag raises for PyTorch point at the user's line, however deep the call."""

import warnings

import pytest

import autodiag as torch


def _caught(fn):
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        fn()
    return w


def test_deprecated_add_overload_warns_at_the_callers_line(monkeypatch):
    from autodiag import _warnings

    monkeypatch.setattr(_warnings, "WARNED", set())
    p = torch.ones(3)
    w = _caught(lambda: p.add_(-0.1, torch.ones(3)))
    assert len(w) == 1 and "This overload of add_ is deprecated" in str(w[0].message)
    assert w[0].filename == __file__
    assert p.tolist() == [0.8999999761581421] * 3


def test_mismatched_masks_warning_points_at_the_module_call():
    m = torch.nn.MultiheadAttention(4, 2, batch_first=True)
    x = torch.ones(1, 3, 4)
    mask = torch.zeros(1, 3, dtype=torch.bool)

    def call():
        m(x, x, x, key_padding_mask=mask, attn_mask=torch.zeros(3, 3))

    w = [r for r in _caught(call) if "mismatched" in str(r.message)]
    assert w and all(r.filename == __file__ for r in w)


def test_warnings_from_inside_modules_and_functionals_point_at_the_user():
    # a deprecation warning raised several frames down (Module.__call__, forward, the op, its
    # tracing wrapper) named autodiag/trace/events.py (dropout2d) or a module's file
    drop = torch.nn.Dropout2d(0.5)
    x = torch.ones(3, 4)
    for make in (
        lambda: drop(x),
        lambda: torch.nn.MSELoss(size_average=False)(x, x),  # PyTorch's legacy argument
        lambda: torch.nn.LSTM(2, 3, dropout=0.5),  # dropout with one layer
    ):
        w = _caught(make)
        assert w, make
        assert all(r.filename == __file__ for r in w), [(r.filename, str(r.message)) for r in w]


# --- a script's PyTorch warnings, run through the CLI on either engine ----------------------
# PyTorch's warnings (its C++ ``TORCH_WARN``s and its Python ``warnings.warn(stacklevel=...)``)
# name the script's line that called the op. Under ``--engine torch`` the op is called from the
# function mode, and the warning named autodiag/engines/torch/observe.py, went through the
# script's filters as autodiag's module (NOTE [Warnings at the user's line]). Plain
# ``python script.py`` on real PyTorch is the oracle for both engines.

WARNS = """\
import warnings

import pytest
import torch
import torch.nn.functional as F


class Net(torch.nn.Module):
    def forward(self, x):
        return F.softmax(x)


def helper(x):
    return torch.tensor(x)


def main():
    x = torch.randn(3, 4, requires_grad=True)
    y = (x * 2).exp()
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        y.grad
        Net()(x)
        helper(y)
        F.softmax(x)
        torch.tensor(x)
        for _ in range(2):
            F.softmax(y)
    for r in w:
        name = r.filename.rsplit("/", 1)[-1]
        print(f"{name}:{r.lineno} {r.category.__name__} {str(r.message)[:40]}")
    with warnings.catch_warnings():
        warnings.filterwarnings("error", category=UserWarning, module="__main__")
        try:
            F.softmax(x)
        except UserWarning as e:
            print("raised", type(e).__name__, str(e)[:40])
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", module="__main__")
        F.softmax(x)
        print("ignored")
    (y.sum() * 3).backward()


main()
z = torch.tensor(torch.ones(2))
s = F.softmax(torch.ones(2, 2, requires_grad=True))
"""


def _plain_and_cli(tmp_path, engine: str, text: str, command: str = "graph"):
    import subprocess
    import sys

    from test_torch_engine import ENV

    path = tmp_path / "warns.py"
    path.write_text(text)
    plain = subprocess.run([sys.executable, str(path)], capture_output=True, text=True)
    args = ["-m", "autodiag", command, str(path), "--engine", engine, "-q", "--no-color"]
    ours = subprocess.run([sys.executable, *args], capture_output=True, text=True, env=ENV)
    return plain, ours


@pytest.mark.parametrize("engine", ["torch", "autodiag"])
def test_pytorch_warnings_name_the_scripts_line(tmp_path, engine):
    pytest.importorskip("torch")
    plain, ours = _plain_and_cli(tmp_path, engine, WARNS)
    assert plain.returncode == 0, plain.stderr
    # recorded ones (a method, a function, main(), a loop; filters on the script's module)
    assert plain.stdout.count("warns.py:") == 7, plain.stdout
    assert "raised UserWarning" in plain.stdout and "ignored" in plain.stdout
    # the script's print()s go to stderr under the CLI (its stdout is the report's)
    assert plain.stdout in ours.stderr, ours.stderr[-3000:]
    # printed ones: the module-level lines, as the default filters show them
    printed = [ln for ln in plain.stderr.splitlines() if "Warning:" in ln]
    assert len(printed) == 2 and all(ln.startswith(str(tmp_path)) for ln in printed), printed
    got = [ln for ln in ours.stderr.splitlines() if "Warning:" in ln]
    assert got == printed, ours.stderr[-3000:]
    assert "autodiag" not in "".join(got)


@pytest.mark.parametrize("engine", ["torch", "autodiag"])
@pytest.mark.parametrize("command", ["graph", "check"])
def test_a_warning_made_an_error_is_raised_at_the_scripts_line(tmp_path, engine, command):
    pytest.importorskip("torch")
    text = (
        "import warnings\nimport torch\n\n"
        "warnings.filterwarnings('error', message='Implicit dimension', module='__main__')\n"
        "x = torch.ones(2, 3, requires_grad=True)\n"
        "y = torch.nn.functional.softmax(x)\n"
    )
    plain, ours = _plain_and_cli(tmp_path, engine, text, command)
    assert plain.returncode == 1 and "UserWarning: Implicit dimension" in plain.stderr
    assert ours.returncode == 3, ours.stderr[-3000:]  # the target failed
    assert "raised UserWarning: Implicit dimension" in ours.stderr
    # the script's line once (the mode's call of the op from that line is not shown again)
    frames = [ln for ln in ours.stderr.splitlines() if ln.strip().startswith("File ")]
    assert frames == [f'  File "{tmp_path / "warns.py"}", line 6, in <module>'], ours.stderr


@pytest.mark.parametrize("engine", ["torch", "autodiag"])
def test_an_op_error_shows_the_scripts_line_once(tmp_path, engine):
    pytest.importorskip("torch")
    text = "import torch\n\n\ndef f(a):\n    return a @ torch.ones(3)\n\n\nf(torch.ones(2))\n"
    plain, ours = _plain_and_cli(tmp_path, engine, text)
    assert plain.returncode == 1
    assert ours.returncode == 3, ours.stderr[-3000:]
    frames = [ln.strip() for ln in ours.stderr.splitlines() if ln.strip().startswith("File ")]
    assert [f.rsplit(", ", 1)[-1] for f in frames] == ["in <module>", "in f"], ours.stderr


def test_warning_attribute_reads_name_the_scripts_line_on_torch(tmp_path):
    """Attribute reads take the mode's short path, but for those PyTorch warns about (``.T`` of
    a tensor that is not 2-D; autodiag's engine does not give that warning yet)."""
    pytest.importorskip("torch")
    text = "import torch\n\nz = torch.ones(2, 3, 4, requires_grad=True)\nw = (z * 2).T\nw.grad\n"
    plain, ours = _plain_and_cli(tmp_path, "torch", text)
    printed = [ln for ln in plain.stderr.splitlines() if "Warning:" in ln]
    assert [ln.split(": ")[0] for ln in printed] == [f"{tmp_path / 'warns.py'}:{n}" for n in (4, 5)]
    assert [ln for ln in ours.stderr.splitlines() if "Warning:" in ln] == printed, ours.stderr


def test_a_runs_call_site_codes_leave_the_stack_walks_tables_when_it_ends():
    # NOTE [Warnings at the user's line]: each call site's stand-in code object is hidden from
    # stacks while the run lasts; a later run in the same process must not find them kept
    torch = pytest.importorskip("torch")
    import autodiag.torch as adt
    from autodiag.engines.torch import observe as obs
    from autodiag.trace import sites

    before = set(sites._HIDDEN_CODES)
    with adt.observe(anomaly=True):
        x = torch.ones(3, requires_grad=True)
        (x * 2).sum().backward()
        made = {id(fn.__code__) for fn, _ in obs._call_sites.values()}
    assert made and made <= set(sites._HIDDEN_CODES) | made
    assert not (made & set(sites._HIDDEN_CODES))
    assert not (made & set(sites._codes))
    assert set(sites._HIDDEN_CODES) == before
