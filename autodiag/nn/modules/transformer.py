"""``nn.Transformer`` and its parts, ported from PyTorch 2.13's ``torch/nn/modules/transformer.py``
so that parameter names and order (a state_dict from torch loads) and the recorded graph are
PyTorch's: each layer is ``MultiheadAttention`` + ``Linear``/``Dropout`` feed-forward +
``LayerNorm``, post-norm by default, pre-norm with ``norm_first``.

PyTorch's inference fast paths (``_transformer_encoder_layer_fwd``, taken in eval mode without
grad) compute the same values as the ordinary path, which autodiag always runs. The one visible
difference they make is reproduced: ``TransformerEncoder`` packs a padded batch into a nested
tensor when it may, and PyTorch's output is then 0 at the padded positions (before ``norm``).
"""

from __future__ import annotations

import copy

from autodiag import _warnings
from autodiag.nn import functional as F
from autodiag.nn import init
from autodiag.nn.modules.activation import GELU, ReLU
from autodiag.nn.modules.attention import MultiheadAttention, _canonical_mask
from autodiag.nn.modules.container import ModuleList
from autodiag.nn.modules.dropout import Dropout
from autodiag.nn.modules.linear import Linear
from autodiag.nn.modules.module import Module
from autodiag.nn.modules.normalization import LayerNorm

__all__ = [
    "Transformer",
    "TransformerEncoder",
    "TransformerDecoder",
    "TransformerEncoderLayer",
    "TransformerDecoderLayer",
]


def _generate_square_subsequent_mask(sz: int, device=None, dtype=None):
    """A float (sz, sz) causal mask: -inf above the diagonal, 0 elsewhere."""
    from autodiag.ops.factories import full
    from autodiag.ops.selection import triu

    return triu(full((sz, sz), float("-inf"), dtype=dtype, device=device), diagonal=1)


def _get_seq_len(src, batch_first: bool) -> int:
    if src.dim() == 2:  # unbatched: (S, E)
        return src.size(0)
    return src.size(1 if batch_first else 0)


def _get_clones(module, n: int):
    return ModuleList([copy.deepcopy(module) for _ in range(n)])


def _get_activation_fn(activation: str):
    if activation == "relu":
        return F.relu
    if activation == "gelu":
        return F.gelu
    raise RuntimeError(f"activation should be relu/gelu, not {activation}")


def _detect_is_causal_mask(mask, is_causal=None, size=None) -> bool:
    """``is_causal`` when given; otherwise whether ``mask`` equals the causal mask (PyTorch's)."""
    make_causal = is_causal is True
    if is_causal is None and mask is not None:
        sz = size if size is not None else mask.size(-2)
        causal = _generate_square_subsequent_mask(sz, device=mask.device, dtype=mask.dtype)
        if tuple(mask.size()) == tuple(causal.size()):
            make_causal = bool((mask == causal).all())
        else:
            make_causal = False
    return make_causal


def _none_or_dtype(x):
    return None if x is None else x.dtype


def _is_relu_or_gelu(activation) -> int:
    """PyTorch's ``activation_relu_or_gelu``: 1 relu, 2 gelu, 0 anything else."""
    if activation is F.relu or isinstance(activation, ReLU):
        return 1
    if activation is F.gelu or isinstance(activation, GELU):
        return 2
    return 0


class _Layer(Module):
    """What the encoder and decoder layers share: their submodules, in PyTorch's order (so
    parameters and ``state_dict`` keys are PyTorch's), the self-attention block and the
    feed-forward block. ``_blocks``: 2 (self-attention, feed-forward) or 3 (with attention over
    the encoder's memory between them); each block has its LayerNorm and dropout."""

    _blocks: int

    def _build(self, d_model, nhead, dim_feedforward, dropout, layer_norm_eps,
               batch_first, norm_first, bias, factory_kwargs) -> None:  # fmt: skip
        def attention():
            return MultiheadAttention(
                d_model, nhead, dropout=dropout, bias=bias, batch_first=batch_first,
                **factory_kwargs,
            )  # fmt: skip

        self.self_attn = attention()
        blocks = self._blocks
        if blocks == 3:
            self.multihead_attn = attention()
        self.linear1 = Linear(d_model, dim_feedforward, bias=bias, **factory_kwargs)
        self.dropout = Dropout(dropout)
        self.linear2 = Linear(dim_feedforward, d_model, bias=bias, **factory_kwargs)
        self.norm_first = norm_first
        for i in range(1, blocks + 1):
            norm = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **factory_kwargs)
            setattr(self, f"norm{i}", norm)
        for i in range(1, blocks + 1):
            setattr(self, f"dropout{i}", Dropout(dropout))

    def _sa_block(self, x, attn_mask, key_padding_mask, is_causal: bool = False):
        x = self.self_attn(
            x,
            x,
            x,
            attn_mask=attn_mask,
            key_padding_mask=key_padding_mask,
            need_weights=False,
            is_causal=is_causal,
        )[0]
        return self.dropout1(x)

    def _ff_block(self, x):
        x = self.linear2(self.dropout(self.activation(self.linear1(x))))
        return getattr(self, f"dropout{self._blocks}")(x)  # the last block's


class TransformerEncoderLayer(_Layer):
    """Self-attention then a feed-forward block, each with dropout, a residual and LayerNorm
    (after the residual by default; before the block with ``norm_first=True``).

    >>> import autodiag as torch
    >>> layer = torch.nn.TransformerEncoderLayer(d_model=8, nhead=2, dim_feedforward=16)
    >>> tuple(layer(torch.ones(5, 3, 8)).shape)
    (5, 3, 8)
    """

    __constants__ = ["norm_first"]
    _blocks = 2

    def __init__(
        self,
        d_model: int,
        nhead: int,
        dim_feedforward: int = 2048,
        dropout: float = 0.1,
        activation=F.relu,
        layer_norm_eps: float = 1e-5,
        batch_first: bool = False,
        norm_first: bool = False,
        bias: bool = True,
        device=None,
        dtype=None,
    ) -> None:
        super().__init__()
        factory_kwargs = {"device": device, "dtype": dtype}
        self._build(d_model, nhead, dim_feedforward, dropout, layer_norm_eps, batch_first,
                    norm_first, bias, factory_kwargs)  # fmt: skip
        if isinstance(activation, str):
            activation = _get_activation_fn(activation)
        self.activation_relu_or_gelu = _is_relu_or_gelu(activation)
        self.activation = activation

    def __setstate__(self, state):
        super().__setstate__(state)
        if not hasattr(self, "activation"):
            self.activation = F.relu

    def forward(self, src, src_mask=None, src_key_padding_mask=None, is_causal: bool = False):
        src_key_padding_mask = _canonical_mask(
            src_key_padding_mask,
            "src_key_padding_mask",
            _none_or_dtype(src_mask),
            "src_mask",
            src.dtype,
        )
        src_mask = _canonical_mask(src_mask, "src_mask", None, "", src.dtype, False)
        # PyTorch's fast path (_transformer_encoder_layer_fwd) gives these same values.
        x = src
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), src_mask, src_key_padding_mask, is_causal)
            x = x + self._ff_block(self.norm2(x))
        else:
            x = self.norm1(x + self._sa_block(x, src_mask, src_key_padding_mask, is_causal))
            x = self.norm2(x + self._ff_block(x))
        return x


class TransformerDecoderLayer(_Layer):
    """Self-attention, attention over the encoder's ``memory``, then a feed-forward block, each
    with dropout, a residual and LayerNorm (``norm_first`` as in the encoder layer).

    >>> import autodiag as torch
    >>> layer = torch.nn.TransformerDecoderLayer(d_model=8, nhead=2, dim_feedforward=16)
    >>> tuple(layer(torch.ones(4, 3, 8), torch.ones(5, 3, 8)).shape)
    (4, 3, 8)
    """

    __constants__ = ["norm_first"]
    _blocks = 3

    def __init__(
        self,
        d_model: int,
        nhead: int,
        dim_feedforward: int = 2048,
        dropout: float = 0.1,
        activation=F.relu,
        layer_norm_eps: float = 1e-5,
        batch_first: bool = False,
        norm_first: bool = False,
        bias: bool = True,
        device=None,
        dtype=None,
    ) -> None:
        super().__init__()
        factory_kwargs = {"device": device, "dtype": dtype}
        self._build(d_model, nhead, dim_feedforward, dropout, layer_norm_eps, batch_first,
                    norm_first, bias, factory_kwargs)  # fmt: skip
        if isinstance(activation, str):
            self.activation = _get_activation_fn(activation)
        else:
            self.activation = activation

    def __setstate__(self, state):
        if "activation" not in state:
            state["activation"] = F.relu
        super().__setstate__(state)

    def forward(
        self,
        tgt,
        memory,
        tgt_mask=None,
        memory_mask=None,
        tgt_key_padding_mask=None,
        memory_key_padding_mask=None,
        tgt_is_causal: bool = False,
        memory_is_causal: bool = False,
    ):
        x = tgt
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), tgt_mask, tgt_key_padding_mask, tgt_is_causal)
            x = x + self._mha_block(
                self.norm2(x), memory, memory_mask, memory_key_padding_mask, memory_is_causal
            )
            x = x + self._ff_block(self.norm3(x))
        else:
            x = self.norm1(x + self._sa_block(x, tgt_mask, tgt_key_padding_mask, tgt_is_causal))
            x = self.norm2(
                x
                + self._mha_block(x, memory, memory_mask, memory_key_padding_mask, memory_is_causal)
            )
            x = self.norm3(x + self._ff_block(x))
        return x

    def _mha_block(self, x, mem, attn_mask, key_padding_mask, is_causal: bool = False):
        x = self.multihead_attn(
            x,
            mem,
            mem,
            attn_mask=attn_mask,
            key_padding_mask=key_padding_mask,
            is_causal=is_causal,
            need_weights=False,
        )[0]
        return self.dropout2(x)


def _why_no_nested_tensor(encoder_layer) -> str:
    """PyTorch's reasons (checked at construction) why an encoder cannot pack padded input."""
    name = "encoder_layer"
    if not isinstance(encoder_layer, TransformerEncoderLayer):
        return f"{name} was not TransformerEncoderLayer"
    if encoder_layer.norm_first:
        return f"{name}.norm_first was True"
    if not encoder_layer.self_attn.batch_first:
        return (
            f"{name}.self_attn.batch_first was not True"
            "(use batch_first for better inference performance)"
        )
    if not encoder_layer.self_attn._qkv_same_embed_dim:
        return f"{name}.self_attn._qkv_same_embed_dim was not True"
    if encoder_layer.self_attn.in_proj_bias is None:
        return f"{name}.self_attn was passed bias=False"
    if not encoder_layer.activation_relu_or_gelu:
        return f"{name}.activation_relu_or_gelu was not True"
    if encoder_layer.norm1.eps != encoder_layer.norm2.eps:
        return f"{name}.norm1.eps was not equal to {name}.norm2.eps"
    if encoder_layer.self_attn.num_heads % 2 == 1:
        return f"{name}.self_attn.num_heads is odd"
    return ""


def _left_aligned(keep) -> bool:
    """Whether every row of the bool ``keep`` mask is Trues followed by Falses."""
    import numpy as np

    k = np.asarray(keep.numpy(), dtype=bool)
    # a row is left aligned when it never goes from False back to True
    return not bool(np.any(~k[:, :-1] & k[:, 1:]))


class TransformerEncoder(Module):
    """A stack of ``num_layers`` copies of ``encoder_layer``, then ``norm`` if given.

    >>> import autodiag as torch
    >>> layer = torch.nn.TransformerEncoderLayer(8, 2, 16, batch_first=True)
    >>> enc = torch.nn.TransformerEncoder(layer, num_layers=2)
    >>> tuple(enc(torch.ones(3, 5, 8)).shape)
    (3, 5, 8)
    """

    __constants__ = ["norm"]

    def __init__(
        self,
        encoder_layer,
        num_layers: int,
        norm=None,
        enable_nested_tensor: bool = True,
        mask_check: bool = True,
    ) -> None:
        super().__init__()
        self.layers = _get_clones(encoder_layer, num_layers)
        self.num_layers = num_layers
        self.norm = norm
        self.enable_nested_tensor = enable_nested_tensor
        self.use_nested_tensor = enable_nested_tensor
        self.mask_check = mask_check
        why_not = _why_no_nested_tensor(encoder_layer)
        if enable_nested_tensor and why_not:
            _warnings.warn(
                "enable_nested_tensor is True, but self.use_nested_tensor is False because "
                f"{why_not}"
            )
            self.use_nested_tensor = False

    def _packs_padding(self, src, mask, src_key_padding_mask) -> bool:
        """Whether PyTorch would take its nested-tensor path (zeros at padded positions)."""
        from autodiag.autograd.grad_mode import is_grad_enabled
        from autodiag.backends import mha

        first = self.layers[0]
        if (
            not mha.get_fastpath_enabled()
            or not getattr(self, "use_nested_tensor", False)
            or first.training
            or src.dim() != 3
            or src_key_padding_mask is None
            or mask is not None
        ):
            return False
        if getattr(self, "mask_check", True) and not _left_aligned(
            src_key_padding_mask.logical_not()
        ):
            return False
        attn = first.self_attn
        tensor_args = (
            src,
            attn.in_proj_weight,
            attn.in_proj_bias,
            attn.out_proj.weight,
            attn.out_proj.bias,
            first.norm1.weight,
            first.norm1.bias,
            first.norm2.weight,
            first.norm2.bias,
            first.linear1.weight,
            first.linear1.bias,
            first.linear2.weight,
            first.linear2.bias,
        )
        return not (is_grad_enabled() and any(x.requires_grad for x in tensor_args))

    def forward(self, src, mask=None, src_key_padding_mask=None, is_causal=None):
        src_key_padding_mask = _canonical_mask(
            src_key_padding_mask,
            "src_key_padding_mask",
            _none_or_dtype(mask),
            "mask",
            src.dtype,
        )
        mask = _canonical_mask(mask, "mask", None, "", src.dtype, False)
        # the float mask is -inf where padded; PyTorch packs with the bool "keep" mask
        packed = self._packs_padding(
            src, mask, None if src_key_padding_mask is None else src_key_padding_mask != 0
        )
        batch_first = self.layers[0].self_attn.batch_first
        is_causal = _detect_is_causal_mask(mask, is_causal, _get_seq_len(src, batch_first))
        output = src
        for mod in self.layers:
            output = mod(
                output,
                src_mask=mask,
                is_causal=is_causal,
                src_key_padding_mask=src_key_padding_mask,
            )
        if packed:
            # NOTE: PyTorch ran the layers on a nested tensor holding only the kept positions
            # and pads it back with 0.0; the kept positions' values are the ones computed here.
            output = output.masked_fill((src_key_padding_mask != 0).unsqueeze(-1), 0.0)
        if self.norm is not None:
            output = self.norm(output)
        return output


class TransformerDecoder(Module):
    """A stack of ``num_layers`` copies of ``decoder_layer`` over ``memory``, then ``norm``.

    >>> import autodiag as torch
    >>> layer = torch.nn.TransformerDecoderLayer(8, 2, 16)
    >>> dec = torch.nn.TransformerDecoder(layer, num_layers=2)
    >>> tuple(dec(torch.ones(4, 3, 8), torch.ones(5, 3, 8)).shape)
    (4, 3, 8)
    """

    __constants__ = ["norm"]

    def __init__(self, decoder_layer, num_layers: int, norm=None) -> None:
        super().__init__()
        self.layers = _get_clones(decoder_layer, num_layers)
        self.num_layers = num_layers
        self.norm = norm

    def forward(
        self,
        tgt,
        memory,
        tgt_mask=None,
        memory_mask=None,
        tgt_key_padding_mask=None,
        memory_key_padding_mask=None,
        tgt_is_causal=None,
        memory_is_causal: bool = False,
    ):
        output = tgt
        seq_len = _get_seq_len(tgt, self.layers[0].self_attn.batch_first)
        tgt_is_causal = _detect_is_causal_mask(tgt_mask, tgt_is_causal, seq_len)
        for mod in self.layers:
            output = mod(
                output,
                memory,
                tgt_mask=tgt_mask,
                memory_mask=memory_mask,
                tgt_key_padding_mask=tgt_key_padding_mask,
                memory_key_padding_mask=memory_key_padding_mask,
                tgt_is_causal=tgt_is_causal,
                memory_is_causal=memory_is_causal,
            )
        if self.norm is not None:
            output = self.norm(output)
        return output


class Transformer(Module):
    """An encoder-decoder Transformer ("Attention Is All You Need"), as ``torch.nn.Transformer``:
    ``encoder`` and ``decoder`` stacks, each ending in a LayerNorm; every parameter with more than
    one dim xavier-uniform initialised.

    >>> import autodiag as torch
    >>> model = torch.nn.Transformer(d_model=8, nhead=2, num_encoder_layers=1,
    ...                              num_decoder_layers=1, dim_feedforward=16)
    >>> tuple(model(torch.ones(5, 3, 8), torch.ones(4, 3, 8)).shape)
    (4, 3, 8)
    >>> torch.nn.Transformer.generate_square_subsequent_mask(3)
    tensor([[0., -inf, -inf],
            [0., 0., -inf],
            [0., 0., 0.]])
    """

    def __init__(
        self,
        d_model: int = 512,
        nhead: int = 8,
        num_encoder_layers: int = 6,
        num_decoder_layers: int = 6,
        dim_feedforward: int = 2048,
        dropout: float = 0.1,
        activation=F.relu,
        custom_encoder=None,
        custom_decoder=None,
        layer_norm_eps: float = 1e-5,
        batch_first: bool = False,
        norm_first: bool = False,
        bias: bool = True,
        device=None,
        dtype=None,
    ) -> None:
        factory_kwargs = {"device": device, "dtype": dtype}
        super().__init__()
        layer_args = (
            d_model,
            nhead,
            dim_feedforward,
            dropout,
            activation,
            layer_norm_eps,
            batch_first,
            norm_first,
            bias,
        )
        if custom_encoder is not None:
            self.encoder = custom_encoder
        else:
            encoder_layer = TransformerEncoderLayer(*layer_args, **factory_kwargs)
            encoder_norm = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **factory_kwargs)
            self.encoder = TransformerEncoder(encoder_layer, num_encoder_layers, encoder_norm)
        if custom_decoder is not None:
            self.decoder = custom_decoder
        else:
            decoder_layer = TransformerDecoderLayer(*layer_args, **factory_kwargs)
            decoder_norm = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **factory_kwargs)
            self.decoder = TransformerDecoder(decoder_layer, num_decoder_layers, decoder_norm)
        self._reset_parameters()
        self.d_model = d_model
        self.nhead = nhead
        self.batch_first = batch_first

    def forward(
        self,
        src,
        tgt,
        src_mask=None,
        tgt_mask=None,
        memory_mask=None,
        src_key_padding_mask=None,
        tgt_key_padding_mask=None,
        memory_key_padding_mask=None,
        src_is_causal=None,
        tgt_is_causal=None,
        memory_is_causal: bool = False,
    ):
        is_batched = src.dim() == 3
        if not self.batch_first and src.size(1) != tgt.size(1) and is_batched:
            raise RuntimeError("the batch number of src and tgt must be equal")
        if self.batch_first and src.size(0) != tgt.size(0) and is_batched:
            raise RuntimeError("the batch number of src and tgt must be equal")
        if src.size(-1) != self.d_model or tgt.size(-1) != self.d_model:
            raise RuntimeError("the feature number of src and tgt must be equal to d_model")
        memory = self.encoder(
            src, mask=src_mask, src_key_padding_mask=src_key_padding_mask, is_causal=src_is_causal
        )
        return self.decoder(
            tgt,
            memory,
            tgt_mask=tgt_mask,
            memory_mask=memory_mask,
            tgt_key_padding_mask=tgt_key_padding_mask,
            memory_key_padding_mask=memory_key_padding_mask,
            tgt_is_causal=tgt_is_causal,
            memory_is_causal=memory_is_causal,
        )

    @staticmethod
    def generate_square_subsequent_mask(sz: int, device=None, dtype=None):
        """The float causal mask: -inf above the diagonal, 0 elsewhere."""
        return _generate_square_subsequent_mask(sz, dtype=dtype, device=device)

    def _reset_parameters(self) -> None:
        for p in self.parameters():
            if p.dim() > 1:
                init.xavier_uniform_(p)
