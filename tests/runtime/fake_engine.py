#!/usr/bin/env python3
"""A stand-in for an inference engine started by `rankrun PLAN -- ...`
(tests/runtime/test_runtime.py, scenarios exec-*): it records what rankrun
gave it (its arguments and the environment names of docs/runtime.md,
"Running a command") as OUT/NODE-PID.json, then does what its options say.

  fake_engine.py OUT [--sleep S] [--listen] [--child] [--trap] [ARGS...]

--listen: accept connections on $RANKPLAN_PORT (for --ready-port {port});
--child: start a grandchild (`sleep 300`) and record its pid, to show that
rankrun stops a process's whole group; --trap: on SIGTERM write
OUT/term-PID and exit 143. Remaining ARGS are recorded as given (after
rankrun expanded their templates)."""
import json
import os
import signal
import socket
import subprocess
import sys
import time

NAMES = ["RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR",
         "MASTER_PORT", "CUDA_VISIBLE_DEVICES", "EXTRA_VAR"]


def main(argv):
    out, rest = argv[0], argv[1:]
    opts = {"sleep": 0.0, "listen": False, "child": False, "trap": False}
    args = []
    while rest:
        a = rest.pop(0)
        if a == "--sleep":
            opts["sleep"] = float(rest.pop(0))
        elif a.startswith("--") and a[2:] in opts:
            opts[a[2:]] = True
        else:
            args.append(a)
    env = {k: v for k, v in os.environ.items() if k in NAMES or k.startswith("RANKPLAN_")}
    rec = {"pid": os.getpid(), "pgid": os.getpgid(0), "args": args, "env": env}
    if opts["child"]:
        rec["child"] = subprocess.Popen(["sleep", "300"]).pid
    if opts["trap"]:
        def on_term(sig, frame):
            with open(os.path.join(out, f"term-{os.getpid()}"), "w") as f:
                f.write(str(sig))
            sys.exit(143)
        signal.signal(signal.SIGTERM, on_term)
    srv = None
    if opts["listen"]:
        srv = socket.socket()
        srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        srv.bind(("0.0.0.0", int(os.environ["RANKPLAN_PORT"])))
        srv.listen(8)
    tmp = os.path.join(out, f".{env.get('RANKPLAN_NODE')}-{os.getpid()}.json")
    with open(tmp, "w") as f:
        json.dump(rec, f)
    os.rename(tmp, os.path.join(out, f"{env.get('RANKPLAN_NODE')}-{os.getpid()}.json"))
    print(f"engine up: RANK={env.get('RANK')} WORLD_SIZE={env.get('WORLD_SIZE')}", flush=True)
    time.sleep(opts["sleep"])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
