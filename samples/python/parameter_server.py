"""A parameter server: an actor holds the weights, tasks compute gradients on
their shard of the data and push them; the weights come back from the actor."""
import numpy as np

import manta as ray


@ray.remote
class ParameterServer:
    def __init__(self, dim):
        self.weights = np.zeros(dim)

    def get_weights(self):
        return self.weights

    def apply_gradients(self, *gradients):
        self.weights -= 0.1 * np.mean(gradients, axis=0)
        return self.weights


@ray.remote
def compute_gradient(weights, x, y):
    # least squares: d/dw |xw - y|^2 / n
    return 2 * x.T @ (x @ weights - y) / len(y)


def main():
    ray.init(num_cpus=2)
    rng = np.random.default_rng(0)
    true_w = rng.normal(size=10)
    shards = []
    for _ in range(4):
        x = rng.normal(size=(2000, 10))
        shards.append((ray.put(x), ray.put(x @ true_w)))
    ps = ParameterServer.remote(10)
    weights = ps.get_weights.remote()
    for _ in range(50):
        grads = [compute_gradient.remote(weights, x, y) for x, y in shards]
        weights = ps.apply_gradients.remote(*grads)
    learned = ray.get(weights)
    print("error of the learned weights:", float(np.abs(learned - true_w).max()))
    assert np.allclose(learned, true_w, atol=1e-2)
    ray.shutdown()


if __name__ == "__main__":
    main()
