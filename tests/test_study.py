"""Studies: a grid of snapshots x products x capacities x settings answered in one table, by
every executor alike, its answers cached by content so that an interrupted study resumes."""

import io
import json
import os
import pickle

import pytest
from test_fit import DIP, _fragmenting, _recorded

from ascend_memsim import MiB
from ascend_memsim.cli import main
from ascend_memsim.cli.study import progress_printer
from ascend_memsim.memory.errors import AllocatorConfigError, InvalidArgument, InvalidArgumentType
from ascend_memsim.plan import Grid, cells, fit_capacity, read_grid, study
from ascend_memsim.plan import cache as cache_module
from ascend_memsim.plan import search as search_module
from ascend_memsim.plan.cache import cell_key
from ascend_memsim.plan.study import CacheWarning

GRID = {"products": "A2,950PR", "capacities": [64 * 1024 * MiB]}


@pytest.fixture(scope="module")
def snapshots(tmp_path_factory):
    """Two small recorded jobs as snapshot files: one whose fit is not monotone, one that
    fragments."""
    folder = tmp_path_factory.mktemp("snapshots")
    paths = []
    for name, snap in (("dip", _recorded(DIP)), ("frag", _recorded(_fragmenting()))):
        path = folder / f"{name}.pickle"
        path.write_bytes(pickle.dumps(snap))
        paths.append(str(path))
    return paths


def _answers(result):
    return [(r.snapshot, r.product, r.capacity, r.setting, r.answer()) for r in result.rows]


def test_each_cell_is_fit_capacitys_answer(snapshots):
    result = study(dict(GRID, snapshots=snapshots))
    # 2 snapshots x (7 default settings on A2 + 6 on 950PR, which has no 1 GiB pages)
    assert len(result.rows) == 26 and result.cached == 0
    assert [r.setting for r in result.rows[:7]] == [
        "", "expandable_segments:True", "max_split_size_mb:32", "max_split_size_mb:128",
        "max_split_size_mb:512", "roundup_power2_divisions:4", "page_size:1g"]
    for r in result.rows:
        f = fit_capacity(r.snapshot, r.product, alloc_conf=r.setting, top=r.capacity)
        assert (r.fits, r.smallest, r.smallest_exact, r.all_fit_from, r.lower_bound,
                r.peak_allocated, r.peak_reserved, r.peak_device, r.retries) == (
            f.fits, f.smallest, f.smallest_exact, f.all_fit_from, f.lower_bound,
            f.peak_allocated, f.peak_reserved, f.peak_device, f.retries), r
        # a setting that replays alike the default is answered by its search, no replay
        assert (r.replays == 0) == (r.same_as is not None)
        assert r.replays == f.replays or r.same_as is not None
    dip = {r.setting: r for r in result.rows if r.snapshot.endswith("dip.pickle")
           and r.product == "A2"}
    assert (dip[""].smallest, dip[""].all_fit_from) == (32 * MiB, 44 * MiB)
    assert dip["max_split_size_mb:32"].same_as == ""
    assert result.replays == sum(r.replays for r in result.rows)
    assert result.fits
    # the compiled snapshots are not kept in this process past the study
    assert not cells._SOURCES


def test_processes_give_the_same_answers(snapshots):
    one = study(dict(GRID, snapshots=snapshots))
    two = study(dict(GRID, snapshots=snapshots), jobs=2)
    assert two.executor == "2 local processes" and one.executor == "this process"
    assert _answers(two) == _answers(one)


def _distributed():
    return pytest.importorskip("distributed", reason="the dask executor's tests need Dask "
                               "distributed: pip install 'ascend-memsim[study]'")


@pytest.fixture(scope="module")
def cluster():
    """A Dask cluster of two worker processes on the loopback, as a user's would run."""
    distributed = _distributed()
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  host="127.0.0.1", dashboard_address=":0") as c:
        yield c


def test_a_dask_cluster_gives_the_same_answers(snapshots, cluster):
    one = study(dict(GRID, snapshots=snapshots))
    there = study(dict(GRID, snapshots=snapshots), scheduler=cluster.scheduler_address)
    assert there.executor == f"Dask ({cluster.scheduler_address}, 2 workers)"
    assert _answers(there) == _answers(one)


def test_a_local_dask_cluster_of_its_own(snapshots):
    _distributed()
    grid = dict(snapshots=snapshots[:1], products="A2", settings=["", "max_split_size_mb:32"])
    mine = study(grid, executor="dask", jobs=2)
    assert mine.executor == "Dask (a local cluster, 2 workers)"
    assert _answers(mine) == _answers(study(grid))


def test_the_command_on_a_cluster(snapshots, cluster, capsys, tmp_path):
    code = main(["study", "--snapshots", *snapshots, "--products", "A2", "--settings",
                 ";expandable_segments:True", "--scheduler", cluster.scheduler_address,
                 "--cache", str(tmp_path), "--json", "--quiet"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["cells"] == 4 and out["executor"].startswith("Dask (tcp://")
    local = study(dict(snapshots=snapshots, products="A2",
                       settings=["", "expandable_segments:True"]))
    assert [r["all_fit_from"] for r in out["rows"]] == [r.all_fit_from for r in local.rows]


class Stop(Exception):
    pass


def _counting(monkeypatch):
    """The replays this process runs, counted."""
    count = [0]
    replay = search_module.Source.replay

    def counted(self, *args, **kwargs):
        count[0] += 1
        return replay(self, *args, **kwargs)

    monkeypatch.setattr(search_module.Source, "replay", counted)
    return count


@pytest.mark.parametrize("where", ["inline", "processes", "dask"])
def test_an_interrupted_study_resumes_from_the_cache(snapshots, tmp_path, monkeypatch, where,
                                                     request):
    grid = dict(GRID, snapshots=snapshots)
    fresh = study(grid)

    def interrupt(done, total, what):
        if what != "cache":
            raise KeyboardInterrupt   # as Ctrl-C after the first task's answers arrive

    run = {"executor": where, "jobs": 2}
    if where == "dask":
        run["scheduler"] = request.getfixturevalue("cluster").scheduler_address
    with pytest.raises(KeyboardInterrupt):
        study(grid, cache=tmp_path, progress=interrupt, **run)
    count = _counting(monkeypatch)
    told = []
    resumed = study(grid, cache=tmp_path, progress=lambda *a: told.append(a))
    kept = [r for r in resumed.rows if r.cached]
    # the first task's cells (one snapshot on one product: 6 or 7 settings) were kept
    assert len(kept) in (6, 7) and resumed.cached == len(kept) and told[0] == (
        len(kept), 26, "cache")
    assert _answers(resumed) == _answers(fresh)
    # only the rest was replayed: every replay the fresh study ran but the kept cells'
    assert count[0] == resumed.replays == fresh.replays - sum(r.replays for r in kept)
    # and once all is kept, nothing is replayed, and no worker is started nor cluster
    # reached (nothing listens at this address)
    again = study(grid, cache=tmp_path, scheduler="tcp://127.0.0.1:9")
    assert again.cached == 26 and again.replays == 0 and count[0] == resumed.replays
    last = str(again).splitlines()[-1]
    assert again.executor == "" and last.startswith("26 cells (26 from the cache): 0 replays")
    assert last.endswith(" s")
    assert _answers(again) == _answers(fresh)


def test_the_cache_key_names_everything_that_decides_an_answer(monkeypatch):
    args = ["ab" * 32, "A2", 64 * MiB, "", "9.1.0", 2 * MiB, 16]
    key = cell_key(*args)
    for i, other in enumerate(["cd" * 32, "A3", 66 * MiB, "expandable_segments:True",
                               "8.1.RC1", 4 * MiB, 8]):
        assert cell_key(*args[:i], other, *args[i + 1:]) != key
    monkeypatch.setattr(cache_module, "__version__", "0.0.0-other")
    assert cell_key(*args) != key


def test_a_damaged_cache_entry_is_replayed_not_trusted(snapshots, tmp_path):
    grid = dict(snapshots=snapshots[:1], products="A2", settings=[""])
    first = study(grid, cache=tmp_path)
    [entry] = [os.path.join(d, f) for d, _, fs in os.walk(tmp_path) for f in fs]
    good = json.loads(open(entry).read())
    assert set(good) == {"key", "answer", "checksum"} and entry.endswith(good["key"] + ".json")
    key, answer = good["key"], good["answer"]

    def signed(**changes):
        """An entry whose checksum matches its changed answer."""
        changed = dict(answer, **changes)
        return json.dumps({"key": key, "answer": changed,
                           "checksum": cache_module.checksum(key, changed)})

    for bad, why in (
            ("{not json", "not JSON"),
            (signed(fits=1), "fits has the type int, not bool"),
            (signed(smallest=True), "smallest has the type bool, not int or NoneType"),
            (signed(extra=1), "does not have the fields of one"),
            (json.dumps([good]), "not a cache entry"),
            (json.dumps(dict(good, answer=dict(answer, retries=answer["retries"] + 1))),
             "checksum does not match"),
            (" " * (cache_module.MAX_ENTRY_BYTES + 1) + json.dumps(good), "larger than 64 KiB")):
        with open(entry, "w") as f:
            f.write(bad)
        with pytest.warns(CacheWarning, match=why):
            again = study(grid, cache=tmp_path)
        assert again.cached == 0 and again.ignored == 1 and _answers(again) == _answers(first)
    assert study(grid, cache=tmp_path).cached == 1     # rewritten whole by the last run


def test_a_file_that_is_no_snapshot_gets_error_rows_the_rest_is_answered(snapshots, tmp_path,
                                                                       capsys):
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"event": "malloc"}\n')
    hostile = tmp_path / "h.pickle"
    hostile.write_bytes(pickle.dumps(os.system))
    code = main(["study", "--snapshots", str(trace), str(hostile), snapshots[0], "--settings",
                 "", "--no-cache", "--quiet", "--jobs", "2"])
    out = capsys.readouterr().out
    assert code == 1
    assert f"error: {trace}: not a memory snapshot" in out
    assert f"error: {hostile}: cannot read the pickle: the pickle refers to posix.system" in out
    [row] = [line for line in out.splitlines() if line.startswith(str(hostile))]
    assert row.split()[5] == "error"      # refused unread: it names a function
    [row] = [line for line in out.splitlines() if line.startswith(snapshots[0])]
    assert row.split()[1:3] == ["A2", "60.96"] and "44 MiB" in row


def test_a_json_grid_file(snapshots, tmp_path):
    (tmp_path / "g.json").write_text(json.dumps(
        {"snapshots": [os.path.relpath(snapshots[0], tmp_path)], "products": ["A2", "A3"],
         "capacities": ["60GiB", 64 * 1024 * MiB], "settings": ["", "max_split_size_mb:128"],
         "step": 2 * MiB, "window": 8}))
    grid = read_grid(str(tmp_path / "g.json"))
    assert os.path.samefile(grid.snapshots[0], snapshots[0])
    result = study(grid)
    assert len(result.rows) == 2 * 2 * 2
    assert {r.capacity for r in result.rows} == {60 * 1024 * MiB, 64 * 1024 * MiB}


def test_a_toml_grid_file(snapshots, tmp_path):
    pytest.importorskip("tomllib", reason="TOML grids need Python 3.11's tomllib")
    folder = os.path.dirname(snapshots[0])
    toml = tmp_path / "g.toml"
    toml.write_text(f'snapshots = ["{os.path.join(folder, "dip.pickle")}"]\n'
                    f'products = "A2"\nsettings = "default"\n')
    assert len(study(read_grid(str(toml))).rows) == 7


@pytest.mark.parametrize("grid, error, words", [
    ({"snapshots": ["x"], "nodes": 3}, InvalidArgument, "unknown key 'nodes'"),
    ({"products": "A2"}, InvalidArgument, "names no snapshots"),
    ([1, 2], InvalidArgumentType, "grid must be a Grid or a dict"),
    ({"snapshots": ["S"], "products": "Z9"}, InvalidArgument, "Z9"),
    ({"snapshots": ["S"], "products": [3]}, InvalidArgumentType, "must be a string"),
    ({"snapshots": ["S"], "capacities": [True]}, InvalidArgumentType, "capacity"),
    ({"snapshots": ["S"], "capacities": ["1KiB"]}, InvalidArgument, "at least one step"),
    ({"snapshots": ["S"], "capacities": ["9TiB"]}, InvalidArgument, "from 1 to 8796093022208"),
    ({"snapshots": ["S"], "settings": ["max_split_size_mb:1"]}, AllocatorConfigError,
     "'max_split_size_mb:1'"),
    ({"snapshots": ["S"], "settings": [1]}, InvalidArgumentType, "a setting must be"),
    ({"snapshots": ["S"], "step": 100}, InvalidArgument, "multiple of 64"),
    # issue 36, item 29: every cell said "a device needs some memory" on a "0 B" card
    ({"snapshots": ["S"], "step": 1 << 40}, InvalidArgument,
     r"step 1 TiB is larger than A2's own card \(60.96 GiB\)"),
    ({"snapshots": ["S"], "window": -1}, InvalidArgument, "window"),
    ({"snapshots": ["S"], "cann": "x"}, InvalidArgument, "CANN"),
    ({"snapshots": [3]}, InvalidArgumentType, "a path or a snapshot dict"),
    ({"snapshots": [{"x": 1}]}, InvalidArgument, "no memory snapshot"),
    ({"snapshots": ["/nonexistent/s.pickle"]}, InvalidArgument, "s.pickle"),
    ({"snapshots": ["S"] * 5000, "settings": ";" * 30}, InvalidArgument, "at most 100,000"),
])
def test_bad_grids_are_refused_before_any_replay(snapshots, grid, error, words, monkeypatch):
    count = _counting(monkeypatch)
    if isinstance(grid, dict) and isinstance(grid.get("snapshots"), list):
        grid = dict(grid, snapshots=[snapshots[0] if s == "S" else s for s in grid["snapshots"]])
    if grid == {"snapshots": [snapshots[0]] * 5000, "settings": ";" * 30}:
        grid["settings"] = [f"max_split_size_mb:{21 + i}" for i in range(30)]
    with pytest.raises(error, match=words):
        study(grid)
    assert count[0] == 0


def test_bad_grid_files(tmp_path):
    big = tmp_path / "big.json"
    big.write_text(" " * (1024 * 1024 + 1))
    deep = tmp_path / "deep.toml"
    deep.write_text("a = " + "[" * 100_000)
    for path, words in ((big, "at most 1 MiB"), (tmp_path / "none.json", "none.json"),
                        (deep, "not a grid"), (tmp_path, "is a directory")):
        with pytest.raises(InvalidArgument, match=words):
            read_grid(str(path))


def test_bad_executors(snapshots):
    grid = dict(snapshots=snapshots[:1])
    for kwargs, words in (({"executor": "mpi"}, "executor must be"),
                          ({"scheduler": "tcp://x:1", "executor": "processes"}, "dask executor"),
                          ({"jobs": 0}, "jobs"), ({"jobs": 1.5}, "jobs")):
        with pytest.raises((InvalidArgument, InvalidArgumentType), match=words):
            study(grid, **kwargs)


def test_the_command_writes_csv_and_keeps_answers_in_the_users_cache(snapshots, tmp_path,
                                                                    monkeypatch, capsys):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    args = ["study", "--snapshots", snapshots[0], "--products", "A2,A3", "--settings",
            "expandable_segments:True", "--jobs", "1"]
    assert main([*args, "--csv"]) == 0
    captured = capsys.readouterr()
    lines = captured.out.splitlines()
    assert lines[0].startswith("snapshot,sha256,product,capacity,setting,fits,smallest,")
    assert len(lines) == 3 and ",A3," in lines[2]
    # not a terminal: one plain line per task
    assert captured.err.splitlines() == [
        f"study: 1/2 cells: {snapshots[0]} on A2 up to 60.96 GiB",
        f"study: 2/2 cells: {snapshots[0]} on A3 up to 64 GiB"]
    assert os.path.isdir(tmp_path / "ascend-memsim" / "study")
    assert main(args) == 0
    captured = capsys.readouterr()
    assert captured.err == "study: 2 of 2 cells from the cache\n"
    assert "cached" in captured.out and "2 cells (2 from the cache): 0 replays" in captured.out


def test_a_progress_bar_on_a_terminal():
    class Terminal(io.StringIO):
        def isatty(self):
            return True

    screen = Terminal()
    show = progress_printer(screen)
    show(0, 4, "cache")
    show(2, 4, "a.pickle on A2")
    show(4, 4, "a.pickle on A3")
    assert screen.getvalue() == (
        "\rstudy [..............................] 0/4 cells 0:00"
        "\rstudy [###############...............] 2/4 cells 0:00"
        "\rstudy [##############################] 4/4 cells 0:00\n")


def test_the_command_says_how_to_resume_when_interrupted(snapshots, tmp_path, monkeypatch,
                                                          capsys):
    from ascend_memsim.cli import study as cli_study

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli_study, "study", interrupted)
    assert main(["study", "--snapshots", snapshots[0], "--cache", str(tmp_path)]) == 130
    assert f"kept in {tmp_path}: run the same command again" in capsys.readouterr().err
    assert main(["study"]) == 2
    assert "no snapshots" in capsys.readouterr().err


def test_a_grid_object(snapshots):
    grid = Grid(snapshots=[snapshots[0]], products=["A2"], settings=[""], window=4)
    [row] = study(grid).rows
    assert row.all_fit_from == fit_capacity(snapshots[0], "A2", window=4).all_fit_from
