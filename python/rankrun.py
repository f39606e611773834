"""Python binding of librankrun (runtime/include/rankrun.h) by ctypes:
no compiled extension. For a worker that `rankrun PLAN --node N --per rank
-- python3 worker.py` started (docs/runtime.md, "Worker API").

    import rankrun
    with rankrun.Rankrun() as rr:
        tp = rr.comm("tp")
        buf = bytearray(8 * 4)
        tp.all_reduce(buf, 4, "int64", "sum")

The library is found as $RANKRUN_LIB (a path), else by the system's
loader (`librankrun.so.1`). Buffers are objects with the writable buffer
protocol (bytearray, memoryview, array, a NumPy array) in host memory, or,
for device memory on the nccl backend, an int address with an explicit
byte count. A failure raises rankrun.Error with the library's code and
message."""
import ctypes
import ctypes.util
import os

API_VERSION = 1
DTYPES = {"int64": (0, 8), "float32": (1, 4)}
OPS = {"sum": 0, "max": 1}
KV_NONE, KV_SEND, KV_RECV = 0, 1, 2
CODES = ["ok", "sys", "timeout", "proto", "closed", "exists", "notfound", "invalid", "inuse",
         "unsupported", "check"]


class Error(Exception):
    """A librankrun call failed: code (RANKRUN_* value), name and message."""

    def __init__(self, code, message):
        self.code = code
        self.name = CODES[code] if 0 <= code < len(CODES) else str(code)
        super().__init__(f"{self.name}: {message}")


class KvLayout(ctypes.Structure):
    """This rank's region of one request: [layer][kv head][token][cell]."""
    _fields_ = [(n, ctypes.c_int64) for n in ("layer_begin", "layer_end", "head_begin", "head_end", "tokens",
                                              "cell_bytes", "bytes")]

    def offset(self, layer, head, token):
        """Byte offset of cell (layer, kv head, token) in the region."""
        return (((layer - self.layer_begin) * (self.head_end - self.head_begin) + (head - self.head_begin))
                * self.tokens + token) * self.cell_bytes


_lib = None
_P, _S, _I, _I64, _D = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int64, ctypes.c_double
_C = ctypes.c_char_p
_SIGS = {
    "rankrun_api_version": ([], _I), "rankrun_errmsg": ([], _C), "rankrun_init": ([_P], _I),
    "rankrun_finalize": ([_P], None), "rankrun_rank": ([_P], _I), "rankrun_world_size": ([_P], _I),
    "rankrun_node": ([_P], _I), "rankrun_device": ([_P], _I), "rankrun_pool": ([_P], _C),
    "rankrun_role": ([_P], _C), "rankrun_instance": ([_P], _I), "rankrun_coord": ([_P, _C], _I),
    "rankrun_backend": ([_P], _C), "rankrun_ngroups": ([_P], _I), "rankrun_group_kind": ([_P, _I], _C),
    "rankrun_group_id": ([_P, _I], _I), "rankrun_group_size": ([_P, _I], _I),
    "rankrun_group_member": ([_P, _I, _I], _I), "rankrun_comm_at": ([_P, _I], _P),
    "rankrun_comm_of_kind": ([_P, _C], _P), "rankrun_comm_size": ([_P], _I), "rankrun_comm_index": ([_P], _I),
    "rankrun_comm_native": ([_P], _P), "rankrun_all_reduce": ([_P, _P, _P, _S, _I, _I], _I),
    "rankrun_all_gather": ([_P, _P, _P, _S], _I), "rankrun_barrier": ([_P], _I),
    "rankrun_send": ([_P, _P, _S, _I], _I), "rankrun_recv": ([_P, _P, _S, _I], _I),
    "rankrun_mem_alloc": ([_P, _S], _P), "rankrun_mem_free": ([_P, _P], None),
    "rankrun_to_host": ([_P, _P, _P, _S], _I), "rankrun_from_host": ([_P, _P, _P, _S], _I),
    "rankrun_store_set": ([_P, _C, _P, _S], _I),
    "rankrun_store_get": ([_P, _C, _P, _S, ctypes.POINTER(_S)], _I),
    "rankrun_store_wait": ([_P, _C, _D, _P, _S, ctypes.POINTER(_S)], _I),
    "rankrun_store_add": ([_P, _C, _I64, ctypes.POINTER(_I64)], _I),
    "rankrun_kv_role": ([_P, _I64, ctypes.POINTER(_I)], _I),
    "rankrun_kv_layout_of": ([_P, _I64, _I64, ctypes.POINTER(KvLayout)], _I),
    "rankrun_kv_send": ([_P, _I64, _I64, _P, _S], _I), "rankrun_kv_recv": ([_P, _I64, _I64, _P, _S], _I),
}


def lib():
    """The loaded library, its functions typed (once)."""
    global _lib
    if _lib is None:
        path = os.environ.get("RANKRUN_LIB") or ctypes.util.find_library("rankrun") or "librankrun.so.1"
        l = ctypes.CDLL(path)
        for name, (args, res) in _SIGS.items():
            f = getattr(l, name)
            f.argtypes, f.restype = args, res
        if l.rankrun_api_version() != API_VERSION:
            raise Error(7, f"{path} has API version {l.rankrun_api_version()}, this binding {API_VERSION}")
        _lib = l
    return _lib


def _check(code):
    if code != 0:
        raise Error(code, lib().rankrun_errmsg().decode(errors="replace"))


def _buf(b, nbytes=None):
    """(address, bytes) of a buffer object, or of an int address."""
    if isinstance(b, int):
        if nbytes is None:
            raise Error(7, "a buffer given as an address needs its byte count")
        return b, nbytes
    mv = memoryview(b).cast("B")
    n = mv.nbytes if nbytes is None else nbytes
    if n > mv.nbytes:
        raise Error(7, f"{n} bytes asked of a buffer of {mv.nbytes}")
    if mv.readonly:
        raise Error(7, "the buffer is read-only (give a bytearray or another writable buffer)")
    return ctypes.addressof((ctypes.c_char * max(mv.nbytes, 1)).from_buffer(mv)) if mv.nbytes else None, n


class Comm:
    """The communicator of one of the rank's groups."""

    def __init__(self, rr, ptr, kind):
        self._rr, self._p, self.kind = rr, ptr, kind

    @property
    def size(self):
        return lib().rankrun_comm_size(self._p)

    @property
    def index(self):
        return lib().rankrun_comm_index(self._p)

    @property
    def native(self):
        """The ncclComm_t (an int) on nccl; None on host."""
        return lib().rankrun_comm_native(self._p)

    def all_reduce(self, buf, count, dtype="int64", op="sum", out=None):
        """In place into buf, or into out."""
        t, size = DTYPES[dtype]
        src, _ = _buf(buf, count * size)
        dst, _ = _buf(out, count * size) if out is not None else (src, 0)
        _check(lib().rankrun_all_reduce(self._p, src, dst, count, t, OPS[op]))

    def all_gather(self, send, recv, nbytes):
        s, _ = _buf(send, nbytes)
        r, _ = _buf(recv, nbytes * self.size)
        _check(lib().rankrun_all_gather(self._p, s, r, nbytes))

    def barrier(self):
        _check(lib().rankrun_barrier(self._p))

    def send(self, buf, peer, nbytes=None):
        p, n = _buf(buf, nbytes)
        _check(lib().rankrun_send(self._p, p, n, peer))

    def recv(self, buf, peer, nbytes=None):
        p, n = _buf(buf, nbytes)
        _check(lib().rankrun_recv(self._p, p, n, peer))


class Group:
    def __init__(self, kind, gid, members, comm):
        self.kind, self.id, self.members, self.comm = kind, gid, members, comm


class Rankrun:
    """This process's place in the deployment (rankrun_init). Close it
    (or use `with`) before the process ends."""

    def __init__(self):
        p = ctypes.c_void_p()
        _check(lib().rankrun_init(ctypes.byref(p)))
        self._p = p
        l = lib()
        self.rank, self.world_size = l.rankrun_rank(p), l.rankrun_world_size(p)
        self.node, self.device, self.instance = l.rankrun_node(p), l.rankrun_device(p), l.rankrun_instance(p)
        self.pool, self.role = l.rankrun_pool(p).decode(), l.rankrun_role(p).decode()
        self.backend = l.rankrun_backend(p).decode()
        self.groups = []
        for i in range(l.rankrun_ngroups(p)):
            kind = l.rankrun_group_kind(p, i).decode()
            members = [l.rankrun_group_member(p, i, m) for m in range(l.rankrun_group_size(p, i))]
            self.groups.append(Group(kind, l.rankrun_group_id(p, i), members,
                                     Comm(self, l.rankrun_comm_at(p, i), kind)))

    def close(self):
        if self._p:
            lib().rankrun_finalize(self._p)
            self._p = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def coord(self, name):
        return lib().rankrun_coord(self._p, name.encode())

    def comm(self, kind):
        """The communicator of this rank's group of that kind, or None."""
        return next((g.comm for g in self.groups if g.kind == kind), None)

    # --- backend memory (device memory on nccl), as int addresses ---
    def mem_alloc(self, nbytes):
        p = lib().rankrun_mem_alloc(self._p, nbytes)
        if not p:
            raise Error(1, f"cannot allocate {nbytes} bytes of backend memory")
        return p

    def mem_free(self, addr):
        lib().rankrun_mem_free(self._p, addr)

    def to_host(self, buf, addr, nbytes=None):
        p, n = _buf(buf, nbytes)
        _check(lib().rankrun_to_host(self._p, p, addr, n))

    def from_host(self, addr, buf, nbytes=None):
        p, n = _buf(buf, nbytes)
        _check(lib().rankrun_from_host(self._p, addr, p, n))

    # --- the rendezvous store (keys under the library's user prefix) ---
    def store_set(self, key, value):
        v = bytes(value)
        _check(lib().rankrun_store_set(self._p, key.encode(), v, len(v)))

    def _get(self, fn, key, *extra, cap=1 << 20):
        buf = ctypes.create_string_buffer(cap)
        n = ctypes.c_size_t()
        _check(fn(self._p, key.encode(), *extra, buf, cap, ctypes.byref(n)))
        return buf.raw[:n.value]

    def store_get(self, key):
        return self._get(lib().rankrun_store_get, key)

    def store_wait(self, key, timeout_s):
        return self._get(lib().rankrun_store_wait, key, ctypes.c_double(timeout_s))

    def store_add(self, key, delta):
        out = ctypes.c_int64()
        _check(lib().rankrun_store_add(self._p, key.encode(), delta, ctypes.byref(out)))
        return out.value

    # --- KV by the plan's kv_reshard ---
    def kv_role(self, request):
        r = ctypes.c_int()
        _check(lib().rankrun_kv_role(self._p, request, ctypes.byref(r)))
        return r.value

    def kv_layout(self, request, tokens):
        lay = KvLayout()
        _check(lib().rankrun_kv_layout_of(self._p, request, tokens, ctypes.byref(lay)))
        return lay

    def kv_send(self, request, tokens, buf, nbytes=None):
        p, n = _buf(buf, nbytes)
        _check(lib().rankrun_kv_send(self._p, request, tokens, p, n))

    def kv_recv(self, request, tokens, buf, nbytes=None):
        p, n = _buf(buf, nbytes)
        _check(lib().rankrun_kv_recv(self._p, request, tokens, p, n))
