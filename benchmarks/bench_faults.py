"""What fault injection and site recording cost per malloc+free, as ratios in one run.

    python benchmarks/bench_faults.py
"""

import timeit

from ascend_memsim import FailNth, HugePagesExhausted, Runtime


def per_op(*faults, sites=False, number=20000):
    """Best-of-5 microseconds for one malloc(4096) + free on a 1 GiB A2 device."""
    with Runtime("A2", hbm_bytes=1 << 30) as rt:
        rt.set_device(0)
        rt.set_record_sites(sites)
        for fault in faults:
            fault.install(rt)

        def op():
            rt.free(rt.malloc(4096))

        return min(timeit.repeat(op, number=number, repeat=5)) / number * 1e6


def main():
    base = per_op()
    rows = [
        ("no interceptor", base),
        ("FailNth(10**9, api='malloc') installed", per_op(FailNth(10**9, api="malloc"))),
        ("HugePagesExhausted(size=(1 GiB, None)) installed",
         per_op(HugePagesExhausted(size=(1 << 30, None)))),
        ("record_sites on (the pytest plugin's default)", per_op(sites=True)),
    ]
    print("| setup | malloc+free (us) | ratio |")
    print("|---|---|---|")
    for name, us in rows:
        print(f"| {name} | {us:.2f} | {us / base:.2f} |")


if __name__ == "__main__":
    main()
