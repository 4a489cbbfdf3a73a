"""``ascend-memsim run``: the script's whole life, its exit included, on the simulator."""

import atexit
import io
import json
import sys
import textwrap

from ascend_memsim.cli import main


def run(*argv):
    out = io.StringIO()
    code = main(list(argv), out=out)
    return code, out.getvalue()


def _script(tmp_path, text, name="prog.py"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return str(path)


CLEANS_UP_AT_EXIT = """
    import atexit
    import sys
    import acl

    assert acl.init() == 0 and acl.rt.set_device(0) == 0
    first, _ = acl.rt.malloc(100, 0)
    second, _ = acl.rt.malloc(200, 0)


    class Holder:
        def __init__(self, ptr):
            self.ptr = ptr

        def __del__(self):
            print("del free", acl.rt.free(self.ptr))


    holder = Holder(second)
    import memsim_test_releaser    # a class of another module: freed when the module goes
    third, _ = acl.rt.malloc(300, 0)
    releaser = memsim_test_releaser.Releaser(third)


    @atexit.register
    def release():
        print("atexit free", acl.rt.free(first))


    atexit.register(print, "never printed")
    atexit.unregister(print)
    if sys.argv[1:] == ["exit"]:
        sys.exit(3)
"""


RELEASER = """
    import acl


    class Releaser:
        def __init__(self, ptr):
            self.ptr = ptr

        def __del__(self):
            print("releaser free", acl.rt.free(self.ptr))
"""


def test_atexit_handlers_and_module_cleanup_run_before_the_runtime_is_finalized(
        tmp_path, capsys):
    # Regression: run finalized the runtime when the script's code returned; the atexit
    # handler and the module-level object's __del__ then freed into a finalized runtime
    # (100001) and both blocks were reported as leaks, exit status 1.
    _script(tmp_path, RELEASER, name="memsim_test_releaser.py")
    script = _script(tmp_path, CLEANS_UP_AT_EXIT)
    main_module, argv, handlers = sys.modules["__main__"], list(sys.argv), atexit._ncallbacks()
    code, _ = run("run", script)
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "atexit free 0" in captured.out and "del free 0" in captured.out
    assert "releaser free 0" in captured.out
    assert "never printed" not in captured.out
    assert "Leaked" not in captured.err and "0 errors" in captured.err
    # the process's own __main__, argv and exit handlers are as they were
    assert sys.modules["__main__"] is main_module and sys.argv == argv
    assert atexit._ncallbacks() == handlers
    # sys.exit() in the script: its status, after the same clean-up
    code, _ = run("run", script, "exit")
    captured = capsys.readouterr()
    assert code == 3 and "atexit free 0" in captured.out and "del free 0" in captured.out
    assert "Leaked" not in captured.err


def test_exit_handlers_run_last_first_and_a_failing_one_does_not_stop_the_rest(
        tmp_path, capsys):
    script = _script(tmp_path, """
        import atexit
        atexit.register(print, "registered first, runs last")
        def boom():
            raise RuntimeError("handler failed")
        atexit.register(boom)
        atexit.register(print, "registered last, runs first")
    """)
    code, _ = run("run", "--sanitizer", "off", script)
    captured = capsys.readouterr()
    assert code == 0                     # as python: a failing handler leaves the status
    assert captured.out.index("runs first") < captured.out.index("runs last")
    assert "Exception ignored in atexit callback" in captured.err
    assert "RuntimeError: handler failed" in captured.err


def test_a_traceback_starts_in_the_script_and_a_syntax_error_is_status_1(tmp_path, capsys):
    script = _script(tmp_path, "def f():\n    raise KeyError('k')\nf()\n")
    assert run("run", "--sanitizer", "off", script)[0] == 1
    err = capsys.readouterr().err
    assert err.startswith("Traceback (most recent call last):\n  File \"" + script)
    assert "KeyError: 'k'" in err and "script.py" not in err
    broken = _script(tmp_path, "def (:\n", name="broken.py")
    assert run("run", "--sanitizer", "off", broken)[0] == 1
    assert "SyntaxError" in capsys.readouterr().err


SHOWS_ARGS = """
    import json, pathlib, sys
    pathlib.Path(sys.argv[0]).with_suffix(".args").write_text(json.dumps(sys.argv[1:]))
"""


def _args_seen(script):
    path = script[:-3] + ".args"
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        return None


def test_runs_own_options_after_the_script_are_refused_not_passed_on(tmp_path, capsys):
    # Regression: `run prog.py --trace t.jsonl` gave --trace to the script with a note,
    # and wrote no trace.
    script = _script(tmp_path, SHOWS_ARGS)
    trace = str(tmp_path / "t.jsonl")
    assert run("run", script, "--trace", trace)[0] == 2
    err = capsys.readouterr().err
    assert f"ascend-memsim run --trace {trace} {script}\n" in err
    assert f"ascend-memsim run {script} -- --trace {trace}" in err
    assert _args_seen(script) is None and not (tmp_path / "t.jsonl").exists()
    # the = form, and several: the fix keeps the script's own arguments in their order
    assert run("run", "--sanitizer", "off", script, "a", "--capacity=64MiB", "b",
               "--no-leak-check")[0] == 2
    err = capsys.readouterr().err
    assert "--capacity, --no-leak-check after the script" in err
    assert f"run --capacity=64MiB --no-leak-check {script} a b\n" in err
    assert _args_seen(script) is None
    # after --, everything goes to the script as it is (a second -- too)
    assert run("run", "--sanitizer", "off", script, "a", "--", "--trace", trace, "--")[0] == 0
    assert _args_seen(script) == ["a", "--trace", trace, "--"]
    # an option run does not have is the script's
    assert run("run", "--sanitizer", "off", script, "--device", "1", "--traces")[0] == 0
    assert _args_seen(script) == ["--device", "1", "--traces"]
    # no script at all
    assert run("run", "--sanitizer", "off")[0] == 2
    assert "the script to run is missing" in capsys.readouterr().err


def test_the_demos_run_hint_is_a_command_that_writes_a_trace(tmp_path, capsys):
    # Regression: the demo suggested `ascend-memsim run your_script.py --trace t.jsonl`.
    text = run("demo")[1]
    hint = next(line for line in text.splitlines() if "ascend-memsim run " in line)
    words = hint.split("(")[0].split()
    words = words[words.index("ascend-memsim") + 1:]
    script = _script(tmp_path, "import acl\nacl.init()\nacl.rt.set_device(0)\n")
    trace = tmp_path / "t.jsonl"
    argv = [script if w == "your_script.py" else str(trace) if w == "t.jsonl" else w
            for w in words]
    assert run(*argv)[0] == 0
    assert '"set_device"' in trace.read_text()


def test_error_exitcode_outside_one_byte_is_refused(tmp_path, capsys):
    # Regression: --error-exitcode 256 was taken, and the process exited 256 % 256 = 0
    # with leaks.
    script = _script(tmp_path, "import acl\nacl.init()\nacl.rt.set_device(0)\n"
                               "acl.rt.malloc(100, 0)\n")
    for bad in ("256", "-1", "1e3", "x"):
        assert run("run", "--error-exitcode", bad, script)[0] == 2, bad
        assert "argument --error-exitcode" in capsys.readouterr().err
    assert run("run", "--error-exitcode", "255", script)[0] == 255
    assert "Leaked 100 bytes" in capsys.readouterr().err


def test_error_exitcode_0_leaves_the_exit_status_to_the_script(tmp_path, capsys):
    # Regression: 0 was refused; valgrind and compute-sanitizer read --error-exitcode 0 as
    # "findings do not change the exit status".
    script = _script(tmp_path, "import sys\nimport acl\nacl.init()\nacl.rt.set_device(0)\n"
                               "acl.rt.malloc(100, 0)\nacl.rt.free(12345)\n"
                               "sys.exit(int(sys.argv[1]))\n")
    code, out = run("run", "--error-exitcode", "0", "--json", script, "0")
    assert code == 0 and json.loads(out)["status"] == 0
    err = capsys.readouterr().err
    assert "Leaked 100 bytes" in err and "[invalid-free]" in err   # still reported
    assert run("run", "--error-exitcode", "0", script, "3")[0] == 3   # the script's own


SECOND_DEVICE = """
    import json, sys
    import acl
    config = ""
    if sys.argv[1:]:
        config = sys.argv[0] + ".json"
        with open(config, "w") as f:
            json.dump({"memsim": json.loads(sys.argv[1])}, f)
    assert acl.init(config) == 0
    print("set_device(1)", acl.rt.set_device(1))
    ptr, ret = acl.rt.malloc(100, 0)
    print("free", acl.rt.free(ptr))
"""


def test_device_count_gives_the_product_more_devices_unless_the_config_says(
        tmp_path, capsys):
    script = _script(tmp_path, SECOND_DEVICE)
    assert run("run", script)[0] == 0
    assert "set_device(1) 107001" in capsys.readouterr().out     # A2: one device
    assert run("run", "--device-count", "2", script)[0] == 0
    assert "set_device(1) 0\nfree 0" in capsys.readouterr().out
    # the script's acl.init config overrides it, as it does --product and --capacity
    assert run("run", "--device-count", "2", script, '{"device_count": 1}')[0] == 0
    assert "set_device(1) 107001" in capsys.readouterr().out
    assert run("run", "--device-count", "2", script, '{"product": "A2"}')[0] == 0
    assert "set_device(1) 107001" in capsys.readouterr().out
    assert run("run", script, '{"device_count": 4}')[0] == 0
    assert "set_device(1) 0" in capsys.readouterr().out
    for bad in ("0", "65", "two"):
        assert run("run", "--device-count", bad, script)[0] == 2, bad
        assert "device" in capsys.readouterr().err


LOADS_A_MODEL = """
    import acl
    assert acl.init() == 0 and acl.rt.set_device(0) == 0
    for _ in range(2):
        model_id, ret = acl.mdl.load_from_file("resnet50.om")
        print("load", model_id, ret)
    print("query", acl.mdl.query_size("resnet50.om")[-1])
"""


def test_a_model_with_no_stand_in_shows_the_recipe_in_runs_diagnostics(
        tmp_path, capsys, monkeypatch):
    # Regression: the recipe for a stand-in was only in acl.get_recent_err_msg(), which a
    # program seldom prints; run said nothing.
    import ascend_memsim.acl.mdl as mdl

    monkeypatch.chdir(tmp_path)
    before = mdl.load_from_file, mdl.query_size
    script = _script(tmp_path, LOADS_A_MODEL)
    assert run("run", script)[0] == 0
    captured = capsys.readouterr()
    assert "load 0 100003\nload 0 100003\nquery 100003" in captured.out   # as without run
    assert captured.err.count("acl.mdl.load_from_file returned 100003: resnet50.om: no such "
                              "model file and no stand-in; write the stand-in "
                              "resnet50.om.memsim.json") == 1   # once per message
    assert '"inputs": [' in captured.err
    (tmp_path / "resnet50.om").write_bytes(b"\x00" * 16)
    log = tmp_path / "run.log"
    code, text = run("run", "--json", "--log-file", str(log), script)
    assert code == 0 and "cannot read .om models" not in capsys.readouterr().err
    assert "acl.mdl.load_from_file returned 100013: resnet50.om: the simulator cannot " \
           "read .om models; write the stand-in" in log.read_text()
    failures = json.loads(text)["model_failures"]
    assert [f["call"] for f in failures] == ["acl.mdl.load_from_file"]
    assert "resnet50.om.memsim.json" in failures[0]["message"]
    assert (mdl.load_from_file, mdl.query_size) == before     # the face as it was


LEAKS_BEYOND_DEVICE_BLOCKS = """
    import acl

    assert acl.init() == 0 and acl.rt.set_device(0) == 0
    host, _ = acl.rt.malloc_host(512)           # never freed
    dev, _ = acl.rt.malloc(64, 0)
    desc = acl.create_tensor_desc(0, [2], 2)    # never destroyed
    assert acl.rt.free(dev) == 0
    assert acl.rt.reset_device(0) == 0
    assert acl.finalize() == 0
"""


def test_run_reports_host_blocks_and_handles_left_live(tmp_path, capsys):
    # The environment switch reports both (as the sanitizer does at aclFinalize); run
    # listed only device blocks, so a program that never freed its malloc_host output
    # buffer (as the vendor's single-operator Add sample does) ended "0 leaks", exit 0.
    script = _script(tmp_path, LEAKS_BEYOND_DEVICE_BLOCKS)
    code, _ = run("run", script)
    err = capsys.readouterr().err
    assert code == 1
    assert "Leaked 512 bytes at 0x" in err and "512-byte host block at" in err
    assert "(aclrtMallocHost) was never freed [leak]" in err
    assert "tensor descriptor 0x" in err and "(aclCreateTensorDesc; destroy with" in err
    assert ("LEAK SUMMARY: 512 bytes leaked in 1 allocation (512 B of footprint); 1 handle "
            "never destroyed (1 tensor descriptor)") in err
    assert "ERROR SUMMARY: 2 errors, 0 warnings (leak: 2)" in err
    code, out = run("run", "--json", script)
    capsys.readouterr()
    result = json.loads(out)
    assert result["findings"] == {"leak": 2}
    assert [(b["api"], b["size"], b["footprint"], b["device"])
            for b in result["leaks"]] == [("aclrtMallocHost", 512, 512, None)]
    assert [(h["api"], h["kind"]) for h in result["leaked_handles"]] == [
        ("aclCreateTensorDesc", "tensor descriptor")]
    assert all(b["site"][-1].endswith("in <module>")
               for b in result["leaks"] + result["leaked_handles"])
    assert run("run", "--no-leak-check", script)[0] == 0


LEAKED_DESCRIPTORS = """
    import acl

    assert acl.init() == 0 and acl.rt.set_device(0) == 0
    pic_buf, _ = acl.media.dvpp_malloc(1056768)
    pic = acl.media.dvpp_create_pic_desc()                  # never destroyed
    acl.media.dvpp_set_pic_desc_data(pic, pic_buf)
    acl.media.dvpp_set_pic_desc_size(pic, 1056768)
    assert acl.media.dvpp_free(pic_buf) == 0                # its memory is given back
    kept, _ = acl.rt.malloc(100, 0)                         # never freed
    buffer = acl.create_data_buffer(kept, 100)              # never destroyed, describes it
    desc = acl.create_tensor_desc(0, [25], 2)               # never destroyed
"""


def test_leaked_descriptors_are_listed_apart_and_their_memory_counted_once(tmp_path, capsys):
    # Regression: a leaked picture description whose buffer was freed added its 1,056,768
    # bytes to "bytes leaked", and a data buffer describing a leaked block counted the
    # block's bytes a second time.
    script = _script(tmp_path, LEAKED_DESCRIPTORS)
    code, _ = run("run", script)
    err = capsys.readouterr().err
    assert code == 1
    assert ("LEAK SUMMARY: 100 bytes leaked in 1 allocation (192 B of footprint); 3 handles "
            "never destroyed (1 data buffer, 1 picture description, 1 tensor descriptor)") in err
    assert "Leaked picture description 0x" in err and "never destroyed [leak]" in err
    assert "1056768" not in err
    assert "ERROR SUMMARY: 4 errors, 0 warnings (leak: 4)" in err
    code, out = run("run", "--json", script)
    capsys.readouterr()
    result = json.loads(out)
    assert result["leaked_bytes"] == 100
    assert [(b["api"], b["size"]) for b in result["leaks"]] == [("aclrtMalloc", 100)]
    assert sorted(h["kind"] for h in result["leaked_handles"]) == [
        "data buffer", "picture description", "tensor descriptor"]


def test_run_keeps_its_leak_check_when_the_script_configures_the_sanitizer(tmp_path, capsys):
    # acl.init's config may replace the sanitizer before any device exists; run's leak
    # check must follow it to the new one
    config = tmp_path / "acl.json"
    config.write_text(json.dumps({"memsim": {"sanitizer": {"mode": "strict"}}}))
    script = _script(tmp_path, f"""
        import acl
        assert acl.init({str(config)!r}) == 0 and acl.rt.set_device(0) == 0
        host, _ = acl.rt.malloc_host(100)
    """)
    code, _ = run("run", script)
    err = capsys.readouterr().err
    assert code == 1 and "100-byte host block at" in err and "(leak: 1)" in err


def test_a_sys_exit_in_an_atexit_handler_is_printed_and_leaves_the_status(tmp_path, capsys):
    # as the interpreter (Python 3.11 to 3.13): "Exception ignored in atexit callback",
    # the script's own status kept
    path = tmp_path / "handler_exits.py"
    path.write_text("import atexit, sys\natexit.register(sys.exit, 5)\nsys.exit(3)\n")
    assert main(["run", str(path)], out=io.StringIO()) == 3
    err = capsys.readouterr().err
    assert "Exception ignored in atexit callback" in err and "SystemExit: 5" in err
