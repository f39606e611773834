#!/usr/bin/env python3
"""deployment.order as Megatron-Core's RankGenerator takes it: a string that
leaves out size-1 dimensions (`tp-pp-dp`) is accepted and gives the groups
RankGenerator gives; one that leaves out a dimension of size > 1 is refused
(E0301), as RankGenerator raises.

The reference below follows the rules of RankGenerator in Megatron-Core's
megatron/core/parallel_state.py (NVIDIA/Megatron-LM, read at commit
00caa53): names missing from the order string are appended in the order
tp, pp, dp, ep, cp when their size is 1 (an error otherwise); a rank is
sum(index[d] * stride[d]) with strides the prefix products of the ordered
sizes, innermost first; the groups of a token such as `tp-dp` hold the
ranks that agree on every dimension outside the token, each group listed
by the token's dimensions innermost first, the groups by the other
dimensions innermost first. It is written from those rules, not from the
compiler's code: it works rank by rank from coordinates, where the
compiler enumerates group by group. Megatron-Core builds the dense groups
from RankGenerator(tp, ep=1, dp, pp, cp) and the expert groups from
RankGenerator(tp=etp, ep, dp=edp, pp, cp=1) over the same order."""
import json
import os
import pathlib
import subprocess
import sys
import tempfile
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import rptest  # noqa: E402
from rptest import check  # noqa: E402

RP = os.environ.get("RANKPLAN", "build/rankplan")
SRC = pathlib.Path(os.environ.get("SRCROOT", "."))
EX = SRC / "plans" / "examples"
ENV = dict(os.environ, NO_COLOR="1", RANKPLAN_CATALOG=str(SRC / "plans" / "catalog"))

MEGATRON_NAMES = ["tp", "pp", "dp", "ep", "cp"]   # RankGenerator's name_to_size order
DENSE = {"tp": "tp", "cp": "cp", "dp": "dp", "pp": "pp", "tp-cp": "tp-cp", "dp-cp": "dp-cp",
         "tp-pp": "tp-pp", "tp-dp-cp": "tp-dp-cp"}          # plan kind -> token
EXPERT = {"ep": "ep", "etp": "tp", "edp": "dp", "tp-ep": "tp-ep"}



def complete(order, sizes):
    """The order RankGenerator uses, or None when it raises."""
    names = order.split("-")
    for n in MEGATRON_NAMES:
        if n not in names:
            if sizes[n] != 1:
                return None
            names.append(n)
    return names


def reference_groups(order, sizes, token):
    names = complete(order, sizes)
    shape = [sizes[n] for n in names]
    stride, acc = [], 1
    for s in shape:
        stride.append(acc)
        acc *= s
    world = acc
    inside = [i for i, n in enumerate(names) if n in token.split("-")]
    outside = [i for i in range(len(names)) if i not in inside]
    groups = {}
    for r in range(world):
        coord = [(r // stride[i]) % shape[i] for i in range(len(names))]
        key, pos, mul = 0, 0, 1
        for i in outside:
            key += coord[i] * mul
            mul *= shape[i]
        mul = 1
        for i in inside:
            pos += coord[i] * mul
            mul *= shape[i]
        groups.setdefault(key, {})[pos] = r
    return [[g[p] for p in sorted(g)] for _, g in sorted(groups.items())]


def plan_groups(plan):
    """kind -> list of instance-relative groups of instance 0 of pool 0."""
    pool = plan["pools"][0]
    first = pool["ranks"][0]
    out = {}
    for g in plan["groups"]:
        if g.get("pool") == pool["name"] and g.get("instance") == 0 and "ranks" in g:
            out.setdefault(g["kind"], []).append([r - first for r in g["ranks"]])
    return out, pool


def spec_with(base, order, pool):
    text = (EX / base).read_text()
    head = text[: text.index("  pools:")]
    head = head.replace("deployment:\n", f"deployment:\n  order: {order}\n", 1)
    lines = "".join(f"      {k}: {v}\n" for k, v in pool.items())
    return head + "  pools:\n    - name: main\n" + lines


def compile_spec(text, tmp, name):
    spec = pathlib.Path(tmp) / f"{name}.yaml"
    spec.write_text(text)
    out = pathlib.Path(tmp) / f"{name}.json"
    p = subprocess.run([RP, "compile", str(spec), "-o", str(out)], env=ENV, capture_output=True, text=True,
                       timeout=120)
    return p, (json.loads(out.read_text()) if p.returncode == 0 else None)


CASES = [
    # (example spec for model and cluster, order, pool)
    ("llama-3.1-8b-agg.yaml", "tp-pp-dp", {"role": "both", "tp": 2, "pp": 2, "dp": 2}),
    ("llama-3.1-8b-agg.yaml", "tp-dp-pp", {"role": "both", "tp": 2, "pp": 2, "dp": 2}),
    ("llama-3.1-8b-agg.yaml", "pp-tp-dp", {"role": "both", "tp": 2, "pp": 2, "dp": 2}),
    ("llama-3.1-8b-agg.yaml", "tp-cp-dp-pp", {"role": "both", "tp": 2, "cp": 2, "pp": 2}),
    ("llama-3.1-8b-agg.yaml", "tp", {"role": "both", "tp": 8}),
    ("qwen3-235b-ep.yaml", "tp-ep-dp-pp", {"role": "both", "tp": 4, "dp": 2, "ep": 8}),
    ("qwen3-235b-ep.yaml", "tp-dp-ep", {"role": "both", "tp": 4, "dp": 2, "ep": 4}),
    ("qwen3-235b-ep.yaml", "tp-ep-dp", {"role": "both", "tp": 4, "dp": 2, "ep": 2, "etp": 2}),
]
REFUSED = [
    ("llama-3.1-8b-agg.yaml", "tp-pp", {"role": "both", "tp": 2, "pp": 2, "dp": 2}, "dp"),
    ("llama-3.1-8b-agg.yaml", "tp-dp-pp", {"role": "both", "tp": 2, "cp": 2, "pp": 2}, "cp"),
    # The expert generator of a dense model: etp = tp 2, so edp = tp*cp/etp
    # = 2 needs `dp` in the order even where the dense dp is 1 (Megatron-Core
    # builds the expert generator for every model).
    ("llama-3.1-8b-agg.yaml", "tp-cp-pp", {"role": "both", "tp": 2, "cp": 2, "pp": 2}, "dp"),
    ("qwen3-235b-ep.yaml", "tp-dp-pp", {"role": "both", "tp": 4, "dp": 2, "ep": 8}, "ep"),
]


def generator_sizes(pool, moe):
    """The dense and expert RankGenerator sizes of a pool (etp defaults to
    tp for a dense model, as in Megatron-Core, and to 1 for a MoE model:
    docs/architecture.md, docs/spec.md)."""
    tp, cp, dp, pp = (pool.get(k, 1) for k in ("tp", "cp", "dp", "pp"))
    ep = pool.get("ep", 1)
    etp = pool.get("etp", 1 if moe else tp)
    dense = {"tp": tp, "cp": cp, "dp": dp, "pp": pp, "ep": 1}
    expert = {"tp": etp, "cp": 1, "dp": tp * cp * dp // (etp * ep), "pp": pp, "ep": ep}
    return dense, expert


def main():
    with tempfile.TemporaryDirectory() as tmp:
        for i, (base, order, pool) in enumerate(CASES):
            p, plan = compile_spec(spec_with(base, order, pool), tmp, f"case{i}")
            check(p.returncode == 0, f"`{order}` on {pool} compiles", p.stderr[-1500:])
            if plan is None:
                continue
            got, lp = plan_groups(plan)
            dense = {"tp": lp["tp"], "cp": lp["cp"], "dp": lp["dp"], "pp": lp["pp"], "ep": 1}
            expert = {"tp": lp["etp"], "cp": 1, "dp": lp["edp"], "pp": lp["pp"], "ep": lp["ep"]}
            bad = []
            for kinds, sizes in ((DENSE, dense), (EXPERT, expert)):
                for kind, token in kinds.items():
                    want = reference_groups(order, sizes, token)
                    if got.get(kind) != want:
                        bad.append(f"{kind}: plan {got.get(kind)} reference {want}")
            check(not bad, f"`{order}` on {pool}: every group as RankGenerator gives it", "\n".join(bad)[:2000])
            # The order completed as RankGenerator completes it compiles to
            # the same groups.
            full = "-".join(complete(order, dense))
            q, plan_full = compile_spec(spec_with(base, full, pool), tmp, f"case{i}-full")
            check(plan_full is not None and plan_full["groups"] == plan["groups"]
                  and plan_full["ranks"] == plan["ranks"],
                  f"`{order}` and `{full}` give the same ranks and groups", q.stderr[-800:])
        for i, (base, order, pool, dim) in enumerate(REFUSED):
            dense, expert = generator_sizes(pool, "qwen3" in base)
            raises = complete(order, dense) is None or complete(order, expert) is None
            p, plan = compile_spec(spec_with(base, order, pool), tmp, f"refused{i}")
            check(raises and p.returncode == 1 and "error[E0301]" in p.stderr
                  and f"the order leaves out {dim}, whose size is not 1" in p.stderr,
                  f"`{order}` on {pool}: refused (E0301, {dim}), as RankGenerator raises", p.stderr[-800:])
            c = subprocess.run([RP, "check", str(pathlib.Path(tmp) / f"refused{i}.yaml")], env=ENV,
                               capture_output=True, text=True, timeout=120)
            check(c.returncode == 1 and "error[E0301]" in c.stderr, f"`{order}`: check refuses it too")
    return rptest.finish()


if __name__ == "__main__":
    sys.exit(main())
