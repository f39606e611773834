"""Helpers shared by the runtime scenarios (tests/runtime/test_runtime.py):
the check counters, the binaries, plans compiled at test time, launchers
whose stderr is read as it comes, rendezvous ports from the OS with a retry
when another process takes one first, and the store's wire format.

Every scenario runs with its own temporary directory (`tmp()`), its own
ports and, from rankrun itself, its own random job id, so that scenarios
can run in parallel."""
import json
import os
import re
import shutil
import socket
import subprocess
import tempfile
import threading
import time

RR = os.environ["RANKRUN"]
RP = os.environ["RANKPLAN"]
SRC = os.environ["SRCROOT"]
RRF = os.environ.get("RANKRUN_FAKEGPU_BIN")
MAX_RANKS = 16
KV_MAX_RANKS = 32

counts = {"passed": 0, "failed": 0, "skipped": 0}
_tmp = [None]


class Abort(Exception):
    """Raised after a failed check that leaves the rest of a scenario
    nothing to run on (a plan that did not compile)."""


def check(cond, what, detail=""):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    counts["passed" if cond else "failed"] += 1
    if not cond and detail:
        print("     " + str(detail).replace("\n", "\n     ")[:4000], flush=True)


def skip(what, why):
    counts["skipped"] += 1
    print(f"skip {what}: {why}", flush=True)


def set_tmp(path):
    _tmp[0] = path


def tmp():
    """This scenario's temporary directory."""
    if _tmp[0] is None:
        _tmp[0] = tempfile.mkdtemp(prefix="rankrun-test-")
    return _tmp[0]


def run(*args, timeout=120, rr=None, **kw):
    return subprocess.run([rr or RR, *args], capture_output=True, text=True, timeout=timeout, **kw)


def write_json(obj, name):
    path = os.path.join(tmp(), name)
    with open(path, "w") as f:
        json.dump(obj, f)
    return path


def load_json(path):
    with open(path) as f:
        return json.load(f)


def free_port():
    """A port the OS has just handed out. Another process can take it before
    rankrun binds it: launch0 and start_nodes retry on another then."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def compile_plan(spec):
    """Compiles SPEC (a path under SRCROOT, or absolute) into this scenario's
    directory: (plan path, "") or (None, rankplan's stderr)."""
    spec = os.path.join(SRC, spec)
    out = os.path.join(tmp(), os.path.basename(spec).replace(".yaml", ".json"))
    if os.path.exists(out):
        return out, ""
    p = subprocess.run([RP, "compile", spec, "-o", out], capture_output=True, text=True, timeout=120)
    if p.returncode != 0:
        return None, p.stderr
    return out, ""


def need_plan(spec, what=None):
    """compile_plan, or a failed check named WHAT and the scenario stops."""
    plan, err = compile_plan(spec)
    if not plan:
        check(False, what or f"compile {spec}", err)
        raise Abort()
    return plan


SMALL = "tests/runtime/two-node-small.yaml"
AGG = "plans/examples/llama-3.1-8b-agg.yaml"
PD = "tests/runtime/pd-small.yaml"
DCP = "tests/runtime/kv-cp-to-dcp.yaml"


def examples():
    return sorted(f for f in os.listdir(os.path.join(SRC, "plans/examples")) if f.endswith(".yaml"))


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead for our purpose; its parent reaps it.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


class Launcher:
    """One `rankrun PLAN --node N` process whose stderr is read as it comes,
    so that the test can wait for "preflight ok" lines and learn rank pids.
    rr: the binary (default $RANKRUN); host: the rendezvous address."""

    def __init__(self, plan, node, port, *extra, prefix=(), rr=None, host="127.0.0.1"):
        self.port = port
        self.report = os.path.join(tmp(), f"report-{os.path.basename(plan)}-{node}-{port}.json")
        args = [*prefix, rr or RR, plan, "--node", str(node), "--rendezvous", f"{host}:{port}",
                "--report", self.report, *extra]
        self.t0 = time.monotonic()
        self.p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.err = []
        self.out = ""
        self.pids = {}
        self.procs = {}
        self.ready = set()
        self.cv = threading.Condition()
        self.th = threading.Thread(target=self._read, daemon=True)
        self.th.start()
        self.th2 = threading.Thread(target=self._read_out, daemon=True)
        self.th2.start()

    def _read(self):
        for line in self.p.stderr:
            with self.cv:
                self.err.append(line)
                w = line.split()
                if "started rank" in line:
                    self.pids[int(w[-3])] = int(w[-1])
                if "started process" in line:
                    self.procs[w[-3]] = int(w[-1])
                if "preflight ok" in line:
                    self.ready.add(int(w[2].rstrip(":")))
                self.cv.notify_all()

    def _read_out(self):
        self.out = self.p.stdout.read()

    def wait_ready(self, n, timeout=60):
        with self.cv:
            return self.cv.wait_for(lambda: len(self.ready) >= n, timeout)

    def wait(self, timeout=120):
        try:
            rc = self.p.wait(timeout)
        except subprocess.TimeoutExpired:
            self.p.kill()
            rc = self.p.wait()
        self.elapsed = time.monotonic() - self.t0
        self.th.join(5)
        self.th2.join(5)
        return rc

    def stderr(self):
        return "".join(self.err)

    def load_report(self):
        try:
            with open(self.report) as f:
                return json.load(f)
        except (OSError, ValueError):
            return None


# --- the rendezvous store's wire format (runtime/store.h) ----------------------------------
def store_frame(op, key, val=b""):
    body = bytes([op]) + len(key).to_bytes(2, "big") + key + val
    return len(body).to_bytes(4, "big") + body


def store_request(port, op, key, val=b""):
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(store_frame(op, key, val))
        hdr = s.recv(5)
        return hdr[4] if len(hdr) == 5 else None


def store_get(port, key):
    """(status, value) of a GET, or (None, b"") when nothing answers."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            s.sendall(store_frame(3, key))
            buf = b""
            while len(buf) < 4 or len(buf) < 4 + int.from_bytes(buf[:4], "big"):
                b = s.recv(65536)
                if not b:
                    break
                buf += b
            if len(buf) < 5:
                return None, b""
            return buf[4], buf[5:4 + int.from_bytes(buf[:4], "big")]
    except OSError:
        return None, b""


def _owns_port(l, timeout=60):
    """Waits until L (a node-0 launcher) serves its store on l.port: the
    store's node/0 key holds L's pid. False when L exits first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if l.p.poll() is not None:
            return False
        st, val = store_get(l.port, b"node/0")
        if st == 0 and val == str(l.p.pid).encode():
            return True
        time.sleep(0.05)
    return False


def _port_taken(l):
    return l.p.poll() is not None and "is already in use" in l.stderr()


def launch0(plan, *extra, prefix=(), rr=None, tries=5):
    """Node 0 of PLAN on a port from the OS, retried on another port when
    some other process bound that one first. Returns once the launcher
    serves the store (or has failed for another reason)."""
    for _ in range(tries):
        l = Launcher(plan, 0, free_port(), *extra, prefix=prefix, rr=rr)
        if _owns_port(l) or not _port_taken(l):
            return l
        l.wait(10)
    return l


def start_nodes(plan, nnodes, *extra, prefix=(), rr=None, node_extra=None, node_prefix=None):
    """One launcher per node; node 0 first, the others once its store is up.
    node_extra / node_prefix: functions of the node giving its own options
    and prefix instead of EXTRA and PREFIX."""
    ex = node_extra or (lambda n: extra)
    px = node_prefix or (lambda n: prefix)
    l0 = launch0(plan, *ex(0), prefix=px(0), rr=rr)
    return [l0] + [Launcher(plan, n, l0.port, *ex(n), prefix=px(n), rr=rr) for n in range(1, nnodes)]


def run_nodes(plan, nnodes, *extra, timeout=120, **kw):
    ls = start_nodes(plan, nnodes, *extra, **kw)
    return ls, [l.wait(timeout) for l in ls]


GROUPED = ("env", "RANKRUN_KV_GROUPED=1")


def run_nodes_grouped(plan, nnodes, *extra):
    return run_nodes(plan, nnodes, *extra, prefix=GROUPED)


def decode_cells(pj, requests, tokens):
    """Cells one decode replica (instance 0, attention-dp rank 0) owns for
    `requests` requests of `tokens` tokens: its ranks' layers x kv heads x
    the tokens its dcp rank keeps. Every request lands on one replica."""
    dec = [r for r in pj["ranks"] if pj["pools"][1]["name"] == r["pool"] and r["instance"] == 0
           and r["coords"]["dp"] == 0]
    dcp = pj["pools"][1]["dcp"]
    return requests * sum((r["shard"]["layers"][1] - r["shard"]["layers"][0]) *
                          (r["shard"]["kv_heads"][1] - r["shard"]["kv_heads"][0]) * (tokens // dcp)
                          for r in dec)


CTL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f\x80-\x9f]")


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return -1


def proc_start(pid):
    """Start time of pid in clock ticks since boot (/proc/PID/stat field 22)."""
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[19])


def rings_of(pid):
    return [n for n in os.listdir("/dev/shm") if re.fullmatch(rf"rankrun-[0-9a-f]{{16}}-{pid}-\d+-\d+-\d+", n)]


# --- the nccl backend on the stand-in (tests/fakegpu) -------------------------------------
# rankrun-fakegpu is rankrun built against the stand-in CUDA runtime and NCCL of
# tests/fakegpu (docs/testing.md): backend_nccl.c's own code, with "device memory" kept
# apart from host memory and communicators over shared memory. Each rank is a stand-in GPU
# of RANKRUN_FAKEGPU_MEMORY bytes (allocated lazily: only the pages written cost memory).

# 256G per device: kv-cp-to-dcp's ledger (about 116 GiB a rank) fits; pd-small's too.
def fake_env(mem="256G", **extra):
    return ("env", f"RANKRUN_FAKEGPU_MEMORY={mem}", *(f"{k}={v}" for k, v in extra.items()))


def fake_nodes(plan, nnodes, *extra, mem="256G", **env):
    """Launchers of rankrun-fakegpu --backend nccl, one per node, waited for."""
    return run_nodes(plan, nnodes, "--backend", "nccl", "--timeout", "60", *extra,
                     prefix=fake_env(mem, **env), rr=RRF)


def fake_shm():
    return {f for f in os.listdir("/dev/shm") if f.startswith("fakegpu-nccl-")} \
        if os.path.isdir("/dev/shm") else set()


class fakegpu_section:
    """Around a stand-in scenario: needs rankrun-fakegpu, and checks at the
    end that no communicator's shared memory is left. The names are random
    (from the ncclUniqueId), so another stand-in scenario running at the
    same time can have names of its own in /dev/shm at that moment; those
    live only while its ranks join (the last member unlinks the name). So
    the names that appeared during this scenario must be gone within 10 s
    of its launchers' exit, when no rank of this scenario is left to remove
    them: one that stays is a leak."""

    def __enter__(self):
        if not RRF or not os.path.exists(RRF):
            check(False, "rankrun-fakegpu is built (RANKRUN_FAKEGPU_BIN)", RRF)
            raise Abort()
        self.before = fake_shm()
        self.t0 = time.monotonic()
        return self

    def __exit__(self, et, ev, tb):
        if et is None:
            left = fake_shm() - self.before
            deadline = time.monotonic() + 10
            while left and time.monotonic() < deadline:
                time.sleep(0.1)
                left &= fake_shm()
            check(not left, "stand-in nccl: no communicator's shared memory left behind", left)
            print(f"     (stand-in section: {time.monotonic() - self.t0:.1f} s)")
        return False


def cleanup():
    if _tmp[0]:
        shutil.rmtree(_tmp[0], ignore_errors=True)
        _tmp[0] = None
