"""Train a tiny GPT (nanoGPT-style) on a few lines of text for a few steps: the loss falls.

Character tokens (vocab 65), token + position embeddings (64 dims, context 32), 2 blocks of
causal self-attention with 4 heads (F.scaled_dot_product_attention) and a GELU MLP, each behind
a LayerNorm, the output head tied to the token embedding; AdamW, batch 16. The weights and the
batches come from integer formulas, not from a random generator, so the same script under
``import torch`` gives PyTorch's losses.

    python samples/tiny_gpt.py
"""

import autodiag as torch
import autodiag.nn as nn
import autodiag.nn.functional as F

VOCAB, DIM, HEADS, BLOCK, LAYERS, BATCH, STEPS = 65, 64, 4, 32, 2, 16, 6

TEXT = (
    "First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak, speak.\n\n"
    "First Citizen:\nYou are all resolved rather to die than to famish?\n\nAll:\nResolved. "
    "resolved.\n\nFirst Citizen:\nFirst, you know Caius Marcius is chief enemy to the people.\n"
)


class CausalSelfAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.c_attn = nn.Linear(DIM, 3 * DIM)
        self.c_proj = nn.Linear(DIM, DIM)

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(DIM, dim=2)
        q = q.view(B, T, HEADS, C // HEADS).transpose(1, 2)
        k = k.view(B, T, HEADS, C // HEADS).transpose(1, 2)
        v = v.view(B, T, HEADS, C // HEADS).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1 = nn.LayerNorm(DIM)
        self.attn = CausalSelfAttention()
        self.ln_2 = nn.LayerNorm(DIM)
        self.mlp = nn.Sequential(nn.Linear(DIM, 4 * DIM), nn.GELU(), nn.Linear(4 * DIM, DIM))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(VOCAB, DIM)
        self.wpe = nn.Embedding(BLOCK, DIM)
        self.h = nn.ModuleList([Block() for _ in range(LAYERS)])
        self.ln_f = nn.LayerNorm(DIM)
        self.lm_head = nn.Linear(DIM, VOCAB, bias=False)
        self.wte.weight = self.lm_head.weight  # weight tying

    def forward(self, idx, targets):
        pos = torch.arange(idx.size(1))
        x = self.wte(idx) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, VOCAB), targets.view(-1))


def formula_init(model):
    """Deterministic weights: an integer hash of each position, scaled to N(0, 0.02)-like."""
    with torch.no_grad():
        for i, (name, p) in enumerate(model.named_parameters()):
            if name.endswith("bias"):
                p.zero_()
            elif "ln" in name:
                p.fill_(1.0)
            else:
                k = torch.arange(p.numel()) * 2654435761 + i * 40503
                u = (k % 2147483647).double() / 2147483647.0 * 2 - 1
                p.copy_((u * 0.0346).view(p.shape))


chars = sorted(set(TEXT))
data = torch.tensor([chars.index(c) for c in TEXT])
model = GPT()
formula_init(model)
opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.1)

for step in range(1, STEPS + 1):
    starts = (torch.arange(BATCH) * 37 + step * 11) % (len(data) - BLOCK - 1)
    idx = starts.view(-1, 1) + torch.arange(BLOCK)
    x, y = data[idx], data[idx + 1]
    loss = model(x, y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    print(f"step {step}  loss {loss.item():.4f}")
