"""local_mode=True: everything runs in the driver, as the C++ local mode does."""
import os
import time

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


def test_local_mode_calls_from_two_threads(fresh):
    # Each thread's submit runs its task in place; one holding the runtime
    # while the other held the GIL hung both.
    import threading
    ray.init(local_mode=True)

    @ray.remote
    def slow_square(x):
        total = 0
        for i in range(300000):  # long enough to switch threads inside
            total += i
        return x * x

    results = {}

    def loop(k):
        results[k] = [ray.get(slow_square.remote(i)) for i in range(10)]

    threads = [threading.Thread(target=loop, args=(k,), daemon=True) for k in range(2)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 60
    for t in threads:
        t.join(max(0, deadline - time.monotonic()))
    assert not any(t.is_alive() for t in threads), "local mode hung with two threads"
    assert results == {k: [i * i for i in range(10)] for k in range(2)}
