"""The layers of ``autodiag.nn`` (re-exports)."""

from autodiag.nn.modules.activation import (
    GELU,
    LeakyReLU,
    LogSoftmax,
    ReLU,
    Sigmoid,
    Softmax,
    Softplus,
    Tanh,
)
from autodiag.nn.modules.container import ModuleList, Sequential
from autodiag.nn.modules.dropout import Dropout
from autodiag.nn.modules.linear import Flatten, Identity, Linear
from autodiag.nn.modules.loss import (
    BCELoss,
    BCEWithLogitsLoss,
    CosineEmbeddingLoss,
    CrossEntropyLoss,
    HuberLoss,
    KLDivLoss,
    L1Loss,
    MarginRankingLoss,
    MSELoss,
    NLLLoss,
    SmoothL1Loss,
)
from autodiag.nn.modules.module import Module
from autodiag.nn.modules.normalization import LayerNorm
from autodiag.nn.modules.rnn import GRU, LSTM, RNN, GRUCell, LSTMCell, RNNBase, RNNCell, RNNCellBase
from autodiag.nn.modules.sparse import Embedding

__all__ = [
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
    "RNNBase",
    "RNN",
    "LSTM",
    "GRU",
    "RNNCellBase",
    "RNNCell",
    "LSTMCell",
    "GRUCell",
    "L1Loss",
    "SmoothL1Loss",
    "HuberLoss",
    "BCELoss",
    "KLDivLoss",
    "CosineEmbeddingLoss",
    "MarginRankingLoss",
]
