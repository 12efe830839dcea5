"""Shared fixtures: a runtime of 2 workers per test module, shut down after it."""
import os
import subprocess
import sys

import pytest

import manta


@pytest.fixture(scope="module")
def runtime():
    manta.shutdown()  # one an earlier module left (a Pool starts its own)
    manta.init(num_cpus=2)
    yield
    manta.shutdown()


@pytest.fixture
def fresh():
    """A test that starts its own runtime; whatever it leaves is shut down."""
    manta.shutdown()
    yield
    manta.shutdown()


def run_python(code, timeout=60, env=None, **kwargs):
    """Runs `code` in a new interpreter that imports manta from this build."""
    full_env = dict(os.environ)
    full_env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    full_env.update(env or {})
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout,
                          env=full_env, **kwargs)


def children_of(pid):
    """Processes whose parent is `pid` (from /proc)."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            if int(fields[1]) == pid:
                out.append(int(entry))
        except (OSError, IndexError, ValueError):
            pass
    return out
