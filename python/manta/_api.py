"""The runtime's lifecycle and the calls on objects: init, shutdown, put, get,
wait, cancel, resources (Ray's names and semantics)."""
import atexit
import os
import threading

from manta import _manta
from manta._manta import ObjectRef
from manta import _serialization, exceptions

_lock = threading.RLock()
_epoch = 0          # bumped by every init: stored functions belong to one runtime
_local_mode = False
_atexit_registered = False

# Ray's init arguments that have no meaning here, accepted so Ray programs run.
_IGNORED_INIT_ARGS = frozenset((
    "namespace", "runtime_env", "logging_level", "logging_format", "log_to_driver", "configure_logging",
    "include_dashboard", "dashboard_host", "dashboard_port", "job_config", "_system_config", "_temp_dir",
    "_plasma_directory", "_node_ip_address", "_redis_password", "_enable_object_reconstruction",
    "_metrics_export_port", "storage", "labels", "_memory", "_driver_object_store_memory", "enable_resource_isolation",
))


def init(address=None, *, num_cpus=None, num_gpus=None, resources=None, object_store_memory=None,
         local_mode=False, ignore_reinit_error=False, log_dir=None, memory_threshold=0.95, progress=False,
         worker_setup=None, **kwargs):
    """Starts the runtime: the zygote and ``num_cpus`` worker processes (default:
    the CPU count), forked from this interpreter.

    ``address``: None runs on this machine, unless ``MANTA_ADDRESS`` names a
    cluster; "auto" or "host:port" joins the cluster there.
    """
    global _epoch, _local_mode, _atexit_registered
    unknown = set(kwargs) - _IGNORED_INIT_ARGS
    if unknown:
        raise TypeError(f"init() got unexpected keyword arguments: {', '.join(sorted(unknown))}")
    if worker_setup is not None:
        raise TypeError("init(worker_setup=) is C++ only; use multiprocessing.Pool(initializer=) "
                        "or an actor's constructor")
    with _lock:
        if _manta.is_initialized():
            if ignore_reinit_error:
                return RuntimeContext()
            raise RuntimeError("manta.init was called twice (pass ignore_reinit_error=True to allow it)")
        if address == "auto":
            address = os.environ.get("MANTA_ADDRESS", "")
            if not address:
                raise ConnectionError("init(address='auto'): MANTA_ADDRESS is not set (start a cluster with "
                                      "'manta start --head' and run under 'manta start -- ...')")
        if address and address.startswith("ray://"):
            address = address[len("ray://"):]
        if num_cpus is not None and (int(num_cpus) != num_cpus or num_cpus < 0):
            raise ValueError(f"init(num_cpus={num_cpus!r}): a whole number >= 0")
        _serialization.remember_main()
        _manta.init(int(num_cpus or 0), int(object_store_memory or 0), -1 if num_gpus is None else int(num_gpus),
                    {str(k): float(v) for k, v in (resources or {}).items()}, address or "", log_dir or "",
                    False, bool(local_mode), float(memory_threshold), bool(progress))
        _epoch += 1
        _local_mode = bool(local_mode)
        if not _atexit_registered:
            atexit.register(_shutdown_at_exit)
            _atexit_registered = True
    return RuntimeContext()


def _shutdown_at_exit():
    try:
        shutdown()
    except Exception:
        pass


def shutdown():
    """Stops the runtime: every worker and actor ends, objects are freed."""
    with _lock:
        _manta.shutdown()


def is_initialized():
    return _manta.is_initialized()


def auto_init():
    """As Ray does, the first call that needs a runtime starts one."""
    if not _manta.is_initialized():
        with _lock:
            if not _manta.is_initialized():
                init()


def epoch():
    return _epoch


def put(value):
    """Stores ``value`` once; returns its ObjectRef. Large buffers (numpy
    arrays) are written into the shared arena, which readers view in place."""
    auto_init()
    return _manta.put(value)


def get(object_refs, *, timeout=None):
    """The value of an ObjectRef, or the values of a list of them, once ready.

    A task's exception is raised as an instance of both RayTaskError and its
    own class; ``timeout`` (seconds) raises GetTimeoutError."""
    if type(object_refs) is ObjectRef:
        return _manta.get([object_refs], timeout)[0]
    if isinstance(object_refs, (list, tuple)):
        if not object_refs:
            return []
        return _manta.get(list(object_refs), timeout)
    if isinstance(object_refs, ObjectRef):
        return _manta.get([object_refs], timeout)[0]
    raise ValueError(f"'object_refs' must either be an ObjectRef or a list of ObjectRefs, "
                     f"not {type(object_refs).__name__}")


def wait(object_refs, *, num_returns=1, timeout=None, fetch_local=True):
    """(ready, not_ready): once ``num_returns`` of the refs are done (or failed),
    or ``timeout`` seconds passed; both lists keep the order of ``object_refs``."""
    if isinstance(object_refs, ObjectRef) or not isinstance(object_refs, (list, tuple)):
        raise TypeError("wait() expected a list of ObjectRef, got " + type(object_refs).__name__)
    object_refs = list(object_refs)
    if not object_refs:  # as Ray: nothing to wait for is an answer, not an error
        return [], []
    if len(set(object_refs)) != len(object_refs):
        raise ValueError("wait() expected a list of unique ObjectRefs")
    if num_returns < 0 or num_returns > len(object_refs):
        raise ValueError(f"wait(num_returns={num_returns}) with {len(object_refs)} refs")
    if timeout is not None and timeout < 0:
        raise ValueError("wait(timeout=) must be None or >= 0")
    flags = _manta.wait(object_refs, num_returns, timeout)
    ready, not_ready = [], []
    for ref, done in zip(object_refs, flags):
        (ready if done and len(ready) < num_returns else not_ready).append(ref)
    return ready, not_ready


def cancel(object_ref, *, force=False, recursive=True):
    """Cancels the task producing ``object_ref``: it fails with TaskCancelledError."""
    if not isinstance(object_ref, ObjectRef):
        raise TypeError(f"cancel() expected an ObjectRef, got {type(object_ref).__name__}")
    _manta.cancel(object_ref)


def get_gpu_ids():
    return list(_manta.gpu_ids())


def _ray_resources(r):
    out = dict(r)
    return out


def available_resources():
    auto_init()
    return _ray_resources(_manta.resources(True))


def cluster_resources():
    auto_init()
    return _ray_resources(_manta.resources(False))


def nodes():
    auto_init()
    return _manta.nodes()


class RuntimeContext:
    """What ray.get_runtime_context() answers."""

    def get_node_id(self):
        return _manta.node_id()

    @property
    def node_id(self):
        return _manta.node_id()

    def get_gpu_ids(self):
        return get_gpu_ids()

    def get_job_id(self):
        return f"{os.getpid():08x}"

    @property
    def was_current_actor_reconstructed(self):
        return False

    def get(self):
        return {"node_id": self.get_node_id()}


def get_runtime_context():
    return RuntimeContext()


def _ref_future(ref):
    """A concurrent.futures.Future of the ref's value (a thread waits for it)."""
    import concurrent.futures
    future = concurrent.futures.Future()

    def settle():
        try:
            future.set_result(get(ref))
        except BaseException as e:  # the task's error, for whoever looks
            future.set_exception(e)
    threading.Thread(target=settle, name="manta-ref-future", daemon=True).start()
    return future


def _ref_await(ref):
    import asyncio
    return asyncio.wrap_future(_ref_future(ref)).__await__()


# `await ref` in async code, and ref.future(), as Ray's refs allow.
ObjectRef.future = _ref_future
ObjectRef.__await__ = _ref_await
