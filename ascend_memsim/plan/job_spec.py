"""A job plan's knobs, checked once, and the cell (:class:`~.job_cells.JobCell`) of each
assignment of their values: the estimate's options, the command's words, the environment,
the config copies, the files to check and the cache key.

The grid's axes come in a fixed order: the product, the capacity and the world size (the
estimate's own options), then ``--grid`` axes, environment axes (``--env``,
``--alloc-conf``, ``--hccl-buffsize``) and config key axes (``--set``), each in the order
given. An axis of one value is a constant: it is in every cell and the key, not a column.

What keys a cell's answer (:meth:`JobSpec.cell`): this package's version and torch's (the
fake tensors' behaviour), the estimate's options, the command's words with every value put
in, the environment variables the estimate reads (:data:`KEYED_ENV`) and those the plan
sets, the SHA-256 of every script and config file the command names
(:func:`~.knobs.files_named`) and of each ``--input``, and the bytes of each config copy.
The folder the plan runs in is not: two folders holding the same files share answers.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import itertools
import json
import os
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from .. import __version__
from ..allocators.conf import parse_alloc_conf
from ..memory.errors import AclError, InvalidArgument
from ..memory.profiles import get_profile
from ..memory.units import parse_size
from .job_cells import Copy, JobCell
from .knobs import (
    Axis,
    ConfigFile,
    EnvKnob,
    KeyKnob,
    dump_config,
    file_sha256,
    files_named,
    load_config,
    parse_env,
    parse_grid,
    parse_key,
    parse_vary,
    placeholders,
    set_key,
    shown_value,
    split_values,
    substitute,
)

__all__ = ["JobSpec", "KEYED_ENV", "MAX_POINTS", "CELL_FORMAT", "LAYOUT_AXES"]

#: DECISION: the environment variables an estimate's answer depends on beyond the script's
#: own: torch_npu's allocator settings and task queue, HCCL's buffers, the visible devices,
#: and what launchers and scripts read for their ranks. Each is in every cell's key with its
#: value here (or unset), and set so (or unset) on every worker, so a cluster's node with
#: another environment answers alike. A variable the script reads besides is named with
#: ``--env NAME``.
KEYED_ENV = ("PYTORCH_NPU_ALLOC_CONF", "PYTORCH_ALLOC_CONF", "TASK_QUEUE_ENABLE",
             "ASCEND_LAUNCH_BLOCKING", "HCCL_BUFFSIZE", "P2P_HCCL_BUFFSIZE",
             "ASCEND_RT_VISIBLE_DEVICES", "WORLD_SIZE", "RANK", "LOCAL_RANK",
             "LOCAL_WORLD_SIZE", "NPROC_PER_NODE", "NNODES")
#: DECISION: the most grid points one plan takes (each is a search of its own)
MAX_POINTS = 10_000
#: the layout of a cell's key (in the key: answers of another layout are never looked up)
CELL_FORMAT = 1
#: the axes the estimate's own options take, by their names in the table
LAYOUT_AXES = ("product", "capacity", "world_size")
#: estimate options a plan gives itself, or that make no one-configuration answer
_REFUSED = {
    "--json": "the plan reads the estimate's JSON itself",
    "--product": "give --product to the plan (a list is an axis)",
    "--capacity": "give --capacity to the plan (a list is an axis)",
    "--world-size": "give --world-size to the plan (a list is an axis)",
    "--alloc-conf": "give --alloc-conf to the plan (a ';' list is an axis)",
    "--hccl-buffsize": "give --hccl-buffsize to the plan (a list is an axis)",
    "--bisect": "a plan's cell is one run", "--sweep": "a plan's cell is one run",
    "--sweep-conf": "a plan's cell is one run", "--sweep-hccl": "a plan's cell is one run",
    "--sweep-products": "a plan's cell is one run",
    "--sweep-world-sizes": "a plan's cell is one run",
    "--snapshot": "a cell keeps no files", "--plot": "give --plot to the plan",
}


def _torch_version() -> str:
    try:
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return "none"


@dataclass
class JobSpec:
    """The knobs of a plan, checked: build with :meth:`make`."""

    command: tuple[str, ...]
    cwd: str
    vary: Axis | None
    axes: list[Axis]
    env: list[EnvKnob]
    keys: list[KeyKnob]
    configs: dict[str, ConfigFile]
    estimate_args: tuple[str, ...]
    inputs: tuple[str, ...]
    timeout: float
    #: the words of the command naming each config file: file -> ((index, prefix), ...)
    uses: dict[str, tuple[tuple[int, str], ...]] = field(default_factory=dict)
    #: the keyed environment's values in this process (None: unset)
    keyed: dict[str, str | None] = field(default_factory=dict)
    torch: str = ""
    #: the cells forked from a warm-start server where they may be (see :mod:`.job_cells`)
    warm: bool = True

    @classmethod
    def make(cls, command: Sequence[str], *, vary: str | None = None,
             grid: Sequence[str] = (), env: Sequence[str] = (),
             keys: Sequence[tuple[str, str]] = (), product: str | None = None,
             capacity: str | None = None, world_size: str | None = None,
             alloc_conf: str | None = None, hccl_buffsize: str | None = None,
             estimate_args: Sequence[str] | str = (), inputs: Sequence[str] = (),
             timeout: float = 3600.0, cwd: str | None = None,
             environ: Mapping[str, str] | None = None) -> JobSpec:
        """The plan's knobs from the text a user types (see :func:`~.job.plan_job`),
        checked: every placeholder names an axis, every axis is used, every config file is
        read, parsed and named by the command, every value of the layout axes is one the
        estimate takes.

        Raises:
            InvalidArgument: what is wrong, said before any run.
            ImportError: a YAML file without PyYAML (TOML on 3.10 without tomli).
        """
        environ = os.environ if environ is None else environ
        words = tuple(command)
        if words[:1] == ("--",):
            words = words[1:]
        if not words or not all(isinstance(w, str) for w in words):
            raise InvalidArgument("nothing to run: give the command after --, e.g. -- "
                                  "train.py --micro-batch {micro_batch}")
        where = os.path.abspath(cwd or os.getcwd())
        axes: list[Axis] = []
        for name, text, check in (("product", product, _product),
                                  ("capacity", capacity, _capacity),
                                  ("world_size", world_size, _world_size)):
            if text is not None:
                values = split_values(str(text), name)
                for v in values:
                    check(v)
                axes.append(Axis(name, values))
        axes += [parse_grid(g) for g in grid]
        knobs = [parse_env(e, environ) for e in env]
        if alloc_conf is not None:
            knobs.append(parse_env(f"PYTORCH_NPU_ALLOC_CONF={alloc_conf}", environ))
        if hccl_buffsize is not None:
            knobs.append(parse_env(f"HCCL_BUFFSIZE={hccl_buffsize}", environ))
        key_knobs = [parse_key(f, t) for f, t in keys]
        axes += [k.axis for k in knobs if k.axis is not None]
        axes += [k.axis for k in key_knobs if k.axis is not None]
        for k in knobs:
            # the values the estimate reads, checked now (a template's once filled in: in
            # its cell's run)
            given = k.axis.values if k.axis is not None else (
                (k.template,) if k.template is not None and not placeholders(k.template)
                else ())
            for v in given:
                if k.name in ("PYTORCH_NPU_ALLOC_CONF", "PYTORCH_ALLOC_CONF"):
                    _alloc_conf(v)
                elif k.name == "HCCL_BUFFSIZE":
                    _positive(v, k.name)
        varied = parse_vary(vary) if vary is not None else None
        args = tuple(shlex.split(estimate_args) if isinstance(estimate_args, str)
                     else estimate_args)
        spec = cls(words, where, varied, axes, knobs, key_knobs, {}, args,
                   tuple(os.path.abspath(os.path.join(where, i)) for i in inputs),
                   _timeout(timeout))
        spec._check_names(environ)
        spec._check_estimate_args()
        spec._read_configs()
        spec.keyed = {n: environ.get(n) for n in KEYED_ENV}
        spec.torch = _torch_version()
        for path in spec.inputs:
            if not os.path.isfile(path):
                raise InvalidArgument(f"--input {path}: no such file")
        points = 1
        for a in spec.axes:
            points *= len(a)
            if points > MAX_POINTS:
                raise InvalidArgument(f"the grid has more than {MAX_POINTS:,} points (each a "
                                      f"search of its own): fewer values")
        return spec

    # -- checks ----------------------------------------------------------------------------

    def _check_names(self, environ: Mapping[str, str]) -> None:
        names: dict[str, str] = {}
        everything = ([self.vary] if self.vary else []) + self.axes
        for a in everything:
            if a.name in names:
                raise InvalidArgument(f"the axis {a.name} is given twice")
            names[a.name] = a.name
        env_names = [k.name for k in self.env]
        for n in env_names:
            if env_names.count(n) > 1:
                raise InvalidArgument(f"--env {n} is given twice (--alloc-conf is "
                                      f"PYTORCH_NPU_ALLOC_CONF, --hccl-buffsize HCCL_BUFFSIZE)")
        templates = [*self.command, *self.estimate_args,
                     *(k.template for k in self.env
                       if k.template is not None and not k.literal),
                     *(k.template for k in self.keys if k.template is not None)]
        used: set[str] = set()
        for t in templates:
            for name in placeholders(t):
                if name not in names:
                    raise InvalidArgument(
                        f"{{{name}}} names no axis (the axes: "
                        f"{', '.join(names) or 'none'}); write {{{{{name}}}}} for the text "
                        f"itself")
                used.add(name)
        own = {k.axis.name for k in self.env if k.axis is not None}
        own |= {k.axis.name for k in self.keys if k.axis is not None}
        for a in everything:
            if a.name not in used and a.name not in own and a.name not in LAYOUT_AXES:
                raise InvalidArgument(f"the axis {a.name} is used nowhere: put {{{a.name}}} "
                                      f"in the command, an --env or a --set value")

    def _check_estimate_args(self) -> None:
        for word in self.estimate_args:
            option = word.split("=", 1)[0]
            if option in _REFUSED:
                raise InvalidArgument(f"--estimate-args {option}: {_REFUSED[option]}")

    def _read_configs(self) -> None:
        for k in self.keys:
            if k.file in self.configs:
                continue
            config = load_config(k.file, self.cwd)
            self.configs[k.file] = config
            target = os.path.abspath(os.path.join(self.cwd, k.file))
            uses = []
            for i, word in enumerate(self.command):
                prefix, value = "", word
                if word.startswith("-") and "=" in word:
                    prefix, value = word.split("=", 1)[0] + "=", word.split("=", 1)[1]
                if value and os.path.abspath(os.path.join(self.cwd, value)) == target:
                    uses.append((i, prefix))
            if not uses:
                raise InvalidArgument(f"--set {k.file}: the command names the file nowhere, "
                                      f"so its copy could not be passed to it (name it as "
                                      f"the script takes it, e.g. --deepspeed {k.file})")
            self.uses[k.file] = tuple(uses)

    # -- the grid --------------------------------------------------------------------------

    @property
    def columns(self) -> list[str]:
        """The axes of more than one value: a table's columns."""
        return [a.name for a in self.axes if len(a) > 1]

    def points(self) -> list[dict[str, str]]:
        """Every grid point, as the value of each axis, in the grid's order (the first axis
        slowest)."""
        return [dict(zip((a.name for a in self.axes), combo))
                for combo in itertools.product(*(a.values for a in self.axes))]

    def values(self, point: Mapping[str, str], value: int | None) -> dict[str, str]:
        """Every axis's value at ``point`` with the monotone axis at ``value``."""
        out = dict(point)
        if self.vary is not None and value is not None:
            out[self.vary.name] = str(value)
        return out

    def label(self, point: Mapping[str, str], value: int | None) -> str:
        """``micro_batch=14, world_size=2``: the axes of more than one value, and the
        monotone one."""
        values = self.values(point, value)
        names = self.columns + ([self.vary.name] if self.vary is not None
                                and value is not None else [])
        return ", ".join(f"{n}={shown_value(n, values[n])}" for n in names) or "the job"

    # -- a cell ----------------------------------------------------------------------------

    def cell(self, point: Mapping[str, str], value: int | None) -> JobCell:
        """The cell of ``point`` with the monotone axis at ``value``: its options, words,
        environment, copies, file checks and key. Time O(size of the config files + the
        files named, the first time each is hashed).

        Raises:
            InvalidArgument: a value a config key cannot take; a named file that cannot be
                read.
        """
        v = self.values(point, value)
        options: list[str] = []
        for name, option in (("product", "--product"), ("capacity", "--capacity"),
                             ("world_size", "--world-size")):
            if name in v:
                options += [option, v[name]]
        options += [substitute(a, v) for a in self.estimate_args]
        words = [substitute(w, v) for w in self.command]
        env: dict[str, str | None] = dict(self.keyed)
        for k in self.env:
            env[k.name] = v[k.name] if k.axis is not None else (
                k.template if k.template is None or k.literal else substitute(k.template, v))
        copies = []
        for file, config in self.configs.items():
            data = config.data
            for key in self.keys:
                if key.file == file:
                    text = v[key.axis.name] if key.axis is not None else substitute(
                        str(key.template), v)
                    data = set_key(data, key.path, text, f"--set {file} {key.text}")
            copies.append(Copy(os.path.basename(file), dump_config(config.format, data),
                               self.uses[file]))
        copied = {i for c in copies for i, _ in c.uses}
        named = files_named([w for i, w in enumerate(words) if i not in copied], self.cwd)
        hashes = []
        for path in [*named, *(p for p in self.inputs if p not in named)]:
            try:
                hashes.append((path, file_sha256(path)))
            except OSError as e:
                raise InvalidArgument(f"cannot read {path}: {e.strerror or e}") from None
        text = json.dumps(["ascend-memsim plan cell", CELL_FORMAT, __version__, self.torch,
                          options, words, sorted(env.items(), key=lambda kv: kv[0]),
                          [sha for _, sha in hashes],
                          [(c.name, hashlib.sha256(c.data).hexdigest(), c.uses)
                           for c in copies]])
        return JobCell(hashlib.sha256(text.encode()).hexdigest(), self.label(point, value),
                       tuple(options), tuple(words), tuple(sorted(env.items())), self.cwd,
                       tuple(hashes), tuple(copies), self.timeout, self.warm)

    def names_no_file(self) -> bool:
        """Whether the command names no script or config file and no ``--input`` is given:
        the cache cannot see the job change."""
        if self.inputs or self.configs:
            return False
        point = self.points()[0]
        low = self.vary.low if self.vary is not None else None
        words = [substitute(w, self.values(point, low)) for w in self.command]
        return not files_named(words, self.cwd)

    def number(self, expression: str, point: Mapping[str, str], value: int | None) -> Fraction:
        """The value of ``expression`` (axis names and whole numbers joined by ``*``) at
        ``point`` with the monotone axis at ``value``."""
        v = self.values(point, value)
        out = Fraction(1)
        for factor in expression.split("*"):
            f = factor.strip()
            out *= int(v[f]) if f in v else int(f)
        return out

    def check_expression(self, expression: str, what: str) -> None:
        """Raise InvalidArgument unless ``expression`` is axis names and positive whole
        numbers joined by ``*``, each axis's every value a positive whole number."""
        axes = {a.name: a for a in self.axes}
        if self.vary is not None:
            axes[self.vary.name] = self.vary
        for factor in expression.split("*"):
            f = factor.strip()
            if f in axes:
                a = axes[f]
                bad = [x for x in a.values if not _is_positive(x)]
                if a.monotone and (a.low or 0) < 1:
                    bad = [str(a.low)]
                if bad:
                    raise InvalidArgument(f"{what} {expression}: {f} takes {bad[0][:40]!r}, "
                                          f"not a positive whole number")
            elif not _is_positive(f):
                raise InvalidArgument(f"{what} {expression!r}: {f[:40]!r} is neither an axis "
                                      f"nor a positive whole number (axes: "
                                      f"{', '.join(axes) or 'none'})")


def _is_positive(text: str) -> bool:
    return text.isascii() and text.isdigit() and int(text) > 0


def _positive(text: str, what: str) -> None:
    if not _is_positive(text):
        raise InvalidArgument(f"{what} {text[:40]!r} is not a positive whole number")


def _world_size(text: str) -> None:
    _positive(text, "--world-size")


def _product(text: str) -> None:
    try:
        get_profile(text)
    except (AclError, ValueError, KeyError) as e:
        raise InvalidArgument(f"--product {text[:40]!r}: {e}") from None


def _capacity(text: str) -> None:
    try:
        if parse_size(text) <= 0:
            raise InvalidArgument("a card holds some memory")
    except InvalidArgument as e:
        raise InvalidArgument(f"--capacity {text[:40]!r}: {e.message}") from None


def _alloc_conf(text: str) -> None:
    try:
        parse_alloc_conf(text)
    except (AclError, ValueError) as e:
        message = e.message if isinstance(e, AclError) else str(e)
        raise InvalidArgument(f"PYTORCH_NPU_ALLOC_CONF {text[:60]!r}: {message}") from None


def _timeout(seconds: float) -> float:
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not (
            0 < seconds <= 7 * 86400):
        raise InvalidArgument(f"timeout must be a number of seconds in (0, 604800], got "
                              f"{str(seconds)[:40]}")
    return float(seconds)


def describe_axes(spec: JobSpec) -> dict[str, Any]:
    """The axes of ``spec`` as JSON: each grid axis's values, the monotone axis's range."""
    out: dict[str, Any] = {a.name: list(a.values) for a in spec.axes}
    if spec.vary is not None:
        out[spec.vary.name] = {"low": spec.vary.low, "high": spec.vary.high}
    return out
