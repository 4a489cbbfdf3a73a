"""Make docs/closeup.png, the README's picture of a block close up (the +32).

Records one 2 MiB aclrtMalloc on a simulated A2 and draws the block it allocated close up,
as ``ascend-memsim plot TRACE --zoom 0 --what map -o OUT.png`` adds to a picture: the whole
footprint to scale, the bytes around the end of the request magnified, and the rules.

    python docs/closeup_picture.py            # writes docs/closeup.png
"""

import os

from ascend_memsim import MiB, Runtime
from ascend_memsim.observe.closeup import closeup_of
from ascend_memsim.observe.pictures import save_picture
from ascend_memsim.observe.trace import Recorder


def main() -> None:
    with Runtime("A2", hbm_bytes=64 * MiB, sanitizer="off") as rt:
        rt.set_device(0)
        with Recorder(rt) as rec:
            rt.free(rt.malloc(2 * MiB))
    rec.trace.name = "one_malloc.jsonl"
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "closeup.png")
    save_picture(out, closeups=[closeup_of(rec.trace, 0)])
    print(out, "written")


if __name__ == "__main__":
    main()
