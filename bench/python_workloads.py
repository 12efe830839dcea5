"""W1-W7 of ../shared/peers, written against manta's Python front and run
beside multiprocessing, joblib and Dask in the same process, the systems
alternating in every round; prints the median of each row and the ratios
the Python front's issue sets as targets.

    PYTHONPATH=build/python /usr/bin/python3 bench/python_workloads.py [W1 W2 ...] [--runs 5] [--no-dask]
"""
import argparse
import gc
import logging
import multiprocessing
import os
import statistics
import threading
import time

import numpy as np

import manta

perf = time.perf_counter


# ---- task bodies (the peers')
def noop(x):
    return x


def ma_row(row, w=10):
    return [row[j - w:j + 1].mean() if j > w else row[:j + 1].mean() for j in range(len(row))]


def ma_row_arr(row, w=10):
    return np.array(ma_row(row, w))


def asum(a):
    return float(a.sum())


def make_leaf(i):
    return np.random.default_rng(i).random(1000)


def add(a, b):
    return a + b


class Counter:
    def __init__(self):
        self.n = 0

    def incr(self):
        self.n += 1
        return self.n


m_noop = manta.remote(noop)
m_asum = manta.remote(asum)
m_leaf = manta.remote(make_leaf)
m_add = manta.remote(add)
MCounter = manta.remote(Counter)


@manta.remote
def m_ma_row(matrix, i):
    return ma_row_arr(matrix[i])


def _pipe_actor(rx, tx):
    obj = Counter()
    while True:
        m = rx.recv()
        if m is None:
            break
        tx.send(getattr(obj, m)())


# ---- the systems
class Systems:
    def __init__(self, names):
        self.names = names
        manta.init(num_cpus=2)
        ctx = multiprocessing.get_context("fork")
        self.mp = ctx.Pool(2) if "mp" in names else None
        self.joblib = None
        if "joblib" in names:
            from joblib import Parallel, delayed
            self.joblib = (Parallel(n_jobs=2), delayed)
        self.dask = None
        if "dask" in names:
            from dask.distributed import Client, LocalCluster
            cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                                   silence_logs=logging.ERROR)
            self.dask = (cluster, Client(cluster))

    def stop(self):
        if self.mp:
            self.mp.terminate()
        if self.dask:
            self.dask[1].close()
            self.dask[0].close()
        manta.shutdown()


def alternate(rows, runs):
    """rows: {label: fn}. Each round runs every row once (warm-up first);
    returns {label: median seconds}."""
    for fn in rows.values():
        fn()
    times = {label: [] for label in rows}
    for _ in range(runs):
        for label, fn in rows.items():
            gc.collect()
            t0 = perf()
            fn()
            times[label].append(perf() - t0)
    return {label: statistics.median(ts) for label, ts in times.items()}


def report(title, medians, unit):
    print(f"\n{title}")
    for label, m in medians.items():
        print(f"  {label:58s} {unit(m)}")


# ---- workloads
def w1(S, runs):
    n = 100_000
    xs = list(range(n))
    rows = {"manta: f.remote() x100k, then get": lambda: manta.get([m_noop.remote(x) for x in xs])}
    if S.mp:
        rows["mp: apply_async x100k, then get"] = lambda: [h.get() for h in [S.mp.apply_async(noop, (x,)) for x in xs]]
        rows["mp: Pool.map (default chunks)"] = lambda: S.mp.map(noop, xs)
    if S.joblib:
        par, delayed = S.joblib
        rows["joblib: Parallel auto-batch"] = lambda: par(delayed(noop)(x) for x in xs)
    med = alternate(rows, runs)
    if S.dask:
        c = S.dask[1]
        med.update(alternate({"dask: client.map x5k + gather (per 100k: x20)":
                              lambda: c.gather(c.map(noop, xs[:5000], pure=False))}, max(1, runs // 2)))
        med["dask: client.map x5k + gather (per 100k: x20)"] *= 20
    report("W1 empty tasks submitted then gathered (tasks/s)", med, lambda m: f"{n / m:12,.0f}")
    if S.mp:
        print(f"  ratio manta / mp apply_async: {med['mp: apply_async x100k, then get'] / med['manta: f.remote() x100k, then get']:.2f}x (target >= 10x)")


def w2(S, runs):
    n = 2000
    rows = {"manta: get(f.remote(i))": lambda: [manta.get(m_noop.remote(i)) for i in range(n)]}
    if S.mp:
        rows["mp: pool.apply"] = lambda: [S.mp.apply(noop, (i,)) for i in range(n)]
    med = alternate(rows, runs)
    if S.dask:
        c = S.dask[1]
        med.update(alternate({"dask: submit().result() (x200, per call)": lambda: [c.submit(noop, i, pure=False).result() for i in range(200)]}, 1))
        med["dask: submit().result() (x200, per call)"] *= n / 200
    report("W2 blocking round trip (us per call)", med, lambda m: f"{m / n * 1e6:10.1f}")
    if S.mp:
        print(f"  manta / mp: {med['manta: get(f.remote(i))'] / med['mp: pool.apply']:.3f} (target <= 0.2)")


def w4(S, runs):
    data = np.random.default_rng(0).normal(size=(1000, 1000))
    rows_list = list(data)
    stored = manta.put(data)
    expect = None

    def seq():
        nonlocal expect
        expect = [ma_row_arr(r) for r in rows_list]

    rows = {"sequential loop": seq,
            "manta: one task per row (matrix put once)": lambda: manta.get([m_ma_row.remote(stored, i) for i in range(1000)])}
    if S.mp:
        rows["mp: Pool.map over rows"] = lambda: S.mp.map(ma_row_arr, rows_list)
    if S.joblib:
        par, delayed = S.joblib
        rows["joblib: Parallel over rows"] = lambda: par(delayed(ma_row_arr)(r) for r in rows_list)
    med = alternate(rows, runs)
    assert np.allclose(np.array(manta.get([m_ma_row.remote(stored, i) for i in range(3)])), np.array(expect[:3]))
    report("W4 moving average, 1000x1000, slow kernel returning ndarray (s; speed-up)", med,
           lambda m: f"{m:8.3f} s  {med['sequential loop'] / m:5.2f}x")
    print("  target: manta one task per row >= 1.8x")


def w5(S, runs):
    a = np.full((200 << 20) // 8, 1.0)
    refs = []

    def put():
        refs.append(manta.put(a))

    med = alternate({"manta.put(200 MB array)": put}, runs)
    r = refs[-1]
    del refs[:-1]
    gets = []
    for _ in range(200):
        t0 = perf()
        v = manta.get(r)
        gets.append(perf() - t0)
        del v
    print("\nW5 large values")
    print(f"  manta.put(200 MB): {0.2097152 / med['manta.put(200 MB array)']:.2f} GB/s (target >= 2)")
    print(f"  manta.get(200 MB stored): {statistics.median(gets) * 1e6:.1f} us median (target <= 50)")
    for nb in (1 << 20, 100 << 20):
        b = np.full(nb // 8, 1.0)
        rows = {f"manta: get(sum.remote(arr)) {nb >> 20} MiB": lambda: manta.get(m_asum.remote(b))}
        if S.mp:
            rows[f"mp: pool.apply(sum, (arr,)) {nb >> 20} MiB"] = lambda: S.mp.apply(asum, (b,))
        report(f"  argument of {nb >> 20} MiB (GB/s)", alternate(rows, max(3, runs)), lambda m: f"{nb / m / 1e9:8.2f}")


def w6(S, runs):
    n_async, n_sync = 100_000, 5000
    c = MCounter.remote()
    manta.get(c.incr.remote())
    rows = {"manta: actor calls x100k, then get": lambda: manta.get([c.incr.remote() for _ in range(n_async)])}
    ctx = multiprocessing.get_context("fork")
    a_rx, p_tx = ctx.Pipe(duplex=False)
    p_rx, a_tx = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_pipe_actor, args=(a_rx, a_tx))
    proc.start()

    def pipe_async():
        out = []
        th = threading.Thread(target=lambda: out.extend(p_rx.recv() for _ in range(n_async)))
        th.start()
        for _ in range(n_async):
            p_tx.send("incr")
        th.join()

    rows["hand-rolled Process+Pipe actor, async"] = pipe_async
    med = alternate(rows, runs)
    report("W6 counter actor in bulk (calls/s)", med, lambda m: f"{n_async / m:12,.0f}")
    print(f"  manta / Pipe actor: {med['hand-rolled Process+Pipe actor, async'] / med['manta: actor calls x100k, then get']:.2f}x (target >= 5x)")

    def pipe_sync():
        for _ in range(n_sync):
            p_tx.send("incr")
            p_rx.recv()
    med = alternate({"manta: get(c.incr.remote())": lambda: [manta.get(c.incr.remote()) for _ in range(n_sync)],
                     "hand-rolled Pipe actor, sync": pipe_sync}, runs)
    report("W6 counter actor, one call at a time (us per call)", med, lambda m: f"{m / n_sync * 1e6:10.1f}")
    p_tx.send(None)
    proc.join()


def w7(S, runs):
    expect = sum(make_leaf(i) for i in range(128))

    def m_tree():
        level = [m_leaf.remote(i) for i in range(128)]
        while len(level) > 1:
            level = [m_add.remote(level[i], level[i + 1]) for i in range(0, len(level), 2)]
        assert np.allclose(manta.get(level[0]), expect)

    rows = {"manta: futures graph, 255 tasks": m_tree}
    if S.mp:
        def mp_tree():
            level = S.mp.map(make_leaf, range(128))
            while len(level) > 1:
                level = S.mp.starmap(add, zip(level[::2], level[1::2]))
        rows["mp: manual rounds"] = mp_tree
    report("W7 tree reduce of 128 leaves (ms)", alternate(rows, runs), lambda m: f"{m * 1e3:8.1f}")


def w3(_S, runs):
    import subprocess
    import sys
    code = {"manta": "import time; t=time.perf_counter(); import manta; manta.init(num_cpus=4); "
                     "f=manta.remote(lambda x: x); manta.get(f.remote(1)); print(time.perf_counter()-t)",
            "mp": "import time; t=time.perf_counter(); import multiprocessing as mp; p=mp.get_context('fork').Pool(4); "
                  "p.apply(abs, (1,)); print(time.perf_counter()-t)"}
    med = {}
    times = {k: [] for k in code}
    for _ in range(runs):
        for k, c in code.items():
            out = subprocess.run([sys.executable, "-c", c], capture_output=True, text=True, env=os.environ)
            times[k].append(float(out.stdout.strip().splitlines()[-1]))
    med = {f"{k}: import, start 4 workers, first result": statistics.median(v) for k, v in times.items()}
    report("W3 cold start (ms)", med, lambda m: f"{m * 1e3:8.1f}")


WORKLOADS = {"W1": w1, "W2": w2, "W3": w3, "W4": w4, "W5": w5, "W6": w6, "W7": w7}

if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("workloads", nargs="*", default=list(WORKLOADS))
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--no-dask", action="store_true")
    ap.add_argument("--no-joblib", action="store_true")
    a = ap.parse_args()
    names = ["mp"] + ([] if a.no_joblib else ["joblib"]) + ([] if a.no_dask else ["dask"])
    S = Systems(names)
    try:
        for w in a.workloads:
            WORKLOADS[w](S, a.runs)
    finally:
        S.stop()
