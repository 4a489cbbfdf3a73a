"""HBM answered from DDR on a DDR-only part (Ascend 310P / Atlas 300I).

aclrtGetMemInfo's documentation: on a part without HBM, the HBM attributes report DDR. A
program written for a training card that asks for ACL_HBM_MEM still gets real figures.
Run: python examples/ddr_only_310p.py
"""

import ascend_memsim
from ascend_memsim import MiB, Runtime

ascend_memsim.install_acl()     # `import acl` now means the simulator
import acl  # noqa: E402

with Runtime("310P", ddr_bytes=256 * MiB):
    assert acl.init() == 0
    assert acl.rt.set_device(0) == 0
    ptr, ret = acl.rt.malloc(10 * MiB, acl.ACL_MEM_MALLOC_HUGE_FIRST)
    assert ret == acl.ACL_SUCCESS
    for name in ("ACL_HBM_MEM", "ACL_DDR_MEM", "ACL_HBM_MEM_HUGE", "ACL_HBM_MEM_HUGE1G"):
        free, total, ret = acl.rt.get_mem_info(getattr(acl, name))
        print(f"get_mem_info({name:18}) -> free {free:>10}, total {total:>10}, ret {ret}")
    hbm = acl.rt.get_mem_info(acl.ACL_HBM_MEM)
    assert hbm == acl.rt.get_mem_info(acl.ACL_DDR_MEM), "HBM is answered from DDR"
    assert acl.rt.free(ptr) == 0
    assert acl.rt.reset_device(0) == 0
    assert acl.finalize() == 0
ascend_memsim.uninstall_acl()
