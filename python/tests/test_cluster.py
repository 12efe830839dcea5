"""A Python driver on a cluster of two nodes on loopback: the head and a node
started with `manta start`, the node running the same Python program."""
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

CLI = os.environ.get("MANTA_CLI") or shutil.which("manta")

APP = textwrap.dedent("""
    import os
    import numpy as np
    import manta as ray

    @ray.remote
    def where(i):
        return ray.get_runtime_context().get_node_id(), i * i

    @ray.remote
    def total(a):
        return float(a.sum())

    @ray.remote
    class Counter:
        def __init__(self):
            self.n = 0
        def incr(self):
            self.n += 1
            return self.n

    if __name__ == "__main__":
        ray.init()
        nodes = ray.nodes()
        assert len(nodes) == 2, nodes
        out = ray.get([where.remote(i) for i in range(60)], timeout=60)
        used = set(node for node, _ in out)
        assert sum(sq for _, sq in out) == sum(i * i for i in range(60))
        assert ray.get(total.remote(np.ones(1 << 20)), timeout=60) == float(1 << 20)
        assert ray.get([ray.remote(lambda x: x + 1).remote(i) for i in range(3)], timeout=60) == [1, 2, 3]
        c = Counter.remote()
        assert ray.get([c.incr.remote() for _ in range(5)], timeout=60) == [1, 2, 3, 4, 5]
        print("nodes used", len(used))
        ray.shutdown()
""")


@pytest.mark.skipif(CLI is None, reason="the manta command line is not built")
def test_python_driver_and_node_on_loopback(tmp_path):
    app = tmp_path / "app.py"
    app.write_text(APP)
    logs = tmp_path / "logs"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p),
               MANTA_TOKEN_FILE=str(logs / "cluster.token"))
    head = subprocess.run([CLI, "start", "--head", "--log-dir", str(logs)], capture_output=True, text=True,
                          timeout=60, env=env)
    assert head.returncode == 0, head.stderr
    address = next(l.split()[1] for l in head.stdout.splitlines() if l.startswith("address:"))
    try:
        node = subprocess.run([CLI, "start", "--address", address, "--log-dir", str(logs), "--",
                               sys.executable, str(app)], capture_output=True, text=True, timeout=60, env=env)
        assert node.returncode == 0, node.stdout + node.stderr
        driver = subprocess.run([sys.executable, str(app)], capture_output=True, text=True, timeout=120,
                                env=dict(env, MANTA_ADDRESS=address))
        assert driver.returncode == 0, driver.stdout + driver.stderr
        assert "nodes used 2" in driver.stdout, driver.stdout
    finally:
        subprocess.run([CLI, "stop", "--address", address], capture_output=True, timeout=60, env=env)
