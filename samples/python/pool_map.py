"""multiprocessing.Pool on manta: the standard library's program with only the
import changed."""
from manta.util.multiprocessing import Pool


def collatz_steps(n):
    steps = 0
    while n != 1:
        n = n // 2 if n % 2 == 0 else 3 * n + 1
        steps += 1
    return steps


if __name__ == "__main__":
    with Pool(2) as pool:
        steps = pool.map(collatz_steps, range(1, 100_001))
        print("longest Collatz chain below 100,000:", max(steps), "steps, from", steps.index(max(steps)) + 1)
        print("first ten, lazily:", list(pool.imap(collatz_steps, range(1, 11))))
