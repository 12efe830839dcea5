"""Actors: state, order, handles passed around, named actors, restarts, threads."""
import os
import threading
import time

import pytest

import manta as ray
from manta.exceptions import RayActorError


@ray.remote
class Counter:
    def __init__(self, start=0):
        self.n = start

    def incr(self, k=1):
        self.n += k
        return self.n

    def get(self):
        return self.n

    def fail(self):
        raise KeyError("no such thing")

    def pid(self):
        return os.getpid()

    @ray.method(num_returns=2)
    def two(self):
        return self.n, -self.n


def test_counter_state_and_order(runtime):
    c = Counter.remote(10)
    assert ray.get([c.incr.remote() for _ in range(100)]) == list(range(11, 111))
    assert ray.get(c.get.remote()) == 110
    a, b = c.two.remote()
    assert ray.get([a, b]) == [110, -110]
    with pytest.raises(AttributeError):
        c.nope
    with pytest.raises(TypeError):
        Counter(1)


def test_actor_survives_its_methods_exception(runtime):
    c = Counter.remote()
    with pytest.raises(KeyError):
        ray.get(c.fail.remote())
    assert ray.get(c.incr.remote()) == 1


def test_handles_passed_to_tasks_and_actors_and_returned(runtime):
    c = Counter.remote()

    @ray.remote
    def bump(counter, times):
        return ray.get([counter.incr.remote() for _ in range(times)])[-1]

    assert ray.get(bump.remote(c, 5)) == 5

    @ray.remote
    class Holder:
        def __init__(self, counter):
            self.counter = counter

        def bump(self):
            return ray.get(self.counter.incr.remote(10))

    h = Holder.remote(c)
    assert ray.get(h.bump.remote()) == 15

    @ray.remote
    def make_counter():
        return Counter.remote(100)

    made = ray.get(make_counter.remote())
    assert ray.get(made.incr.remote()) == 101


def test_named_actor_and_kill(runtime):
    c = Counter.options(name="the-counter").remote(3)
    same = ray.get_actor("the-counter")
    assert ray.get(same.incr.remote()) == 4
    with pytest.raises(ValueError):
        ray.get_actor("nobody")
    with pytest.raises(ValueError, match="already taken"):  # Ray's error for a name in use
        Counter.options(name="the-counter").remote(0)
    assert ray.get(Counter.options(name="the-counter", get_if_exists=True).remote(0).incr.remote()) == 5
    ray.kill(c)
    with pytest.raises(RayActorError):
        ray.get(c.incr.remote(), timeout=30)


def test_actor_restart_after_its_process_dies(runtime):
    @ray.remote(max_restarts=1)
    class Fragile:
        def __init__(self):
            self.calls = 0

        def crash(self):
            os._exit(1)

        def count(self):
            self.calls += 1
            return self.calls

    f = Fragile.remote()
    assert ray.get(f.count.remote()) == 1
    with pytest.raises(Exception):
        ray.get(f.crash.remote(), timeout=30)
    assert ray.get(f.count.remote(), timeout=30) == 1  # restarted: fresh state
    with pytest.raises(RayActorError):
        ray.get(f.crash.remote(), timeout=30)  # past max_restarts


def test_threaded_actor_whose_methods_wait(runtime):
    @ray.remote(max_concurrency=4)
    class Gate:
        def __init__(self):
            self.event = threading.Event()

        def wait(self):
            return self.event.wait(20)

        def open(self):
            self.event.set()
            return True

        def fan_out(self, n):
            return sum(ray.get([ray.remote(lambda x: x).remote(i) for i in range(n)]))

    g = Gate.remote()
    waiting = [g.wait.remote() for _ in range(3)]
    assert ray.get(g.open.remote(), timeout=30)
    assert ray.get(waiting, timeout=30) == [True] * 3
    assert ray.get([g.fan_out.remote(10) for _ in range(4)], timeout=60) == [45] * 4


def test_threaded_actor_keeps_each_threads_locals(runtime):
    @ray.remote(max_concurrency=2)
    class Marks:
        def __init__(self):
            self.local = threading.local()

        def mark(self):
            seen = getattr(self.local, "n", 0)
            self.local.n = seen + 1
            return threading.get_ident(), seen

    m = Marks.remote()
    by_thread = {}
    for ident, seen in (ray.get(m.mark.remote(), timeout=30) for _ in range(6)):
        by_thread.setdefault(ident, []).append(seen)
    # 6 calls on at most 2 threads: each thread's counts go on from its last
    assert all(seen == list(range(len(seen))) for seen in by_thread.values()), by_thread


def test_async_methods(runtime):
    @ray.remote
    class AsyncActor:
        async def twice(self, x):
            import asyncio
            await asyncio.sleep(0.01)
            return 2 * x

    a = AsyncActor.remote()
    assert ray.get([a.twice.remote(i) for i in range(3)]) == [0, 2, 4]


def test_async_actor_calls_share_one_loop_and_overlap(runtime):
    # Ray's async actor: one event loop; a call awaits what another sets.
    @ray.remote
    class Signal:
        def __init__(self):
            self.event = None

        async def wait(self):
            import asyncio
            if self.event is None:
                self.event = asyncio.Event()
            await self.event.wait()
            return "released"

        async def send(self):
            import asyncio
            if self.event is None:
                self.event = asyncio.Event()
            self.event.set()
            return "sent"

    s = Signal.remote()
    waiters = [s.wait.remote() for _ in range(20)]  # more than a thread each would need by default
    assert ray.get(s.send.remote(), timeout=30) == "sent"
    assert ray.get(waiters, timeout=30) == ["released"] * 20


def test_actor_constructor_failure(runtime):
    @ray.remote
    class Broken:
        def __init__(self):
            raise RuntimeError("cannot start")

        def f(self):
            return 1

    b = Broken.remote()
    with pytest.raises(RayActorError, match="cannot start"):
        ray.get(b.f.remote(), timeout=30)
