"""A first-in first-out queue shared by the driver, tasks and actors (Ray's
ray.util.queue.Queue). Its items live in an actor of its own; pass the Queue
itself to tasks and actors."""
import queue as _queue
import threading
import time

from manta import _api
from manta._remote import remote


class Empty(_queue.Empty):
    pass


class Full(_queue.Full):
    pass


class _QueueHome:
    """The actor holding the items. Blocking calls wait here, on threads of its own."""

    def __init__(self, maxsize):
        self.maxsize = maxsize
        self.items = []
        self.changed = threading.Condition()

    def qsize(self):
        return len(self.items)

    def empty(self):
        return not self.items

    def full(self):
        return 0 < self.maxsize <= len(self.items)

    def put(self, item, timeout=None):
        end = None if timeout is None else time.monotonic() + timeout
        with self.changed:
            while 0 < self.maxsize <= len(self.items):
                left = None if end is None else end - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self.changed.wait(left)
            self.items.append(item)
            self.changed.notify_all()
            return True

    def put_batch(self, items):
        with self.changed:
            if self.maxsize > 0 and len(items) + len(self.items) > self.maxsize:
                return False
            self.items.extend(items)
            self.changed.notify_all()
            return True

    def get(self, timeout=None):
        end = None if timeout is None else time.monotonic() + timeout
        with self.changed:
            while not self.items:
                left = None if end is None else end - time.monotonic()
                if left is not None and left <= 0:
                    return False, None
                self.changed.wait(left)
            item = self.items.pop(0)
            self.changed.notify_all()
            return True, item

    def get_batch(self, n):
        with self.changed:
            if n > len(self.items):
                return False, None
            got, self.items = self.items[:n], self.items[n:]
            self.changed.notify_all()
            return True, got


_QueueActor = remote(_QueueHome)

# Waiting callers each hold one of the home's threads.
_HOME_THREADS = 128


class Queue:
    """Queue(maxsize=0): put/get with block and timeout, the _nowait forms and
    their batches, qsize/size, empty, full; Empty and Full as queue's."""

    def __init__(self, maxsize=0, actor_options=None):
        _api.auto_init()
        self.maxsize = maxsize
        options = dict(actor_options or {})
        options.setdefault("max_concurrency", _HOME_THREADS)
        self.actor = _QueueActor.options(**options).remote(maxsize)

    def __len__(self):
        return self.size()

    def size(self):
        return _api.get(self.actor.qsize.remote())

    qsize = size

    def empty(self):
        return _api.get(self.actor.empty.remote())

    def full(self):
        return _api.get(self.actor.full.remote())

    def put(self, item, block=True, timeout=None):
        if not block:
            timeout = 0
        elif timeout is not None and timeout < 0:
            raise ValueError("'timeout' must be a non-negative number")
        if not _api.get(self.actor.put.remote(item, timeout)):
            raise Full
    
    def put_async(self, item, block=True, timeout=None):
        return self.actor.put.remote(item, 0 if not block else timeout)

    def get(self, block=True, timeout=None):
        if not block:
            timeout = 0
        elif timeout is not None and timeout < 0:
            raise ValueError("'timeout' must be a non-negative number")
        ok, item = _api.get(self.actor.get.remote(timeout))
        if not ok:
            raise Empty
        return item

    def get_async(self, block=True, timeout=None):
        return self.actor.get.remote(0 if not block else timeout)

    def put_nowait(self, item):
        return self.put(item, block=False)

    def put_nowait_batch(self, items):
        if not isinstance(items, list):
            raise TypeError("put_nowait_batch takes a list")
        if not _api.get(self.actor.put_batch.remote(items)):
            raise Full(f"Cannot add {len(items)} items to queue of size {self.size()} and maxsize {self.maxsize}.")

    def get_nowait(self):
        return self.get(block=False)

    def get_nowait_batch(self, num_items):
        if not isinstance(num_items, int) or num_items < 0:
            raise ValueError("'num_items' must be a non-negative integer")
        ok, items = _api.get(self.actor.get_batch.remote(num_items))
        if not ok:
            raise Empty(f"Cannot get {num_items} items from queue of size {self.size()}.")
        return items

    def shutdown(self, force=False, grace_period_s=5):
        from manta._remote import kill
        if self.actor is not None:
            kill(self.actor)
        self.actor = None
