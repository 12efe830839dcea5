"""The exceptions of manta, under Ray's names (``ray.exceptions``)."""

from manta._worker import PICKLED_EXCEPTION_MARK


class RayError(Exception):
    """Base of every exception manta raises."""


class UsageError(RayError, RuntimeError):
    """The API was used wrongly (init twice, a call after shutdown, ...)."""


class RaySystemError(RayError):
    """The runtime itself failed."""


class RayTaskError(RayError):
    """A task (or a task it depended on) raised.

    ``get`` raises it as an instance of both RayTaskError and the class of the
    task's exception, so ``except ValueError:`` catches a remote ValueError.
    ``cause`` is the task's exception, ``traceback_str`` its remote traceback.
    """

    def __init__(self, function_name="", traceback_str="", cause=None, pid=None, chain=""):
        self.function_name = function_name
        self.traceback_str = traceback_str
        self.cause = cause
        self.pid = pid
        self.chain = chain
        super().__init__(self._message())

    def _message(self):
        where = f"task '{self.function_name}'" + (f" (pid={self.pid})" if self.pid else "")
        through = f" [failed through: {self.chain}]" if self.chain and self.chain != self.function_name else ""
        return f"{where} raised{through}:\n{self.traceback_str.rstrip()}"

    def __str__(self):
        return self._message()

    def __reduce__(self):
        return (RayTaskError, (self.function_name, self.traceback_str, self.cause, self.pid, self.chain))

    def as_instanceof_cause(self):
        """This error as an instance of both RayTaskError and its cause's class."""
        cause = self.cause
        if cause is None or isinstance(cause, RayTaskError):
            return self
        cause_cls = type(cause)
        try:
            dual = _dual_classes.get(cause_cls)
            if dual is None:
                dual = type(f"RayTaskError({cause_cls.__name__})", (RayTaskError, cause_cls), {
                    "__init__": _dual_init,
                    "__str__": RayTaskError.__str__,
                    "__reduce__": RayTaskError.__reduce__,
                    "__getattr__": _dual_getattr,
                    "__module__": __name__,
                })
                _dual_classes[cause_cls] = dual
            return dual(self)
        except Exception:  # a class that cannot be subclassed: the plain error
            return self


_dual_classes = {}


def _dual_init(self, error):
    self.function_name = error.function_name
    self.traceback_str = error.traceback_str
    self.cause = error.cause
    self.pid = error.pid
    self.chain = error.chain
    self.args = (error._message(),)


def _dual_getattr(self, name):
    # Attributes of the original exception (e.g. errno, a custom field).
    cause = self.__dict__.get("cause")
    if cause is None:
        raise AttributeError(name)
    return getattr(cause, name)


class RayActorError(RayError):
    """The actor a call was sent to died (killed, crashed past max_restarts, or
    its constructor raised)."""


ActorDiedError = RayActorError


class WorkerCrashedError(RayError):
    """The process running the task died more often than max_retries allowed."""


class GetTimeoutError(RayError, TimeoutError):
    """get (or a queue's, a pool's wait) ran past its timeout."""


class TaskCancelledError(RayError):
    """The task was cancelled, or depended on one that was."""


class ObjectStoreFullError(RayError):
    """The object store has no room for a value and nothing can be spilled."""


class OutOfMemoryError(RayError):
    """The memory monitor killed the task past its retries."""


class NodeDiedError(RayError):
    """The node that held a task, an object or an actor was lost."""


class ObjectLostError(RayError):
    """An object can no longer be reached."""


def _from_task_error(remote_type, message, function_name, pid, chain, what):
    """The exception get raises for a task's failure (called by the runtime)."""
    text, mark, pickled = message.partition(PICKLED_EXCEPTION_MARK)
    cause = None
    if mark and pickled:
        try:
            import base64
            import pickle
            cause = pickle.loads(base64.b64decode(pickled))
        except Exception:
            cause = None
    if not mark:  # a C++ task's exception
        text = f"{remote_type}: {message}"
    error = RayTaskError(function_name, text, cause, pid, chain)
    return error.as_instanceof_cause()
