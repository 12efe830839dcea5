"""Values larger than the object store spill to disk and come back; arrays a
program still views stay where they are."""
import pytest

import manta as ray
from manta.exceptions import ObjectStoreFullError

np = pytest.importorskip("numpy")


def test_puts_beyond_the_store_spill_and_come_back(fresh, tmp_path):
    ray.init(num_cpus=2, object_store_memory=64 << 20, log_dir=str(tmp_path))
    refs = [ray.put(np.full(8 << 20, i, dtype=np.uint8)) for i in range(20)]  # 160 MB into 64 MB
    assert all(int(ray.get(r)[0]) == i for i, r in enumerate(refs))

    @ray.remote
    def first(a):
        return int(a[0])
    assert ray.get([first.remote(r) for r in refs], timeout=120) == list(range(20))


def test_views_pin_and_a_store_full_of_them_says_so(fresh, tmp_path):
    ray.init(num_cpus=1, object_store_memory=64 << 20, log_dir=str(tmp_path))
    held = [ray.get(ray.put(np.full(12 << 20, i, dtype=np.uint8))) for i in range(4)]  # 48 MB viewed
    with pytest.raises(ObjectStoreFullError, match="held by readers"):
        ray.put(np.zeros(40 << 20, dtype=np.uint8))
    assert [int(h[0]) for h in held] == [0, 1, 2, 3]  # untouched
    del held
    ray.put(np.zeros(40 << 20, dtype=np.uint8))  # room once the views are gone


def test_a_function_holding_an_array_does_not_pin_it_in_workers(fresh, tmp_path):
    # Each worker keeps the functions it ran; one closing over a large array
    # kept it pinned as long (views of the arena), so the store filled up.
    ray.init(num_cpus=1, object_store_memory=64 << 20, log_dir=str(tmp_path))
    for i in range(6):  # 6 x 20 MB of functions through a 64 MB store
        table = np.full(20 << 20, i, dtype=np.uint8)
        lookup = ray.remote(lambda k, table=table: int(table[k]))
        assert ray.get(lookup.remote(5), timeout=60) == i
        del lookup, table
