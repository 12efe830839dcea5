"""local_mode=True: everything runs in the driver, as the C++ local mode does."""
import os

import pytest

import manta as ray


def test_local_mode(fresh):
    ray.init(local_mode=True)

    @ray.remote
    def where():
        return os.getpid()

    @ray.remote
    class Counter:
        def __init__(self):
            self.n = 0

        def incr(self):
            self.n += 1
            return self.n

    assert ray.get(where.remote()) == os.getpid()
    c = Counter.remote()
    assert ray.get([c.incr.remote() for _ in range(3)]) == [1, 2, 3]
    with pytest.raises(ZeroDivisionError):
        ray.get(ray.remote(lambda: 1 / 0).remote())

    @ray.remote
    def nested():
        return ray.get(where.remote())
    assert ray.get(nested.remote()) == os.getpid()
