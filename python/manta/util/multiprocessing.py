"""multiprocessing.Pool on manta's runtime: change only the import.

    from manta.util.multiprocessing import Pool
    with Pool(4) as p:
        print(p.map(f, range(100)))

The whole Pool API (map, imap, imap_unordered, starmap, apply, the _async
forms with callback/error_callback, close, join, terminate, the context
manager, processes=, initializer=/initargs=, maxtasksperchild=); it starts the
runtime itself when none is running. Work goes out as tasks of chunks, so
functions and lambdas defined anywhere (even in __main__ after the pool
started) can be mapped.
"""
import collections
import itertools
import multiprocessing as _std
import os
import threading
import time
import uuid
from multiprocessing.pool import RemoteTraceback

from manta import _api, _manta
from manta._remote import _Stored
from manta.exceptions import GetTimeoutError, RayTaskError

class TimeoutError(_std.TimeoutError, GetTimeoutError):
    """A wait of the pool ran out: multiprocessing's TimeoutError, and manta's."""


def _as_raised_by_multiprocessing(error):
    """A task's error as multiprocessing raises it: the original exception
    (its class, args and attributes such as errno), the remote traceback as
    its cause."""
    if isinstance(error, RayTaskError) and error.cause is not None and not isinstance(error.cause, RayTaskError):
        original = error.cause
        original.__cause__ = RemoteTraceback(error.traceback_str)
        return original
    return error


class _ChunkCall:
    """A chunk of a pool's work, as the worker's run_task sees it."""
    __slots__ = ("star", "items", "setup")

    def __init__(self, star, items, setup):
        self.star = star
        self.items = items
        self.setup = setup

    def __reduce__(self):
        return (_ChunkCall, (self.star, self.items, self.setup))


_set_up_pools = set()  # in a worker: the pools whose initializer ran here


def run_chunk(fn, call):
    """Runs one chunk in a worker (manta._worker.run_task calls it)."""
    if call.setup is not None:
        number, initializer, initargs = call.setup
        if number not in _set_up_pools:
            initializer(*initargs)
            _set_up_pools.add(number)
    if call.star:
        return [fn(*args) for args in call.items]
    return [fn(x) for x in call.items]


class ApplyResult:
    """What apply_async returns: get(timeout), wait(timeout), ready(), successful().

    A result with a callback is settled by the pool's result thread, which runs
    the callback before the result counts as ready; one without is settled by
    whoever asks first."""

    def __init__(self, pool, refs, unpack, callback, error_callback):
        self._pool = pool
        self._refs = refs
        self._unpack = unpack
        self._callback = callback
        self._error_callback = error_callback
        self._lock = threading.Lock()
        self._settled = False
        self._value = None
        self._error = None
        self._done = None
        if callback is not None or error_callback is not None:
            self._done = threading.Event()
            pool._track(self)

    def _take(self, timeout=None):
        """Takes the value (once its tasks are done, or raises GetTimeoutError)."""
        with self._lock:
            if self._settled:
                return
            try:
                self._value = self._unpack(_api.get(self._refs, timeout=timeout))
            except GetTimeoutError as e:
                if isinstance(e, TimeoutError):
                    raise
                raise TimeoutError(str(e)) from None
            except BaseException as e:  # a task's error, as raised by get
                self._error = _as_raised_by_multiprocessing(e)
            self._settled = True
            self._pool._forget(self._refs)

    def _settle(self):
        """The result thread's part: take the value, then run a callback."""
        self._take()
        try:
            if self._error is None and self._callback is not None:
                self._callback(self._value)
            elif self._error is not None and self._error_callback is not None:
                self._error_callback(self._error)
        finally:
            self._done.set()

    def ready(self):
        if self._done is not None:
            return self._done.is_set()
        if self._settled:
            return True
        return len(_api.wait(self._refs, num_returns=len(self._refs), timeout=0)[0]) == len(self._refs)

    def successful(self):
        if not self.ready():
            raise ValueError(f"{self!r} not ready")
        self._take()
        return self._error is None

    def wait(self, timeout=None):
        if self._done is not None:
            self._done.wait(timeout)
        elif not self._settled:
            _api.wait(self._refs, num_returns=len(self._refs), timeout=timeout)

    def get(self, timeout=None):
        if self._done is not None:
            if not self._done.wait(timeout):
                raise TimeoutError(f"the result was not ready within {timeout} s")
        else:
            self._take(timeout)
        if self._error is not None:
            raise self._error
        return self._value


AsyncResult = ApplyResult


class MapResult(ApplyResult):
    pass


class IMapIterator:
    """What imap returns: iterate, or next(timeout).

    A thread of its own reads the iterable and submits its chunks as it goes
    (as multiprocessing's task handler does), so results come while a slow or
    endless iterable is still being read."""

    def __init__(self, pool, fn, iterable, chunksize, ordered):
        self._pool = pool
        self._ordered = ordered
        self._buffer = collections.deque()
        self._lock = threading.Lock()  # one reader at a time
        self._fed = threading.Condition()
        self._pending = []  # submitted chunks' refs, in order
        self._fed_all = False
        self._feed_error = None  # what reading the iterable raised
        self._feeder = threading.Thread(target=self._feed, args=(fn, iterable, chunksize),
                                        name="manta-pool-imap", daemon=True)
        pool._started_feeder(self._feeder)
        self._feeder.start()

    def _feed(self, fn, iterable, chunksize):
        # Chunks running or queued at most: an endless iterable is read as
        # the workers keep up, not into memory (the count waits for the
        # workers, never for the reader, so join cannot wait on the reader).
        ahead = max(8, 4 * self._pool._processes)
        in_flight = []
        try:
            items = iter(iterable)
            while not self._pool._terminated:
                chunk = list(itertools.islice(items, chunksize))
                if not chunk:
                    break
                ref = self._pool._submit_chunks(fn, [chunk], star=False)[0]
                with self._fed:
                    self._pending.append(ref)
                    self._fed.notify_all()
                in_flight.append(ref)
                while len(in_flight) >= ahead and not self._pool._terminated:
                    _, in_flight = _api.wait(in_flight, num_returns=len(in_flight) - ahead + 1, timeout=0.5)
        except BaseException as e:  # raised by next() once the chunks before it are read
            self._feed_error = e
        finally:
            with self._fed:
                self._fed_all = True
                self._fed.notify_all()

    def __iter__(self):
        return self

    def next(self, timeout=None):
        deadline = None if timeout is None else time.monotonic() + timeout

        def left():
            return None if deadline is None else max(0.0, deadline - time.monotonic())

        with self._lock:
            while not self._buffer:
                with self._fed:
                    while not self._pending and not self._fed_all:
                        if not self._fed.wait(left()) and deadline is not None and left() == 0:
                            raise TimeoutError(f"no result within {timeout} s")
                    if not self._pending:
                        if self._feed_error is not None:
                            error, self._feed_error = self._feed_error, None
                            raise error
                        raise StopIteration
                    pending = list(self._pending) if not self._ordered else [self._pending[0]]
                ready, _ = _api.wait(pending, num_returns=1, timeout=left())
                if not ready:
                    raise TimeoutError(f"no result within {timeout} s")
                ref = ready[0]
                with self._fed:
                    self._pending.remove(ref)
                self._pool._forget([ref])
                try:
                    self._buffer.extend(_api.get(ref))  # a failed chunk raises here, once
                except RayTaskError as e:
                    raise _as_raised_by_multiprocessing(e)
            return self._buffer.popleft()

    __next__ = next


class IMapUnorderedIterator(IMapIterator):
    pass


class Pool:
    """multiprocessing.Pool's API on manta's workers."""

    def __init__(self, processes=None, initializer=None, initargs=(), maxtasksperchild=None, context=None,
                 ray_address=None, ray_remote_args=None):
        if processes is not None and processes < 1:
            raise ValueError("Number of processes must be at least 1")
        if initializer is not None and not callable(initializer):
            raise TypeError("initializer must be a callable")
        if maxtasksperchild is not None and (not isinstance(maxtasksperchild, int) or maxtasksperchild <= 0):
            raise ValueError("maxtasksperchild must be a positive int or None")
        if not _manta.is_initialized():
            _api.init(address=ray_address, num_cpus=processes)
        cpus = _api.cluster_resources().get("CPU", os.cpu_count() or 1)
        self._processes = processes or int(cpus) or 1
        self._number = uuid.uuid4().hex  # names the pool in workers (of any driver)
        self._setup = (self._number, initializer, tuple(initargs)) if initializer is not None else None
        # Fewer processes than the runtime's workers: each chunk holds a larger share.
        share = max(1.0, cpus / self._processes) if processes else 1.0
        self._options = _manta.TaskOptions(num_cpus=float(share), max_retries=0, name="Pool chunk",
                                           max_calls=int(maxtasksperchild or 0))
        self._stored = {}  # id(fn) -> (fn, _Stored)
        self._state = "run"
        self._lock = threading.Lock()
        self._outstanding = {}  # ApplyResult -> None, in submission order
        self._changed = threading.Condition(self._lock)
        self._results_thread = None
        self._stopping = False
        self._live = set()  # refs of submitted work not yet taken
        self._feeders = []  # imap's threads reading their iterables
        self._terminated = False

    # ---- submitting

    def _check_running(self):
        if self._state != "run":
            raise ValueError("Pool not running")

    def _stored_fn(self, fn, apply=False):
        """The chunk runner of fn, stored once per pool (one function pickle)."""
        entry = self._stored.get((id(fn), apply))
        if entry is None or entry[0] is not fn:
            runner = _ChunkRunner(_ApplyCall(fn) if apply else fn)
            entry = (fn, _Stored(runner))
            self._stored[(id(fn), apply)] = entry
        return entry[1]

    def _submit_chunks(self, fn, chunks, star, apply=False):
        stored = self._stored_fn(fn, apply)
        refs = []
        for chunk in chunks:
            refs.append(_manta.submit_task(stored.ref(), ((_ChunkCall(star, chunk, self._setup),), None), None,
                                           self._options, 1))
        with self._lock:
            self._live.update(refs)
        return refs

    def _started_feeder(self, thread):
        with self._lock:
            self._feeders = [t for t in self._feeders if t.is_alive()]
            self._feeders.append(thread)

    def _forget(self, refs):
        """These refs are done and taken: terminate and join need not see them."""
        with self._lock:
            self._live.difference_update(refs)

    def _chunks(self, iterable, chunksize, star):
        items = list(iterable)
        if chunksize is None:
            chunksize, extra = divmod(len(items), self._processes * 4)
            if extra:
                chunksize += 1
        chunksize = max(1, int(chunksize))
        return [items[i:i + chunksize] for i in range(0, len(items), chunksize)]

    def _track(self, result):
        with self._changed:
            self._outstanding[result] = None
            if self._results_thread is None or not self._results_thread.is_alive():
                self._stopping = False
                self._results_thread = threading.Thread(target=self._settle_results, name="manta-pool-results",
                                                        daemon=True)
                self._results_thread.start()
            self._changed.notify_all()

    def _settle_results(self):
        """The pool's result thread: settles each async result once its tasks are
        done and runs its callback, one at a time, in the order they finish."""
        while True:
            with self._changed:
                while not self._outstanding and not self._stopping:
                    self._changed.wait()
                if not self._outstanding:
                    return
                pending = list(self._outstanding)
            refs = [r for res in pending for r in res._refs]
            try:
                _api.wait(refs, num_returns=1, timeout=0.2)
                ready = set(_api.wait(refs, num_returns=len(refs), timeout=0)[0])
            except Exception:  # the runtime was shut down under the pool
                ready = set(refs)
            for res in pending:
                if all(r in ready for r in res._refs):
                    res._settle()
                    with self._changed:
                        self._outstanding.pop(res, None)
                        self._changed.notify_all()

    def apply(self, func, args=(), kwds={}):
        return self.apply_async(func, args, kwds).get()

    def apply_async(self, func, args=(), kwds={}, callback=None, error_callback=None):
        self._check_running()
        refs = self._submit_chunks(func, [[(tuple(args), dict(kwds))]], star=True, apply=True)
        return ApplyResult(self, refs, lambda values: values[0][0], callback, error_callback)

    def map(self, func, iterable, chunksize=None):
        return self.map_async(func, iterable, chunksize).get()

    def starmap(self, func, iterable, chunksize=None):
        return self.starmap_async(func, iterable, chunksize).get()

    def map_async(self, func, iterable, chunksize=None, callback=None, error_callback=None):
        self._check_running()
        refs = self._submit_chunks(func, self._chunks(iterable, chunksize, False), star=False)
        return MapResult(self, refs, lambda values: [x for chunk in values for x in chunk], callback,
                         error_callback)

    def starmap_async(self, func, iterable, chunksize=None, callback=None, error_callback=None):
        self._check_running()
        refs = self._submit_chunks(func, self._chunks(iterable, chunksize, True), star=True)
        return MapResult(self, refs, lambda values: [x for chunk in values for x in chunk], callback,
                         error_callback)

    def imap(self, func, iterable, chunksize=1):
        self._check_running()
        return IMapIterator(self, func, iterable, self._imap_chunksize(chunksize), True)

    def imap_unordered(self, func, iterable, chunksize=1):
        self._check_running()
        return IMapUnorderedIterator(self, func, iterable, self._imap_chunksize(chunksize), False)

    @staticmethod
    def _imap_chunksize(chunksize):
        if chunksize < 1:
            raise ValueError(f"Chunksize must be 1+, not {chunksize:n}")
        return int(chunksize)

    # ---- ending

    def close(self):
        """No more work is accepted; what was submitted finishes."""
        if self._state == "run":
            self._state = "close"

    def terminate(self):
        """Stops the work at once: what has not finished is cancelled."""
        self._state = "terminate"
        self._terminated = True  # imap's feeders submit no more
        with self._lock:
            feeders = list(self._feeders)
        for thread in feeders:
            if thread is not threading.current_thread():
                thread.join(5)  # (one blocked reading its iterable is left: it submits nothing more)
        with self._lock:
            refs, self._live = self._live, set()
        for ref in refs:
            try:
                _manta.cancel(ref)
            except Exception:
                pass
        self._stop_results_thread()

    def join(self):
        """Waits for the submitted work (after close or terminate)."""
        if self._state == "run":
            raise ValueError("Pool is still running")
        with self._lock:
            feeders = list(self._feeders)
        for thread in feeders:  # imap's iterables are read to their end first, as multiprocessing does
            thread.join()
        with self._lock:
            refs = list(self._live)
        if refs:
            _api.wait(refs, num_returns=len(refs))
        self._stop_results_thread()

    def _stop_results_thread(self):
        with self._changed:
            self._stopping = True
            self._changed.notify_all()
            thread = self._results_thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def __enter__(self):
        self._check_running()
        return self

    def __exit__(self, *exc):
        self.terminate()

    def __reduce__(self):
        raise NotImplementedError("pool objects cannot be passed between processes or pickled")


class _ChunkRunner:
    """The callable a chunk task runs: the user's function over a chunk."""

    def __init__(self, fn):
        self.fn = fn

    def __call__(self, call):
        return run_chunk(self.fn, call)


class _ApplyCall:
    """apply_async's one call with keyword arguments, as a chunk of one."""

    def __init__(self, fn):
        self.fn = fn

    def __call__(self, args, kwds):
        return self.fn(*args, **kwds)
