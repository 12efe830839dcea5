"""manta.util: ActorPool and queue.Queue, as Ray's."""
import pytest

import manta as ray
from manta.util import ActorPool
from manta.util.queue import Empty, Full, Queue


@ray.remote
class Doubler:
    def double(self, v):
        return 2 * v


def test_actor_pool_map_and_by_hand(runtime):
    pool = ActorPool([Doubler.remote(), Doubler.remote()])
    assert list(pool.map(lambda a, v: a.double.remote(v), range(10))) == [2 * v for v in range(10)]
    assert sorted(pool.map_unordered(lambda a, v: a.double.remote(v), range(10))) == [2 * v for v in range(10)]
    for v in range(5):
        pool.submit(lambda a, v: a.double.remote(v), v)
    assert pool.has_next()
    assert [pool.get_next(timeout=30) for _ in range(5)] == [0, 2, 4, 6, 8]
    assert not pool.has_next()
    with pytest.raises(StopIteration):
        pool.get_next()
    idle = pool.pop_idle()
    assert idle is not None
    pool.push(idle)
    with pytest.raises(ValueError):
        pool.push(idle)


@ray.remote
class Sleeper:
    def nap(self, v):
        import time
        time.sleep(v)
        return v


def test_actor_pool_map_left_unread_does_not_leak_into_the_next(runtime):
    pool = ActorPool([Sleeper.remote(), Sleeper.remote()])
    first = pool.map(lambda a, v: a.nap.remote(v), [0.3, 0.3, 0.3])  # submitted now, never read
    assert pool.has_next()
    second = list(pool.map(lambda a, v: a.nap.remote(v), [0, 0.01, 0.02]))
    assert second == [0, 0.01, 0.02]
    assert list(first) == []  # dropped by the second map, as Ray drops it


def test_queue_between_tasks(runtime):
    q = Queue(maxsize=2)

    @ray.remote
    def produce(queue, n):
        for i in range(n):
            queue.put(i)
        return n

    @ray.remote
    def consume(queue, n):
        return [queue.get(timeout=30) for _ in range(n)]

    p = [produce.remote(q, 10) for _ in range(2)]
    c = [consume.remote(q, 10) for _ in range(2)]
    got = ray.get(c, timeout=60)
    assert sorted(got[0] + got[1]) == sorted(list(range(10)) * 2)
    assert ray.get(p) == [10, 10]


def test_queue_api(runtime):
    q = Queue(maxsize=2)
    assert q.empty() and q.size() == 0 and len(q) == 0
    q.put(1)
    q.put_nowait(2)
    assert q.full() and q.qsize() == 2
    with pytest.raises(Full):
        q.put_nowait(3)
    with pytest.raises(Full):
        q.put(3, timeout=0.05)
    assert q.get() == 1 and q.get_nowait() == 2
    with pytest.raises(Empty):
        q.get(timeout=0.05)
    with pytest.raises(Empty):
        q.get_nowait()
    q.put_nowait_batch([5, 6])
    assert q.get_nowait_batch(2) == [5, 6]
    with pytest.raises(Empty):
        q.get_nowait_batch(1)
    ray.get(q.put_async(9))
    assert ray.get(q.get_async()) == (True, 9)
    q.shutdown()
