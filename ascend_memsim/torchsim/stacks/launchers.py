"""The launchers training stacks are started with, read as each documents its arguments:
what each rank's process runs (a script, a module, or a console script's function), with
which arguments and environment, and how many ranks there are.

``ascend-memsim estimate`` takes the command a user types, after its own options:

- ``SCRIPT.py [ARGS]`` and ``-m MODULE [ARGS]`` (also after ``python``/``python3``): one
  process (``--world-size N`` for N ranks);
- ``torchrun ... SCRIPT.py [ARGS]`` (and ``python -m torch.distributed.run`` / ``.launch``):
  torch's own argument parser (``torch.distributed.run.get_args_parser``); ranks =
  ``--nproc-per-node`` x ``--nnodes`` (the largest of a ``MIN:MAX`` range), ``--module``
  and ``--no-python`` as torchrun takes them;
- ``deepspeed ... SCRIPT.py [ARGS]``: DeepSpeed's own parser
  (``deepspeed.launcher.runner.parse_args``); ranks = ``--num_gpus`` (default: every card of
  a node) x ``--num_nodes`` (default 1 without a hostfile), and each rank's script gets
  ``--local_rank=N`` as ``deepspeed/launcher/launch.py`` appends it (not with
  ``--no_local_rank``);
- ``accelerate launch ... SCRIPT.py [ARGS]``: accelerate's own parser and its own
  preparation of the processes' environment (``launch_command_parser``,
  ``_validate_launch_command``, ``prepare_multi_gpu_env`` / ``prepare_deepspeed_cmd_env``);
  ranks = ``--num_processes``, or as ``--config_file`` (or accelerate's default config)
  sets them;
- ``llamafactory-cli train CONFIG.yaml [KEY=VALUE ...]`` (``lmf``): LLaMA-Factory's rule
  (``llamafactory/launcher.py``, ``launch``): with ``FORCE_TORCHRUN`` set or more than one
  card, torchrun of ``llamafactory/launcher.py`` on ``NPROC_PER_NODE`` (default: the cards of
  a node) x ``NNODES`` ranks, with the environment it sets; else one process;
- any other console script an installed package declares (``pip``'s ``console_scripts``
  entry points): its function, in one process.

Anything else (``mpirun``, ``srun``, a shell script) is refused with the forms above
(:class:`LaunchError`). DECISION: "the cards of a node" is the estimate's
``--cards-per-node`` (8 by default, as on an Atlas 800 node), and ``ASCEND_RT_VISIBLE_DEVICES``
narrows it as it narrows the devices torch_npu sees.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["Program", "LaunchError", "resolve", "FORMS"]

#: the forms that work, as the refusal lists them
FORMS = ("SCRIPT.py [ARGS]", "-m MODULE [ARGS]", "torchrun [OPTIONS] SCRIPT.py [ARGS]",
         "deepspeed [OPTIONS] SCRIPT.py [ARGS]", "accelerate launch [OPTIONS] SCRIPT.py [ARGS]",
         "llamafactory-cli train CONFIG.yaml", "a console script of an installed package")


class LaunchError(ValueError):
    """A command the estimate cannot run as its launcher would: the message says why and
    which forms work."""


@dataclass
class Program:
    """What each rank's process runs: ``kind`` "script" (``target`` a path), "module"
    (``python -m target``) or "entry" (``target`` "module:function", a console script), with
    ``argv`` (``sys.argv``, its first word the program's name), ``env`` (what the launcher
    sets for it), ``world_size`` and ``cards_per_node`` (None: one process, unless the
    estimate is given ``--world-size``), and whether each rank's ``argv`` gets
    ``--local_rank=N`` (DeepSpeed's launcher)."""

    kind: str
    target: str
    argv: list[str]
    world_size: int | None = None
    cards_per_node: int | None = None
    env: dict[str, str] = field(default_factory=dict)
    local_rank_arg: bool = False
    #: the launcher and its settings, for the report ("torchrun: 2 nodes x 8")
    launcher: str = ""

    def rank_argv(self, local_rank: int | None) -> list[str]:
        """``argv`` as the rank with ``local_rank`` gets it."""
        if self.local_rank_arg and local_rank is not None:
            return [*self.argv, f"--local_rank={local_rank}"]
        return list(self.argv)


def _cards(cards_per_node: int) -> int:
    """The cards a process on a node sees: ``ASCEND_RT_VISIBLE_DEVICES`` narrows the node's."""
    visible = os.environ.get("ASCEND_RT_VISIBLE_DEVICES")
    if visible is None or not visible.strip():
        return cards_per_node
    return max(1, len([d for d in visible.split(",") if d.strip()]))


def _count(text: object, name: str) -> int:
    """A launcher's count argument as a whole number >= 1."""
    try:
        value = int(str(text))
    except ValueError:
        raise LaunchError(f"{name} {text!r}: expected a whole number") from None
    if value < 1:
        raise LaunchError(f"{name} {value}: expected a whole number >= 1")
    return value


def _parse(parser: Any, words: list[str], launcher: str) -> Any:
    """``parser.parse_args(words)``, its usage errors a LaunchError."""
    import contextlib
    import io

    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            return parser.parse_args(words)
    except SystemExit:
        lines = [line for line in err.getvalue().splitlines() if line.strip()]
        raise LaunchError(f"{launcher}: {lines[-1] if lines else 'bad arguments'}") from None


def _program(script: str, args: list[str], module: bool, no_python: bool,
             launcher: str) -> tuple[str, str, list[str]]:
    if no_python:
        raise LaunchError(f"{launcher} --no-python runs {script!r} as a program, not "
                          f"Python: the estimate runs Python scripts and modules")
    if module:
        return "module", script, [script, *args]
    return "script", script, [script, *args]


def _torchrun(words: list[str], cards_per_node: int, name: str = "torchrun") -> Program:
    from torch.distributed.run import get_args_parser

    args = _parse(get_args_parser(), words, name)
    nproc = str(args.nproc_per_node)
    # torchrun's own meanings: "gpu"/"cuda"/"xpu" count the devices, "auto" them else the
    # CPUs (determine_local_world_size); on an NPU node torch_npu's devices
    per_node = _cards(cards_per_node) if nproc in ("auto", "gpu", "cuda", "xpu") else \
        _count(nproc, "--nproc-per-node")
    nnodes = str(args.nnodes)
    nodes = _count(nnodes.split(":")[-1], "--nnodes")
    kind, target, argv = _program(args.training_script, list(args.training_script_args),
                                  args.module, args.no_python, name)
    return Program(kind, target, argv, per_node * nodes, per_node,
                   launcher=f"{name}: {nodes} node{'s' if nodes > 1 else ''} x {per_node}")


def _deepspeed(words: list[str], cards_per_node: int) -> Program:
    from deepspeed.launcher.runner import parse_args

    args = _parse(_DeepSpeedParser(parse_args), words, "deepspeed")
    if args.hostfile and os.path.isfile(args.hostfile):
        raise LaunchError("deepspeed --hostfile: a job over the hosts of a hostfile is "
                          "estimated with --num_nodes N --num_gpus G instead (the hosts "
                          "themselves are not read)")
    per_node = _cards(cards_per_node) if args.num_gpus in (None, -1) else \
        _count(args.num_gpus, "--num_gpus")
    nodes = 1 if args.num_nodes in (None, -1) else _count(args.num_nodes, "--num_nodes")
    kind, target, argv = _program(args.user_script, list(args.user_args), args.module,
                                  args.no_python, "deepspeed")
    return Program(kind, target, argv, per_node * nodes, per_node,
                   local_rank_arg=not args.no_local_rank,
                   launcher=f"deepspeed: {nodes} node{'s' if nodes > 1 else ''} x {per_node}")


class _DeepSpeedParser:
    """DeepSpeed's ``parse_args(args)`` as an object with ``parse_args``."""

    def __init__(self, parse: Any) -> None:
        self._parse = parse

    def parse_args(self, words: list[str]) -> Any:
        return self._parse(words)


def _accelerate(words: list[str], cards_per_node: int) -> Program:
    if not words or words[0] != "launch":
        raise LaunchError("accelerate: the estimate runs `accelerate launch ...`, not "
                          f"`accelerate {words[0] if words else ''}`")
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser
    from accelerate.utils import launch as accelerate_launch

    args = _parse(launch_command_parser(), words[1:], "accelerate launch")
    _validate_launch_command(args)
    nodes = int(args.num_machines or 1)
    processes = _count(args.num_processes or 1, "--num_processes")
    env: dict[str, str] = {}
    if processes > 1 or nodes > 1:
        prepare = (accelerate_launch.prepare_deepspeed_cmd_env if args.use_deepspeed
                   else accelerate_launch.prepare_multi_gpu_env)
        prepared = prepare(args)
        # (prepare_deepspeed_cmd_env gives the command and the environment)
        env_all = prepared[1] if isinstance(prepared, tuple) else prepared
        env = {k: v for k, v in env_all.items() if os.environ.get(k) != v}
    else:
        env = {k: v for k, v in accelerate_launch.prepare_simple_launcher_cmd_env(args)[1]
               .items() if os.environ.get(k) != v}
    kind, target, argv = _program(args.training_script, list(args.training_script_args),
                                  bool(args.module), bool(args.no_python), "accelerate launch")
    per_node = max(1, processes // nodes)
    return Program(kind, target, argv, processes if processes > 1 else None,
                   per_node if processes > 1 else None, env=env,
                   launcher=f"accelerate launch: {processes} process"
                            f"{'es' if processes > 1 else ''}")


def _llamafactory(words: list[str], cards_per_node: int, name: str) -> Program:
    # llamafactory/launcher.py, launch(): `train` goes through torchrun when FORCE_TORCHRUN is
    # set or the node has more than one device; its environment then sets the allocator's
    # CUDA variable (OPTIM_TORCH), which torch_npu does not read. Nothing of LLaMA-Factory is
    # imported here (its import reads torch_npu's presence, which the run's stand-in gives)
    import importlib.util

    spec = importlib.util.find_spec("llamafactory.launcher")
    if spec is None or spec.origin is None:
        raise LaunchError(f"{name}: LLaMA-Factory is not installed (pip install llamafactory)")

    def is_env_enabled(env_var: str, default: str = "0") -> bool:
        # llamafactory/extras/misc.py, is_env_enabled
        return os.getenv(env_var, default).lower() in ["true", "y", "1"]

    command = words[0] if words else "help"
    cards = _cards(cards_per_node)
    entry = Program("entry", "llamafactory.cli:main", [name, *words], launcher=name)
    if command != "train" or not (is_env_enabled("FORCE_TORCHRUN") or cards > 1):
        return entry
    per_node = _count(os.environ.get("NPROC_PER_NODE", str(cards)), "NPROC_PER_NODE")
    nodes = _count(os.environ.get("NNODES", "1"), "NNODES")
    env = {}
    if is_env_enabled("OPTIM_TORCH", "1"):
        env = {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
               "TORCH_NCCL_AVOID_RECORD_STREAMS": "1"}
    script = os.path.abspath(spec.origin)
    return Program("script", script, [script, *words[1:]], per_node * nodes, per_node,
                   env=env, launcher=f"{name} train (torchrun: {nodes} node"
                                     f"{'s' if nodes > 1 else ''} x {per_node})")


def _in_child(launcher: str, words: list[str], cards_per_node: int) -> Program:
    """DeepSpeed's and accelerate's own parsers, run in a child interpreter: importing
    either makes choices from the process it runs in (DeepSpeed picks its accelerator,
    accelerate caches whether torch_npu is there), which the estimate's run must make
    itself, under the stand-in torch_npu. The child prints the :class:`Program` as JSON."""
    code = ("import json, sys\n"
            "from ascend_memsim.torchsim.stacks.launchers import _here\n"
            "print(json.dumps(_here(sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3]))))")
    done = subprocess.run([sys.executable, "-c", code, launcher, json.dumps(words),
                           str(cards_per_node)], capture_output=True, text=True, timeout=300,
                          check=False)
    if done.returncode != 0:
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        raise LaunchError(lines[-1].split("LaunchError: ", 1)[-1] if lines else
                          f"{launcher}: its arguments could not be read")
    return Program(**json.loads(done.stdout.strip().splitlines()[-1]))


def _here(launcher: str, words: list[str], cards_per_node: int) -> dict[str, Any]:
    """In the child of :func:`_in_child`: the launcher's program, as a dict."""
    sys.argv[0] = launcher      # the name its parser's messages give
    program = (_deepspeed if launcher == "deepspeed" else _accelerate)(words, cards_per_node)
    return asdict(program)


def _console_script(name: str) -> str | None:
    """The ``module:function`` of the installed console script ``name``, or None."""
    from importlib.metadata import entry_points

    for ep in entry_points(group="console_scripts"):
        if ep.name == name:
            return str(ep.value)
    return None


def resolve(words: list[str], cards_per_node: int = 8) -> Program:
    """The program the command ``words`` runs in each rank's process (see the module).

    Raises:
        LaunchError: an unknown launcher, or arguments its own parser refuses.
    """
    if not words:
        raise LaunchError("nothing to run: give " + "; ".join(FORMS))
    first, rest = words[0], list(words[1:])
    base = os.path.basename(first)
    if base in ("python", "python3") or base.startswith("python3."):
        if rest[:2] in (["-m", "torch.distributed.run"], ["-m", "torch.distributed.launch"]):
            return _torchrun(rest[2:], cards_per_node, f"python -m {rest[1]}")
        return resolve(rest, cards_per_node)
    if first == "-m":
        if not rest:
            raise LaunchError("-m: the module to run is missing")
        if rest[0] in ("torch.distributed.run", "torch.distributed.launch"):
            return _torchrun(rest[1:], cards_per_node, f"python -m {rest[0]}")
        return Program("module", rest[0], [rest[0], *rest[1:]])
    if first.endswith(".py") or os.path.isfile(first):
        if not os.path.isfile(first):
            raise LaunchError(f"no such script: {first}")
        return Program("script", first, [first, *rest])
    if base == "torchrun":
        return _torchrun(rest, cards_per_node)
    if base in ("deepspeed", "accelerate"):
        return _in_child(base, rest, cards_per_node)
    if base in ("llamafactory-cli", "lmf"):
        return _llamafactory(rest, cards_per_node, base)
    entry = _console_script(base)
    if entry is not None:
        return Program("entry", entry, [base, *rest], launcher=base)
    where = shutil.which(first)
    what = f"{first} ({where})" if where else first
    raise LaunchError(f"{what} is not a Python script, module, known launcher or console "
                      f"script of an installed package; the forms that work: "
                      + "; ".join(FORMS))
