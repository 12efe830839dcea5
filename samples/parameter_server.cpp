// parameter_server: a parameter server as an actor. Worker tasks hold its
// handle, pull the current parameters, compute a gradient on their own shard of
// the data and push it back; the server applies each push as it arrives.
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include <manta/manta.hpp>

constexpr int dims = 8;

/// Holds the weights of a linear model; applies gradients in arrival order.
class ParameterServer {
 public:
  explicit ParameterServer(double learning_rate) : rate_(learning_rate), weights_(dims, 0.0) {}
  std::vector<double> get_params() const { return weights_; }
  int apply_gradients(std::vector<double> gradient) {
    for (int i = 0; i < dims; ++i) weights_[i] -= rate_ * gradient[i];
    return ++updates_;
  }

 private:
  double rate_;
  std::vector<double> weights_;
  int updates_ = 0;
};
MANTA_ACTOR(ParameterServer, &ParameterServer::get_params, &ParameterServer::apply_gradients);

/// The weights the data was generated from (what training should find).
std::vector<double> true_weights() {
  std::vector<double> w(dims);
  for (int i = 0; i < dims; ++i) w[i] = 0.5 * (i - 3);
  return w;
}

/// A shard of noisy linear data: (x, y) with y = true_weights . x + noise.
void make_shard(int seed, std::vector<std::vector<double>>& xs, std::vector<double>& ys) {
  std::mt19937_64 rng(static_cast<std::uint64_t>(seed));
  std::normal_distribution<double> normal;
  auto w = true_weights();
  for (int n = 0; n < 200; ++n) {
    std::vector<double> x(dims);
    double y = 0;
    for (int i = 0; i < dims; ++i) {
      x[i] = normal(rng);
      y += w[i] * x[i];
    }
    xs.push_back(x);
    ys.push_back(y + 0.01 * normal(rng));
  }
}

/// A worker: pull, compute the mean squared error's gradient on its shard, push; `steps` times.
int train_worker(manta::actor_handle<ParameterServer> ps, int shard, int steps) {
  std::vector<std::vector<double>> xs;
  std::vector<double> ys;
  make_shard(shard, xs, ys);
  for (int s = 0; s < steps; ++s) {
    auto w = manta::get(ps.task(&ParameterServer::get_params).remote());
    std::vector<double> grad(dims, 0.0);
    for (std::size_t n = 0; n < xs.size(); ++n) {
      double err = -ys[n];
      for (int i = 0; i < dims; ++i) err += w[i] * xs[n][i];
      for (int i = 0; i < dims; ++i) grad[i] += 2 * err * xs[n][i] / xs.size();
    }
    manta::get(ps.task(&ParameterServer::apply_gradients).remote(grad));
  }
  return steps;
}
MANTA_REMOTE(train_worker);

int main() {
  manta::init({.num_workers = 2});
  auto ps = manta::actor<ParameterServer>().remote(0.05);
  std::vector<manta::object_ref<int>> workers;
  for (int shard = 0; shard < 4; ++shard) workers.push_back(manta::task(train_worker).remote(ps, shard, 50));
  int steps = 0;
  for (int s : manta::get(workers)) steps += s;

  auto w = manta::get(ps.task(&ParameterServer::get_params).remote());
  auto target = true_weights();
  double distance = 0;
  for (int i = 0; i < dims; ++i) distance += (w[i] - target[i]) * (w[i] - target[i]);
  distance = std::sqrt(distance);
  std::printf("4 workers pushed %d gradients to the parameter server\n", steps);
  std::printf("distance from the true weights: %.4f\n", distance);
  std::printf("converged: %s\n", distance < 0.05 ? "yes" : "no");
  manta::shutdown();
  return distance < 0.05 ? 0 : 1;
}
