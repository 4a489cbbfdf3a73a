"""Each teaching example runs to completion (each asserts its own lesson)."""

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLES = ["quickstart.py", "plus32_gotcha.py", "hugepage_fallback.py", "ddr_only_310p.py",
            "leak_hunt.py", "same_trace_a2_950pr.py", "caching_allocator.py",
            "operator_unit_test.py", "npu_allocator_unit_test.py"]
EXPECT = {"quickstart.py": "HBM in use: 4 MiB", "plus32_gotcha.py": "footprint 4 MiB",
          "hugepage_fallback.py": "fallback=True", "caching_allocator.py": "after empty_cache",
          "ddr_only_310p.py": "get_mem_info(ACL_HBM_MEM", "leak_hunt.py": "in step",
          "same_trace_a2_950pr.py": "A2 needs", "operator_unit_test.py": "4 passed",
          "npu_allocator_unit_test.py": "3 passed"}


@pytest.mark.parametrize("name", EXAMPLES)
def test_example_runs(name):
    env = dict(os.environ, PYTHONPATH=ROOT)
    done = subprocess.run([sys.executable, os.path.join(ROOT, "examples", name)], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert EXPECT[name] in done.stdout
    # a lesson ends clean: no stray sanitizer reports or warnings on stderr
    assert done.stderr == "", done.stderr



# the torch_npu scripts ascend-memsim estimate runs on fake tensors: estimate's options, the
# script's arguments, what the output shows
ESTIMATED = {
    "estimate_mlp.py": ([], [], ["268.5M parameters", "step 1: max allocated 4611 MiB",
                                 "verdict: fits"]),
    "estimate_mlp.py --bisect": (["--bisect"], [], ["traced once at 60.96 GiB",
                                                    "smallest capacity", "up fits",
                                                    "the script runs out of memory at"]),
    "estimate_gpt.py": ([], ["--size", "125M", "--layers", "2", "--steps", "1"],
                        ["GPT 125M: 2 layers, 0.05B parameters", "verdict: fits"]),
}


@pytest.mark.parametrize("name", ESTIMATED)
def test_estimate_example_runs(name):
    pytest.importorskip("torch", reason="ascend-memsim estimate runs the script on torch's "
                                        "fake tensors; install the torch extra")
    options, args, expected = ESTIMATED[name]
    script = os.path.join(ROOT, "examples", name.split()[0])
    done = subprocess.run([sys.executable, "-m", "ascend_memsim", "estimate", "--product",
                           "A2", *options, script, *args],
                          env=dict(os.environ, PYTHONPATH=ROOT), capture_output=True,
                          text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    for text in expected:
        assert text in done.stdout
