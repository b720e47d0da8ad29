"""Train a small classifier on synthetic data: the loss falls.

Three Gaussian blobs in 2-D, an MLP (2 -> 32 -> 32 -> 3) and Adam; 150 full-batch steps of
cross-entropy. Prints the loss every 25 steps and the final training accuracy.

    python samples/train.py
"""

import autodiag as torch
import autodiag.nn as nn

torch.manual_seed(0)

# --- data: 3 blobs of 100 points ------------------------------------------------------------
centers = torch.tensor([[0.0, 2.0], [-2.0, -1.0], [2.0, -1.0]])
labels = torch.arange(3).repeat(100)
points = centers[labels] + 1.0 * torch.randn(300, 2)

# --- model and optimizer --------------------------------------------------------------------
model = nn.Sequential(nn.Linear(2, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(),
                      nn.Linear(32, 3))
opt = torch.optim.Adam(model.parameters(), lr=0.003)
loss_fn = nn.CrossEntropyLoss()

for step in range(1, 151):
    opt.zero_grad()
    loss = loss_fn(model(points), labels)
    loss.backward()
    opt.step()
    if step == 1 or step % 25 == 0:
        print(f"step {step:3d}  loss {loss.item():.4f}")

with torch.no_grad():
    accuracy = (model(points).argmax(1) == labels).float().mean().item()
print(f"training accuracy: {accuracy:.3f}")
