"""LoRA fine-tuning with PEFT on an NPU: the base model frozen, small adapters trained, as
PEFT's examples do, on a model made from its config (no download).

    ascend-memsim estimate --product A2 examples/gallery/peft_lora.py
"""

import torch
import torch_npu  # noqa: F401
from peft import LoraConfig, get_peft_model
from transformers import LlamaConfig, LlamaForCausalLM


def main():
    config = LlamaConfig(vocab_size=2000, hidden_size=512, intermediate_size=1376,
                         num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=8)
    model = LlamaForCausalLM(config).to("npu")
    lora = LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"],
                      lora_dropout=0.05, task_type="CAUSAL_LM")
    model = get_peft_model(model, lora)
    model.print_trainable_parameters()
    optimizer = torch.optim.AdamW((p for p in model.parameters() if p.requires_grad), lr=2e-4)
    ids = torch.randint(0, 2000, (4, 256), device="npu")
    for _ in range(2):
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    print(f"max allocated {torch.npu.max_memory_allocated() >> 20} MiB")


if __name__ == "__main__":
    main()
