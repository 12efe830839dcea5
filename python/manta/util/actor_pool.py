"""ActorPool: work spread over a fixed set of actors (Ray's ray.util.ActorPool)."""
from manta import _api
from manta.exceptions import GetTimeoutError


class ActorPool:
    """Each actor is given its next value only once it has finished its previous one.

        pool = ActorPool([Worker.remote() for _ in range(4)])
        results = list(pool.map(lambda a, v: a.double.remote(v), range(10)))
    """

    def __init__(self, actors):
        self._idle = list(actors)
        self._future_to_actor = {}   # ref -> (submission index, actor)
        self._index_to_future = {}   # submission index -> ref
        self._next_index = 0         # of the next submission
        self._next_return = 0        # of the next result get_next returns
        self._pending = []           # (fn, value) waiting for an idle actor

    def map(self, fn, values):
        """Results of fn(actor, value) for each value, in the order of values.
        The values are submitted now; the results come as they are iterated."""
        self._drain()
        for v in values:
            self.submit(fn, v)

        def results():
            while self.has_next():
                yield self.get_next()
        return results()

    def map_unordered(self, fn, values):
        """Results of fn(actor, value) for each value, as they finish."""
        self._drain()
        for v in values:
            self.submit(fn, v)

        def results():
            while self.has_next():
                yield self.get_next_unordered()
        return results()

    def _drain(self):
        """What an earlier map left unread is waited for and dropped (as Ray),
        so the next map's results are its own."""
        while self._future_to_actor:
            try:
                self.get_next_unordered()
            except Exception:  # a dropped result's error is dropped with it
                pass
        self._pending.clear()  # (left only by a pool without actors)

    def submit(self, fn, value):
        """Schedules fn(actor, value) on an idle actor, or once one is free."""
        if self._idle:
            actor = self._idle.pop()
            ref = fn(actor, value)
            self._future_to_actor[ref] = (self._next_index, actor)
            self._index_to_future[self._next_index] = ref
            self._next_index += 1
        else:
            self._pending.append((fn, value))

    def has_next(self):
        return bool(self._future_to_actor) or bool(self._pending)

    def get_next(self, timeout=None, ignore_if_timedout=False):
        """The next result in submission order."""
        if not self.has_next():
            raise StopIteration("No more results to get")
        if self._next_return >= self._next_index:
            raise ValueError("It is not allowed to call get_next() after get_next_unordered().")
        ref = self._index_to_future[self._next_return]
        if timeout is not None:
            ready, _ = _api.wait([ref], timeout=timeout)
            if not ready:
                if ignore_if_timedout:
                    return None
                raise GetTimeoutError("Timed out waiting for result")
        del self._index_to_future[self._next_return]
        self._next_return += 1
        _, actor = self._future_to_actor.pop(ref)
        self._return_actor(actor)
        return _api.get(ref)

    def get_next_unordered(self, timeout=None, ignore_if_timedout=False):
        """Whichever result finishes first."""
        if not self.has_next():
            raise StopIteration("No more results to get")
        ready, _ = _api.wait(list(self._future_to_actor), num_returns=1, timeout=timeout)
        if not ready:
            if ignore_if_timedout:
                return None
            raise GetTimeoutError("Timed out waiting for result")
        ref = ready[0]
        index, actor = self._future_to_actor.pop(ref)
        self._index_to_future.pop(index, None)
        self._next_return = max(self._next_return, index + 1)
        self._return_actor(actor)
        return _api.get(ref)

    def _return_actor(self, actor):
        self._idle.append(actor)
        if self._pending:
            fn, value = self._pending.pop(0)
            self.submit(fn, value)

    def has_free(self):
        return bool(self._idle) and not self._pending

    def pop_idle(self):
        """An idle actor, taken out of the pool, or None."""
        return self._idle.pop() if self.has_free() else None

    def push(self, actor):
        """Adds an actor to the pool."""
        busy = [a for _, a in self._future_to_actor.values()]
        if actor in self._idle or actor in busy:
            raise ValueError("Actor already belongs to current ActorPool")
        self._return_actor(actor)
