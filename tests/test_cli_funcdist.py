"""The debugger on scripts that use ``torch.func`` and ``torch.distributions`` under the
``import torch`` alias: they run, transforms leave no retained graphs behind (a false
``retained_graph`` finding otherwise), and the graph shows the reparameterised sample."""

from __future__ import annotations

import json

from cli_helpers import check_envelope, cli

PER_SAMPLE = """
import torch
from torch.func import functional_call, grad, hessian, jacrev, vmap

model = torch.nn.Linear(3, 1)
params = {k: v.detach() for k, v in model.named_parameters()}
x, y = torch.randn(5, 3), torch.randn(5, 1)

def loss(params, xi, yi):
    out = functional_call(model, params, (xi.unsqueeze(0),))
    return torch.nn.functional.mse_loss(out, yi.unsqueeze(0))

per_sample = vmap(grad(loss), in_dims=(None, 0, 0))(params, x, y)
h = hessian(lambda t: (t ** 3).sum())(torch.tensor([1.0, 2.0]))
j = jacrev(torch.sin)(torch.tensor([0.0, 1.0]))
"""

POLICY = """
import torch
from torch.distributions import Categorical, Normal

logits = torch.tensor([0.5, 1.0, -1.0], requires_grad=True)
policy = Categorical(logits=logits)
(-policy.log_prob(policy.sample()) * 2.0).backward()
loc = torch.tensor(0.0, requires_grad=True)
z = Normal(loc, 1.0).rsample((10,))
z.mean().backward()
"""


def test_transforms_leave_no_retained_graph(script):
    r = cli("check", script(PER_SAMPLE), "--format", "json")
    doc = json.loads(r.stdout)
    check_envelope(doc, "check")
    assert r.exit_code == 0, r.stdout
    assert doc["findings"] == []


def test_graph_of_a_reparameterised_sample(script):
    r = cli("graph", script(POLICY), "--format", "json")
    assert r.exit_code == 0, r.stdout
    doc = json.loads(r.stdout)
    names = [n["name"] for n in doc["nodes"]]
    assert names[:2] == ["MeanBackward0", "AddBackward0"]
    leaves = [n["variable"]["name"] for n in doc["nodes"] if n["variable"]]
    assert leaves == ["loc"]
    r = cli("check", script(POLICY))
    assert r.exit_code == 0, r.stdout
