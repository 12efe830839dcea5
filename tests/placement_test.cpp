// placement_test: choosing workers without processes: idle workers first, short
// tasks pipelined behind busy ones once their duration is known, a blocked
// worker lending its CPU (and running the producers of what it waits for),
// resources taken and given back. Durations are injected, no clock is read.
#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "process/control.hpp"
#include "runtime/placement.hpp"

namespace {
using namespace manta;
using namespace manta::runtime;

struct placement_fixture : ::testing::Test {
  placement_fixture() {
    fn.name.push_back('f');  // (assigning "f" trips a g++ 12 -Wrestrict false positive)
    fn.id = 1;
    for (int i = 0; i < 2; ++i) {
      workers[i].slot = i;
      workers[i].usable = true;
    }
    place.set_workers({&workers[0], &workers[1]});
  }
  ~placement_fixture() override {
    for (auto& w : workers) w.in_flight.clear();
    graph.clear();
    for (auto* e : entries) {
      e->store = nullptr;
      delete e;
    }
  }
  object_entry* object(bool sealed = false) {
    object_entry* e = dir.create(dir.next_id(), 1);
    if (sealed) e->state.store(state_ready);
    dir.insert(e);
    entries.push_back(e);
    return e;
  }
  /// A default task (1 CPU) on `deps`, queued when all are sealed.
  task_spec* task(std::vector<object_entry*> deps = {}, demand need = {1.0, 0, {}}) {
    auto t = std::make_unique<task_spec>();
    t->key = ++next_key;
    t->fn = &fn;
    t->profile = new task_profile({}, std::move(need));
    for (auto* d : deps) {
      detail::acquire(d);
      t->deps.push_back(d);
    }
    object_entry* out = object();
    detail::acquire(out);
    t->returns.push_back(out);
    task_spec* raw = t.get();
    graph.add(std::move(t));
    if (raw->pending_deps == 0) graph.enter(raw, graph.ready());
    return raw;
  }
  void send(worker_state& w, task_spec* t) {
    t->worker = w.slot;
    place.sent(w, *t);
  }

  detail::function_info fn;
  directory dir{7, nullptr};
  task_graph graph;
  resource_ledger ledger{2, 2, {{"disk", 1}}};
  placement place{ledger, dir, graph};
  worker_state workers[2];
  std::vector<object_entry*> entries;
  std::uint64_t next_key = 0;
};

TEST_F(placement_fixture, idle_workers_first_then_nothing_until_durations_are_known) {
  task_spec* a = task();
  task_spec* b = task();
  task_spec* c = task();
  EXPECT_EQ(place.pick(*a), &workers[0]);
  send(workers[0], a);
  EXPECT_EQ(place.pick(*b), &workers[1]);
  send(workers[1], b);
  EXPECT_EQ(ledger.available().at("CPU"), 0);
  EXPECT_EQ(place.pick(*c), nullptr);  // no CPU, and its duration is unknown
  EXPECT_TRUE(place.blocks_later(*c));
}

TEST_F(placement_fixture, short_tasks_queue_behind_busy_workers_up_to_a_window) {
  task_spec* a = task();
  task_spec* b = task();
  place.record(*a, 100'000, 8);  // 100 µs each: a 1 ms window holds 10
  send(workers[0], a);
  send(workers[1], b);
  std::vector<task_spec*> queued;
  for (int i = 0; i < 40; ++i) {
    task_spec* t = task();
    worker_state* w = place.pick(*t);
    if (!w) break;
    send(*w, t);
    queued.push_back(t);
  }
  EXPECT_EQ(queued.size(), 18u);  // 10 per worker, one running on each already
  EXPECT_EQ(workers[0].in_flight.size(), 10u);
  EXPECT_EQ(workers[1].in_flight.size(), 10u);
  EXPECT_EQ(ledger.available().at("CPU"), 0);  // queued tasks share their worker's CPU
  for (auto* t : queued) place.finished(workers[t->worker], *t);
  place.finished(workers[0], *a);
  place.finished(workers[1], *b);
  EXPECT_EQ(ledger.available().at("CPU"), 2);
}

// A short task queued behind a long one waits for all of it: 9,000 short tasks
// submitted beside one that ran 30 s waited those 30 s for the half queued
// behind it. Nothing queues behind a task whose run time is unknown or longer
// than the window.
TEST_F(placement_fixture, short_tasks_never_queue_behind_long_or_unknown_ones) {
  detail::function_info other;
  other.name.push_back('g');
  other.id = 2;
  task_spec* unknown = task();
  unknown->fn = &other;  // never seen finish
  task_spec* long_one = task();
  send(workers[0], unknown);
  place.record(*long_one, 50'000'000, 8);  // 50 ms: f is slow now
  send(workers[1], long_one);
  place.record(*long_one, 1'000, 8);  // f seen fast since, but the one running was sent as slow
  for (int i = 0; i < 60; ++i) place.record(*long_one, 1'000, 8);  // the average forgets the 50 ms
  EXPECT_EQ(place.pick(*task()), nullptr);
  place.finished(workers[1], *long_one);
  task_spec* fast = task();
  ASSERT_EQ(place.pick(*fast), &workers[1]);
  send(workers[1], fast);
  EXPECT_EQ(place.pick(*task()), &workers[1]);  // behind a known short task: yes
  place.finished(workers[0], *unknown);
  place.finished(workers[1], *fast);
  EXPECT_EQ(workers[0].unbounded + workers[1].unbounded, 0);
  EXPECT_EQ(workers[0].expected_ns + workers[1].expected_ns, 0);
}

// Waiters in every process spin only while a core is free of processes that
// compute: a worker counts as computing from when it is sent a task expected to
// run longer than a spin (or for an unknown time), not while it runs only short ones.
TEST_F(placement_fixture, waiters_learn_which_workers_compute_and_spin_only_beside_a_free_core) {
  process::control_block control;
  control.cpus = 2;
  control.slots_in_use = 3;  // slot 2: an actor host, which the driver says nothing of
  for (int i = 0; i < 2; ++i) workers[i].assigned = &control.slots[i].assigned;
  auto work = [&](int i) { return control.slots[i].assigned.load(); };

  task_spec* unknown = task();
  send(workers[0], unknown);
  EXPECT_EQ(work(0), process::work_long);  // never seen finish: could run for long
  EXPECT_TRUE(process::core_free(control, -1));  // the driver beside one computing worker
  EXPECT_FALSE(process::core_free(control, 1));  // worker 1 counts the driver's core too
  place.record(*unknown, 1'000, 8);
  place.finished(workers[0], *unknown);
  EXPECT_EQ(work(0), process::work_idle);

  task_spec* short_one = task();
  send(workers[0], short_one);
  EXPECT_EQ(work(0), process::work_short);
  control.slots[0].depth = 1;  // running it
  EXPECT_TRUE(process::core_free(control, 1));  // its result comes within a spin
  place.record(*short_one, 10'000'000, 8);  // f takes 10 ms now
  task_spec* long_one = task();
  send(workers[1], long_one);
  control.slots[1].depth = 1;
  EXPECT_EQ(work(1), process::work_long);
  EXPECT_TRUE(process::core_free(control, -1));
  control.slots[0].spinning = 1;  // a spinner takes a core as well
  EXPECT_FALSE(process::core_free(control, -1));
  control.slots[0].spinning = 0;
  place.blocked(workers[1], *long_one, {1, {}});  // waiting in get: its core is free, whatever its depth
  EXPECT_EQ(work(1), process::work_idle);
  control.slots[2].depth = 1;  // the actor host runs a call
  EXPECT_TRUE(process::core_free(control, -1));
  place.unblocked(workers[1], *long_one, 0);
  EXPECT_EQ(work(1), process::work_long);
  EXPECT_FALSE(process::core_free(control, -1));  // worker 1 and the actor host
  place.finished(workers[0], *short_one);
  place.lost(workers[1]);
  EXPECT_EQ(work(1), process::work_idle);
  EXPECT_EQ(workers[1].long_tasks, 0);
  EXPECT_TRUE(process::core_free(control, -1));
}

TEST_F(placement_fixture, tasks_that_block_are_never_queued_behind_others) {
  task_spec* a = task();
  send(workers[0], a);
  send(workers[1], task());
  place.record(*a, 1000, 8);
  place.note_blocks(*a);
  EXPECT_EQ(place.pick(*task()), nullptr);
}

TEST_F(placement_fixture, a_blocked_worker_lends_its_cpu_and_runs_the_producer_it_waits_for) {
  task_spec* outer = task();
  task_spec* other = task();
  send(workers[0], outer);
  send(workers[1], other);
  object_entry* in = object();
  task_spec* producer = task({});          // queued, makes what `outer` waits for
  task_spec* consumer = task({in});        // waits on an unsealed argument: not queued
  (void)consumer;
  place.blocked(workers[0], *outer, {1, {producer->returns[0]->id}});
  EXPECT_EQ(ledger.available().at("CPU"), 1);  // lent
  EXPECT_TRUE(place.lending(workers[0]));
  auto lend = place.producers_to_lend(workers[0]);
  ASSERT_EQ(lend.size(), 1u);
  EXPECT_EQ(lend[0], producer);
  send(workers[0], producer);  // nested on the blocked worker
  EXPECT_FALSE(place.lending(workers[0]));  // it runs one now
  place.finished(workers[0], *producer);
  place.unblocked(workers[0], *outer, 0);
  EXPECT_EQ(ledger.available().at("CPU"), 0);
}

TEST_F(placement_fixture, producers_are_followed_through_tasks_still_waiting) {
  task_spec* outer = task();
  send(workers[0], outer);
  send(workers[1], task());
  object_entry* seed = object();
  task_spec* first = task({});            // queued: makes `seed`'s input
  task_spec* second = task({first->returns[0]});  // waits for `first`
  place.blocked(workers[0], *outer, {1, {second->returns[0]->id}});
  auto lend = place.producers_to_lend(workers[0]);
  ASSERT_EQ(lend.size(), 1u);
  EXPECT_EQ(lend[0], first);  // what `second` needs, since `second` cannot run yet
  (void)seed;
}

TEST_F(placement_fixture, a_worker_whose_wait_can_go_on_is_not_lent) {
  task_spec* outer = task();
  send(workers[0], outer);
  object_entry* ready = object(true);
  place.blocked(workers[0], *outer, {1, {ready->id}});
  EXPECT_FALSE(place.lending(workers[0]));  // it will resume at once: nothing may sit on top of it
}

TEST_F(placement_fixture, a_task_given_unsealed_refs_never_nests) {
  task_spec* outer = task();
  send(workers[0], outer);
  send(workers[1], task());
  object_entry* unsealed = object();
  place.blocked(workers[0], *outer, {1, {object()->id}});
  task_spec* careful = task();
  detail::acquire(unsealed);
  careful->contained.push_back(unsealed);  // a borrowed ref to an object not sealed yet
  EXPECT_TRUE(place.may_wait_on_others(*careful));
  EXPECT_EQ(place.pick(*careful), nullptr);
  EXPECT_EQ(place.pick(*task()), &workers[0]);  // a plain one may nest there
}

TEST_F(placement_fixture, resources_are_taken_and_given_back_whole) {
  task_spec* gpu = task({}, demand{1.0, 2, {{"disk", 1}}});
  ASSERT_EQ(place.pick(*gpu), &workers[0]);
  send(workers[0], gpu);
  EXPECT_EQ(gpu->gpus.size(), 2u);
  EXPECT_EQ(ledger.available().at("GPU"), 0);
  EXPECT_EQ(ledger.available().at("disk"), 0);
  task_spec* another = task({}, demand{1.0, 1, {}});
  EXPECT_EQ(place.pick(*another), nullptr);  // no GPU left
  EXPECT_FALSE(place.blocks_later(*another));  // later tasks may still pass it
  place.finished(workers[0], *gpu);
  EXPECT_EQ(ledger.available().at("GPU"), 2);
  EXPECT_EQ(ledger.available().at("disk"), 1);
  EXPECT_EQ(ledger.available().at("CPU"), 2);
}

TEST_F(placement_fixture, a_demand_without_room_means_no_task_like_it_goes_until_something_ends) {
  task_spec* disk = task({}, demand{1.0, 0, {{"disk", 1}}});
  ASSERT_EQ(place.pick(*disk), &workers[0]);
  send(workers[0], disk);
  task_spec* second = task({}, demand{1.0, 0, {{"disk", 1}}});
  EXPECT_EQ(place.pick(*second), nullptr);
  EXPECT_TRUE(place.none_fits_like(*second));  // the disk is taken
  task_spec* no_cpu = task({}, demand{0.0, 0, {}});
  EXPECT_FALSE(place.none_fits_like(*no_cpu));  // worker 1 is idle
  ASSERT_EQ(place.pick(*no_cpu), &workers[1]);
  send(workers[1], no_cpu);
  task_spec* another = task({}, demand{0.0, 0, {}});
  EXPECT_EQ(place.pick(*another), nullptr);
  EXPECT_TRUE(place.none_fits_like(*another));  // it fits, but no worker is idle or lending
  EXPECT_FALSE(place.none_fits_like(*task()));  // a default task may queue behind a busy worker
  place.finished(workers[0], *disk);
  EXPECT_FALSE(place.none_fits_like(*second));
}

TEST_F(placement_fixture, a_lost_worker_settles_its_accounts) {
  task_spec* a = task();
  task_spec* b = task();
  send(workers[0], a);
  send(workers[0], b);
  place.blocked(workers[0], *a, {1, {object()->id}});
  place.finished(workers[0], *a);
  place.finished(workers[0], *b);
  place.lost(workers[0]);
  EXPECT_EQ(ledger.available().at("CPU"), 2);
  EXPECT_FALSE(workers[0].usable);
  EXPECT_EQ(place.pick(*task()), &workers[1]);
}

TEST_F(placement_fixture, a_result_extent_is_offered_once_large_results_are_seen) {
  task_spec* a = task();
  EXPECT_EQ(place.result_grant_size(*a), 0u);
  place.record(*a, 1000, 16);  // inline-sized
  EXPECT_EQ(place.result_grant_size(*a), 0u);
  place.record(*a, 1000, 1 << 20);
  EXPECT_EQ(place.result_grant_size(*task()), 1u << 20);
}

// A stored argument pinned only by the hold of its read-back from the spill
// file (the dispatch right after it) does not count as pinned: the task is not
// queued behind a busy worker, where it would keep the object pinned; each
// read-back added one more, until the arena was all queued tasks' inputs and
// the next read-back failed (spilling.tasks_queued_behind_busy_workers...,
// about 1 run in 40 under load).
TEST_F(placement_fixture, an_input_only_a_read_back_holds_is_not_queued_behind_busy_workers) {
  task_spec* a = task();
  task_spec* b = task();
  place.record(*a, 1'000, 8);  // short: pipelined behind busy workers
  send(workers[0], a);
  send(workers[1], b);
  object_entry* stored = object(true);
  stored->large = true;
  stored->pins.store(1);  // the read-back's hold
  task_spec* reader = task({stored});
  const std::vector<object_entry*> read_back{stored};
  place.held_for_read_back(&read_back);
  EXPECT_EQ(place.pick(*reader), nullptr);
  EXPECT_EQ(place.pick_ahead(*reader), nullptr);
  place.held_for_read_back(nullptr);
  EXPECT_NE(place.pick(*reader), nullptr);  // pinned by someone else: it may queue
  stored->pins.store(0);
  EXPECT_EQ(place.pick(*reader), nullptr);  // nobody pins it: it stays spillable
  place.finished(workers[0], *a);
  place.finished(workers[1], *b);
}

// One task goes ahead to a worker running exactly one, while one of its ahead
// words is free; not a task with a timeout, nor one a process waits for, nor
// behind a task known to wait in get.
TEST_F(placement_fixture, a_task_goes_ahead_only_where_it_cannot_be_held_up_for_ever) {
  std::atomic<std::uint64_t> words0[2]{}, words1[2]{};
  workers[0].ahead = words0;
  workers[1].ahead = words1;
  detail::function_info waits;
  waits.name.push_back('w');
  waits.id = 3;
  task_spec* a = task();
  task_spec* b = task();
  b->fn = &waits;
  EXPECT_EQ(place.pick_ahead(*task()), nullptr);  // idle workers: none is busy
  send(workers[0], a);
  send(workers[1], b);
  task_spec* next = task();
  EXPECT_EQ(place.pick_ahead(*next), &workers[0]);
  send(workers[0], next);
  words0[0].store(next->key);
  EXPECT_EQ(place.pick_ahead(*task()), &workers[1]);  // the first runs two now
  words1[0].store(99);
  words1[1].store(98);
  EXPECT_EQ(place.pick_ahead(*task()), nullptr);  // (no free word: never with one in flight, but checked)
  words1[0].store(0);
  words1[1].store(0);
  task_spec* timed = task();
  auto with_timeout = detail::task_options{};
  with_timeout.timeout_ns = 1'000'000'000;
  timed->profile = new task_profile(with_timeout, {1.0, 0, {}});
  EXPECT_EQ(place.pick_ahead(*timed), nullptr);
  task_spec* awaited = task();
  awaited->returns[0]->subscribe({0, 1});  // a process waits for its result
  EXPECT_EQ(place.pick_ahead(*awaited), nullptr);
  place.note_blocks(*b);  // b's function waits in get: nothing goes behind b
  EXPECT_EQ(place.pick_ahead(*task()), nullptr);
  for (task_spec* t : {a, next}) place.finished(workers[0], *t);
  place.finished(workers[1], *b);
}

// Not behind a task with a timeout (killed then, with what waits behind it);
// behind the task expected to end first, one of unknown length last.
TEST_F(placement_fixture, a_task_goes_ahead_behind_the_task_expected_to_end_first) {
  std::atomic<std::uint64_t> words0[2]{}, words1[2]{};
  workers[0].ahead = words0;
  workers[1].ahead = words1;
  detail::function_info other;
  other.name.push_back('g');
  other.id = 2;
  task_spec* unknown = task();
  unknown->fn = &other;
  task_spec* known = task();
  place.record(*known, 5'000'000, 8);  // f: 5 ms
  send(workers[0], unknown);
  send(workers[1], known);
  EXPECT_EQ(place.pick_ahead(*task()), &workers[1]);
  place.finished(workers[1], *known);
  task_spec* timed = task();
  auto with_timeout = detail::task_options{};
  with_timeout.timeout_ns = 1'000'000'000;
  timed->profile = new task_profile(with_timeout, {1.0, 0, {}});
  send(workers[1], timed);
  EXPECT_EQ(place.pick_ahead(*task()), &workers[0]);
  place.finished(workers[0], *unknown);
  place.finished(workers[1], *timed);
}

// Statistics are kept per task name too: the Python front runs every Python
// function through one registered function, which it names per task. One of
// them that waits in get kept the others from going ahead, and their run
// times were averaged together.
TEST_F(placement_fixture, tasks_of_one_function_under_other_names_keep_their_own_statistics) {
  std::atomic<std::uint64_t> words0[2]{}, words1[2]{};
  workers[0].ahead = words0;
  workers[1].ahead = words1;
  auto named = [&](const char* name) {
    task_spec* t = task();
    detail::task_options o;
    o.name = name;
    t->profile = new task_profile(o, {1.0, 0, {}});
    return t;
  };
  task_spec* waits = named("parent");
  task_spec* quick = named("work");
  place.note_blocks(*waits);  // "parent" waits in get
  place.record(*quick, 2'000'000, 8);  // "work": 2 ms
  send(workers[0], quick);
  send(workers[1], named("work"));
  EXPECT_NE(place.pick_ahead(*named("work")), nullptr);  // not held back by "parent"
  EXPECT_EQ(place.pick_ahead(*named("parent")), nullptr);
  for (auto& w : workers)
    while (!w.in_flight.empty()) place.finished(w, *w.in_flight.front());
}

}  // namespace
