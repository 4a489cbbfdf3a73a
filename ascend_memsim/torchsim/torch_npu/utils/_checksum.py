"""``torch_npu.matmul_checksum(a, b, c)`` (``torch_npu/asd/checksum.py``): whether the
result ``c`` of ``a @ b`` looks corrupted (silent data corruption), as a bool scalar on the
device.

torch_npu takes one of two paths: the ``_npu_matmul_abft_verify`` operator
(``aclnnMatmulAbftVerify``) when the CANN ships it and the inputs fit it (2-D bfloat16 or
float32), else a check in PyTorch operators: the row sums of ``c`` against ``a`` times the
row sums of ``b`` in float32, with an error bound from ``c``'s largest and mean magnitudes
(it reads a value on the host to choose the bound), and, when the difference passes the
bound, the matmul run again into ``c`` and the mean magnitudes compared.

DECISION: the PyTorch path, whichever CANN the estimate models (whether a CANN release
ships the operator is not in the sources the simulator reads); its temporaries (a float32
copy of ``a``, ``|c|``) are the device memory the check costs. Its reads of values are the
estimate's value reads (``--item-value``): with the default 0 the bound is the mean one
and no anomaly is found, so the result is False and ``c`` is not recomputed.
"""

from __future__ import annotations

import math

import torch

__all__ = ["matmul_checksum"]

_DTYPES = (torch.bfloat16, torch.float32)


def _check(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> None:
    for t in (a, b, c):
        if not isinstance(t, torch.Tensor) or t.device.type != "npu":
            raise TypeError("tensor should be torch.Tensor, and device type should be npu")
    if a.dtype not in _DTYPES or b.dtype not in _DTYPES or c.dtype not in _DTYPES:
        raise TypeError(f"matmul_checksum only supports bfloat16 and float32, but got "
                        f"a.dtype={a.dtype}, b.dtype={b.dtype}, c.dtype={c.dtype}")


def matmul_checksum(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    """A bool scalar tensor on the device: True when ``c`` does not check out as ``a @ b``.

    Raises:
        TypeError: a tensor not on the NPU, or of a dtype other than bfloat16 and float32.
    """
    _check(a, b, c)
    n = b.shape[-1]
    row_sums = torch.sum(c, dim=-1, dtype=torch.float32)
    expected = torch.matmul(a.to(torch.float32),
                            torch.sum(b, dim=-1, keepdim=True, dtype=torch.float32)).squeeze(-1)
    magnitude = torch.abs(c)
    largest = torch.max(magnitude, dim=-1)[0]
    mean = torch.mean(magnitude, dim=-1)
    # bfloat16's rounding, 2**-8 a term, accumulated over the row (sqrt(n) when a few
    # large terms dominate, n otherwise)
    if torch.min(largest / mean) > 5:
        bound = largest * 2 ** (-8) * math.sqrt(n)
    else:
        bound = mean * 2 ** (-8) * n
    flag = torch.any((torch.abs(row_sums - expected) - 5 * bound.to(torch.float)) > 5e-20)
    if flag:
        torch.matmul(a, b, out=c)
        return torch.any(mean != torch.mean(torch.abs(c), dim=-1))
    return flag
