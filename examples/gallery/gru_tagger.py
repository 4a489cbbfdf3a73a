"""A sequence tagger with a bidirectional GRU and an LSTM head, trained on the NPU.

    ascend-memsim estimate --product A2 examples/gallery/gru_tagger.py
"""

import torch
import torch.nn as nn
import torch_npu  # noqa: F401


class Tagger(nn.Module):
    def __init__(self, vocab=5000, dim=128, hidden=256, tags=17):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.gru = nn.GRU(dim, hidden, batch_first=True, bidirectional=True)
        self.lstm = nn.LSTM(2 * hidden, hidden, batch_first=True)
        self.out = nn.Linear(hidden, tags)

    def forward(self, tokens):
        x, _ = self.gru(self.embed(tokens))
        x, _ = self.lstm(x)
        return self.out(x)


def main():
    model = Tagger().npu()
    optimizer = torch.optim.Adam(model.parameters())
    tokens = torch.randint(0, 5000, (32, 40), device="npu")
    tags = torch.randint(0, 17, (32, 40), device="npu")
    for _ in range(2):
        logits = model(tokens)
        loss = nn.functional.cross_entropy(logits.reshape(-1, 17), tags.reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    print(f"max allocated {torch.npu.max_memory_allocated() >> 20} MiB")


if __name__ == "__main__":
    main()
