"""Fine-tuning a causal language model with Hugging Face's Trainer on an NPU, from a model
config (no download) and a tokenized dataset made on the spot, as a Trainer example does.

    ascend-memsim estimate --product A2 examples/gallery/hf_trainer.py -- OUT_DIR
"""

import sys

import torch
import torch_npu  # noqa: F401
from torch.utils.data import Dataset
from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments


class Tokens(Dataset):
    def __init__(self, n=64, length=128, vocab=2000):
        g = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, vocab, (n, length), generator=g)

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def main(out_dir):
    config = LlamaConfig(vocab_size=2000, hidden_size=512, intermediate_size=1376,
                         num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=8,
                         max_position_embeddings=512)
    model = LlamaForCausalLM(config)
    args = TrainingArguments(output_dir=out_dir, per_device_train_batch_size=8, max_steps=3,
                             learning_rate=1e-4, bf16=True, logging_steps=1, save_strategy="no",
                             report_to=[], dataloader_num_workers=2, use_cpu=False)
    trainer = Trainer(model=model, args=args, train_dataset=Tokens())
    trainer.train()
    print(f"trained on {trainer.args.device}; max allocated "
          f"{torch.npu.max_memory_allocated() >> 20} MiB")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "trainer_out")
