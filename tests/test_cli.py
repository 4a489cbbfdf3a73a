"""The command line, through its entry point main(argv) (and once as python -m)."""

import io
import json
import os
import subprocess
import sys
import textwrap
import types

from ascend_memsim import MiB, Runtime
from ascend_memsim.cli import main, parse_policy_arg, sanitizer_report_count
from ascend_memsim.observe.trace import Recorder, load


def run(*argv):
    out = io.StringIO()
    code = main(list(argv), out=out)
    return code, out.getvalue()


def test_demo_shows_the_rules():
    code, text = run("demo")
    assert code == 0
    assert "footprint 192" in text                       # +32 rule on 100 bytes
    assert "footprint 4194304 (4 MiB)" in text and "footprint 2097152 (2 MiB)" in text
    assert "<- huge-page fallback" in text
    assert "ret 207001" in text and "no fallback: HUGE_ONLY" in text
    assert "live footprints) ==" in text and ": True" in text
    # step 8, 1 GB pages: no +32 under HUGE1G_ONLY, one more huge page under HUGE_ONLY
    assert "(1 GiB, HUGE1G_ONLY)            -> huge1g pages, rule size 1073741824, " \
           "footprint 1073741824 (1 GiB)" in text
    assert "footprint 1075838976 (1 GiB + 2 MiB)" in text


def test_explain_accepts_size_and_policy_forms():
    code, text = run("explain", "2MiB", "--policy", "huge-only")
    assert code == 0 and "HUGE_ONLY" in text and "4194304" in text
    code, text = run("explain", "2MiB", "--api", "malloc_align32", "--policy", "0")
    assert code == 0 and "=> 2097152 bytes" in text
    assert run("explain", "123", "--product", "950PR")[0] == 0
    assert run("explain", "12x")[0] == 2
    assert run("explain", "1GiB", "--policy", "HUGE1G_ONLY", "--product", "950PR")[0] == 2
    assert parse_policy_arg("ACL_MEM_MALLOC_NORMAL_ONLY_P2P") == 5


def test_profiles_table():
    code, text = run("profiles")
    assert code == 0
    for name in ("950PR", "A2", "A3", "310P"):
        assert f"\n{name} " in text
    assert "sources:" in text and "ALIGN_UP(size, 32) + 32" in text


def _script(tmp_path, body):
    path = tmp_path / "prog.py"
    path.write_text(textwrap.dedent(body))
    return str(path)


LEAKY = """
    import sys
    import acl
    assert acl.init() == 0
    assert acl.rt.set_device(0) == 0
    ptr, ret = acl.rt.malloc(int(sys.argv[1]), 0)
    assert ret == 0
    if sys.argv[2] == "free":
        assert acl.rt.free(ptr) == 0
    acl.rt.reset_device(0)
    acl.finalize()
"""


def test_run_reports_leaks_and_exits_nonzero(tmp_path, capsys):
    script = _script(tmp_path, LEAKY)
    code, text = run("run", script, "100", "keep")
    err = capsys.readouterr().err
    assert code == 1 and text == ""                 # findings are diagnostics: stderr
    assert "Leaked 100 bytes at 0x" in err and "100-byte block" in err
    assert "prog.py:6 in <module>" in err
    assert "========= LEAK SUMMARY: 100 bytes leaked in 1 allocation (192 B of footprint)" in err
    assert "========= ERROR SUMMARY: 1 error, 0 warnings (leak: 1)" in err
    assert run("run", "--error-exitcode", "7", script, "100", "keep")[0] == 7
    capsys.readouterr()
    code, text = run("run", script, "100", "free")
    err = capsys.readouterr().err
    assert code == 0 and "Leaked" not in err
    assert "LEAK SUMMARY: 0 bytes leaked in 0 allocations" in err
    assert "ERROR SUMMARY: 0 errors, 0 warnings" in err
    assert run("run", "--no-leak-check", script, "100", "keep")[0] == 0


def test_run_records_a_trace_and_passes_the_scripts_status(tmp_path):
    script = _script(tmp_path, LEAKY)
    trace_path = str(tmp_path / "t.jsonl")
    code, _ = run("run", "--trace", trace_path, script, "2097152", "free")
    assert code == 0
    kinds = [e["event"] for e in load(trace_path).events]
    assert kinds[:3] == ["set_device", "malloc", "free"]
    failing = _script(tmp_path, "import sys\nsys.exit(3)\n")
    assert run("run", failing)[0] == 3
    crashing = _script(tmp_path, "raise RuntimeError('boom')\n")
    assert run("run", crashing)[0] == 1
    assert run("run", str(tmp_path / "missing.py"))[0] == 2


def test_sanitizer_hook_counts_reports():
    rt = types.SimpleNamespace()
    assert sanitizer_report_count(rt) == 0
    rt.sanitizer = types.SimpleNamespace(reports=["double free", "use after free"])
    assert sanitizer_report_count(rt) == 2
    rt.sanitizer = types.SimpleNamespace(report_count=lambda: 5)
    assert sanitizer_report_count(rt) == 5


def _trace_file(tmp_path):
    with Runtime("A2", hbm_bytes=32 * MiB) as rt, Recorder(rt) as rec:
        rt.set_device(0)
        for _ in range(3):
            rt.malloc(2 * MiB)
        rt.malloc_with_cfg(100, 2, {1: 3})
    path = str(tmp_path / "t.jsonl")
    rec.trace.save(path)
    return path


def test_replay_bisect_plot_map_stats(tmp_path):
    path = _trace_file(tmp_path)
    code, text = run("replay", path, "--quiet")
    assert code == 0 and "the whole trace fits" in text
    code, text = run("replay", path, "--capacity", "10MiB", "--quiet")
    assert code == 1 and "first failure: event 3" in text
    code, text = run("replay", path, "--bisect", "--quiet")
    assert code == 0 and "12 MiB + 128 B" not in text and "14 MiB" in text
    code, text = run("replay", path, "--bisect", "--product", "950PR", "--quiet")
    assert "8 MiB" in text
    out = str(tmp_path / "p.html")
    code, text = run("plot", path, "--capacity", "10MiB", "-o", out, "--quiet")
    assert code == 0 and os.path.exists(out) and "a malloc failed" in text
    assert "first failure" in open(out).read()
    svg = str(tmp_path / "p.svg")
    assert run("plot", path, "-o", svg, "--what", "timeline", "--quiet")[0] == 0
    code, text = run("map", path, "--at", "end", "--cell", "2MiB", "--quiet")
    assert code == 0 and "HhHhHhn" in text
    # by default the scale comes from the span the blocks use: 12 MiB + 128 B in about 8
    # lines of 64 is 24 KiB a character, 32 KiB up to a power of two; each 4 MiB block two
    # lines, its 2 MiB of data a line of H, its padding and page rounding one of h
    code, text = run("map", path, "--at", "end", "--quiet")
    assert code == 0 and "one character = 32 KiB (scaled to the 12 MiB + 128 B" in text
    assert "+2 MiB      " + "h" * 64 in text.splitlines()
    assert run("map", path, "--cell", "96", "--quiet")[0] == 2
    code, text = run("stats", path, "--quiet")
    # the 100-byte aclrtMallocWithCfg block: ALIGN_UP(100, 32) = 128, no +32 (memory.cpp)
    assert code == 0 and "footprint_bytes all" in text and "12 MiB + 128 B" in text


def test_bad_trace_reports_line_numbers(tmp_path, capsys):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"event": "malloc", "size": 64, "ptr": 64}\n{"event": "free", "pt\n'
                    '{"event": "free", "ptr": 64}\n{"event": "free", "ptr": 64}\n')
    code, text = run("replay", str(path), "--quiet")
    assert code == 0
    assert "bad.jsonl:2: not a JSON object" in capsys.readouterr().err
    assert "bad.jsonl:4: free of 0x40, which is not live" in text
    assert run("replay", str(tmp_path / "none.jsonl"))[0] == 2


def test_no_command_prints_help_and_python_dash_m_runs_the_demo():
    code, text = run()
    assert code == 0 and "demo" in text
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(__file__)))
    done = subprocess.run([sys.executable, "-m", "ascend_memsim", "demo"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "huge-page fallback" in done.stdout


def test_demo_on_a_ddr_part_and_on_a_part_without_the_plus32_rule():
    code, text = run("demo", "--product", "310P")
    assert code == 0
    assert "get_mem_info(ACL_DDR_MEM)" in text and "total 67108864" in text
    # steps 1 to 6 ask for the part's own memory; step 7 shows HBM answered from DDR
    tour = text[:text.index("7. HBM answered from DDR")]
    assert "ACL_HBM_MEM" not in tour and "out of DDR memory" in tour
    code, text = run("demo", "--product", "950PR")
    assert code == 0
    assert "<- +32 rule" not in text and "costs 4 MiB of huge pages" not in text
    assert "the +32 does not apply here" in text
    assert "on 950PR, which has no 1 GB pages: acl.rt.malloc(1 GiB, HUGE1G_ONLY) -> ret 207000" \
        in text and "8. 1 GB huge pages on A2" in text


def test_sizes_that_overflow_or_are_negative_are_usage_errors(capsys):
    assert run("explain", "1.0e999")[0] == 2
    assert "size '1.0e999' is not a size" in capsys.readouterr().err
    assert run("demo", "--capacity=-2MiB")[0] == 2
    assert "is negative" in capsys.readouterr().err
    assert run("explain", "1e3")[0] == 0


GOOD_LINE = '{"event":"malloc","size":100,"ptr":64}\n'
BAD_TRACES = {
    "deep.jsonl": GOOD_LINE + "[" * 100000 + "]" * 100000 + "\n",
    "stream.jsonl": GOOD_LINE + '{"event":"malloc","size":100,"ptr":64,"stream":[1]}\n',
    "digits.jsonl": GOOD_LINE + '{"event":"malloc","size":' + "9" * 5000 + ',"ptr":64}\n',
    "field.csv": "Thread,Time,Action,Pointer,Size,Stream\n1,0,allocate,0x10,"
                 + "1" * 200000 + ",0\n",
}


def test_malformed_traces_give_warnings_not_tracebacks(tmp_path, capsys):
    for name, text in BAD_TRACES.items():
        path = tmp_path / name
        path.write_text(text)
        for command in (["replay"], ["replay", "--bisect"], ["stats"], ["map"],
                        ["plot", "-o", str(tmp_path / "p.svg")]):
            code, out = run(*command, str(path), "--quiet")
            assert code == 0, (name, command, out)
            assert f"warning: {path}:" in capsys.readouterr().err
        if name.endswith(".jsonl"):
            # every line bad: no trace at all, a usage error rather than "0 events, fits"
            path.write_text(text.removeprefix(GOOD_LINE))
            code, out = run("replay", str(path), "--quiet")
            assert code == 2 and "fits" not in out
    assert "Traceback" not in capsys.readouterr().err


def test_map_at_an_event_number_outside_the_trace_is_a_usage_error(tmp_path, capsys):
    path = _trace_file(tmp_path)                     # 5 events
    assert run("map", path, "--at", "4", "--quiet")[0] == 0
    for at in ("5", "99", "-3"):
        assert run("map", path, "--at", at, "--quiet")[0] == 2
        assert f"--at {at} is not an event number" in capsys.readouterr().err
    assert run("plot", path, "--at", "99", "-o", str(tmp_path / "p.svg"), "--quiet")[0] == 2


def test_bisect_beyond_the_simulated_span_says_so(tmp_path):
    path = tmp_path / "huge.jsonl"
    path.write_text(json.dumps({"event": "malloc", "size": 1 << 44, "ptr": 64}) + "\n")
    code, text = run("replay", str(path), "--bisect", "--quiet")
    assert code == 1 and "does not fit on A2 at any simulated capacity" in text


def test_run_that_fails_early_leaves_sys_modules_alone(tmp_path):
    script = _script(tmp_path, "pass\n")
    before = sys.modules.get("acl")
    assert run("run", "--product", "bogus", script)[0] == 2
    assert sys.modules.get("acl") is before


def test_run_makes_no_device_before_the_script_and_observes_later_ones(tmp_path, capsys):
    script = _script(tmp_path, """
        import acl
        from ascend_memsim import current_runtime
        assert current_runtime().devices() == [], current_runtime().devices()
        assert acl.init() == 0 and acl.rt.set_device(0) == 0
        ptr, ret = acl.rt.malloc(100, 0)
        acl.rt.reset_device(0)
        acl.finalize()
    """)
    trace_path = str(tmp_path / "t.jsonl")
    code, _ = run("run", "--trace", trace_path, script)
    assert code == 1 and "Leaked 100 bytes" in capsys.readouterr().err
    assert [e["event"] for e in load(trace_path).events][:2] == ["set_device", "malloc"]


def test_run_exits_nonzero_on_a_double_free(tmp_path, capsys):
    script = _script(tmp_path, """
        import acl
        assert acl.init() == 0 and acl.rt.set_device(0) == 0
        ptr, ret = acl.rt.malloc(100, 0)
        assert acl.rt.free(ptr) == 0
        acl.rt.free(ptr)
        acl.rt.reset_device(0)
        acl.finalize()
    """)
    code, text = run("run", script)
    err = capsys.readouterr().err
    assert code == 1 and text == "" and "[double-free]" in err and "Leaked" not in err
    assert err.rstrip().endswith("ERROR SUMMARY: 1 error, 0 warnings (double-free: 1)")
    assert run("run", "--error-exitcode", "9", script)[0] == 9
    capsys.readouterr()


DOUBLE_FREES = """
    import acl
    assert acl.init() == 0 and acl.rt.set_device(0) == 0
    for _ in range(3):
        ptr, ret = acl.rt.malloc(100, 0)
        acl.rt.free(ptr)
        print("second free:", acl.rt.free(ptr))
    kept, ret = acl.rt.malloc(64, 0)
"""


def test_run_sanitizer_mode_print_limit_and_log_file(tmp_path, capsys):
    script = _script(tmp_path, DOUBLE_FREES)
    code, text = run("run", "--sanitizer", "strict", "--print-limit", "1", script)
    err = capsys.readouterr().err
    assert code == 1
    assert text == ""                           # the script prints to the real stdout
    assert err.count("[double-free]") == 1 and "print limit of 1 reports reached" in err
    assert "ERROR SUMMARY: 4 errors, 0 warnings (double-free: 3, leak: 1)" in err
    assert "LEAK SUMMARY: 64 bytes leaked in 1 allocation" in err
    out = capsys.readouterr().out
    assert out == "" or "second free: 107000" in out
    code, _ = run("run", "--sanitizer", "off", "--no-leak-check", script)
    assert code == 0 and "SUMMARY" not in capsys.readouterr().err
    log = tmp_path / "san.log"
    assert run("run", "--log-file", str(log), script)[0] == 1
    assert "[double-free]" not in capsys.readouterr().err
    logged = log.read_text()
    assert logged.count("[double-free]") == 3 and "LEAK SUMMARY" in logged
    assert run("run", "--sanitizer", "paranoid", script)[0] == 2


def test_json_output_of_run_replay_stats_explain_profiles(tmp_path, capsys):
    script = _script(tmp_path, DOUBLE_FREES)
    code, text = run("run", "--json", script)
    result = json.loads(text[text.index("{"):])
    assert code == 1 and result["status"] == 1 and result["script_status"] == 0
    assert result["findings"] == {"double-free": 3, "leak": 1}
    assert [(b["size"], b["footprint"]) for b in result["leaks"]] == [(64, 128)]
    assert result["leaks"][0]["site"][-1].endswith("in <module>")
    path = _trace_file(tmp_path)
    code, text = run("replay", path, "--capacity", "10MiB", "--quiet", "--json")
    result = json.loads(text)
    assert code == 1 and result["failures"] == 1 and result["first_failure"]["index"] == 3
    result = json.loads(run("replay", path, "--bisect", "--quiet", "--json")[1])
    assert result["capacity"] == 14 * MiB
    result = json.loads(run("stats", path, "--quiet", "--json")[1])
    # aclrtMallocWithCfg rounds to 32 only (memory.cpp, aclrtMallocInnerWithCfg): 128 B
    assert result["devices"]["0"]["footprint_bytes.all.peak"] == 12 * MiB + 128
    assert result["replay"]["mallocs"] == 4
    result = json.loads(run("explain", "2MiB", "--json")[1])
    assert result["footprint"] == 4 * MiB and result["page"] == "huge" and result["steps"]
    assert result["alignment"] == 2 * MiB and result["fallback"][0]["text"].startswith(
        "fallback, normal pages")
    result = json.loads(run("profiles", "--json")[1])
    assert {p["name"] for p in result} >= {"950PR", "A2", "A3", "310P"}
    pages = {p["name"]: p["page_bytes"] for p in result}
    assert pages["A3"] == {"normal": 64, "huge": 2 * MiB, "huge1g": 1 << 30}
    assert pages["950PR"] == {"normal": 64, "huge": 2 * MiB}
    capsys.readouterr()


def test_version(capsys):
    import ascend_memsim

    assert run("--version")[0] == 0
    assert capsys.readouterr().out.strip() == f"ascend-memsim {ascend_memsim.__version__}"


def test_the_version_is_written_once():
    """pyproject.toml's metadata reads ascend_memsim.__version__; no second copy to drift."""
    import re

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with open(os.path.join(root, "pyproject.toml"), encoding="utf-8") as f:
        pyproject = f.read()
    project = pyproject[pyproject.index("[project]"):]
    project = project[:project.index("\n[", 1)]
    assert not re.search(r"^version\s*=", project, re.M)
    assert re.search(r'^dynamic = \[.*"version"', project, re.M)
    assert 'version = { attr = "ascend_memsim.__version__" }' in pyproject


def test_run_lets_the_scripts_acl_init_config_choose_the_simulation(tmp_path):
    config = tmp_path / "acl.json"
    config.write_text(json.dumps({"memsim": {"product": "950PR", "hbm_bytes": 64 * MiB,
                                             "sanitizer": "strict"},
                                  "defaultDevice": {"default_device": "0"}}))
    script = _script(tmp_path, f"""
        import acl
        from ascend_memsim import current_runtime
        assert acl.init({str(config)!r}) == 0
        ptr, ret = acl.rt.malloc(100, 0)     # no set_device: the config's default device
        assert ret == 0, ret
        rt = current_runtime()
        assert rt.profile.name == "950PR" and rt.block(ptr).rule_size == 128
        assert rt.sanitizer.mode == "strict" and not rt.sanitizer.leak_check
        acl.rt.free(ptr)
        acl.finalize()
    """)
    code, text = run("run", "--product", "A2", script)
    assert code == 0, text


def test_a_closed_pipe_ends_the_output_quietly(capsys):
    class ClosedPipe(io.StringIO):
        def write(self, text):
            raise BrokenPipeError(32, "Broken pipe")

    assert main(["demo"], out=ClosedPipe()) == 0
    assert "Broken pipe" not in capsys.readouterr().err


def test_help_names_the_default_product_and_imports_nothing_of_the_package():
    import subprocess
    import sys

    from ascend_memsim import cli
    from ascend_memsim.cli import common
    from ascend_memsim.memory.profiles import DEFAULT_PRODUCT

    assert cli.HELP_DEFAULT_PRODUCT == DEFAULT_PRODUCT
    assert cli.USAGE_ERROR == common.USAGE_ERROR
    code = ("import sys; from ascend_memsim.cli import main\n"
            "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in sys.modules if m.startswith('ascend_memsim')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    assert done.stdout.strip().splitlines()[-1] == "['ascend_memsim', 'ascend_memsim.cli']"


def test_plot_to_svg_draws_both_pictures_by_default(tmp_path):
    """Issue 9: `plot T -o x.svg` (--what both) silently dropped the timeline."""
    path = _trace_file(tmp_path)
    svg = tmp_path / "both.svg"
    assert run("plot", path, "-o", str(svg), "--quiet")[0] == 0
    text = svg.read_text()
    assert "event number" in text and "Memory map" in text
    assert text.count("<svg ") == 3  # the document and its two panels
    only = tmp_path / "map.svg"
    assert run("plot", path, "-o", str(only), "--what", "map", "--quiet")[0] == 0
    assert "event number" not in only.read_text()


def _subcommands():
    import argparse

    from ascend_memsim.cli import _parser

    parser = _parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return action.choices


def test_every_option_has_help_and_sizes_say_their_units_are_binary():
    # Regression: --product (demo, explain), --what, --color-by and --format had none.
    for name, sub in _subcommands().items():
        for action in sub._actions:
            assert action.help, (name, action.option_strings or action.dest)
        text = sub.format_help()
        if any(a.type is not None and getattr(a.type, "__name__", "") == "_size_arg"
               for a in sub._actions):
            assert "MB/MiB = 2**20" in text, name


def test_counts_agree_with_their_nouns(tmp_path, capsys):
    # Regression: "1 mallocs", "Leaked 1 bytes", "1 live blocks", "(1 blocks still live)".
    script = tmp_path / "one.py"
    script.write_text("import acl\nacl.init()\nacl.rt.set_device(0)\nacl.rt.malloc(1, 0)\n"
                      "acl.rt.reset_device(0)\n")
    trace = str(tmp_path / "t.jsonl")
    assert run("run", "--trace", trace, str(script))[0] == 1
    err = capsys.readouterr().err
    assert "trace of 4 events" in err and "Leaked 1 byte at" in err
    assert "LEAK SUMMARY: 1 byte leaked in 1 allocation (" in err
    assert "ERROR SUMMARY: 1 error, 0 warnings" in err
    text = run("replay", trace, "--quiet")[1]
    assert "1 malloc, 0 frees, 0 failed" in text
    assert "(1 block still live)" in run("stats", trace, "--quiet")[1]
    with Runtime("A2", hbm_bytes=4 * MiB, sanitizer="off") as rt:
        rt.set_device(0)
        rt.malloc(3 * MiB)
        try:
            rt.malloc(3 * MiB)
        except Exception as e:  # OutOfDeviceMemory
            assert "; 1 live block" in str(e) and "1 live blocks" not in str(e)
        else:
            raise AssertionError("the second malloc should not fit")


def test_no_help_or_demo_text_cites_documents_users_do_not_have():
    texts = [run("demo")[1], run("demo", "--product", "950PR")[1], _parser_help()]
    texts += [sub.format_help() for sub in _subcommands().values()]
    for text in texts:
        assert "SPEC" not in text and "seed chapter" not in text


def _parser_help():
    from ascend_memsim.cli import _parser

    return _parser().format_help()


def test_stats_and_replay_of_a_snapshot_with_nothing_to_replay_both_exit_2(tmp_path, capsys):
    # a snapshot whose trace holds nothing either replay could take (a shared-list pickle)
    import pickle

    path = tmp_path / "empty.pickle"
    path.write_bytes(pickle.dumps({"segments": [], "device_traces": [[]]}))
    for command in ("stats", "replay"):
        assert main([command, str(path)], out=io.StringIO()) == 2, command
        assert "nothing to replay" in capsys.readouterr().err
