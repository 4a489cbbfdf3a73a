"""pytest at the repository's root: without torch, the doctests of the torch front end
(``ascend_memsim/torchsim``, which imports torch) are not collected; its tests say why they
skip (tests/test_torchsim.py)."""

import importlib.util

collect_ignore_glob = [] if importlib.util.find_spec("torch") else ["ascend_memsim/torchsim/*"]
