"""``autodiag.nn``: modules, parameters, functional ops and initialisers, as ``torch.nn``.

>>> import autodiag as torch
>>> model = torch.nn.Sequential(torch.nn.Linear(2, 3), torch.nn.ReLU(), torch.nn.Linear(3, 1))
>>> model(torch.ones(4, 2)).shape
torch.Size([4, 1])
"""

from autodiag.nn import functional, init, utils  # noqa: F401 - utils: torch.nn.utils
from autodiag.nn.modules import (
    GELU,
    BCELoss,
    BCEWithLogitsLoss,
    CosineEmbeddingLoss,
    CrossEntropyLoss,
    Dropout,
    Embedding,
    Flatten,
    HuberLoss,
    Identity,
    KLDivLoss,
    L1Loss,
    LayerNorm,
    LeakyReLU,
    Linear,
    LogSoftmax,
    MarginRankingLoss,
    Module,
    ModuleList,
    MSELoss,
    NLLLoss,
    ReLU,
    Sequential,
    Sigmoid,
    SmoothL1Loss,
    Softmax,
    Softplus,
    Tanh,
)
from autodiag.nn.parameter import Buffer, Parameter

__all__ = [
    "functional",
    "init",
    "Parameter",
    "Buffer",
    "Module",
    "Sequential",
    "ModuleList",
    "Linear",
    "Identity",
    "Flatten",
    "ReLU",
    "LeakyReLU",
    "Sigmoid",
    "Tanh",
    "GELU",
    "Softplus",
    "Softmax",
    "LogSoftmax",
    "Dropout",
    "LayerNorm",
    "Embedding",
    "MSELoss",
    "CrossEntropyLoss",
    "NLLLoss",
    "BCEWithLogitsLoss",
    "L1Loss",
    "SmoothL1Loss",
    "HuberLoss",
    "BCELoss",
    "KLDivLoss",
    "CosineEmbeddingLoss",
    "MarginRankingLoss",
]
