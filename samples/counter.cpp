// counter: actors. Ten counters, each in a process of its own, are incremented
// in parallel; then one of them five times: its calls run in the order submitted.
#include <cstdio>
#include <vector>

#include <manta/manta.hpp>

class Counter {
 public:
  Counter() = default;
  int increment() { return ++value_; }
  int read() const { return value_; }

 private:
  int value_ = 0;
};
MANTA_ACTOR(Counter, &Counter::increment, &Counter::read);

void print(const char* label, const std::vector<int>& values) {
  std::printf("%s[", label);
  for (std::size_t i = 0; i < values.size(); ++i) std::printf(i ? ",%d" : "%d", values[i]);
  std::printf("]\n");
}

int main() {
  manta::init({.num_workers = 2});
  std::vector<manta::actor_handle<Counter>> counters;
  for (int i = 0; i < 10; ++i) counters.push_back(manta::actor<Counter>().remote());

  std::vector<manta::object_ref<int>> once;
  for (auto& c : counters) once.push_back(c.task(&Counter::increment).remote());
  print("ten counters, once each: ", manta::get(once));

  std::vector<manta::object_ref<int>> in_order;
  for (int i = 0; i < 5; ++i) in_order.push_back(counters[0].task(&Counter::increment).remote());
  print("one counter, five times: ", manta::get(in_order));
  manta::shutdown();
}
