"""@remote functions and classes: RemoteFunction, ActorClass, ActorHandle."""
import inspect
import threading

from manta import _api, _manta, exceptions
from manta._manta import ObjectRef
from manta._serialization import RefSlot

_TASK_OPTIONS = frozenset(("num_cpus", "num_gpus", "resources", "memory", "num_returns", "num_return_vals",
                           "max_retries", "retry_exceptions", "name", "max_calls", "timeout"))
_ACTOR_OPTIONS = frozenset(("num_cpus", "num_gpus", "resources", "memory", "max_restarts", "max_task_retries",
                            "max_concurrency", "name", "lifetime", "namespace", "get_if_exists"))
# Ray's options that place work on other hardware or environments: accepted, no effect here.
_IGNORED_OPTIONS = frozenset(("runtime_env", "scheduling_strategy", "placement_group", "accelerator_type",
                              "placement_group_bundle_index", "placement_group_capture_child_tasks",
                              "object_store_memory", "_metadata", "concurrency_groups", "label_selector",
                              "enable_task_events", "_labels", "max_pending_calls", "lifetime", "namespace"))


def _check_options(options, allowed, what):
    unknown = set(options) - allowed - _IGNORED_OPTIONS
    if unknown:
        raise ValueError(f"invalid option(s) for {what}: {', '.join(sorted(unknown))}")
    retry = options.get("retry_exceptions")
    if retry is not None and not isinstance(retry, bool):
        raise TypeError("retry_exceptions: only True or False is supported here")


def _qualified_name(obj):
    module = getattr(obj, "__module__", None) or "__main__"
    return f"{module}.{getattr(obj, '__qualname__', getattr(obj, '__name__', '?'))}"


def _split_refs(args, kwargs):
    """(args, kwargs) with top-level ObjectRefs replaced by slots, and the refs."""
    refs = None
    for a in args:
        if type(a) is ObjectRef:
            refs = []
            break
    if kwargs:
        for v in kwargs.values():
            if type(v) is ObjectRef:
                refs = []
                break
    if refs is None:
        return (args, kwargs or None), None

    def slot(v):
        if type(v) is ObjectRef:
            refs.append(v)
            return RefSlot(len(refs) - 1)
        return v

    args = tuple(slot(a) for a in args)
    kwargs = {k: slot(v) for k, v in kwargs.items()} if kwargs else None
    return (args, kwargs), refs


def _empty(cls):
    return cls.__new__(cls)


class _Stored:
    """A function or class stored once per runtime, so each call names it by id."""

    def __init__(self, obj):
        self._obj = obj
        self._ref = None
        self._epoch = -1
        self._lock = threading.Lock()

    def __getstate__(self):
        # Already stored: the receiver names it by this id. Not stored yet (or
        # being stored: a function that calls itself), the receiver stores it.
        current = self._ref is not None and self._epoch == _api.epoch()
        return {"obj": self._obj, "ref": self._ref if current else None}

    def __setstate__(self, state):
        self._obj = state["obj"]
        self._ref = state["ref"]
        self._epoch = _api.epoch()
        self._lock = threading.Lock()

    def ref(self):
        if self._epoch != _api.epoch() or self._ref is None:
            with self._lock:
                if self._epoch != _api.epoch() or self._ref is None:
                    self._ref = _manta.put(self._obj)
                    self._epoch = _api.epoch()
        return self._ref


class RemoteFunction:
    """A function made remote by @manta.remote: ``f.remote(*args)`` runs it as a task."""

    def __init__(self, function, options, stored=None):
        _check_options(options, _TASK_OPTIONS, "a remote function")
        self._function = function
        self._options = dict(options)
        self._stored = stored or _Stored(function)
        n = options.get("num_returns", options.get("num_return_vals", 1))
        if not isinstance(n, int) or n < 0:
            raise ValueError(f"num_returns must be an int >= 0 (dynamic returns are not supported), got {n!r}")
        self._num_returns = n
        self._task_options = None
        self.__name__ = getattr(function, "__name__", "remote_function")
        self.__qualname__ = getattr(function, "__qualname__", self.__name__)
        self.__module__ = getattr(function, "__module__", None)
        self.__doc__ = getattr(function, "__doc__", None)
        self.__wrapped__ = function

    def __reduce__(self):
        # The state after the object: a function that calls itself pickles once.
        return (_empty, (RemoteFunction,), (self._function, self._options, self._stored))

    def __setstate__(self, state):
        function, options, stored = state
        RemoteFunction.__init__(self, function, options, stored)

    def __call__(self, *args, **kwargs):
        raise TypeError(f"Remote functions cannot be called directly: use {self.__name__}.remote(...) "
                        f"(the function itself is {self.__name__}.__wrapped__)")

    def options(self, **options):
        merged = dict(self._options)
        merged.update(options)
        if "num_return_vals" in options:
            merged.pop("num_returns", None)
        return RemoteFunction(self._function, merged, self._stored)

    def _make_task_options(self):
        o = self._options
        timeout = o.get("timeout") or 0.0
        return _manta.TaskOptions(
            num_cpus=float(o.get("num_cpus", 1) if o.get("num_cpus") is not None else 1),
            num_gpus=float(o.get("num_gpus") or 0), resources=dict(o.get("resources") or {}),
            memory=int(o.get("memory") or 0),
            max_retries=int(o.get("max_retries", 3) if o.get("max_retries") is not None else 3),
            retry_exceptions=bool(o.get("retry_exceptions", False)),
            name=o.get("name") or _qualified_name(self._function), timeout=float(timeout),
            max_calls=int(o.get("max_calls") or 0))

    def remote(self, *args, **kwargs):
        if not _manta.is_initialized():
            _api.auto_init()
        if self._task_options is None:
            self._task_options = self._make_task_options()
        payload, refs = _split_refs(args, kwargs)
        n = self._num_returns
        out = _manta.submit_task(self._stored.ref(), payload, refs, self._task_options, n or 1)
        return None if n == 0 else out

    def bind(self, *args, **kwargs):
        raise NotImplementedError("Ray DAGs (bind) are not supported: call .remote()")


def method(*args, **kwargs):
    """@manta.method(num_returns=N) on an actor's method, as @ray.method."""
    def decorate(m):
        if "num_returns" in kwargs:
            m.__manta_num_returns__ = kwargs["num_returns"]
        return m
    if args and callable(args[0]) and not kwargs:
        return args[0]
    return decorate


def _method_table(cls):
    table = {}
    for name, member in inspect.getmembers(cls):
        if name.startswith("__") and name != "__call__":
            continue
        if callable(member):
            table[name] = getattr(member, "__manta_num_returns__", 1)
    return table


class ActorClass:
    """A class made remote by @manta.remote: ``C.remote(*args)`` starts an actor."""

    def __init__(self, cls, options, stored=None):
        _check_options(options, _ACTOR_OPTIONS, "an actor class")
        self._cls = cls
        self._options = dict(options)
        self._stored = stored or _Stored(cls)
        self._methods = _method_table(cls)
        self._is_async = any(inspect.iscoroutinefunction(m) or inspect.isasyncgenfunction(m)
                             for _, m in inspect.getmembers(cls, callable))
        self.__name__ = cls.__name__
        self.__qualname__ = cls.__qualname__
        self.__module__ = cls.__module__
        self.__doc__ = cls.__doc__

    def __reduce__(self):
        return (_empty, (ActorClass,), (self._cls, self._options, self._stored))

    def __setstate__(self, state):
        cls, options, stored = state
        ActorClass.__init__(self, cls, options, stored)

    def __call__(self, *args, **kwargs):
        raise TypeError(f"Actors cannot be instantiated directly: use {self.__name__}.remote(...)")

    def options(self, **options):
        merged = dict(self._options)
        merged.update(options)
        return ActorClass(self._cls, merged, self._stored)

    def remote(self, *args, **kwargs):
        _api.auto_init()
        o = self._options
        name = o.get("name") or ""
        if name and o.get("get_if_exists"):
            existing = _manta.find_actor(name)
            if existing is not None:
                return ActorHandle(existing, self._cls.__name__, self._methods)
        concurrency = o.get("max_concurrency")
        if concurrency is None:  # Ray's defaults: 1000 calls in flight for an async actor, else 1
            concurrency = 1000 if self._is_async else 1
        options = _manta.TaskOptions(
            num_cpus=float(o.get("num_cpus") or 0), num_gpus=float(o.get("num_gpus") or 0),
            resources=dict(o.get("resources") or {}), memory=int(o.get("memory") or 0),
            max_retries=0, name=name, max_restarts=int(o.get("max_restarts") or 0),
            max_task_retries=int(o.get("max_task_retries") or 0), max_concurrency=int(concurrency),
            class_label=self._cls.__qualname__)
        payload, refs = _split_refs(args, kwargs)
        try:
            ref = _manta.create_actor(self._stored.ref(), payload, refs, options)
        except exceptions.UsageError as e:
            if not name or "already exists" not in str(e):
                raise
            existing = _manta.find_actor(name) if o.get("get_if_exists") else None
            if existing is not None:  # another thread made it first
                return ActorHandle(existing, self._cls.__name__, self._methods)
            raise ValueError(f"The name '{name}' is already taken: use a different name, or get the "
                             f"existing actor with get_actor('{name}')") from None
        return ActorHandle(ref, self._cls.__name__, self._methods)


class ActorMethod:
    """``handle.method``: ``.remote(*args)`` queues a call; ``.options(num_returns=)``."""

    def __init__(self, handle, name, num_returns, timeout=0.0):
        # The actor's ref, not its handle: a handle caches its methods, and a
        # cycle between them would keep the actor alive until a GC pass.
        self._actor_ref = handle._actor_ref
        self._class_name = handle._class_name
        self._name = name
        self._num_returns = num_returns
        self._timeout = float(timeout or 0.0)
        self._label = f"{handle._class_name}.{name}"

    def remote(self, *args, **kwargs):
        payload, refs = _split_refs(args, kwargs)
        n = self._num_returns
        out = _manta.call_method(self._actor_ref, self._name, payload, refs, n or 1, self._label,
                                 self._timeout)
        return None if n == 0 else out

    def options(self, num_returns=None, timeout=None, **ignored):
        return ActorMethod(self, self._name, self._num_returns if num_returns is None else num_returns,
                           self._timeout if timeout is None else timeout)

    def __call__(self, *args, **kwargs):
        raise TypeError(f"Actor methods cannot be called directly: use .{self._name}.remote(...)")


class ActorHandle:
    """A handle of an actor: picklable, passed to tasks and actors, returned from them."""

    def __init__(self, actor_ref, class_name, methods):
        self._actor_ref = actor_ref
        self._class_name = class_name
        self._methods = methods

    def __getattr__(self, name):
        methods = self.__dict__.get("_methods")
        if methods is None or name.startswith("__"):
            raise AttributeError(name)
        if name not in methods:
            raise AttributeError(f"'{self.__dict__.get('_class_name')}' actor has no method '{name}'")
        method = ActorMethod(self, name, methods[name])
        self.__dict__[name] = method  # found directly from now on
        return method

    def __reduce__(self):
        return (ActorHandle, (self._actor_ref, self._class_name, self._methods))

    def __getstate__(self):
        return None

    def __repr__(self):
        return f"Actor({self._class_name}, {self._actor_ref.hex()})"

    def __eq__(self, other):
        return isinstance(other, ActorHandle) and self._actor_ref == other._actor_ref

    def __hash__(self):
        return hash(self._actor_ref)


def remote(*args, **options):
    """@manta.remote, bare or with options, on a function or a class."""
    def make(target):
        if inspect.isclass(target):
            return ActorClass(target, options)
        if callable(target):
            return RemoteFunction(target, options)
        raise TypeError("@remote takes a function or a class")
    if len(args) == 1 and not options and callable(args[0]):
        return make(args[0])
    if args:
        raise TypeError("@remote takes keyword options only, e.g. @remote(num_cpus=2)")
    return make


def get_actor(name, namespace=None):
    """The actor started with ``.options(name=name)``."""
    _api.auto_init()
    ref = _manta.find_actor(name)
    if ref is None:
        raise ValueError(f"Failed to look up actor with name '{name}'")
    cls = _api.get(_manta.call_method(ref, "__manta_class__", ((), None), None, 1, "get_actor", 0.0))
    return ActorHandle(ref, cls.__name__, _method_table(cls))


def kill(actor, *, no_restart=True):
    """Ends the actor now: its calls fail with RayActorError."""
    if not isinstance(actor, ActorHandle):
        raise ValueError(f"kill() takes an actor handle, not {type(actor).__name__}")
    _manta.kill_actor(actor._actor_ref)
