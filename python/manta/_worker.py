"""What workers and actor hosts run for a Python call (called from C++)."""
import base64
import sys
import threading
import traceback

from manta._serialization import RefSlot, pickle_by_value

PICKLED_EXCEPTION_MARK = "\n--- manta pickled exception ---\n"


def _fill(payload, resolved):
    args, kwargs = payload
    if resolved:
        args = tuple(resolved[a.index] if type(a) is RefSlot else a for a in args)
        if kwargs:
            kwargs = {k: (resolved[v.index] if type(v) is RefSlot else v) for k, v in kwargs.items()}
    return args, kwargs


def run_task(fn, payload, resolved):
    args, kwargs = _fill(payload, resolved)
    if kwargs:
        return fn(*args, **kwargs)
    return fn(*args)


def construct(cls, payload, resolved):
    args, kwargs = _fill(payload, resolved)
    return cls(*args, **(kwargs or {}))


def run_method(instance, name, payload, resolved):
    args, kwargs = _fill(payload, resolved)
    if name == "__manta_ready__":
        return True
    if name == "__manta_class__":
        return type(instance)
    method = getattr(instance, name)
    result = method(*args, **(kwargs or {}))
    if hasattr(result, "__await__"):  # an async method: on the actor's event loop
        import asyncio
        result = asyncio.run_coroutine_threadsafe(_awaited(result), _actor_loop()).result()
    return result


async def _awaited(awaitable):
    return await awaitable


# An actor's async methods share one event loop, on a thread of its own, as
# Ray's async actors do: they overlap while they await, and an asyncio.Event
# one call makes is awaited by another. The calling executor thread waits.
_loop = None
_loop_lock = threading.Lock()


def _actor_loop():
    global _loop
    with _loop_lock:
        if _loop is None:
            import asyncio
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="manta-actor-asyncio", daemon=True).start()
            _loop = loop
    return _loop


def set_up_process():
    """In a worker or actor host, before its first call: what it prints reaches
    the driver line by line (the runtime prefixes each with its pid)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.reconfigure(line_buffering=True)
        except (AttributeError, ValueError):
            pass


def flush_output():
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):
            pass


def _type_name(cls):
    module = getattr(cls, "__module__", "")
    qualname = getattr(cls, "__qualname__", cls.__name__)
    return qualname if module in ("builtins", "__main__", None, "") else f"{module}.{qualname}"


def describe_exception(exc, tb=None):
    """(type name, message): the traceback's text, then the pickled exception
    (base64), which get() turns back into an exception of the same class."""
    from manta.exceptions import RayTaskError
    if isinstance(exc, RayTaskError):  # a get inside the task failed: pass the cause on
        text = exc.traceback_str
        cause = exc.cause
        name = _type_name(type(cause)) if cause is not None else "RayTaskError"
        to_pickle = cause
    else:
        text = "".join(traceback.format_exception(type(exc), exc, tb or exc.__traceback__))
        name = _type_name(type(exc))
        to_pickle = exc
    if len(text) > 12 * 1024:  # the runtime keeps 64 KiB of a message
        text = text[:2048] + "\n[...]\n" + text[-10 * 1024:]
    try:
        pickled = base64.b64encode(pickle_by_value(to_pickle)).decode("ascii")
    except Exception:  # an exception that cannot be pickled: its text alone
        pickled = ""
    if len(pickled) > 48 * 1024:
        pickled = ""
    return name, text + PICKLED_EXCEPTION_MARK + pickled
