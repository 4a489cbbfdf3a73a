"""Dynamic gears of a model stand-in: dynamic batch, image size and dims.

ATC builds one ``.om`` for several input shapes (its ``--dynamic_batch_size``,
``--dynamic_image_size`` and ``--dynamic_dims`` options); the program picks one of them, a
*gear*, before each execution (``aclmdlSetDynamicBatchSize``, ``aclmdlSetDynamicHWSize``,
``aclmdlSetInputDynamicDims``). A stand-in declares them under the same names::

    "inputs":  [{"name": "data", "shape": [-1, 3, 224, 224], "dtype": "float32"}],
    "outputs": [{"name": "prob", "shape": [-1, 1000], "dtype": "float32"}],
    "dynamic_batch_size": [1, 2, 4, 8]

- ``dynamic_batch_size``: a list of batch sizes; every -1 of every input and output is the
  batch.
- ``dynamic_image_size``: a list of ``[height, width]``; a tensor holds no -1 or two (its
  height, then its width).
- ``dynamic_dims``: a list of gears, each the values of every input's -1 dims in input
  order (ATC's ``--dynamic_dims``); an output's -1 dims take the gear's values from the
  first on (DECISION: the .om records each gear's output shapes; a stand-in cannot, and the
  leading dynamic dim, usually the batch, is what outputs carry).

What the runtime derives from them (hicann/ge ``api/acl/acl_model/model/model.cpp``,
``runtime/v1/executor/ge_executor.cc``; docs ``aclmdlGetInputSizeByIndex``,
``aclmdlGetOutputDims``, ``aclmdlGetInputDims``):

- the model gets one more input, ``ascend_mbatch_shape_data`` (ACL_DYNAMIC_TENSOR_NAME, last),
  int32 of one value per dynamic dim (GE ``MultiBatchClonePass``: ``GeShape({n})``,
  ``DT_INT32``), which the set calls fill;
- input and output sizes are those of the largest gear; input dims report -1 where they are
  dynamic, output dims the largest gear's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..memory.errors import ModelParseError

__all__ = ["Gears", "KEYS", "SHAPE_INPUT", "MIN_GEARS", "MAX_GEARS", "parse_gears",
           "resolve_dims"]

#: ACL_DYNAMIC_TENSOR_NAME (acl_mdl.h): the input that carries the chosen gear.
SHAPE_INPUT = "ascend_mbatch_shape_data"
#: The stand-in keys (ATC's option names) and the kind of gear each declares.
KEYS = {"dynamic_batch_size": "batch", "dynamic_image_size": "hw", "dynamic_dims": "dims"}
#: ACL_MAX_BATCH_NUM / ACL_MAX_HW_NUM / ACL_MAX_DIM_CNT (acl_mdl.h): the most gears the
#: query structs hold.
MAX_GEARS = 128
#: GE's kMinShapesCount (compiler/graph/preprocess/multi_batch_options.cc): ATC builds no
#: model with fewer gears.
MIN_GEARS = 2


@dataclass(frozen=True)
class Gears:
    """The gears of a model: ``kind`` ("batch", "hw" or "dims") and each gear's values
    (batch: ``(b,)``, hw: ``(h, w)``, dims: the -1 dims' values in input order)."""

    kind: str
    values: tuple[tuple[int, ...], ...]

    def index(self, values: Sequence[int]) -> int | None:
        """The gear whose values are ``values``, or None."""
        values = tuple(values)
        for i, gear in enumerate(self.values):
            if gear == values:
                return i
        return None

    @property
    def width(self) -> int:
        """Values per gear: the ``ascend_mbatch_shape_data`` input's element count."""
        return len(self.values[0])

    def describe(self) -> str:
        """The gears for a message: ``batch sizes [1, 2, 4]``."""
        shown = [list(g) if len(g) > 1 else g[0] for g in self.values]
        return f"{_NOUNS[self.kind]} {shown}"


_NOUNS = {"batch": "batch sizes", "hw": "[height, width] gears", "dims": "dims gears"}


def _gear_list(raw: object, kind: str) -> tuple[tuple[int, ...], ...]:
    key = next(k for k, v in KEYS.items() if v == kind)
    # GE multi_batch_options.cc CheckDynamicParams: at least kMinShapesCount (2) gears
    if not isinstance(raw, list) or not MIN_GEARS <= len(raw) <= MAX_GEARS:
        count = len(raw) if isinstance(raw, list) else type(raw).__name__
        raise ModelParseError(f'"{key}" must be a list of {MIN_GEARS} to {MAX_GEARS} gears, '
                              f"got {count}")
    gears = []
    for i, gear in enumerate(raw):
        values = [gear] if kind == "batch" else gear
        ok = isinstance(values, list) and all(
            isinstance(v, int) and not isinstance(v, bool) and 1 <= v < 1 << 31 for v in values)
        if not ok or (kind == "hw" and len(values) != 2) or not values:
            form = {"batch": "an int >= 1", "hw": "[height, width] of ints >= 1",
                    "dims": "a non-empty list of ints >= 1"}[kind]
            raise ModelParseError(f'"{key}"[{i}] must be {form}')
        gears.append(tuple(values))
    if len({len(g) for g in gears}) != 1:
        raise ModelParseError(f'"{key}": every gear must have as many values as the first')
    if len(set(gears)) != len(gears):
        # GE CheckDynamicParams refuses repeated gears
        raise ModelParseError(f'"{key}" repeats a gear')
    return tuple(gears)


def parse_gears(spec: Mapping[str, object]) -> Gears | None:
    """The gears a stand-in dict declares (None: a static model).

    Raises:
        ModelParseError: more than one kind, or a malformed list.
    """
    found = [(key, kind) for key, kind in KEYS.items() if spec.get(key) is not None]
    if not found:
        return None
    if len(found) > 1:
        raise ModelParseError(f"a stand-in declares one kind of gears, got "
                              f"{', '.join(k for k, _ in found)}")
    key, kind = found[0]
    return Gears(kind, _gear_list(spec[key], kind))


def resolve_dims(gears: Gears, dims: tuple[int, ...], gear: int, start: int, where: str
                 ) -> tuple[int, ...]:
    """``dims`` with its -1 dims set for gear number ``gear``; ``start``: for dims gears,
    the first value an input's -1 dims take (outputs: 0).

    Raises:
        ModelParseError: a -1 the gears cannot fill.
    """
    values = gears.values[gear]
    holes = [i for i, d in enumerate(dims) if d == -1]
    if gears.kind == "batch":
        fill = values * len(holes)
    elif gears.kind == "hw":
        if len(holes) not in (0, 2):
            raise ModelParseError(f"{where}: with dynamic_image_size a tensor has no -1 dims "
                                  f"or two (height, width), got {list(dims)}")
        fill = values if holes else ()
    else:
        fill = values[start:start + len(holes)]
        if len(fill) != len(holes):
            raise ModelParseError(f"{where}: its -1 dims outnumber the dynamic_dims gear "
                                  f"values ({len(values)})")
    out = list(dims)
    for i, value in zip(holes, fill):
        out[i] = value
    return tuple(out)
