"""Train a small convolutional network on MNIST-shaped data: the loss falls.

Two conv -> relu -> max-pool blocks and a linear classifier over 16 images of 1x28x28, trained
with SGD for 8 full-batch steps of cross-entropy. Prints the loss at every step.

The images and the initial weights are built from sin() rather than drawn at random, so that
the script gives the same numbers on autodiag and, with ``import torch``, on PyTorch (the two
random generators differ).

    python samples/cnn.py
"""

import autodiag as torch
import autodiag.nn as nn

# --- data: 16 images, 1x28x28, 10 classes ---------------------------------------------------
images = torch.sin(torch.arange(16 * 28 * 28).float().reshape(16, 1, 28, 28) * 0.37)
labels = torch.arange(16) % 10


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3)  # 28 -> 26, pooled to 13
        self.conv2 = nn.Conv2d(8, 16, 3)  # 13 -> 11, pooled to 5
        self.pool = nn.MaxPool2d(2)
        self.fc = nn.Linear(16 * 5 * 5, 10)

    def forward(self, x):
        x = self.pool(torch.relu(self.conv1(x)))
        x = self.pool(torch.relu(self.conv2(x)))
        return self.fc(x.flatten(1))


model = Net()
with torch.no_grad():  # deterministic weights (the same on both engines), zero biases
    for i, p in enumerate(model.parameters()):
        if p.dim() == 1:
            p.zero_()
        else:
            wave = torch.sin(torch.arange(p.numel()).float() * 2.9 + i)
            p.copy_(wave.reshape(p.shape) / p[0].numel() ** 0.5)

opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
loss_fn = nn.CrossEntropyLoss()

for step in range(1, 9):
    opt.zero_grad()
    loss = loss_fn(model(images), labels)
    loss.backward()
    opt.step()
    print(f"step {step}  loss {loss.item():.4f}")
