"""``autodiag.nn``: modules, parameters, functional ops and initialisers, as ``torch.nn``.

>>> import autodiag as torch
>>> model = torch.nn.Sequential(torch.nn.Linear(2, 3), torch.nn.ReLU(), torch.nn.Linear(3, 1))
>>> model(torch.ones(4, 2)).shape
torch.Size([4, 1])
"""

from autodiag.nn import functional, init
from autodiag.nn.modules import (
    ELU,
    GELU,
    BCEWithLogitsLoss,
    CrossEntropyLoss,
    Dropout,
    Embedding,
    Flatten,
    Identity,
    LayerNorm,
    LeakyReLU,
    Linear,
    LogSoftmax,
    Module,
    ModuleDict,
    ModuleList,
    MSELoss,
    MultiheadAttention,
    NLLLoss,
    ParameterDict,
    ParameterList,
    ReLU,
    Sequential,
    Sigmoid,
    SiLU,
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
    "SiLU",
    "ELU",
    "MultiheadAttention",
    "ModuleDict",
    "ParameterList",
    "ParameterDict",
]
