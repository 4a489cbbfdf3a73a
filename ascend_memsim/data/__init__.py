"""The data plane: the bytes of device blocks (sparse chunks, initcheck bookkeeping) and host
memory (``aclrtMallocHost`` blocks, buffers the program registers through ``acl.util``).

It may import :mod:`ascend_memsim.memory` only; it reaches the runtime it serves through the
object it is given (its ``host``, ``sanitizer``, ``device_holding``), never by import.
"""
