"""The layers of ``autodiag.nn`` (re-exports)."""

from autodiag.nn.modules.activation import (
    ELU,
    GELU,
    LeakyReLU,
    LogSoftmax,
    ReLU,
    Sigmoid,
    SiLU,
    Softmax,
    Softplus,
    Tanh,
)
from autodiag.nn.modules.attention import MultiheadAttention
from autodiag.nn.modules.batchnorm import BatchNorm1d, BatchNorm2d, BatchNorm3d
from autodiag.nn.modules.container import (
    ModuleDict,
    ModuleList,
    ParameterDict,
    ParameterList,
    Sequential,
)
from autodiag.nn.modules.conv import (
    Conv1d,
    Conv2d,
    Conv3d,
    ConvTranspose1d,
    ConvTranspose2d,
    ConvTranspose3d,
)
from autodiag.nn.modules.dropout import Dropout, Dropout1d, Dropout2d
from autodiag.nn.modules.instancenorm import InstanceNorm1d, InstanceNorm2d, InstanceNorm3d
from autodiag.nn.modules.lazy import (
    LazyBatchNorm1d,
    LazyBatchNorm2d,
    LazyConv1d,
    LazyConv2d,
    LazyLinear,
)
from autodiag.nn.modules.linear import (
    Flatten,
    Identity,
    Linear,
    Unflatten,
)
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
from autodiag.nn.modules.normalization import (
    GroupNorm,
    LayerNorm,
)
from autodiag.nn.modules.pooling import (
    AdaptiveAvgPool2d,
    AdaptiveMaxPool1d,
    AdaptiveMaxPool2d,
    AvgPool2d,
    AvgPool3d,
    MaxPool1d,
    MaxPool2d,
    MaxPool3d,
)
from autodiag.nn.modules.rnn import GRU, LSTM, RNN, GRUCell, LSTMCell, RNNBase, RNNCell, RNNCellBase
from autodiag.nn.modules.sparse import Embedding
from autodiag.nn.modules.transformer import (
    Transformer,
    TransformerDecoder,
    TransformerDecoderLayer,
    TransformerEncoder,
    TransformerEncoderLayer,
)

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
    "SiLU",
    "ELU",
    "MultiheadAttention",
    "ModuleDict",
    "ParameterList",
    "ParameterDict",
    "Conv1d",
    "Conv2d",
    "ConvTranspose1d",
    "ConvTranspose2d",
    "MaxPool1d",
    "MaxPool2d",
    "AvgPool2d",
    "AdaptiveAvgPool2d",
    "BatchNorm1d",
    "BatchNorm2d",
    "GroupNorm",
    "Dropout1d",
    "Dropout2d",
    "Unflatten",
    "Transformer",
    "TransformerEncoder",
    "TransformerDecoder",
    "TransformerEncoderLayer",
    "TransformerDecoderLayer",
    "Conv3d",
    "ConvTranspose3d",
    "MaxPool3d",
    "AvgPool3d",
    "AdaptiveMaxPool1d",
    "AdaptiveMaxPool2d",
    "BatchNorm3d",
    "InstanceNorm1d",
    "InstanceNorm2d",
    "InstanceNorm3d",
    "LazyLinear",
    "LazyConv1d",
    "LazyConv2d",
    "LazyBatchNorm1d",
    "LazyBatchNorm2d",
]

# cover16a: sub-pixel shuffles
from autodiag.nn.modules.pixelshuffle import PixelShuffle, PixelUnshuffle  # noqa: E402

__all__ += ["PixelShuffle", "PixelUnshuffle"]
