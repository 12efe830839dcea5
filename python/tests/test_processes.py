"""Processes: crashes retried then reported, output forwarded, Ctrl-C, exit
with nothing left behind, local_mode is in test_local_mode.py."""
import os
import re
import signal
import subprocess
import sys
import time

import pytest

import manta as ray
from manta.exceptions import WorkerCrashedError
from conftest import children_of, run_python


def test_a_worker_that_exits_is_retried_then_reported(runtime, tmp_path):
    marker = tmp_path / "attempts"

    @ray.remote(max_retries=2)
    def dies_twice(path):
        with open(path, "a") as f:
            f.write("x")
        with open(path) as f:
            if len(f.read()) <= 2:
                os._exit(7)
        return "third time"

    assert ray.get(dies_twice.remote(str(marker)), timeout=60) == "third time"

    @ray.remote(max_retries=1)
    def always_dies():
        os._exit(3)

    with pytest.raises(WorkerCrashedError):
        ray.get(always_dies.remote(), timeout=60)
    assert ray.get(ray.remote(lambda: 1).remote(), timeout=30) == 1  # the pool goes on


def test_worker_output_reaches_the_driver_prefixed():
    r = run_python("""
import manta as ray
ray.init(num_cpus=1)
@ray.remote
def speak(i):
    print("worker says", i)
    return i
print("sum", sum(ray.get([speak.remote(i) for i in range(3)])))
ray.shutdown()
""")
    assert r.returncode == 0, r.stderr
    # Forwarded lines arrive whole, but may fall between two writes of the
    # driver's own line (print writes its pieces apart under PYTHONUNBUFFERED).
    spoken = re.findall(r"\(pid=\d+\) worker says \d\n", r.stdout)
    assert len(spoken) == 3, r.stdout
    own = re.sub(r"\(pid=\d+\)[^\n]*\n", "", r.stdout)
    assert "sum 3" in own.splitlines(), r.stdout


def test_ctrl_c_interrupts_get_and_leaves_no_process():
    code = """
import os, sys, time
import manta as ray
ray.init(num_cpus=2)
@ray.remote
def forever():
    time.sleep(300)
try:  # (a Ctrl-C that comes before the get is caught too)
    refs = [forever.remote() for _ in range(2)]
    print("pid", os.getpid(), flush=True)
    ray.get(refs)
except KeyboardInterrupt:
    print("interrupted", flush=True)
    sys.exit(5)
"""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env, start_new_session=True)
    try:
        line = proc.stdout.readline()
        assert line.startswith("pid"), line + proc.stderr.read()
        driver = int(line.split()[1])
        deadline = time.monotonic() + 20
        while len(children_of(driver)) < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        zygote = children_of(driver)
        assert zygote, "the runtime's processes did not start"
        workers = children_of(zygote[0])
        time.sleep(0.3)  # into get's wait
        os.killpg(proc.pid, signal.SIGINT)  # as a terminal's Ctrl-C: the whole group
        out, err = proc.communicate(timeout=20)
        assert proc.returncode == 5, err
        assert "interrupted" in out
        deadline = time.monotonic() + 20
        alive = lambda: [p for p in zygote + workers if os.path.exists(f"/proc/{p}") and
                         open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()[0] != "Z"]
        while alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not alive(), "processes left behind"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_a_driver_killed_leaves_no_process():
    code = """
import os, time
import manta as ray
ray.init(num_cpus=2)
@ray.remote
class A:
    def pid(self):
        return os.getpid()
a = A.remote()
print(os.getpid(), ray.get(a.pid.remote()), flush=True)
time.sleep(300)
"""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=env)
    try:
        driver, actor = map(int, proc.stdout.readline().split())
        zygote = children_of(driver)
        proc.kill()
        proc.wait(timeout=10)
        deadline = time.monotonic() + 20
        while any(os.path.exists(f"/proc/{p}") for p in zygote + [actor]) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not any(os.path.exists(f"/proc/{p}") for p in zygote + [actor])
    finally:
        if proc.poll() is None:
            proc.kill()


def test_fork_of_a_driver_keeps_the_parent_runtime(runtime):
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    assert ray.get(ray.remote(lambda: 5).remote(), timeout=30) == 5


def test_a_task_computing_after_a_get_counts_as_busy(runtime, tmp_path):
    """The end of a wait reaches the driver at once: a task that got its
    child's result and computes on is not shown waiting (nor given extra
    workers beside it, as if its CPU were still lent)."""
    import shutil
    cli = os.environ.get("MANTA_CLI") or shutil.which("manta")
    if cli is None:
        pytest.skip("the manta command line is not built")
    marker = tmp_path / "go"

    @ray.remote
    def computes_after_get(path):
        ray.get(ray.remote(lambda: 1).remote())
        deadline = time.monotonic() + 30
        while not os.path.exists(path) and time.monotonic() < deadline:
            time.sleep(0.02)  # (computing, as far as the runtime knows)
        return True

    ref = computes_after_get.remote(str(marker))
    seen = ""
    deadline = time.monotonic() + 15
    try:
        while time.monotonic() < deadline:
            seen = subprocess.run([cli, "status", "--address", str(os.getpid())], capture_output=True, text=True,
                                  timeout=10).stdout
            line = [l for l in seen.splitlines() if "computes_after_get" in l]
            if line and " busy " in line[0]:
                break
            time.sleep(0.05)
        assert any(" busy " in l and "computes_after_get" in l for l in seen.splitlines()), seen
    finally:
        marker.write_text("go")
    assert ray.get(ref, timeout=30)
