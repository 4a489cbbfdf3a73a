"""A Hypothesis state machine over IPC keys shared by three simulated processes: exports,
imports, closes and frees in any order, against a model of the rules of hicann/runtime
docs/zh/api_ref/11-07_IPC_memory_sharing.md (every importer closes before the exporter, the
exporter frees last)."""

from collections import Counter

from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, initialize, invariant, rule

from ascend_memsim import MiB, Runtime
from ascend_memsim.memory.errors import InvalidRuntimeParam
from ascend_memsim.runtime.ipc import ipc_memory

PROCESSES = 3


class IpcMachine(RuleBasedStateMachine):
    keys = Bundle("keys")

    @initialize()
    def start(self):
        self.first = Runtime("A2", hbm_bytes=64 * MiB, sanitizer={"output": None})
        self.procs = [self.first] + [self.first.spawn_process(sanitizer={"output": None})
                                     for _ in range(PROCESSES - 1)]
        for rt in self.procs:
            rt.set_device(0)
        #: key -> exporter index, block pointer, open imports per process, closed, freed
        self.model: dict[str, dict] = {}
        #: findings expected in each exporter's sanitizer
        self.findings = Counter()

    def teardown(self):
        for rt in self.procs:
            rt.close()

    @rule(target=keys, who=st.integers(0, PROCESSES - 1), size=st.integers(1, 8192))
    def export(self, who, size):
        rt = self.procs[who]
        ptr = rt.malloc(size)
        key = ipc_memory(rt).get_export_key(ptr, size, 65, 1)
        self.model[key] = {"exporter": who, "ptr": ptr, "open": Counter(), "closed": False,
                           "freed": False}
        return key

    @rule(key=keys, who=st.integers(0, PROCESSES - 1))
    def import_key(self, key, who):
        entry = self.model[key]
        allowed = who != entry["exporter"] and not entry["closed"] and not entry["freed"]
        try:
            ipc_memory(self.procs[who]).import_by_key(key, 0)
        except InvalidRuntimeParam:
            assert not allowed
        else:
            assert allowed
            entry["open"][who] += 1

    @rule(key=keys, who=st.integers(0, PROCESSES - 1))
    def close(self, key, who):
        entry = self.model[key]
        importer = entry["open"][who] > 0
        exporter = who == entry["exporter"] and not entry["closed"]
        try:
            ipc_memory(self.procs[who]).close_key(key)
        except InvalidRuntimeParam:
            assert not (importer or exporter)
            return
        assert importer or exporter
        if importer:
            entry["open"][who] -= 1
        else:
            entry["closed"] = True
            if sum(entry["open"].values()):
                self.findings[entry["exporter"]] += 1

    @rule(key=keys)
    def free(self, key):
        entry = self.model[key]
        if entry["freed"]:
            return  # its address may hold a newer block now
        self.procs[entry["exporter"]].free(entry["ptr"])
        entry["freed"] = True
        if sum(entry["open"].values()):
            self.findings[entry["exporter"]] += 1

    @invariant()
    def the_machine_agrees_with_the_model(self):
        if not hasattr(self, "procs"):
            return
        table = self.first.machine.ipc_keys
        for key, entry in self.model.items():
            gone = entry["closed"] and not sum(entry["open"].values())
            assert (key in table) == (not gone), key
            if not gone:
                record = table[key]
                assert record.freed == entry["freed"] and record.closed == entry["closed"]
                assert {p: len(m) for p, m in record.imports.items()} == {
                    self.procs[w].pid: n for w, n in entry["open"].items() if n}

    @invariant()
    def each_process_maps_its_live_imports_and_findings_match(self):
        if not hasattr(self, "procs"):
            return
        for who, rt in enumerate(self.procs):
            mapped = sum(entry["open"][who] for entry in self.model.values()
                         if not entry["freed"])
            space = rt.vmm.space
            assert (0 if space is None else len(space.reservations)) == mapped
            if space is not None:
                space.check_invariants()
            kinds = Counter(r.kind for r in rt.sanitizer.reports)
            assert kinds["ipc-close-order"] == self.findings[who]


TestIpc = IpcMachine.TestCase
