// task_graph_test: the task graph alone, in one process: edges, lanes, failure
// spreading and removal, then a random run checked against its invariants after
// every step. No worker, no clock.
#include <map>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "runtime/task_graph.hpp"

namespace {
using namespace manta;
using namespace manta::runtime;

struct graph_fixture : ::testing::Test {
  graph_fixture() {
    fn.name.push_back('f');  // (assigning "f" trips a g++ 12 -Wrestrict false positive)
    fn.id = 1;
  }
  ~graph_fixture() override {
    graph.clear();
    for (auto* e : entries) {
      e->store = nullptr;
      delete e;
    }
  }
  /// A pending object (the test keeps one count of its own).
  object_entry* object() {
    object_entry* e = dir.create(dir.next_id(), 1);
    entries.push_back(e);
    return e;
  }
  object_entry* sealed_object() {
    object_entry* e = object();
    e->state.store(state_ready);
    return e;
  }
  /// A task named `name` reading `deps`, producing one new object; added to the graph.
  task_spec* add(const std::string& name, std::vector<object_entry*> deps, std::uint64_t parent = 0,
                 ipc::failure_ptr* failed = nullptr) {
    auto t = std::make_unique<task_spec>();
    t->key = ++next_key;
    t->fn = &fn;
    detail::task_options named;
    named.name = name;
    t->profile = profile_of(std::move(named), detail::call_mode::call);
    t->parent = parent;
    for (auto* d : deps) {
      detail::acquire(d);
      t->deps.push_back(d);
    }
    object_entry* out = object();
    detail::acquire(out);
    t->returns.push_back(out);
    task_spec* raw = t.get();
    ipc::failure_ptr f = graph.add(std::move(t));
    if (failed) *failed = f;
    return raw;
  }
  void seal(object_entry* e, std::vector<task_spec*>& runnable) {
    dir.publish(e, state_ready);
    graph.sealed(e, runnable);
  }
  std::string check() const { return graph.check(entries); }

  detail::function_info fn;
  directory dir{7, nullptr};
  task_graph graph;
  std::vector<object_entry*> entries;
  std::uint64_t next_key = 0;
};

TEST_F(graph_fixture, a_task_waits_for_its_unsealed_arguments_in_order) {
  auto* a = object();
  auto* b = sealed_object();
  task_spec* t1 = add("t1", {a, b});
  task_spec* t2 = add("t2", {a});
  EXPECT_EQ(t1->pending_deps, 1);
  EXPECT_EQ(task_graph::producer_of(t1->returns[0]), t1);
  EXPECT_EQ(check(), "");
  std::vector<task_spec*> runnable;
  seal(a, runnable);
  ASSERT_EQ(runnable.size(), 2u);
  EXPECT_EQ(runnable[0], t1);  // in the order they started waiting
  EXPECT_EQ(runnable[1], t2);
  EXPECT_EQ(t2->pending_deps, 0);
  EXPECT_EQ(check(), "");
}

TEST_F(graph_fixture, an_argument_that_already_failed_is_reported_and_nothing_waits) {
  auto* bad = object();
  auto* pending = object();
  bad->error = ipc::make_failure({ipc::error_kind::task_exception, "E", "boom", "g", "", 1, 0});
  dir.publish(bad, state_failed);
  ipc::failure_ptr failed;
  task_spec* t = add("t", {pending, bad}, 0, &failed);
  ASSERT_TRUE(failed);
  EXPECT_EQ(failed->describe().message, "boom");
  EXPECT_EQ(t->pending_deps, 0);  // not left in `pending`'s dependents
  EXPECT_EQ(check(), "");
}

TEST_F(graph_fixture, failure_spreads_to_every_dependent_with_its_chain) {
  auto* in = object();
  task_spec* a = add("a", {in});
  task_spec* b = add("b", {a->returns[0]});
  task_spec* c = add("c", {b->returns[0]});
  task_spec* d = add("d", {c->returns[0], a->returns[0]});  // reached twice, fails once
  task_spec* other = add("other", {in});
  task_graph::failure_spread spread;
  graph.fail(a, ipc::make_failure({ipc::error_kind::task_exception, "E", "boom", "a", "", 1, 0}), spread);
  ASSERT_EQ(spread.tasks.size(), 4u);
  EXPECT_EQ(spread.tasks[0], a);
  ASSERT_EQ(spread.objects.size(), 4u);
  EXPECT_EQ(c->returns[0]->error->describe().chain, "c <- b");
  EXPECT_EQ(d->returns[0]->error->describe().chain, "d");  // through its direct argument
  EXPECT_EQ(other->pending_deps, 1);  // untouched
  for (auto* e : spread.objects) dir.publish(e, state_failed);
  for (auto* t : spread.tasks) graph.remove(t);
  EXPECT_EQ(graph.size(), 1u);
  EXPECT_EQ(check(), "");
  std::vector<task_spec*> runnable;
  seal(in, runnable);  // only `other` was still waiting on it
  ASSERT_EQ(runnable.size(), 1u);
  EXPECT_EQ(runnable[0], other);
}

TEST_F(graph_fixture, removing_a_task_takes_it_out_of_every_list) {
  auto* in = object();
  task_spec* t = add("t", {in});
  graph.enter(t, graph.ready());
  object_entry* out = t->returns[0];
  graph.remove(t);
  EXPECT_TRUE(graph.ready().empty());
  EXPECT_EQ(task_graph::producer_of(out), nullptr);
  EXPECT_EQ(check(), "");
  std::vector<task_spec*> runnable;
  seal(in, runnable);  // nothing freed is touched
  EXPECT_TRUE(runnable.empty());
}

TEST_F(graph_fixture, a_task_is_in_one_lane_at_a_time) {
  lane mine, theirs;
  task_spec* t1 = add("t1", {});
  task_spec* t2 = add("t2", {});
  task_spec* t3 = add("t3", {});
  graph.enter(t1, mine);
  graph.enter(t2, mine);
  graph.enter(t3, mine);
  graph.enter(t2, theirs);  // out of the middle of `mine`
  EXPECT_EQ(mine, (lane{t1, t3}));
  EXPECT_EQ(theirs, (lane{t2}));
  graph.enter(t3, theirs, /*at_front=*/true);
  EXPECT_EQ(theirs, (lane{t3, t2}));
  graph.leave(t1);
  EXPECT_TRUE(mine.empty());
  EXPECT_EQ(t1->in_lane, nullptr);
  graph.remove(t2);
  EXPECT_EQ(theirs, (lane{t3}));
  graph.leave(t3);
}

TEST_F(graph_fixture, the_ready_queue_counts_its_tasks_by_demand) {
  auto asking = [&](std::map<std::string, double> custom) {
    task_spec* t = add("t", {});
    detail::task_options o;
    o.resources = std::move(custom);
    t->profile = profile_of(std::move(o), detail::call_mode::call);
    return t;
  };
  task_spec* a = asking({{"disk", 1}});
  task_spec* b = asking({{"disk", 1}});
  task_spec* c = asking({{"disk", 2}});
  task_spec* d = add("default", {});
  for (task_spec* t : {a, b, c, d}) graph.enter(t, graph.ready());
  const demand one_disk = a->need(), two_disks = c->need();
  EXPECT_EQ(graph.ready_asking(one_disk), 2u);
  EXPECT_EQ(graph.ready_asking(two_disks), 1u);
  EXPECT_EQ(graph.ready_asking(d->need()), 0u);  // default tasks are not counted
  lane elsewhere;
  graph.enter(b, elsewhere);
  EXPECT_EQ(graph.ready_asking(one_disk), 1u);
  graph.remove(a);
  EXPECT_EQ(graph.ready_asking(one_disk), 0u);
  graph.enter(b, graph.ready(), /*at_front=*/true);
  EXPECT_EQ(graph.ready_asking(one_disk), 1u);
  EXPECT_EQ(check(), "");
  graph.leave(b);
}

TEST_F(graph_fixture, children_are_found_by_their_parent) {
  task_spec* parent = add("p", {});
  add("c1", {}, parent->key);
  add("c2", {}, parent->key);
  add("unrelated", {});
  EXPECT_EQ(graph.children_of(parent->key).size(), 2u);
  EXPECT_TRUE(graph.children_of(999).empty());
}

// Random operations (submit with random arguments, seal, fail, finish, move
// between lanes) with the invariants checked after each: no list ever names a
// task that is gone, and every count matches its edges.
TEST_F(graph_fixture, random_operations_keep_the_graph_consistent) {
  std::mt19937 rng(12345);
  std::vector<object_entry*> pending;
  std::vector<task_spec*> live;
  lane lanes[3];
  for (int step = 0; step < 20000; ++step) {
    int op = static_cast<int>(rng() % 6);
    if (op <= 1 || live.empty()) {
      std::vector<object_entry*> deps;
      int n = static_cast<int>(rng() % 4);
      for (int i = 0; i < n; ++i) {
        if (!pending.empty() && rng() % 2) {
          deps.push_back(pending[rng() % pending.size()]);
        } else {
          deps.push_back(rng() % 3 ? object() : sealed_object());
        }
        if (deps.back()->status() == state_pending &&
            std::find(pending.begin(), pending.end(), deps.back()) == pending.end())
          pending.push_back(deps.back());
      }
      ipc::failure_ptr failed;
      task_spec* t = add(std::to_string(step), deps, 0, &failed);
      if (rng() % 3 == 0) {  // asking a resource: the ready queue counts it by demand
        detail::task_options o;
        o.resources = {{rng() % 2 ? "disk" : "lens", 1.0 + static_cast<double>(rng() % 2)}};
        t->profile = profile_of(std::move(o), detail::call_mode::call);
      }
      pending.push_back(t->returns[0]);
      if (failed) {
        task_graph::failure_spread spread;
        graph.fail(t, ipc::chain_failure(failed, t->name()), spread);
        for (auto* e : spread.objects) dir.publish(e, state_failed);
        for (auto* f : spread.tasks) {
          live.erase(std::remove(live.begin(), live.end(), f), live.end());
          graph.remove(f);
        }
      } else {
        live.push_back(t);
      }
    } else if (op == 2 && !pending.empty()) {  // an object is sealed
      std::size_t i = rng() % pending.size();
      object_entry* e = pending[i];
      pending.erase(pending.begin() + static_cast<std::ptrdiff_t>(i));
      if (e->status() != state_pending || e->error) continue;
      std::vector<task_spec*> runnable;
      seal(e, runnable);
      for (auto* t : runnable) EXPECT_EQ(t->pending_deps, 0);
    } else if (op == 3) {  // a task fails
      task_spec* t = live[rng() % live.size()];
      task_graph::failure_spread spread;
      graph.fail(t, ipc::make_failure({ipc::error_kind::task_exception, "E", "x", "t", "", 1, 0}), spread);
      for (auto* e : spread.objects) dir.publish(e, state_failed);
      for (auto* f : spread.tasks) {
        live.erase(std::remove(live.begin(), live.end(), f), live.end());
        graph.remove(f);
      }
    } else if (op == 4) {  // a task finishes
      std::size_t i = rng() % live.size();
      task_spec* t = live[i];
      if (t->pending_deps) continue;
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
      for (auto* e : t->returns) {
        std::vector<task_spec*> runnable;
        seal(e, runnable);
      }
      graph.remove(t);
    } else {  // it moves to some queue, the ready queue among them
      const std::size_t l = rng() % 4;
      graph.enter(live[rng() % live.size()], l == 3 ? graph.ready() : lanes[l], rng() % 2);
    }
    if (step % 97 == 0) {
      ASSERT_EQ(check(), "") << "after step " << step;
    }
  }
  ASSERT_EQ(check(), "");
  graph.clear();
  for (auto& l : lanes) EXPECT_TRUE(l.empty());
  EXPECT_TRUE(graph.ready().empty());
  EXPECT_EQ(check(), "");
}

// A pending task points to its options: the defaults are shared, equal options
// submitted one after another share one profile, and each keeps its own values.
TEST(task_profile, tasks_with_equal_options_share_one_and_keep_their_own_values) {
  const profile_ptr plain = profile_of({}, detail::call_mode::call);
  EXPECT_EQ(plain, profile_of({}, detail::call_mode::call));
  EXPECT_EQ(plain->need.cpu, 1);
  EXPECT_EQ(plain, task_spec().profile) << "a new task has the defaults";

  detail::task_options method;
  method.num_cpus = 0;  // as actor_handle asks
  const profile_ptr call = profile_of(std::move(method), detail::call_mode::method);
  EXPECT_NE(call, plain);
  EXPECT_TRUE(call->need.empty()) << "a method call holds nothing: its actor does";

  detail::task_options gpu;
  gpu.num_gpus = 1;
  gpu.memory = 1000;
  gpu.name = "render";
  detail::task_options same = gpu;
  const profile_ptr a = profile_of(std::move(gpu), detail::call_mode::call);
  const profile_ptr b = profile_of(std::move(same), detail::call_mode::call);
  EXPECT_EQ(a, b);
  EXPECT_EQ(a->options.name, "render");
  EXPECT_EQ(a->need.gpu, 1);
  EXPECT_EQ(a->need.custom.at("memory"), 1000);

  detail::task_options other;
  other.num_gpus = 1;
  other.memory = 2000;
  const profile_ptr c = profile_of(std::move(other), detail::call_mode::call);
  EXPECT_NE(c, a);
  EXPECT_EQ(c->need.custom.at("memory"), 2000);
  EXPECT_EQ(a->need.custom.at("memory"), 1000) << "a's tasks keep theirs";
  EXPECT_TRUE(c->options.name.empty());
}

}  // namespace
