"""Every sample of samples/python runs to its end."""
import os
import subprocess
import sys

import pytest

SAMPLES = os.path.join(os.path.dirname(__file__), "..", "..", "samples", "python")


@pytest.mark.parametrize("name", ["counter", "parameter_server", "moving_average", "tree_reduce", "pool_map"])
def test_sample_runs(name):
    if name != "counter" and name != "pool_map":
        pytest.importorskip("numpy")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    r = subprocess.run([sys.executable, os.path.join(SAMPLES, name + ".py")], capture_output=True, text=True,
                       timeout=180, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.strip(), "the sample printed nothing"
