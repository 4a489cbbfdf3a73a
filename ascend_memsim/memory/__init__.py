"""The memory core: vendor constants, errors, argument checks, product profiles, the
allocation rules, the first-fit allocator, one device's blocks and accounting, ``explain``.

It knows nothing of threads' current devices, streams, host memory or the faces, and imports
nothing outside this package (the ``memory`` layer of the import-linter contract).
"""
