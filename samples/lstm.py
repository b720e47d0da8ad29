"""A word-level language model, the shape of PyTorch's examples/word_language_model: an LSTM
trained with truncated backpropagation through time.

Embedding (65 tokens, 64 dims) -> LSTM (1 layer, hidden 64) -> Linear (64 -> 65); sequences of
35 tokens, batch 20, plain SGD. Between steps the hidden state is carried over *detached*
(``hidden = tuple(h.detach() for h in hidden)``): gradients stop at the step boundary and each
step's graph is freed. Forgetting the detach makes the second backward fail ("backward through
the graph a second time": ``autodiag check`` says through which tensor); a state carried without
detach and never backpropagated (an evaluation loop) keeps every earlier step's graph alive,
which ``autodiag leaks`` finds.

The weights and the token stream are set by formula, not by the random generator, so the same
script under real PyTorch (``import torch``) prints the same losses.

    python samples/lstm.py
    autodiag check samples/lstm.py
"""

import autodiag as torch
import autodiag.nn as nn

VOCAB, EMB, HIDDEN, SEQ, BATCH, STEPS, LR = 65, 64, 64, 35, 20, 12, 3.0


class LanguageModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, EMB)
        self.lstm = nn.LSTM(EMB, HIDDEN)
        self.head = nn.Linear(HIDDEN, VOCAB)

    def forward(self, tokens, hidden):
        out, hidden = self.lstm(self.embed(tokens), hidden)
        return self.head(out), hidden


def fill_(p, k):
    """Deterministic small weights (the same in PyTorch and autodiag)."""
    with torch.no_grad():
        n = p.numel()
        wave = (torch.arange(n, dtype=torch.float64) * (0.7 + 0.1 * k)).sin() * 0.3
        p.copy_(wave.reshape(p.shape).float())


model = LanguageModel()
for k, p in enumerate(model.parameters()):
    fill_(p, k)
opt = torch.optim.SGD(model.parameters(), lr=LR)
loss_fn = nn.CrossEntropyLoss()

# a token stream with structure to learn, laid out as BATCH parallel columns
n = BATCH * (SEQ * STEPS + 1)
i = torch.arange(n)
stream = (i * 7 + i // 13) % VOCAB
data = stream.reshape(BATCH, -1).t()  # (time, batch)

hidden = (torch.zeros(1, BATCH, HIDDEN), torch.zeros(1, BATCH, HIDDEN))
for step in range(STEPS):
    x = data[step * SEQ : (step + 1) * SEQ]
    y = data[step * SEQ + 1 : (step + 1) * SEQ + 1]
    hidden = tuple(h.detach() for h in hidden)  # truncated BPTT: stop at the step boundary
    opt.zero_grad()
    logits, hidden = model(x, hidden)
    loss = loss_fn(logits.reshape(-1, VOCAB), y.reshape(-1))
    loss.backward()
    opt.step()
    print(f"step {step + 1}  loss {loss.item():.4f}")
