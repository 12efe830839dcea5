"""Tree reduce: 128 arrays summed pairwise by tasks that take the futures of
the level below, so the whole tree is submitted at once and runs as results
arrive; nothing comes back to the driver until the root."""
import numpy as np

import manta as ray


@ray.remote
def make_leaf(i, n):
    return np.full(n, i, dtype=np.float64)


@ray.remote
def add(a, b):
    return a + b


def main(leaves=128, n=100_000):
    ray.init(num_cpus=2)
    level = [make_leaf.remote(i, n) for i in range(leaves)]
    while len(level) > 1:
        level = [add.remote(level[i], level[i + 1]) for i in range(0, len(level), 2)]
    total = ray.get(level[0])
    expected = sum(range(leaves))
    print(f"root of {leaves} leaves: every element is {total[0]:.0f} (expected {expected})")
    assert (total == expected).all()
    ray.shutdown()


if __name__ == "__main__":
    main()
