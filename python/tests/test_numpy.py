"""numpy arrays in and out of the object store without a copy."""
import gc

import pytest

import manta as ray

np = pytest.importorskip("numpy")


def arena_backed(a):
    """Whether a's memory is a view of the arena (an ArenaView is at the bottom of its bases)."""
    base = a
    while getattr(base, "base", None) is not None:
        base = base.base
    if isinstance(base, memoryview):
        base = base.obj
    return type(base).__name__ == "ArenaView"


def test_put_get_is_zero_copy_and_read_only(runtime):
    a = np.arange(1_000_000, dtype=np.float64)
    r = ray.put(a)
    b1 = ray.get(r)
    b2 = ray.get(r)
    assert np.array_equal(a, b1)
    assert np.shares_memory(b1, b2)  # two gets view the same bytes
    assert not np.shares_memory(a, b1)  # written once into the arena
    assert not b1.flags.writeable
    assert arena_backed(b1)
    with pytest.raises(ValueError):
        b1[0] = 1


def test_small_arrays_travel_inline(runtime):
    a = np.arange(10)
    b = ray.get(ray.put(a))
    assert np.array_equal(a, b) and b.flags.writeable  # a copy: under 64 KiB


def test_arrays_as_arguments_and_results(runtime):
    @ray.remote
    def info(x):
        return float(x.sum()), x.flags.writeable, arena_backed(x)

    @ray.remote
    def make(n):
        return np.ones(n, dtype=np.float32)

    a = np.random.default_rng(0).random(500_000)
    total, writeable, in_arena = ray.get(info.remote(a))
    assert total == pytest.approx(a.sum()) and not writeable and in_arena
    r = ray.put(a)
    assert ray.get(info.remote(r))[2]  # a ref passed at top level: the worker views the arena too
    big = ray.get(make.remote(1 << 20))
    assert big.dtype == np.float32 and big.sum() == 1 << 20 and arena_backed(big)
    nested = ray.get(ray.remote(lambda d: d["x"].shape).remote({"x": a, "y": 1}))
    assert nested == a.shape


def test_a_view_keeps_its_object_pinned(runtime):
    r = ray.put(np.full(1 << 20, 7, dtype=np.int64))
    view = ray.get(r)
    del r
    gc.collect()
    # The ref is gone; the view still pins the object: other puts cannot reuse its bytes.
    others = [ray.put(np.zeros(1 << 20, dtype=np.int64)) for _ in range(8)]
    assert (view == 7).all()
    del others


def test_many_arrays_in_a_list_and_structured_values(runtime):
    arrays = [np.full(100_000, i, dtype=np.int32) for i in range(5)]
    got = ray.get(ray.put({"arrays": arrays, "meta": "m"}))
    assert got["meta"] == "m" and [int(x[0]) for x in got["arrays"]] == list(range(5))
    assert all(arena_backed(x) for x in got["arrays"])
    matrix = np.asfortranarray(np.arange(200_000, dtype=np.float64).reshape(400, 500))
    back = ray.get(ray.put(matrix))
    assert np.array_equal(back, matrix)
    strided = np.arange(1_000_000)[::2]  # not contiguous: pickled in band
    assert np.array_equal(ray.get(ray.put(strided)), strided)
    assert ray.get(ray.put(bytearray(200_000))) == bytearray(200_000)


def test_refs_inside_a_value_with_arrays(runtime):
    inner = ray.put("inside")
    got = ray.get(ray.put({"ref": inner, "a": np.zeros(100_000)}))
    assert ray.get(got["ref"]) == "inside" and got["a"].sum() == 0
