"""NOTE [Masked origins]: a NaN/Inf the script masks away before any use (pytorch/examples gcn's
``r_inv = rowsum ** -1; r_inv[torch.isinf(r_inv)] = 0``) is no finding, on either engine, at
module level, in a function, a method and a ``main()`` loop; without the mask it is found at
its line, and a masked value that still goes on (its raw tensor used again, or its node
reached by backward: the where trap) is found as before."""

from __future__ import annotations

import json
import textwrap

import pytest
from test_torch_engine_anomaly import _anomaly_facts, _run_both, _twin_scripts

torch = pytest.importorskip("torch")

IDIOMS = {
    "setitem isinf (gcn)": [
        "rowsum = torch.tensor([0.0, 2.0, 4.0])",
        "r = rowsum ** -1  # ORIGIN",
        "r[torch.isinf(r)] = 0  # MASK",
    ],
    "where isfinite": [
        "a = torch.tensor([1.0, 2.0, 4.0])",
        "b = torch.tensor([0.0, 2.0, 1.0])",
        "r = a / b  # ORIGIN",
        "r = torch.where(torch.isfinite(r), r, 0.0)  # MASK",
    ],
    "masked_fill_ isnan": [
        "a = torch.tensor([0.0, 2.0, 4.0])",
        "r = a / a  # ORIGIN",
        "r.masked_fill_(torch.isnan(r), 0)  # MASK",
    ],
    "masked_fill ~isfinite": [
        "a = torch.tensor([0.0, 2.0, 4.0])",
        "r = torch.log(a)  # ORIGIN",
        "r = r.masked_fill(~torch.isfinite(r), 0.0)  # MASK",
    ],
}

PLACES = {
    "module level": """\
{code}
w = torch.ones(3, requires_grad=True)
(w * r).sum().backward()
""",
    "function": """\
def prepare():
{code}
    return r


w = torch.ones(3, requires_grad=True)
(w * prepare()).sum().backward()
""",
    "method": """\
class Prepare(torch.nn.Module):
    def forward(self):
{code}
        return r


w = torch.ones(3, requires_grad=True)
(w * Prepare()()).sum().backward()
""",
    "main() loop": """\
def main():
    w = torch.ones(3, requires_grad=True)
    opt = torch.optim.SGD([w], lr=0.1)
    for step in range(3):
        opt.zero_grad()
{code}
        (w * r).sum().backward()
        opt.step()


if __name__ == "__main__":
    main()
""",
}
INDENT = {"module level": "", "function": "    ", "method": "        ", "main() loop": "        "}


def _script(place: str, lines: list[str]) -> str:
    code = "\n".join(INDENT[place] + line for line in lines)
    return textwrap.dedent(PLACES[place]).replace("{code}", code)


@pytest.mark.parametrize("place", list(PLACES))
@pytest.mark.parametrize("idiom", list(IDIOMS))
def test_a_value_masked_before_any_use_is_no_finding(tmp_path, idiom, place):
    paths, _ = _twin_scripts(tmp_path, _script(place, IDIOMS[idiom]))
    ours, theirs = _run_both("anomaly", paths)
    assert ours["findings"] == theirs["findings"] == []
    assert ours["masked"] == theirs["masked"]
    assert sum(ours["masked"].values()) >= 1


@pytest.mark.parametrize("place", list(PLACES))
@pytest.mark.parametrize("idiom", list(IDIOMS))
def test_the_same_without_the_mask_is_found_at_its_line(tmp_path, idiom, place):
    lines = [line for line in IDIOMS[idiom] if "# MASK" not in line]
    paths, marks = _twin_scripts(tmp_path, _script(place, lines))
    ours, theirs = _run_both("anomaly", paths)
    assert _anomaly_facts(theirs) == _anomaly_facts(ours)
    first = ours["findings"][0]
    assert first["kind"] in ("inf_forward", "nan_forward")
    assert first["location"]["line"] == marks["ORIGIN"]
    assert ours.get("masked", {}) == theirs.get("masked", {}) == {}


USED_AFTER_MASKING = {
    "raw value used again": """\
a = torch.tensor([1.0, 2.0, 4.0])
r = a / torch.tensor([0.0, 2.0, 1.0])  # ORIGIN
clean = torch.where(torch.isfinite(r), r, 0.0)
z = torch.exp(-r)  # finite (exp(-inf) = 0), but the Inf was used
w = torch.ones(3, requires_grad=True)
(w * clean * z).sum().backward()
""",
    "where trap: the masked value is in the graph": """\
a = torch.tensor([1.0, 2.0, 4.0], requires_grad=True)
r = a / torch.tensor([0.0, 2.0, 1.0])  # ORIGIN
clean = torch.where(torch.isfinite(r), r, 0.0)
clean.sum().backward()  # DivBackward0 sends 0 / 0 = NaN to a
""",
    "masked in place, but only its NaN": """\
a = torch.tensor([0.0, 2.0, -1.0])
r = torch.log(a)  # ORIGIN
r.masked_fill_(torch.isnan(r), 0)  # the -inf stays
w = torch.ones(3, requires_grad=True)
(w * r).sum().backward()
""",
    "tested, then used": """\
a = torch.tensor([0.0, 2.0, 4.0])
r = 1 / a  # ORIGIN
seen = bool(torch.isinf(r).any())
w = torch.ones(3, requires_grad=True)
(w * r).sum().backward()
""",
}


@pytest.mark.parametrize("case", list(USED_AFTER_MASKING))
def test_a_value_that_goes_on_is_found_at_its_line(tmp_path, case):
    paths, marks = _twin_scripts(tmp_path, USED_AFTER_MASKING[case])
    ours, theirs = _run_both("anomaly", paths, "--keep-going")
    assert _anomaly_facts(theirs) == _anomaly_facts(ours)
    first = ours["findings"][0]
    assert first["kind"] in ("inf_forward", "nan_forward")
    assert first["location"]["line"] == marks["ORIGIN"]


def test_check_passes_the_gcn_normalisation_and_fails_without_its_mask(tmp_path):
    (tmp_path / "masked").mkdir()
    (tmp_path / "bare").mkdir()
    masked = _script("function", IDIOMS["setitem isinf (gcn)"])
    paths, _ = _twin_scripts(tmp_path / "masked", masked)
    ours, theirs = _run_both("check", paths)
    assert [f["kind"] for f in ours["findings"]] == [f["kind"] for f in theirs["findings"]] == []
    bare = [line for line in IDIOMS["setitem isinf (gcn)"] if "# MASK" not in line]
    paths, marks = _twin_scripts(tmp_path / "bare", _script("function", bare))
    ours, theirs = _run_both("check", paths)
    for doc in (ours, theirs):
        found = [f for f in doc["findings"] if f["kind"] == "inf_forward"]
        assert [f["location"]["line"] for f in found] == [marks["ORIGIN"]]


@pytest.mark.parametrize("engine", ["autodiag", "torch"])
@pytest.mark.parametrize("masked", [True, False])
def test_nan_to_num_on_both_engines(tmp_path, masked, engine):
    """``nan_to_num`` (autodiag's engine has it since ops16: exit 2, not provided, before)."""
    from cli_helpers import cli

    lines = ["a = torch.tensor([0.0, 2.0, 4.0])", "r = torch.log(a)  # ORIGIN"]
    if masked:
        lines.append("r = torch.nan_to_num(r, neginf=0.0)")
    source = "import torch\n" + _script("main() loop", lines)
    path = tmp_path / "bug.py"
    path.write_text(source)
    r = cli("anomaly", str(path), "-f", "json", "-q", "--engine", engine)
    doc = json.loads(r.stdout)
    if masked:
        assert r.exit_code == 0, r.stderr
        assert doc["findings"] == [] and doc["masked"] == {"log": 3}  # one per step
    else:
        assert r.exit_code == 1, r.stderr
        [f] = doc["findings"]
        line = next(i for i, t in enumerate(source.splitlines(), 1) if "# ORIGIN" in t)
        assert (f["kind"], f["op"], f["location"]["line"]) == ("inf_forward", "log", line)
