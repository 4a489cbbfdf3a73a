"""The runtime: the composition root that holds devices (current device per thread,
reference counts), host memory, byte moves, streams and contexts, and routes each aclrt call
to them; the aclInit config reader; the active runtime (aclInit / aclFinalize); the hook
interface through which checks attach.

It may import :mod:`ascend_memsim.data` and :mod:`ascend_memsim.memory`; never the checks,
the observers, the testing toolkit or the faces (they import it).
"""
