"""What the GPU scripts of tests/bench share: CUDA-event timing, capturing
a callable in a CUDA graph after warming it up on a side stream (as
PyTorch requires and engines do), a least-squares line and the JSON
output. Imports without PyTorch, so the scripts' no-GPU modes run
anywhere."""
import json
import statistics

try:
    import torch
except ImportError:
    torch = None


def timed(fn, reps=20, trials=7, warm=3):
    """Median seconds of one call of fn, by CUDA events: `warm` rounds left
    out, then `trials` rounds of `reps` calls."""
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    out = []
    for t in range(warm + trials):
        s.record()
        for _ in range(reps):
            fn()
        e.record()
        e.synchronize()
        if t >= warm:
            out.append(s.elapsed_time(e) / 1e3 / reps)
    return statistics.median(out)


def warm_up(fn, times):
    """Runs fn `times` times on a side stream, as a capture needs first."""
    st = torch.cuda.Stream()
    st.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(st):
        for _ in range(times):
            fn()
    torch.cuda.current_stream().wait_stream(st)


def capture(fn, calls=1, pool=None):
    """fn called `calls` times, captured in one CUDA graph (in `pool` when
    given, as engines share one among their graphs)."""
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, pool=pool):
        for _ in range(calls):
            fn()
    return g


def line_fit(xs, ys):
    """Least-squares y = a + b x: (a, b)."""
    mx, my = statistics.mean(xs), statistics.mean(ys)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    return my - b * mx, b


def write_json(path, res):
    if path:
        with open(path, "w", encoding="utf-8") as f:
            json.dump(res, f, indent=1)
