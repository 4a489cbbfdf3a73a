"""An operator test suite written with unittest, run on the NPU: ``unittest.main()`` exits
with True when a test fails, which is the script's status.

    ascend-memsim estimate --product A2 examples/gallery/unittest_style.py
"""

import unittest

import torch
import torch_npu  # noqa: F401


class TestMatmul(unittest.TestCase):
    def test_shapes(self):
        a = torch.randn(512, 256, device="npu")
        b = torch.randn(256, 128, device="npu")
        self.assertEqual((a @ b).shape, (512, 128))

    def test_memory_is_given_back(self):
        before = torch.npu.memory_allocated()
        x = torch.empty(64 << 20, dtype=torch.uint8, device="npu")
        self.assertGreaterEqual(torch.npu.memory_allocated() - before, 64 << 20)
        del x
        self.assertEqual(torch.npu.memory_allocated(), before)


if __name__ == "__main__":
    unittest.main()
