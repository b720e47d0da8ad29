"""A REINFORCE training loop (pytorch/examples' reinforcement_learning/reinforce.py, on a toy
environment) written for PyTorch, run unchanged under ``import torch`` aliased to autodiag.

The actions are drawn by ``Categorical.sample`` after ``torch.manual_seed(0)``: autodiag draws
PyTorch's stream (NOTE [Sampling streams]), so PyTorch running the script unchanged takes the
same actions from the same initial weights; every loss and the final weights must agree, which
covers Categorical's sampling and log_prob through softmax, the policy's backward and Adam over
several episodes.
"""

from __future__ import annotations

import numpy as np
import pytest

from autodiag.torch_alias import torch_alias

torch = pytest.importorskip("torch")

SCRIPT = """
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.distributions import Categorical


class Policy(nn.Module):
    def __init__(self):
        super().__init__()
        self.affine1 = nn.Linear(4, 16)
        self.dropout = nn.Dropout(p=0.0)
        self.affine2 = nn.Linear(16, 2)

    def forward(self, x):
        x = self.dropout(F.relu(self.affine1(x)))
        return F.softmax(self.affine2(x), dim=1)


def train(states, init, replay=None, episodes=4, gamma=0.99):
    torch.manual_seed(0)
    policy = Policy()
    with torch.no_grad():
        for p, v in zip(policy.parameters(), init):
            p.copy_(torch.tensor(v))
    optimizer = optim.Adam(policy.parameters(), lr=1e-2)
    eps = np.finfo(np.float32).eps.item()
    taken, losses = [], []
    for episode in range(episodes):
        log_probs, rewards, actions = [], [], []
        for t, s in enumerate(states):
            probs = policy(torch.from_numpy(s).float().unsqueeze(0))
            m = Categorical(probs)
            action = m.sample() if replay is None else torch.tensor([replay[episode][t]])
            log_probs.append(m.log_prob(action))
            actions.append(action.item())
            rewards.append(1.0 if action.item() == int(s[0] > 0) else 0.0)
        R, returns = 0.0, []
        for r in rewards[::-1]:
            R = r + gamma * R
            returns.insert(0, R)
        returns = torch.tensor(returns)
        returns = (returns - returns.mean()) / (returns.std() + eps)
        policy_loss = [-log_prob * R for log_prob, R in zip(log_probs, returns)]
        optimizer.zero_grad()
        loss = torch.cat(policy_loss).sum()
        loss.backward()
        optimizer.step()
        taken.append(actions)
        losses.append(loss.item())
    return taken, losses, [p.detach().numpy().copy() for p in policy.parameters()]
"""


def _inputs():
    rng = np.random.default_rng(7)
    states = [rng.standard_normal(4).astype(np.float32) for _ in range(12)]
    shapes = [(16, 4), (16,), (2, 16), (2,)]
    init = [(rng.standard_normal(s) * 0.3).astype(np.float32) for s in shapes]
    return states, init


def test_reinforce_under_the_alias_takes_torchs_actions_and_matches_its_losses():
    states, init = _inputs()
    with torch_alias():
        ns: dict = {}
        exec(compile(SCRIPT, "reinforce.py", "exec"), ns)
        actions, losses, weights = ns["train"](states, init)
        assert type(ns["torch"].tensor(1.0)).__module__.startswith("autodiag")

    real: dict = {}
    exec(compile(SCRIPT, "reinforce.py", "exec"), real)
    assert real["torch"] is torch
    t_actions, t_losses, t_weights = real["train"](states, init)

    assert t_actions == actions
    assert len({a for ep in actions for a in ep}) == 2  # the policy explored both actions
    # NOTE: a loss is a sum of 12 signed terms of size ~1: float32 rounding of the terms
    # (~1e-7 each) survives the cancellation as up to ~1e-5 of a small sum
    np.testing.assert_allclose(losses, t_losses, rtol=1e-5, atol=1e-5)
    for a, t in zip(weights, t_weights):
        np.testing.assert_allclose(a, t, rtol=1e-5, atol=1e-6)
    # the weights moved: the test compares a trained policy, not the initial one
    assert any(not np.allclose(a, i) for a, i in zip(weights, init))


def test_reinforce_replayed_under_the_alias_is_deterministic():
    states, init = _inputs()
    replay = [[int(s[0] > 0) for s in states]] * 4
    with torch_alias():
        ns: dict = {}
        exec(compile(SCRIPT, "reinforce.py", "exec"), ns)
        a = ns["train"](states, init, replay=replay)
    real: dict = {}
    exec(compile(SCRIPT, "reinforce.py", "exec"), real)
    t = real["train"](states, init, replay=replay)
    np.testing.assert_allclose(a[1], t[1], rtol=1e-5, atol=1e-6)
