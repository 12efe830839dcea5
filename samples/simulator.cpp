// simulator: the Ray paper's example. A cart-pole environment lives in an actor;
// a train_policy task starts several simulators, collects rollouts from all of
// them in parallel for each candidate policy, and improves a linear policy by
// random search. Nested: the task itself creates the actors and calls them.
#include <cmath>
#include <cstdio>
#include <random>
#include <tuple>
#include <vector>

#include <manta/manta.hpp>

/// Cart-pole (Barto, Sutton and Anderson, 1983): push a cart left or right to
/// keep a pole upright; one point per step, at most 500 steps.
class CartPole {
 public:
  explicit CartPole(int seed) : rng_(static_cast<std::uint64_t>(seed)) {}

  /// One episode with the policy "push right when policy . state > 0".
  double rollout(std::vector<double> policy) {
    std::uniform_real_distribution<double> start(-0.05, 0.05);
    double x = start(rng_), v = start(rng_), theta = start(rng_), omega = start(rng_);
    int steps = 0;
    while (steps < 500 && std::abs(x) <= 2.4 && std::abs(theta) <= 12 * M_PI / 180) {
      double push = policy[0] * x + policy[1] * v + policy[2] * theta + policy[3] * omega > 0 ? 10.0 : -10.0;
      // Equations of motion, Euler step of 20 ms.
      const double gravity = 9.8, cart = 1.0, pole = 0.1, half_length = 0.5, dt = 0.02;
      double total = cart + pole, c = std::cos(theta), s = std::sin(theta);
      double temp = (push + pole * half_length * omega * omega * s) / total;
      double alpha = (gravity * s - c * temp) /
                     (half_length * (4.0 / 3.0 - pole * c * c / total));
      double accel = temp - pole * half_length * alpha * c / total;
      x += dt * v;
      v += dt * accel;
      theta += dt * omega;
      omega += dt * alpha;
      ++steps;
    }
    return steps;
  }

 private:
  std::mt19937_64 rng_;
};
MANTA_ACTOR(CartPole, &CartPole::rollout);

/// Mean reward of `policy` over one rollout on every simulator, run in parallel.
double evaluate(const std::vector<manta::actor_handle<CartPole>>& sims, const std::vector<double>& policy) {
  std::vector<manta::object_ref<double>> rewards;
  for (const auto& sim : sims) rewards.push_back(sim.task(&CartPole::rollout).remote(policy));
  double total = 0;
  for (double r : manta::get(rewards)) total += r;
  return total / sims.size();
}

/// Random search over linear policies, with `num_simulators` cart-poles.
std::tuple<std::vector<double>, double, double> train_policy(int num_simulators, int iterations) {
  std::vector<manta::actor_handle<CartPole>> sims;
  for (int i = 0; i < num_simulators; ++i) sims.push_back(manta::actor<CartPole>().remote(i));
  std::vector<double> policy{0, 0, 0, 0};
  const double first = evaluate(sims, policy);
  double best = first;
  std::mt19937_64 rng(42);
  std::normal_distribution<double> noise(0.0, 0.5);
  for (int it = 0; it < iterations && best < 500; ++it) {
    std::vector<double> candidate = policy;
    for (double& p : candidate) p += noise(rng);
    double reward = evaluate(sims, candidate);
    if (reward >= best) {
      best = reward;
      policy = candidate;
    }
  }
  return {policy, first, best};
}
MANTA_REMOTE(train_policy);

int main() {
  manta::init({.num_workers = 2});
  auto [policy, before, after] = manta::get(manta::task(train_policy).remote(4, 50));
  std::printf("4 cart-pole simulators, linear policy by random search\n");
  std::printf("mean reward before training: %.1f steps\n", before);
  std::printf("mean reward after training:  %.1f steps (policy %.2f %.2f %.2f %.2f)\n", after,
              policy[0], policy[1], policy[2], policy[3]);
  std::printf("improved: %s\n", after > before ? "yes" : "no");
  manta::shutdown();
  return after > before ? 0 : 1;
}
