"""The Ray-named API: remote functions, put/get/wait, options, refs, errors."""
import pickle
import time

import pytest

import manta
import manta as ray
from conftest import run_python
from manta.exceptions import GetTimeoutError, RayError, RayTaskError, TaskCancelledError


@ray.remote
def square(x):
    return x * x


@ray.remote
def add(a, b=0):
    return a + b


@ray.remote(num_returns=2)
def pair(x):
    return x, x + 1


@ray.remote
def fails(x):
    raise ValueError(f"bad {x}")


@ray.remote
def sleeper(s):
    time.sleep(s)
    return s


def test_init_shutdown_is_initialized(fresh):
    assert not manta.is_initialized()
    manta.init(num_cpus=2)
    assert manta.is_initialized()
    with pytest.raises(RuntimeError):
        manta.init(num_cpus=2)
    manta.init(num_cpus=2, ignore_reinit_error=True)
    manta.shutdown()
    assert not manta.is_initialized()
    manta.init(num_cpus=1)  # a new runtime after shutdown; stored functions are stored again
    assert ray.get(square.remote(3)) == 9


def test_remote_get_put_wait(runtime):
    assert ray.get(square.remote(4)) == 16
    assert ray.get([square.remote(i) for i in range(20)]) == [i * i for i in range(20)]
    r = ray.put({"a": [1, 2, 3]})
    assert ray.get(r) == {"a": [1, 2, 3]}
    assert ray.get(add.remote(r and 1, b=2)) == 3
    assert ray.get(add.remote(ray.put(5), b=ray.put(6))) == 11  # top-level refs are resolved, kwargs too
    slow = sleeper.remote(30)
    fast = square.remote(2)
    ready, not_ready = ray.wait([slow, fast], num_returns=1, timeout=20)
    assert ready == [fast] and not_ready == [slow]
    ready, not_ready = ray.wait([slow], timeout=0)
    assert ready == [] and not_ready == [slow]
    ray.cancel(slow)
    with pytest.raises(TaskCancelledError):
        ray.get(slow, timeout=20)
    assert ray.get([]) == []


def test_options_and_num_returns(runtime):
    a, b = pair.remote(1)
    assert ray.get([a, b]) == [1, 2]
    old = ray.remote(num_return_vals=3)(lambda: (1, 2, 3))
    assert ray.get(old.remote()) == [1, 2, 3]
    assert ray.get(square.options(num_cpus=0.5, name="sq", max_retries=0).remote(5)) == 25
    with pytest.raises(ValueError):
        square.options(no_such_option=1)
    with pytest.raises(TypeError):
        square(3)  # remote functions are called with .remote
    bad = pair.options(num_returns=3).remote(1)
    with pytest.raises(RayTaskError):
        ray.get(bad[0], timeout=20)


def test_lambdas_closures_and_main_functions(runtime):
    k = 7
    closure = ray.remote(lambda x: x + k)
    assert ray.get(closure.remote(1)) == 8

    def make_adder(n):
        def adder(x):
            return x + n
        return adder
    assert ray.get(ray.remote(make_adder(10)).remote(5)) == 15
    # a function passed as a value
    assert ray.get(ray.remote(lambda f, x: f(x)).remote(lambda v: v * 3, 4)) == 12


def test_refs_are_hashable_picklable_and_travel_inside_values(runtime):
    r = ray.put(41)
    assert r == r and hash(r) == hash(r) and len({r, r}) == 1
    assert isinstance(r, ray.ObjectRef)
    assert r.hex() != ray.put(41).hex()
    assert ray.get(pickle.loads(pickle.dumps(r))) == 41

    @ray.remote
    def inner(refs):
        return sum(ray.get(refs)) + 1
    refs = [ray.put(i) for i in range(5)]
    assert ray.get(inner.remote(refs)) == 11

    @ray.remote
    def make_ref():
        return ray.put("made inside")

    inner_ref = ray.get(make_ref.remote())
    assert isinstance(inner_ref, ray.ObjectRef) and ray.get(inner_ref) == "made inside"


def test_dynamic_task_graph_and_nested_tasks(runtime):
    @ray.remote
    def tree_sum(lo, hi):
        if hi - lo <= 4:
            return sum(range(lo, hi))
        mid = (lo + hi) // 2
        return sum(ray.get([tree_sum.remote(lo, mid), tree_sum.remote(mid, hi)]))
    assert ray.get(tree_sum.remote(0, 100), timeout=60) == sum(range(100))
    chained = square.remote(square.remote(square.remote(2)))
    assert ray.get(chained) == 256


class CustomError(Exception):
    def __init__(self, code):
        super().__init__(f"code {code}")
        self.code = code


def test_task_errors_as_ray_raises_them(runtime):
    with pytest.raises(ValueError) as info:
        ray.get(fails.remote(3))
    e = info.value
    assert isinstance(e, RayTaskError) and isinstance(e, RayError)
    assert "bad 3" in str(e) and "Traceback" in str(e) and "fails" in str(e)
    # through a dependent task
    with pytest.raises(ValueError):
        ray.get(square.remote(fails.remote(1)))
    # a task that gets a failing child and lets it go
    @ray.remote
    def parent():
        return ray.get(fails.remote(2))
    with pytest.raises(ValueError, match="bad 2"):
        ray.get(parent.remote())

    @ray.remote
    def custom():
        raise CustomError(7)
    with pytest.raises(CustomError) as info:
        ray.get(custom.remote())
    assert info.value.code == 7


def test_an_exception_that_cannot_be_pickled_still_arrives(runtime):
    @ray.remote
    def unpicklable():
        import threading

        class Odd(Exception):
            def __init__(self):
                super().__init__("odd one")
                self.lock = threading.Lock()
        raise Odd()
    with pytest.raises(RayTaskError, match="odd one"):
        ray.get(unpicklable.remote())


def test_get_timeout_and_bad_input(runtime):
    r = sleeper.remote(5)
    with pytest.raises(GetTimeoutError):
        ray.get(r, timeout=0.05)
    with pytest.raises(TimeoutError):
        ray.get(r, timeout=0)
    with pytest.raises(ValueError):
        ray.get(42)
    with pytest.raises(TypeError):
        ray.get([1, 2])
    with pytest.raises(TypeError):
        ray.put(r)
    with pytest.raises(TypeError):
        ray.wait(r)
    with pytest.raises(ValueError):
        ray.wait([r, r])
    assert ray.wait([]) == ([], [])  # as Ray: nothing to wait for
    assert repr(r) == f"ObjectRef({r.hex()})"
    ray.cancel(r)


def test_num_returns_that_the_result_does_not_match(runtime):
    @ray.remote(num_returns=2)
    def one():
        return 1
    first, second = one.remote()
    with pytest.raises(ValueError, match="num_returns=2"):  # Python's ValueError, as Ray raises
        ray.get(first)
    with pytest.raises(ValueError):
        ray.get(second)


def test_an_exception_class_of_main_is_caught_by_its_name():
    # A class __main__ held at init comes back as the driver's own class.
    code = '''
import manta as ray

class MainError(Exception):
    pass

ray.init(num_cpus=1)

@ray.remote
def fails():
    raise MainError("from a task")

try:
    ray.get(fails.remote())
except MainError as e:
    print("caught", type(e).__name__)
'''
    out = run_python(code)
    assert out.returncode == 0, out.stderr
    assert "caught RayTaskError(MainError)" in out.stdout


def test_retry_exceptions(runtime, tmp_path):
    marker = tmp_path / "tries"

    @ray.remote(max_retries=2, retry_exceptions=True)
    def flaky(path):
        with open(path, "a") as f:
            f.write("x")
        with open(path) as f:
            if len(f.read()) < 3:
                raise RuntimeError("not yet")
        return "ok"
    assert ray.get(flaky.remote(str(marker)), timeout=30) == "ok"
    assert marker.read_text() == "xxx"


def test_resources_nodes_and_context(runtime):
    total = ray.cluster_resources()
    assert total["CPU"] == 2
    assert "memory" in total
    assert ray.available_resources()["CPU"] <= 2
    nodes = ray.nodes()
    assert len(nodes) == 1 and nodes[0]["Alive"] and nodes[0]["Resources"]["CPU"] == 2
    assert ray.get_gpu_ids() == []
    node = ray.get_runtime_context().get_node_id()

    @ray.remote
    def where():
        return ray.get_runtime_context().get_node_id()
    assert ray.get(where.remote()) == node

    @ray.remote(resources={"unicorn": 1})
    def never():
        return 1
    with pytest.raises(RayError, match="unicorn"):
        never.remote()


def test_timeout_option(runtime):
    @ray.remote(timeout=0.5)
    def too_long():
        time.sleep(30)
    with pytest.raises(GetTimeoutError):
        ray.get(too_long.remote(), timeout=30)


def test_refs_are_awaitable_and_have_futures(runtime):
    import asyncio
    r = square.remote(6)

    async def main():
        return await r
    assert asyncio.run(main()) == 36
    assert square.remote(7).future().result(timeout=30) == 49
    with pytest.raises(ValueError):
        fails.remote(0).future().result(timeout=30)
