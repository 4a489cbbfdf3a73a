"""The training stacks an estimate runs: their launchers (:mod:`.launchers`), the state a
library keeps for the life of its process, forgotten between ranks (:mod:`.process_state`),
and one module per stack whose own code needs adapting to the simulated machine (DeepSpeed:
:mod:`.deepspeed`), each installed for a run and taking effect only when the script imports
that stack."""
