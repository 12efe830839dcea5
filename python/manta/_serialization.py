"""How Python values are pickled for the object store.

Pickle protocol 5: every buffer of 64 KiB or more (numpy arrays, bytearrays,
memoryviews) travels out of band, so the runtime writes it once into the
shared arena and readers see it there without a copy. Values of plain types
use the C pickler; everything else cloudpickle, so functions, lambdas and
classes defined in ``__main__`` after ``init`` travel by value.
"""
import io
import pickle
import sys
import types

import cloudpickle

OUT_OF_BAND_BYTES = 64 * 1024

_PLAIN = frozenset((int, float, str, bytes, bool, type(None), complex))
_dumps = pickle.dumps


def _plain(value):
    t = type(value)
    if t in _PLAIN:
        return True
    if t is tuple or t is list:
        return len(value) <= 64 and all(type(x) in _PLAIN for x in value)
    return False


# What __main__ held when init forked the zygote: its functions and classes
# exist in every worker under the same name, so they travel by name (and share
# __main__'s globals there, as with multiprocessing's fork); later ones by value.
_forked_main = {}


def remember_main():
    """Called by init just before the zygote is forked."""
    main = sys.modules.get("__main__")
    _forked_main.clear()
    if main is not None:
        for name, obj in list(vars(main).items()):
            if isinstance(obj, (types.FunctionType, type)):
                _forked_main[name] = obj


class _Pickler(cloudpickle.CloudPickler):
    def reducer_override(self, obj):
        if isinstance(obj, (types.FunctionType, type)) and getattr(obj, "__module__", None) == "__main__" and \
                _forked_main.get(getattr(obj, "__qualname__", None)) is obj:
            return NotImplemented  # by name: the worker's __main__ has it
        return super().reducer_override(obj)


class _NeedsCloudpickle(Exception):
    """A value holds code that only cloudpickle can send (by value)."""


def _by_name_in_worker(obj):
    """Whether a function or class is found under its name in a worker."""
    module = getattr(obj, "__module__", None)
    qualname = getattr(obj, "__qualname__", "")
    if module == "__main__":
        return _forked_main.get(qualname) is obj
    return module is not None and "<" not in qualname


class _FastPickler(pickle.Pickler):
    """The C pickler, for values whose code (functions, classes) every worker
    finds by name; anything else makes it give up for cloudpickle."""

    def reducer_override(self, obj):
        if isinstance(obj, (types.FunctionType, type)) and not _by_name_in_worker(obj):
            raise _NeedsCloudpickle
        return NotImplemented


def _fast_dumps(value, buffer_callback):
    out = io.BytesIO()
    _FastPickler(out, 5, buffer_callback=buffer_callback).dump(value)
    return out.getvalue()


def _cloud_dumps(value, protocol, buffer_callback=None):
    out = io.BytesIO()
    _Pickler(out, protocol=protocol, buffer_callback=buffer_callback).dump(value)
    return out.getvalue()


def pickle_by_value(value):
    """cloudpickle's bytes, but code __main__ held at init goes by name (so the
    driver's own class comes back, and ``except MainError:`` catches it)."""
    return _cloud_dumps(value, 5)


def serialize(value):
    """Returns (pickle bytes, list of out-of-band PickleBuffers or None)."""
    # The call payload, (args, kwargs), of plain values: the C pickler alone.
    if type(value) is tuple and len(value) == 2 and _plain(value[0]) and (
            value[1] is None or (type(value[1]) is dict and _plain(tuple(value[1].values())))):
        return _dumps(value, 5), None
    if _plain(value):
        return _dumps(value, 5), None
    buffers = []

    def out_of_band(buffer):
        try:
            size = buffer.raw().nbytes
        except BufferError:  # not contiguous: pickled in band
            return True
        if size < OUT_OF_BAND_BYTES:
            return True
        buffers.append(buffer)
        return False

    try:
        data = _fast_dumps(value, out_of_band)
    except (_NeedsCloudpickle, pickle.PicklingError, AttributeError, TypeError):
        # Lambdas, closures, code defined in __main__ after init: by value.
        buffers.clear()
        data = _cloud_dumps(value, 5, buffer_callback=out_of_band)
    return data, (buffers or None)


class RefSlot:
    """Where a top-level ObjectRef argument was: the worker puts its value here."""
    __slots__ = ("index",)

    def __init__(self, index):
        self.index = index

    def __reduce__(self):
        return (RefSlot, (self.index,))


def rebuild_ref(hi, lo):
    """An ObjectRef unpickled: one more count of the object with this id."""
    from manta import _manta
    return _manta._ref_from_id(hi, lo)
