"""Counters: actors keep state between calls; calls on one actor run in order."""
import manta as ray


@ray.remote
class Counter:
    def __init__(self, start=0):
        self.value = start

    def increment(self, by=1):
        self.value += by
        return self.value

    def read(self):
        return self.value


def main():
    ray.init(num_cpus=2)
    counters = [Counter.remote(start) for start in (0, 100)]
    refs = [c.increment.remote() for c in counters for _ in range(10)]
    print("increments:", ray.get(refs))
    print("final values:", ray.get([c.read.remote() for c in counters]))
    ray.shutdown()


if __name__ == "__main__":
    main()
