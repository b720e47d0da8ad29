"""``import torch`` scripts on autodiag's engine: the alias under the CLI (every command),
``python -m autodiag.run``, the precise exit 2 for a name autodiag lacks, ``--engine``, and that
nothing of the alias leaks into the process afterwards (checked against the real torch)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
from cli_helpers import cli

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}


BUGGY = """\
{imports}
torch.manual_seed(0)

logits = torch.tensor([[2.0, -1.0, 0.5], [0.0, 1.0, 3.0]], requires_grad=True)
mask = torch.tensor([[1.0, 0.0, 1.0], [1.0, 1.0, 1.0]])
p = F.softmax(logits, dim=1) * mask
p = p / p.sum(dim=1, keepdim=True)
model = nn.Linear(3, 1)
opt = optim.SGD(model.parameters(), lr=0.1)
entropy = -(p * torch.log(p)).sum() + model(p).sum()
entropy.backward()
opt.step()
"""
AS_TORCH = (
    "import autodiag as torch\nfrom autodiag import nn, optim\nimport autodiag.nn.functional as F"
)
IMPORT_TORCH = "import torch\nfrom torch import nn, optim\nimport torch.nn.functional as F"


def _strip(doc):
    """A JSON report without what differs between two files of the same program."""
    text = json.dumps(doc)
    return json.loads(text.replace("b.py", "X.py").replace("a.py", "X.py"))


@pytest.mark.parametrize("command", ["graph", "check", "anomaly", "trace", "leaks", "inplace"])
def test_import_torch_script_finds_what_the_autodiag_version_finds(script, command):
    plain = script(BUGGY.format(imports=AS_TORCH), "a.py")
    aliased = script(BUGGY.format(imports=IMPORT_TORCH), "b.py")
    r1, r2 = cli(command, plain, "-f", "json"), cli(command, aliased, "-f", "json")
    assert r2.exit_code == r1.exit_code, r2.stderr
    d1, d2 = json.loads(r1.stdout), json.loads(r2.stdout)
    d1.pop("target"), d2.pop("target")
    assert _strip(d2) == _strip(d1)
    if command in ("check", "anomaly"):
        assert r2.exit_code == 1
        kinds = {f["kind"] for f in d2["findings"]}
        assert {"inf_forward", "nan_forward"} <= kinds
        (line,) = {f["location"]["line"] for f in d2["findings"] if f["kind"] == "inf_forward"}
        assert line == 12  # the log(p) line of b.py
    if command == "graph":
        assert "MulBackward0" in {n["name"] for n in d2["nodes"]}


@pytest.mark.parametrize(
    "source,line,name,code",
    [
        (
            "import torch\nimport torch.nn as nn\nx = torch.ones(2)\n\nm = nn.ChannelShuffle(2)\n",
            5,
            "torch.nn.ChannelShuffle",
            "m = nn.ChannelShuffle(2)",
        ),
        (
            "import torch\nfrom torch.nn import Linear, ChannelShuffle\n",
            2,
            "torch.nn.ChannelShuffle",
            "from torch.nn import Linear, ChannelShuffle",
        ),
        (
            "import torch\nimport torch.fft as fft\n",
            2,
            "torch.fft",
            "import torch.fft as fft",
        ),
        (
            "from torch import nn, fft\n",
            1,
            "torch.fft",
            "from torch import nn, fft",
        ),
        (
            "import torch\ndef f():\n    return torch.compile(len)\nf()\n",
            3,
            "torch.compile",
            "return torch.compile(len)",
        ),
        (
            "import torch\nx = torch.fake_quantize_per_tensor_affine(torch.eye(2), 0.1, 0, 0, 9)\n",
            2,
            "torch.fake_quantize_per_tensor_affine",
            "x = torch.fake_quantize_per_tensor_affine(torch.eye(2), 0.1, 0, 0, 9)",
        ),
        ("import torchvision\n", 1, "torchvision", "import torchvision"),
        # a method of PyTorch's Tensor autodiag's lacks: exit 2 too, not the script's failure
        (
            "import torch\na = torch.eye(3).to_sparse_csr()\n",
            2,
            "Tensor.to_sparse_csr",
            "a = torch.eye(3).to_sparse_csr()",
        ),
        (
            "import torch\ndef f(x):\n    return x.to_mkldnn()\nf(torch.ones(2))\n",
            3,
            "Tensor.to_mkldnn",
            "return x.to_mkldnn()",
        ),
        # read on the class (an unbound method), and on a Parameter
        (
            "import torch\nx = torch.ones(2)\ny = torch.Tensor.igammac(x, x)\n",
            3,
            "Tensor.igammac",
            "y = torch.Tensor.igammac(x, x)",
        ),
        (
            "import torch\nf = torch.nn.Parameter.to_sparse_csr\n",
            2,
            "Tensor.to_sparse_csr",
            "f = torch.nn.Parameter.to_sparse_csr",
        ),
        (
            "import torch\np = torch.nn.Parameter(torch.ones(2))\nq = p.igammac(p)\n",
            3,
            "Tensor.igammac",
            "q = p.igammac(p)",
        ),
    ],
)
@pytest.mark.parametrize("command", ["graph", "check"])
def test_a_name_autodiag_lacks_is_exit_2_with_file_line_and_name(
    script, source, line, name, code, command
):
    path = script(source)
    r = cli(command, path, "-f", "json")
    assert r.exit_code == 2, r.stderr
    assert f"s.py:{line} uses `{name}`, which autodiag's engine does not provide" in r.stderr
    assert code in r.stderr
    assert "--engine torch (every command runs there)" in r.stderr  # torch is here
    assert "Traceback" not in r.stderr and "autodiag/" not in r.stderr
    # no report, no verdict: only the error envelope (DESIGN §4: JSON on every exit)
    doc = json.loads(r.stdout)
    assert doc["status"] == "error" and doc["findings"] == []
    assert doc["error"]["kind"] == "not_provided" and doc["error"]["exit_code"] == 2


def test_hasattr_and_getattr_default_still_work_in_the_script(script):
    path = script("""\
        import torch
        ok = not hasattr(torch, "compile") and getattr(torch.nn, "ChannelShuffle", None) is None
        try:
            from torch.nn import ChannelShuffle
        except ImportError:
            ok = ok and True
        if not ok:
            raise SystemExit(5)
        x = torch.ones(2, requires_grad=True)
        (x * 2).sum().backward()
        """)
    r = cli("graph", path)
    assert r.exit_code == 0, r.stderr
    assert "MulBackward0" in r.stdout


def test_the_alias_does_not_leak_and_real_torch_is_put_back(script, tmp_path, torch):
    other = tmp_path / "lib"
    other.mkdir()
    (other / "helper_with_torch_xyz.py").write_text("import torch\nK = torch.ones(1)\n")
    path = script(f"""\
        import sys
        sys.path.insert(0, {str(other)!r})
        import torch, torch.nn, torch.optim
        import helper_with_torch_xyz
        assert type(helper_with_torch_xyz.K).__module__.startswith("autodiag")
        x = torch.ones(2, requires_grad=True)
        (x * 2).sum().backward()
        """)
    before_path = list(sys.meta_path)
    assert sys.modules["torch"] is torch  # conftest imported the oracle
    r = cli("graph", path)
    assert r.exit_code == 0, r.stderr
    assert sys.modules["torch"] is torch and sys.modules["torch.nn"] is torch.nn
    assert sys.meta_path == before_path
    assert "helper_with_torch_xyz" not in sys.modules
    assert not [n for n, m in sys.modules.items() if type(m).__name__ == "_TorchModule"]
    import torch as again

    assert again is torch and hasattr(again.nn, "Conv2d")


def test_a_later_real_import_torch_is_unaffected(tmp_path):
    # a fresh process that has not imported torch before the run
    (tmp_path / "s.py").write_text(
        "import torch\nx = torch.ones(2, requires_grad=True)\n(x * 3).sum().backward()\n"
    )
    code = textwrap.dedent(f"""\
        import sys
        from typer.testing import CliRunner
        from autodiag.cli import app
        r = CliRunner().invoke(app, ["graph", {str(tmp_path / "s.py")!r}])
        assert r.exit_code == 0 and "MulBackward0" in r.stdout, r.stdout + r.stderr
        assert "torch" not in sys.modules
        import torch
        assert hasattr(torch.nn, "Conv2d") and "site-packages" in torch.__file__
        print("real", torch.__version__)
        """)
    p = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=ENV,
        cwd=tmp_path,
        timeout=300,
    )
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("real 2.")


def test_engine_option(script):
    path = script("import torch\nx = torch.ones(2, requires_grad=True)\n(x * 2).sum().backward()\n")
    assert cli("graph", path, "--engine", "autodiag").exit_code == 0
    for command in ("graph", "inplace", "anomaly", "leaks", "check", "trace"):  # on real PyTorch
        r = cli(command, path, "--engine", "torch")  # (tests/test_torch_engine*.py)
        assert r.exit_code == 0, (command, r.stderr)
    r = cli("gradcheck", path, "--engine", "torch")  # runs, and finds no Function to check
    assert r.exit_code == 2
    assert "nothing to check" in r.stderr
    r = cli("graph", path, "--engine", "jax")
    assert r.exit_code == 2


def test_python_m_autodiag_run(tmp_path):
    (tmp_path / "t.py").write_text(
        textwrap.dedent("""\
        import sys
        import torch
        import torch.nn as nn
        x = torch.tensor([1.0, 2.0], requires_grad=True)
        (x ** 2).sum().backward()
        print(type(torch.ones(1)).__module__, x.grad.tolist(), sys.argv[1:])
        """)
    )
    p = subprocess.run(
        [sys.executable, "-m", "autodiag.run", "t.py", "a", "--b"],
        capture_output=True,
        text=True,
        env=ENV,
        cwd=tmp_path,
        timeout=300,
    )
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "autodiag.tensor [2.0, 4.0] ['a', '--b']"
    (tmp_path / "u.py").write_text("import torch\n\ny = torch.nn.ChannelShuffle(2)\n")
    p = subprocess.run(
        [sys.executable, "-m", "autodiag.run", "u.py"],
        capture_output=True,
        text=True,
        env=ENV,
        cwd=tmp_path,
        timeout=300,
    )
    assert p.returncode == 2
    assert "u.py:3 uses `torch.nn.ChannelShuffle`, which autodiag's engine does not" in p.stderr
    assert "Traceback" not in p.stderr
    (tmp_path / "v.py").write_text("import torch\nraise ValueError('boom')\n")
    p = subprocess.run(
        [sys.executable, "-m", "autodiag.run", "v.py"],
        capture_output=True,
        text=True,
        env=ENV,
        cwd=tmp_path,
        timeout=300,
    )
    assert p.returncode == 1 and "ValueError: boom" in p.stderr and 'v.py", line 2' in p.stderr
    assert "autodiag/run.py" not in p.stderr


SAMPLES = sorted(f for f in os.listdir(os.path.join(ROOT, "samples")) if f.endswith(".py"))


@pytest.mark.parametrize("name", SAMPLES)
def test_every_sample_both_ways(tmp_path, name):
    """Each sample as written (``import autodiag as torch``) and rewritten to ``import torch``
    gives the same `check` report under the CLI."""
    source = open(os.path.join(ROOT, "samples", name)).read()
    rewritten = (
        source.replace("import autodiag as torch", "import torch")
        .replace("import autodiag.nn.functional as F", "import torch.nn.functional as F")
        .replace("import autodiag.nn as nn", "import torch.nn as nn")
    )
    assert "autodiag" not in "\n".join(
        l for l in rewritten.splitlines() if l.startswith(("import", "from"))
    )
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / name).write_text(source)
    (tmp_path / "b" / name).write_text(rewritten)
    r1 = cli("check", str(tmp_path / "a" / name), "-f", "json")
    r2 = cli("check", str(tmp_path / "b" / name), "-f", "json")
    assert r2.exit_code == r1.exit_code, r2.stderr[-2000:]
    d1, d2 = json.loads(r1.stdout), json.loads(r2.stdout)
    assert json.dumps(d2).replace("/b/", "/a/") == json.dumps(d1)


def test_a_misspelt_tensor_method_stays_the_scripts_error(script):
    # not a name of PyTorch's Tensor: the script's own AttributeError (exit 3), as python says
    path = script("import torch\nx = torch.ones(2)\ny = x.sinn()\n")
    r = cli("graph", path)
    assert r.exit_code == 3, r.stderr
    assert "AttributeError: 'Tensor' object has no attribute 'sinn'" in r.stderr
    assert "does not provide" not in r.stderr


def test_the_list_of_pytorchs_tensor_names_is_pytorchs():
    torch = pytest.importorskip("torch")
    from autodiag._pytorch_names import TENSOR

    if not torch.__version__.startswith("2.13."):
        pytest.skip("the list is PyTorch 2.13's")
    assert sorted(TENSOR) == sorted(n for n in dir(torch.Tensor) if not n.startswith("_"))


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_name_autodiag_lacks_used_in_a_worker_thread_is_exit_2_not_a_pass(script):
    # the thread's AttributeError ends the thread (python prints it) and the script goes on:
    # the run did not do what it does on PyTorch, so no verdict (was: exit 0, "no findings")
    path = script("""\
        import threading
        import torch

        def work():
            x = torch.ones(2, requires_grad=True)
            (x * 2).sum().backward()
            x.detach().igammac(x.detach())

        t = threading.Thread(target=work)
        t.start()
        t.join()
        """)
    r = cli("check", path, "-f", "json")
    assert r.exit_code == 2, r.stderr
    assert "s.py:7 uses `Tensor.igammac`, which autodiag's engine does not provide" in r.stderr
    doc = json.loads(r.stdout)
    assert doc["status"] == "error" and doc["error"]["kind"] == "not_provided"
    # a misspelt method in a thread stays the thread's own error, printed as python prints it
    path = script("""\
        import threading, torch
        t = threading.Thread(target=lambda: torch.ones(1).sinn())
        t.start(); t.join()
        x = torch.ones(1, requires_grad=True)
        x.sum().backward()
        """)
    r = cli("check", path)
    # the thread died of it: the run failed (exit 3, the thread named), as in the script's own
    # thread; in-process, pytest's thread hook takes the printed traceback
    assert r.exit_code == 3, r.stderr
    assert "AttributeError: 'Tensor' object has no attribute 'sinn'" in r.stderr
    assert "does not provide" not in r.stderr
