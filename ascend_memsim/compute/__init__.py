"""The compute plane: tensor descriptors, data buffers, datasets, operators and models.

It sits above the runtime (and uses its devices, data plane and streams) and below the checks:
the runtime makes it on first use through ``Runtime.extension`` without importing it. Kernels
and model functions compute with numpy, imported only when they run.
"""
