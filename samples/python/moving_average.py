"""The flagship workload in Python: a 100-sample moving average over every row
of a 5000x1000 matrix, stored once with put and read in place (no copy) by one
task per row, timed against a sequential loop."""
import time

import numpy as np

import manta as ray

WINDOW = 100


def moving_average(row):
    kernel = np.ones(WINDOW) / WINDOW
    return np.convolve(row, kernel, mode="valid")


@ray.remote
def row_average(matrix, i):
    return moving_average(matrix[i])


@ray.remote
def block_average(matrix, lo, hi):
    return np.stack([moving_average(matrix[i]) for i in range(lo, hi)])


def main(rows=5000, cols=1000):
    ray.init(num_cpus=2)
    data = np.random.default_rng(1).random((rows, cols))
    t0 = time.perf_counter()
    expected = np.stack([moving_average(r) for r in data])
    sequential = time.perf_counter() - t0

    stored = ray.put(data)  # written once into the shared arena
    t0 = time.perf_counter()
    rows_out = ray.get([row_average.remote(stored, i) for i in range(rows)])
    per_row = time.perf_counter() - t0
    assert np.allclose(np.stack(rows_out), expected)

    blocks = 2
    t0 = time.perf_counter()
    step = rows // blocks
    out = ray.get([block_average.remote(stored, lo, min(rows, lo + step)) for lo in range(0, rows, step)])
    per_block = time.perf_counter() - t0
    assert np.allclose(np.concatenate(out), expected)
    print(f"sequential {sequential:.3f} s; one task per row {per_row:.3f} s ({sequential / per_row:.2f}x); "
          f"{blocks} block tasks {per_block:.3f} s ({sequential / per_block:.2f}x)")
    ray.shutdown()


if __name__ == "__main__":
    main()
