"""How Python values are pickled for the object store.

Pickle protocol 5: every buffer of 64 KiB or more (numpy arrays, bytearrays,
memoryviews) travels out of band, so the runtime writes it once into the
shared arena and readers see it there without a copy. Values of plain types
use the C pickler; everything else cloudpickle, so functions, lambdas and
classes defined in ``__main__`` after ``init`` travel by value.
"""
import pickle

import cloudpickle

OUT_OF_BAND_BYTES = 64 * 1024

_PLAIN = frozenset((int, float, str, bytes, bool, type(None), complex))
_dumps = pickle.dumps
_cloud_dumps = cloudpickle.dumps


def _plain(value):
    t = type(value)
    if t in _PLAIN:
        return True
    if t is tuple or t is list:
        return len(value) <= 64 and all(type(x) in _PLAIN for x in value)
    return False


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

    data = _cloud_dumps(value, 5, buffer_callback=out_of_band)
    return data, (buffers or None)


def dumps_function(fn):
    """A function or class, by value when it cannot be found by name elsewhere."""
    return fn


class RefSlot:
    """Where a top-level ObjectRef argument was: the worker puts its value here."""
    __slots__ = ("index",)

    def __init__(self, index):
        self.index = index

    def __reduce__(self):
        return (RefSlot, (self.index,))
