"""A study meets files and servers nobody vouches for: its cache folder's entries (forged,
copied, huge numbers, FIFOs, symlinks), a cache path that is no folder, and a "Dask scheduler"
that says nothing or sends garbage. Each answer is the true one or a message with exit 2; none
hangs, none is a traceback."""

import importlib
import json
import os
import pickle
import re
import shutil
import socket
import struct
import threading
import time

import pytest
from test_fit import DIP, _recorded

from ascend_memsim import MiB
from ascend_memsim.cli import main
from ascend_memsim.memory.errors import InvalidArgument
from ascend_memsim.plan import cache as cache_module
from ascend_memsim.plan import study
from ascend_memsim.plan.cache import MAX_ENTRY_BYTES, ResultCache, checksum
from ascend_memsim.plan.study import CacheWarning

#: the module (``ascend_memsim.plan.study`` is also the function's name in the package)
study_module = importlib.import_module("ascend_memsim.plan.study")
#: dip on an A2 up to 40 MiB: expandable segments need 42 MiB, so that cell does not fit
#: (docs/guide/studies.md, "Capacities: the cards"); the default conf fits from 32 MiB
NO_FIT = ["--products", "A2", "--capacities", "40MiB", "--settings", "expandable_segments:True"]


@pytest.fixture(scope="module")
def dip(tmp_path_factory):
    path = tmp_path_factory.mktemp("snapshots") / "dip.pickle"
    path.write_bytes(pickle.dumps(_recorded(DIP)))
    return str(path)


def _entries(folder):
    return sorted(os.path.join(d, f) for d, _, fs in os.walk(folder) for f in fs)


def _count_replays(monkeypatch):
    from ascend_memsim.plan import search as search_module

    count = [0]
    replay = search_module.Source.replay

    def counted(self, *args, **kwargs):
        count[0] += 1
        return replay(self, *args, **kwargs)

    monkeypatch.setattr(search_module.Source, "replay", counted)
    return count


def _study(dip, cache, capsys, *more):
    code = main(["study", "--snapshots", dip, *NO_FIT, "--cache", str(cache), "--quiet",
                 "--jobs", "1", *more])
    out, err = capsys.readouterr()
    return code, out, err


def _row(out):
    """The one row of the table: snapshot, A2, 40, MiB, setting, the answer, the replays."""
    return out.splitlines()[1].split()


def test_a_forged_entry_does_not_turn_no_fit_into_fit(dip, tmp_path, capsys):
    code, out, _ = _study(dip, tmp_path, capsys)
    assert code == 1 and _row(out)[5:7] == ["no", "fit"]
    [entry] = _entries(tmp_path)
    # what the adversary wrote: a well-typed answer, "fits from 2 MiB", 2 MiB = one step
    forged = {"fits": True, "smallest": 2 * MiB, "smallest_exact": True,
              "all_fit_from": 2 * MiB, "lower_bound": 2 * MiB, "peak_allocated": 0,
              "peak_reserved": 0, "peak_device": 0, "retries": 0, "replays": 1,
              "seconds": 0.01, "same_as": None}
    with open(entry, "w") as f:
        json.dump(forged, f)
    code, out, err = _study(dip, tmp_path, capsys)
    # the true answer, replayed, and a warning naming the entry and why
    assert code == 1 and _row(out)[5:7] == ["no", "fit"] and _row(out)[-1] == "1"
    assert err.startswith(f"ascend-memsim study: warning: the cache entry {entry} ")
    assert "not a cache entry (an object of key, answer and checksum)" in err
    # rewritten whole by the replay: read back at once
    code, out, err = _study(dip, tmp_path, capsys)
    assert code == 1 and _row(out)[-1] == "cached" and err == ""


def _answer(entry):
    with open(entry) as f:
        return json.load(f)


def _signed(entry, **changes):
    """Rewrite ``entry`` with its answer changed and its checksum recomputed, as someone who
    knows the format would."""
    value = _answer(entry)
    answer = dict(value["answer"], **changes)
    with open(entry, "w") as f:
        json.dump({"key": value["key"], "answer": answer,
                   "checksum": checksum(value["key"], answer)}, f)


def test_an_edited_entry_fails_its_checksum(dip, tmp_path, capsys):
    _study(dip, tmp_path, capsys)
    [entry] = _entries(tmp_path)
    value = _answer(entry)
    value["answer"].update(fits=True, smallest=2 * MiB, all_fit_from=2 * MiB)
    with open(entry, "w") as f:
        json.dump(value, f)
    code, out, err = _study(dip, tmp_path, capsys)
    assert code == 1 and _row(out)[5:7] == ["no", "fit"]
    assert "its checksum does not match its contents" in err


@pytest.mark.parametrize("changes, why", [
    # fits from 2 MiB (one step) with the "no fit" figures: lower bound 0 < one step
    ({"fits": True, "smallest": 2 * MiB, "all_fit_from": 2 * MiB, "smallest_exact": True},
     "it fits from 2 MiB, the smallest 2 MiB, with a lower bound of 0 B: not in that order"),
    # a 4,000-digit peak (10**3999 has 4,000 digits) above the 40 MiB searched: once an
    # OverflowError in human_bytes
    ({"peak_reserved": 10 ** 3999}, "peak_reserved is not between 0 and the capacity "
                                    "searched, 40 MiB"),
    ({"replays": 0}, "replays is not between 1 and one per step up to the capacity (20)"),
    ({"same_as": "expandable_segments:True"}, "replays alike its own setting"),
    ({"retries": 3}, "does not fit, yet holds the figures of a fit"),
])
def test_an_answer_the_search_cannot_give_is_replayed(dip, tmp_path, capsys, changes, why):
    _study(dip, tmp_path, capsys)
    [entry] = _entries(tmp_path)
    _signed(entry, **changes)
    code, out, err = _study(dip, tmp_path, capsys)
    # 40 MiB / 2 MiB steps = 20 capacities a search may replay, at most
    assert code == 1 and _row(out)[5:7] == ["no", "fit"] and _row(out)[-1] == "1", err
    assert why in err and "Traceback" not in err


def test_a_time_that_is_no_number_is_replayed(dip, tmp_path, capsys):
    _study(dip, tmp_path, capsys)
    [entry] = _entries(tmp_path)
    value = _answer(entry)
    text = json.dumps(value).replace(f'"seconds": {value["answer"]["seconds"]!r}',
                                     '"seconds": 1e999')
    assert "1e999" in text                # JSON reads 1e999 as infinity, and NaN as NaN
    for seconds in ("1e999", "NaN"):
        with open(entry, "w") as f:
            f.write(text.replace("1e999", seconds))
        code, out, err = _study(dip, tmp_path, capsys)
        assert code == 1 and _row(out)[-1] == "1"
        assert ("a value JSON cannot" if seconds == "1e999" else "not JSON") in err


def test_a_fitting_answer_is_checked_against_its_cell(dip, tmp_path):
    grid = dict(snapshots=[dip], products="A2", capacities=["40MiB"], settings=[""])
    [row] = study(grid, cache=tmp_path).rows
    # by hand: the peak allocated is 12.5 MiB + 12 MiB, each padded by 32 B and rounded up
    # to 512 B, 24.5 MiB + 1 KiB; rounded up to 2 MiB steps, the lower bound 26 MiB; 26 to
    # 30 MiB fail and 32 MiB fits (docs/guide/studies.md)
    assert row.peak_allocated == 24 * MiB + MiB // 2 + 2 * 512
    assert (row.smallest, row.all_fit_from, row.lower_bound) == (32 * MiB, 32 * MiB, 26 * MiB)
    [entry] = _entries(tmp_path)
    for changes, why in (
            ({"all_fit_from": 33 * MiB}, "not a multiple of the step, 2 MiB"),
            ({"smallest": 34 * MiB}, "not in that order"),
            ({"peak_device": 34 * MiB}, "peaks (allocated, reserved, device) are not in order"),
            ({"peak_allocated": 28 * MiB, "peak_reserved": 28 * MiB},
             "its peak allocated, 28 MiB, is above the lower bound, 26 MiB"),
            ({"smallest": 26 * MiB, "smallest_exact": False}, "not exact")):
        good = _answer(entry)["answer"]
        _signed(entry, **changes)
        with pytest.warns(CacheWarning, match=re.escape(why)):
            again = study(grid, cache=tmp_path)
        assert again.cached == 0 and again.ignored == 1
        # replayed, and rewritten with the true answer (only the time it took differs)
        assert again.rows[0].answer() == row.answer()
        assert dict(_answer(entry)["answer"], seconds=0) == dict(good, seconds=0)


def test_an_entry_copied_under_another_cells_name_is_not_used(dip, tmp_path):
    grid = dict(snapshots=[dip], products="A2", capacities=["40MiB", "64MiB"], settings=[""])
    first = study(grid, cache=tmp_path)
    small, large = first.rows
    # up to 40 MiB every capacity from 32 MiB fits; up to 64 MiB the dip at 42 MiB shows
    assert (small.all_fit_from, large.all_fit_from) == (32 * MiB, 44 * MiB)
    entries = _entries(tmp_path)
    at = {_answer(e)["answer"]["all_fit_from"]: e for e in entries}
    shutil.copyfile(at[32 * MiB], at[44 * MiB])
    with pytest.warns(CacheWarning, match="made for another cell"):
        again = study(grid, cache=tmp_path)
    assert again.cached == 1 and [r.all_fit_from for r in again.rows] == [32 * MiB, 44 * MiB]


@pytest.mark.parametrize("plant", ["fifo", "directory", "symlink"])
def test_an_entry_that_is_no_regular_file_is_never_opened(dip, tmp_path, plant, capsys):
    if plant == "fifo" and not hasattr(os, "mkfifo"):
        pytest.skip("this platform has no FIFOs")
    cache = tmp_path / "cache"
    _study(dip, cache, capsys)
    [entry] = _entries(cache)
    os.replace(entry, tmp_path / "elsewhere.json")
    if plant == "fifo":
        os.mkfifo(entry)          # a read would wait for a writer for ever
    elif plant == "directory":
        os.mkdir(entry)
    else:
        # a true entry, but not in the folder: a symlink is not followed
        os.symlink(tmp_path / "elsewhere.json", entry)
    done = {}
    # in a thread, so that a read that blocks fails this test instead of hanging it
    worker = threading.Thread(target=lambda: done.update(r=_study(dip, cache, capsys)),
                              daemon=True)
    worker.start()
    worker.join(60)
    assert not worker.is_alive(), "the study hangs on the planted entry"
    code, out, err = done["r"]
    assert code == 1 and _row(out)[-1] == "1"
    assert "not a regular file (a directory, FIFO, device or symlink): never opened" in err


def test_an_entry_too_large_is_not_read(dip, tmp_path, capsys):
    _study(dip, tmp_path, capsys)
    [entry] = _entries(tmp_path)
    with open(entry, "ab") as f:
        f.write(b" " * MAX_ENTRY_BYTES)
    code, out, err = _study(dip, tmp_path, capsys)
    assert code == 1 and _row(out)[-1] == "1" and "larger than 64 KiB" in err


def test_many_ignored_entries_are_warned_about_then_counted(dip, tmp_path, monkeypatch):
    grid = dict(snapshots=[dip], products="A2")        # the 7 default settings
    study(grid, cache=tmp_path)
    for entry in _entries(tmp_path):
        with open(entry, "w") as f:
            f.write("{")
    monkeypatch.setattr(study_module, "MAX_WARNINGS", 2)
    with pytest.warns(CacheWarning) as told:
        again = study(grid, cache=tmp_path)
    # 7 damaged: 2 told one by one, then the other 7 - 2 = 5 counted
    assert [str(w.message).endswith(": not JSON") for w in told] == [True, True, False]
    assert str(told[2].message).startswith("5 more cache entries")
    assert again.ignored == 7 and again.cached == 0


@pytest.mark.parametrize("where", ["a file", "under a file"])
def test_a_cache_that_is_no_folder_stops_the_study_before_any_replay(dip, tmp_path, capsys,
                                                                      monkeypatch, where):
    count = _count_replays(monkeypatch)
    (tmp_path / "f").write_text("")
    cache = tmp_path / "f" if where == "a file" else tmp_path / "f" / "sub"
    code, out, err = _study(dip, cache, capsys)
    assert code == 2 and out == "" and count[0] == 0
    says = "is not a directory" if where == "a file" else "Not a directory"
    assert err.startswith("ascend-memsim study: error: ") and says in err and str(cache) in err
    with pytest.raises(InvalidArgument, match="give a folder this user can write to"):
        study(dict(snapshots=[dip]), cache=cache)
    assert count[0] == 0


def test_a_cache_folder_this_user_cannot_write_stops_the_study(dip, tmp_path, monkeypatch):
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o500)
    try:
        if os.access(folder, os.W_OK):
            # root writes anywhere: here the folder refuses a new file as it would refuse
            # any other user
            def refused(*args, **kwargs):
                raise PermissionError(13, "Permission denied")

            monkeypatch.setattr(cache_module.tempfile, "mkstemp", refused)
        count = _count_replays(monkeypatch)
        with pytest.raises(InvalidArgument, match=f"cannot write in the cache folder {folder}: "
                                                 f"Permission denied"):
            study(dict(snapshots=[dip], settings=[""]), cache=folder)
        assert count[0] == 0
    finally:
        folder.chmod(0o700)


def test_an_answer_that_cannot_be_kept_does_not_lose_the_table(dip, tmp_path, capsys,
                                                               monkeypatch):
    def full(self, key, answer):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(ResultCache, "put", full)
    code = main(["study", "--snapshots", dip, "--products", "A2", "--capacities", "40MiB",
                 "--settings", ";expandable_segments:True", "--cache", str(tmp_path),
                 "--quiet", "--jobs", "1"])
    out, err = capsys.readouterr()
    # the table, whole: the default fits from 32 MiB, expandable segments do not fit
    assert code == 1 and "2 cells: 5 replays" in out
    assert err.count("warning: cannot keep an answer in the cache: ") == 1
    assert err.count(": No space left on device; the study goes on") == 1
    assert f"warning: 2 answers in all could not be kept in the cache folder {tmp_path}" in err


# -- a scheduler that is none -----------------------------------------------------------

def _dask():
    return pytest.importorskip("distributed", reason="the dask executor's tests need Dask "
                               "distributed: pip install 'ascend-memsim[study]'")


class _Server:
    """A TCP server on the loopback that accepts every connection, sends ``reply`` (if
    any), and then says nothing until it is closed."""

    def __init__(self, reply=b""):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.reply = reply
        self.held = []
        self.address = f"tcp://127.0.0.1:{self.sock.getsockname()[1]}"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.held.append(conn)
            if self.reply:
                try:
                    conn.sendall(self.reply)
                except OSError:
                    pass

    def close(self):
        self.sock.close()
        for conn in self.held:
            conn.close()


#: the first 8 bytes of a Dask TCP message are the length of what follows (a native uint64,
#: ``distributed.comm.tcp.TCP.read``): 1 << 40 bytes is 1 TiB, which numpy fails to allocate
ONE_TIB = struct.pack("Q", 1 << 40)


def _within(seconds, fn):
    """``fn()``'s result, or its exception raised; fails the test if it takes longer than
    ``seconds`` (the old study hung)."""
    done = {}

    def run():
        try:
            done["value"] = fn()
        except BaseException as e:       # handed to the test
            done["error"] = e

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(seconds)
    assert not worker.is_alive(), f"still running after {seconds} s"
    if "error" in done:
        raise done["error"]
    return done["value"]


@pytest.mark.parametrize("reply, why", [
    (b"", "no answer as a Dask scheduler within 1 s"),
    (ONE_TIB, "what came back is no Dask scheduler's answer"),
    (b"\xff" * 64, "what came back is no Dask scheduler's answer"),
], ids=["silent", "a 1 TiB message announced", "garbage"])
def test_a_server_that_is_no_scheduler_is_refused_in_time(dip, capsys, reply, why):
    _dask()
    import dask

    server = _Server(reply)
    try:
        with dask.config.set({"distributed.comm.timeouts.connect": "1s"}):
            started = time.monotonic()
            code = _within(20, lambda: main(
                ["study", "--snapshots", dip, *NO_FIT, "--no-cache", "--quiet",
                 "--scheduler", server.address]))
            took = time.monotonic() - started
    finally:
        server.close()
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and "Traceback" not in err
    assert err.startswith(f"ascend-memsim study: error: cannot use the Dask scheduler at "
                          f"{server.address}: ")
    if reply == ONE_TIB and "no answer" in err:
        # where the machine lets numpy reserve 1 TiB (overcommit), the read waits instead
        why = "no answer as a Dask scheduler within 1 s"
    assert why in err
    # the 1 s deadline and the client's close; nothing near distributed's own 30 s
    assert took < 10


def test_an_address_distributed_cannot_connect_to(dip, capsys):
    _dask()
    for address, why in (("ucx://127.0.0.1:8786", "cannot connect over ucx://"),
                         ("tcp://127.0.0.1", "missing port number"),
                         ("mpi://127.0.0.1:8786", "unknown address scheme 'mpi'")):
        code = _within(20, lambda a=address: main(
            ["study", "--snapshots", dip, *NO_FIT, "--no-cache", "--quiet",
             "--scheduler", a]))
        out, err = capsys.readouterr()
        assert code == 2 and out == "" and "Traceback" not in err
        assert err.startswith(f"ascend-memsim study: error: the scheduler address "
                              f"'{address}': ") and why in err, err


def test_a_port_nothing_listens_on(dip, capsys):
    _dask()
    import dask

    with socket.socket() as s:        # a port that was free a moment ago
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with dask.config.set({"distributed.comm.timeouts.connect": "1s"}):
        code = _within(20, lambda: main(["study", "--snapshots", dip, *NO_FIT, "--no-cache",
                                         "--quiet", "--scheduler", f"tcp://127.0.0.1:{port}"]))
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and "Traceback" not in err
    assert f"cannot use the Dask scheduler at tcp://127.0.0.1:{port}: cannot connect" in err


def test_a_scheduler_without_workers_is_refused_in_time(dip):
    distributed = _dask()
    import dask

    from ascend_memsim.plan.executors import ClusterUnavailable

    with distributed.LocalCluster(n_workers=0, host="127.0.0.1", dashboard_address=":0",
                                  processes=False, protocol="tcp") as cluster:
        address = cluster.scheduler_address
        with dask.config.set({"distributed.comm.timeouts.connect": "1s"}):
            with pytest.raises(ClusterUnavailable, match=f"the Dask scheduler at {address} "
                                                         f"has no workers: none joined within 1 s"):
                _within(20, lambda: study(dict(snapshots=[dip], settings=[""]),
                                          scheduler=address))
