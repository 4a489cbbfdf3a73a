"""The capacity keywords of a small simulated device, per product: its main memory (HBM, or
DDR on a part without HBM, which refuses ``hbm_bytes``) and, when asked, its DDR too."""

from ascend_memsim.memory.profiles import get_profile


def capacity(product, size, *, ddr=None):
    """``Runtime(product, **capacity(product, 64 * MiB))``: ``size`` bytes of the product's
    main memory; ``ddr`` bytes of DDR besides, on a part that has HBM."""
    if not get_profile(product).hbm_bytes:
        return {"ddr_bytes": size}
    return {"hbm_bytes": size} if ddr is None else {"hbm_bytes": size, "ddr_bytes": ddr}
