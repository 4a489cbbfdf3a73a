"""The training stacks' own code under an estimate: their launchers (:mod:`.launchers`:
torchrun, deepspeed, accelerate launch, llamafactory-cli, ``-m`` and console scripts), what a
library keeps for its process forgotten between ranks (:mod:`.process_state`) and, one module
a stack, what each needs to run on the stand-in torch_npu: Hugging Face's Trainer, PEFT, TRL
and LLaMA-Factory (:mod:`.hf`), DeepSpeed (:mod:`.deepspeed`), Megatron-core
(:mod:`.megatron`), torchtitan (:mod:`.torchtitan`). Nothing here imports a stack at the
estimate's start: each is imported when the user's command or script uses it."""
