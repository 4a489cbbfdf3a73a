"""Image classification on an NPU, written as torch_npu's tutorials write it: a Dataset, a
DataLoader with 4 worker processes and pinned memory, SGD with momentum, accuracy on the CPU.

    ascend-memsim estimate --product A2 examples/gallery/cnn_dataloader.py
"""

import torch
import torch.nn as nn
import torch_npu  # noqa: F401  (registers the npu device)
from torch.utils.data import DataLoader, Dataset


class Shapes(Dataset):
    """Synthetic 3x32x32 images in 10 classes (no download)."""

    def __len__(self):
        return 512

    def __getitem__(self, index):
        g = torch.Generator().manual_seed(index)
        return torch.randn(3, 32, 32, generator=g), index % 10


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2))
        self.classifier = nn.Linear(64 * 8 * 8, 10)

    def forward(self, x):
        return self.classifier(self.features(x).flatten(1))


def main():
    device = torch.device("npu:0")
    torch.npu.set_device(device)
    model = Net().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loader = DataLoader(Shapes(), batch_size=64, shuffle=True, num_workers=4,
                        pin_memory=True, drop_last=True)
    for epoch in range(2):
        seen = correct = 0
        for images, labels in loader:
            images = images.to(device, non_blocking=True)
            labels = labels.to(device, non_blocking=True)
            logits = model(images)
            loss = nn.functional.cross_entropy(logits, labels)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            correct += (logits.argmax(1) == labels).sum().item()
            seen += labels.size(0)
        print(f"epoch {epoch}: loss {loss.item():.4f} accuracy {correct / seen:.3f} "
              f"max allocated {torch.npu.max_memory_allocated() >> 20} MiB")


if __name__ == "__main__":
    main()
