"""Quick start: an unmodified-looking pyacl program, then the Pythonic core and explain().

Run: python examples/quickstart.py
"""

from ascend_memsim import MiB, Runtime, explain, install_acl

install_acl()
import acl  # noqa: E402  (resolves to the simulator after install_acl)

ACL_MEM_MALLOC_HUGE_FIRST = 0
ACL_HBM_MEM = 1

# 1. pyacl style: out-values first, the aclError code last.
ret = acl.init()
assert ret == 0, ret
acl.rt.set_device(0)
ptr, ret = acl.rt.malloc(2 * MiB, ACL_MEM_MALLOC_HUGE_FIRST)
free, total, ret = acl.rt.get_mem_info(ACL_HBM_MEM)
print(f"malloc(2 MiB) -> {ptr:#x}; HBM in use: {(total - free) // MiB} MiB of {total // MiB} MiB")
print(f"free(NULL) -> {acl.rt.free(0)} ({acl.get_recent_err_msg()})")
acl.rt.free(ptr)
acl.rt.reset_device(0)
acl.finalize()

# 2. The Pythonic core on a small device: exceptions instead of codes, blocks to inspect.
with Runtime("950PR", hbm_bytes=64 * MiB) as rt:
    rt.set_device(0)
    block = rt.block(rt.malloc(2 * MiB))
    print(f"on 950PR the same request: rule size {block.rule_size}, "
          f"footprint {block.footprint // MiB} MiB on {block.page.value} pages")
    rt.free(block.ptr)

# 3. Why: each step and the rule behind it.
print(explain(2 * MiB, ACL_MEM_MALLOC_HUGE_FIRST, product="A2"))
