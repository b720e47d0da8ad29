"""``torch.distributions``: ``Normal``, ``Categorical``, ``Bernoulli``, ``Uniform``, their
``kl_divergence`` pairs and ``constraints``, with PyTorch's formulas, shapes, validation errors
and graph nodes. Samples come from the engine's random stream, not PyTorch's (NOTE [Sampling
streams] in ``distribution.py``).

>>> import autodiag as torch
>>> from autodiag.distributions import Categorical
>>> logits = torch.tensor([0.0, 1.0, 2.0], requires_grad=True)
>>> d = Categorical(logits=logits)
>>> action = torch.tensor(2)
>>> (-d.log_prob(action)).backward()
>>> logits.grad
tensor([ 0.0900,  0.2447, -0.3348])
"""

from __future__ import annotations

from autodiag.distributions import constraints
from autodiag.distributions.bernoulli import Bernoulli
from autodiag.distributions.categorical import Categorical
from autodiag.distributions.distribution import Distribution
from autodiag.distributions.kl import kl_divergence, register_kl
from autodiag.distributions.normal import Normal
from autodiag.distributions.uniform import Uniform

__all__ = [
    "Bernoulli",
    "Categorical",
    "Distribution",
    "Normal",
    "Uniform",
    "constraints",
    "kl_divergence",
    "register_kl",
]
