"""Properties of dynamic gears: for random gears and shapes, the sizes a description reports
are the largest gear's, an execution at any gear reads and writes exactly that gear's bytes
(a buffer one byte short of them is refused), and get_cur_output_dims follows the gear."""

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

import ascend_memsim.acl as acl
from ascend_memsim import MiB, Runtime, Sanitizer, register_model, unregister_model

SHAPE = "ascend_mbatch_shape_data"
PATH = "/nonexistent/gears-property.om"


@st.composite
def models(draw):
    """A dynamic batch or image size stand-in and a gear of it."""
    if draw(st.booleans()):
        gears = draw(st.lists(st.integers(1, 6), min_size=2, max_size=5, unique=True))
        tail = draw(st.lists(st.integers(1, 4), min_size=1, max_size=2))
        spec = {"inputs": [{"name": "x", "shape": [-1, *tail], "dtype": "float32"}],
                "outputs": [{"name": "y", "shape": [-1, *tail], "dtype": "float32"}],
                "dynamic_batch_size": gears}
        values = [(g,) for g in gears]
    else:
        gears = draw(st.lists(st.tuples(st.integers(1, 5), st.integers(1, 5)), min_size=2,
                              max_size=4, unique=True))
        spec = {"inputs": [{"name": "x", "shape": [1, -1, -1], "dtype": "uint8"}],
                "outputs": [{"name": "y", "shape": [1, -1, -1], "dtype": "uint8"}],
                "dynamic_image_size": [list(g) for g in gears]}
        values = gears
    return spec, values, draw(st.sampled_from(range(len(values))))


def _at(spec, gear):
    dims = spec["inputs"][0]["shape"]
    fill = iter(gear * dims.count(-1))
    return [next(fill) if d == -1 else d for d in dims]


def _nbytes(spec, dims):
    return int(np.prod(dims)) * (4 if spec["inputs"][0]["dtype"] == "float32" else 1)


@given(models(), st.booleans())
def test_an_execution_touches_exactly_its_gear(model, short):
    spec, gears, chosen = model
    gear = gears[chosen]
    dims = _at(spec, gear)
    need = _nbytes(spec, dims)
    largest = max(_nbytes(spec, _at(spec, g)) for g in gears)
    register_model(PATH, spec, fn=lambda inputs: inputs[0] + 1)
    try:
        with Runtime("A2", hbm_bytes=16 * MiB, sanitizer=Sanitizer(output=None)) as rt:
            rt.set_device(0)
            model_id, ret = acl.mdl.load_from_file(PATH)
            assert ret == 0
            desc = acl.mdl.create_desc()
            acl.mdl.get_desc(desc, model_id)
            assert acl.mdl.get_input_size_by_index(desc, 0) == largest
            assert acl.mdl.get_output_size_by_index(desc, 0) == largest
            index, _ = acl.mdl.get_input_index_by_name(desc, SHAPE)
            size = need - 1 if short else largest
            blocks, datasets = [], []
            for sizes in ((size, 4 * len(gear)), (largest,)):
                ds = acl.mdl.create_dataset()
                for n in sizes:
                    ptr, _ = acl.rt.malloc(max(n, 1), 0)
                    acl.rt.memset(ptr, max(n, 1), 0xAB, max(n, 1))
                    blocks.append(ptr)
                    acl.mdl.add_dataset_buffer(ds, acl.create_data_buffer(ptr, n))
                datasets.append(ds)
            set_gear = (acl.mdl.set_dynamic_batch_size if len(gear) == 1
                        else acl.mdl.set_dynamic_hw_size)
            assert set_gear(model_id, datasets[0], index, *gear) == 0
            assert acl.mdl.get_cur_output_dims(desc, 0)[0]["dims"] == dims
            ret = acl.mdl.execute(model_id, datasets[0], datasets[1])
            out = bytes(largest)
            acl.rt.memcpy(acl.util.bytes_to_ptr(out), largest, blocks[2], largest, 2)
            if short:
                assert ret == 100017                       # one byte short of the gear
                assert out == b"\xab" * largest            # nothing written
            else:
                assert ret == 0
                dtype = np.float32 if spec["inputs"][0]["dtype"] == "float32" else np.uint8
                x = np.frombuffer(b"\xab" * need, dtype)
                assert out[:need] == (x + 1).astype(dtype).tobytes()
                assert out[need:] == b"\xab" * (largest - need)   # past the gear: untouched
            for ds in datasets:
                for i in range(acl.mdl.get_dataset_num_buffers(ds)):
                    acl.destroy_data_buffer(acl.mdl.get_dataset_buffer(ds, i))
                acl.mdl.destroy_dataset(ds)
            for ptr in blocks:
                acl.rt.free(ptr)
            acl.mdl.destroy_desc(desc)
            acl.mdl.unload(model_id)
    finally:
        unregister_model(PATH)
