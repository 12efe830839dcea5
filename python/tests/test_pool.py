"""A multiprocessing.Pool test file: only the import differs from one written
for the standard library (swap it for `from multiprocessing import Pool,
TimeoutError` and it passes there too)."""
import os
import threading
import time

import pytest

from manta.util.multiprocessing import Pool, TimeoutError


def square(x):
    return x * x


def power(x, y):
    return x ** y


def fail_on_three(x):
    if x == 3:
        raise ValueError("three")
    return x


def slow(x):
    time.sleep(x)
    return x


def pid_of(_):
    return os.getpid()


def set_global(value):
    global CONFIGURED
    CONFIGURED = value


def read_global(x):
    return CONFIGURED + x


def test_map_starmap_apply():
    with Pool(2) as pool:
        assert pool.map(square, range(100)) == [x * x for x in range(100)]
        assert pool.map(square, range(100), chunksize=7) == [x * x for x in range(100)]
        assert pool.map(square, []) == []
        assert pool.starmap(power, [(2, 3), (3, 2), (10, 0)]) == [8, 9, 1]
        assert pool.apply(power, (2, 10)) == 1024
        assert pool.apply(power, (), {"x": 3, "y": 3}) == 27


def test_imap_and_imap_unordered():
    with Pool(2) as pool:
        assert list(pool.imap(square, range(20))) == [x * x for x in range(20)]
        assert list(pool.imap(square, range(20), chunksize=3)) == [x * x for x in range(20)]
        assert sorted(pool.imap_unordered(square, range(20))) == sorted(x * x for x in range(20))
        it = pool.imap(slow, [0.5])
        with pytest.raises(TimeoutError):
            it.next(timeout=0.01)
        assert it.next(timeout=30) == 0.5


def gated(gate):
    yield 1
    if not gate.wait(60):  # opened by the reader once it holds the first result
        raise RuntimeError("the iterable was read ahead of its results")
    yield 2


def broken_after_three():
    yield from range(3)
    raise KeyError("the iterable broke")


def open_file(path):
    with open(path):
        pass


def test_imap_reads_its_iterable_as_it_goes():
    with Pool(2) as pool:
        for imap in (pool.imap, pool.imap_unordered):
            gate = threading.Event()
            it = imap(square, gated(gate))
            assert it.next(timeout=30) == 1
            gate.set()
            assert list(it) == [4]
        it = pool.imap(square, broken_after_three())
        assert [next(it), next(it), next(it)] == [0, 1, 4]
        with pytest.raises(KeyError):
            next(it)


def test_errors_are_the_tasks_own_exceptions(tmp_path):
    missing = str(tmp_path / "missing")
    with Pool(2) as pool:
        with pytest.raises(FileNotFoundError) as info:
            pool.apply(open_file, (missing,))
        assert type(info.value) is FileNotFoundError
        assert info.value.errno == 2 and info.value.filename == missing
        with pytest.raises(ValueError) as info:
            pool.map(fail_on_three, range(5))
        assert info.value.args == ("three",)
        with pytest.raises(FileNotFoundError):
            next(pool.imap(open_file, [missing]))


def test_async_results_and_callbacks():
    got, errors = [], []
    with Pool(2) as pool:
        r = pool.apply_async(square, (6,), callback=got.append)
        assert r.get(timeout=30) == 36
        assert r.ready() and r.successful()
        m = pool.map_async(square, range(5), callback=got.append)
        m.wait(timeout=30)
        assert m.get() == [0, 1, 4, 9, 16]
        s = pool.starmap_async(power, [(2, 2)])
        assert s.get(timeout=30) == [4]
        e = pool.apply_async(fail_on_three, (3,), error_callback=errors.append)
        with pytest.raises(ValueError):
            e.get(timeout=30)
        assert not e.successful()
        t = pool.apply_async(slow, (1,))
        with pytest.raises(TimeoutError):
            t.get(timeout=0.01)
        with pytest.raises(ValueError):
            pool.apply_async(slow, (5,)).successful()  # not ready yet
    assert got == [36, [0, 1, 4, 9, 16]]
    assert len(errors) == 1 and isinstance(errors[0], ValueError)


def test_errors_propagate():
    with Pool(2) as pool:
        with pytest.raises(ValueError, match="three"):
            pool.map(fail_on_three, range(6))
        it = pool.imap(fail_on_three, range(6))
        assert [next(it), next(it), next(it)] == [0, 1, 2]
        with pytest.raises(ValueError):
            next(it)


def test_close_join_terminate():
    pool = Pool(2)
    results = [pool.apply_async(square, (i,)) for i in range(50)]
    pool.close()
    with pytest.raises(ValueError):
        pool.apply_async(square, (1,))
    pool.join()
    assert [r.get() for r in results] == [i * i for i in range(50)]

    pool = Pool(2)
    pool.apply_async(slow, (60,))
    started = time.monotonic()
    pool.terminate()
    pool.join()
    assert time.monotonic() - started < 30
    with pytest.raises(ValueError):
        pool.map(square, [1])


def test_initializer_and_maxtasksperchild():
    with Pool(2, initializer=set_global, initargs=(100,)) as pool:
        assert pool.map(read_global, range(4)) == [100, 101, 102, 103]
    with Pool(2, maxtasksperchild=1) as pool:
        pids = pool.map(pid_of, range(6), chunksize=1)
    assert len(set(pids)) >= 3  # each worker ran at most one task


def test_processes_argument_and_work_in_parallel():
    with Pool(processes=2) as pool:
        started = time.monotonic()
        assert pool.map(slow, [1, 1]) == [1, 1]
        assert time.monotonic() - started < 1.9
    with pytest.raises(ValueError):
        Pool(0)
