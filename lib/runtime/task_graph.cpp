// runtime/task_graph.cpp: adding, linking, failing and removing tasks.
#include "runtime/task_graph.hpp"

#include "runtime/actor_record.hpp"

#include <algorithm>
#include <cassert>

namespace manta::runtime {

const profile_ptr& default_profile(bool method) {
  // Made once and never freed: tasks may outlive static destruction at exit.
  static const profile_ptr* made = [] {
    detail::task_options call, method;
    method.num_cpus = 0;  // as actor_handle's calls ask: the actor holds the resources
    return new profile_ptr[2]{new task_profile(call, demand_of(call), /*immortal=*/true),
                              new task_profile(method, demand{}, /*immortal=*/true)};
  }();
  return made[method];
}

namespace {
thread_local bool last_profiles_gone = false;  // (trivially destructible: readable to the thread's end)
/// The profiles of tasks and of method calls this thread made last.
struct last_profiles {
  profile_ptr made[2];
  ~last_profiles() { last_profiles_gone = true; }
};
}  // namespace

profile_ptr profile_of(detail::task_options&& o, detail::call_mode mode) {
  const bool method = mode == detail::call_mode::method;
  if (const profile_ptr& d = default_profile(method); o == d->options) return d;
  auto make = [&] {
    demand need = method ? demand{} : demand_of(o);
    return profile_ptr(new task_profile(std::move(o), std::move(need)));
  };
  // The last one this thread made, unless the thread is past destroying it (a
  // thread_local destructor that submits).
  thread_local last_profiles last;
  if (last_profiles_gone) return make();
  profile_ptr& l = last.made[method];
  if (!l || !(l->options == o)) l = make();
  return l;
}

task_spec::task_spec() : profile(default_profile(false)) {}

const std::string& task_spec::label() const {
  return mode == detail::call_mode::construct && actor && !actor->class_name.empty() ? actor->class_name : name();
}

task_spec::~task_spec() {
  if (inputs_pinned)
    for (auto* e : deps)
      if (e->store) e->store->unpin(e);
  for (auto* e : deps) detail::release(e);
  for (auto* e : contained) detail::release(e);
  for (auto* e : returns) detail::release(e);
  detail::release(actor_entry);
}

ipc::failure_ptr task_graph::add(std::unique_ptr<task_spec> owned) {
  task_spec* t = owned.get();
  assert(!tasks_.count(t->key));
  tasks_.emplace(t->key, std::move(owned));
  if (t->parent) ++with_parent_;
  for (auto* e : t->returns) e->producer_ = t;
  // A failed argument fails the task before it waits on any other.
  for (auto* e : t->deps)
    if (e->status() == state_failed) return e->error;
  for (auto* e : t->deps)
    if (e->status() == state_pending) {
      e->waiters().dependents.push_back(t);
      ++t->pending_deps;
    }
  return nullptr;
}

task_spec* task_graph::find(std::uint64_t key) const {
  auto it = tasks_.find(key);
  return it == tasks_.end() ? nullptr : it->second.get();
}

std::vector<std::uint64_t> task_graph::keys() const {
  std::vector<std::uint64_t> out;
  out.reserve(tasks_.size());
  for (const auto& [key, t] : tasks_) out.push_back(key);
  return out;
}

void task_graph::remove(task_spec* t) {
  leave(t);
  stop_waiting(t);
  for (auto* e : t->returns)
    if (e->producer_ == t) e->producer_ = nullptr;
  if (t->parent) --with_parent_;
  // Deleted once out of the map: its destructor releases entries, which must
  // find the map whole.
  auto it = tasks_.find(t->key);
  std::unique_ptr<task_spec> doomed = std::move(it->second);
  tasks_.erase(it);
}

void task_graph::clear() {
  // Edges first, so deleting a task (which releases entries) finds none.
  for (auto& [key, t] : tasks_) {
    if (t->in_lane) t->in_lane->clear();
    t->in_lane = nullptr;
    stop_waiting(t.get());
    for (auto* e : t->returns)
      if (e->producer_ == t.get()) e->producer_ = nullptr;
  }
  ready_.clear();
  ready_demands_.clear();
  with_parent_ = 0;
  auto doomed = std::move(tasks_);
  tasks_.clear();
}

void task_graph::enter(task_spec* t, lane& l, bool at_front) {
  leave(t);
  // Counted first: a count that cannot be made leaves `t` out of every lane.
  std::size_t* count = &l == &ready_ && !t->is_default() ? &ready_demands_[t->need()] : nullptr;
  try {
    if (at_front) l.push_front(t);
    else l.push_back(t);
  } catch (...) {
    if (count && *count == 0) ready_demands_.erase(t->need());
    throw;
  }
  if (count) ++*count;
  t->in_lane = &l;
}

void task_graph::leave(task_spec* t) {
  lane* l = std::exchange(t->in_lane, nullptr);
  if (!l) return;
  if (l == &ready_ && !t->is_default()) {
    auto it = ready_demands_.find(t->need());
    assert(it != ready_demands_.end() && it->second > 0);
    if (it != ready_demands_.end() && --it->second == 0) ready_demands_.erase(it);
  }
  // Mostly taken from either end: a worker's tasks finish in the order sent
  // (or the reverse, when nested), queues are served from the front.
  if (!l->empty() && l->front() == t) l->pop_front();
  else if (!l->empty() && l->back() == t) l->pop_back();
  else l->erase(std::find(l->begin(), l->end(), t));
}

std::size_t task_graph::ready_asking(const demand& d) const {
  auto it = ready_demands_.find(d);
  return it == ready_demands_.end() ? 0 : it->second;
}

void task_graph::sealed(object_entry* e, std::vector<task_spec*>& runnable) {
  if (!e->waiters_) return;
  for (auto* d : e->waiters_->dependents)
    if (--d->pending_deps == 0) runnable.push_back(d);
  e->waiters_->dependents.clear();
}

void task_graph::stop_waiting(task_spec* t) {
  if (t->pending_deps <= 0) return;
  for (auto* d : t->deps) {
    if (!d->waiters_) continue;  // sealed before t came
    auto& ds = d->waiters_->dependents;
    ds.erase(std::remove(ds.begin(), ds.end(), t), ds.end());
  }
  t->pending_deps = 0;
}

void task_graph::fail(task_spec* first, ipc::failure_ptr first_why, failure_spread& out) {
  std::vector<std::pair<task_spec*, ipc::failure_ptr>> work{{first, std::move(first_why)}};
  while (!work.empty()) {
    auto [t, why] = std::move(work.back());
    work.pop_back();
    stop_waiting(t);
    out.tasks.push_back(t);
    for (auto* e : t->returns) {
      if (e->status() != state_pending || e->error) continue;
      e->error = why;
      out.objects.push_back(e);
      if (!e->waiters_) continue;
      pool_vector<task_spec*> dependents = std::move(e->waiters_->dependents);
      e->waiters_->dependents.clear();
      for (auto* d : dependents) {
        if (d->pending_deps <= 0) continue;  // failed through another argument already
        stop_waiting(d);
        work.emplace_back(d, ipc::chain_failure(why, d->name()));
      }
    }
  }
}

std::vector<task_spec*> task_graph::children_of(std::uint64_t parent) const {
  std::vector<task_spec*> out;
  if (with_parent_ == 0) return out;
  for (const auto& [key, t] : tasks_)
    if (t->parent == parent) out.push_back(t.get());
  return out;
}

std::string task_graph::check(std::span<object_entry* const> entries) const {
  auto live = [&](const task_spec* t) {
    auto it = tasks_.find(t->key);
    return it != tasks_.end() && it->second.get() == t;
  };
  std::unordered_map<const task_spec*, int> edges;
  for (const object_entry* e : entries) {
    if (e->producer_ && !live(e->producer_)) return "an object's producer is gone";
    if (!e->waiters_) continue;
    for (const task_spec* d : e->waiters_->dependents) {
      if (!live(d)) return "an object lists a task that is gone among its dependents";
      if (e->status() != state_pending) return "a sealed object still has dependents";
      ++edges[d];
    }
  }
  for (const auto& [key, t] : tasks_) {
    if (t->pending_deps != edges[t.get()])
      return "task " + std::to_string(key) + " counts " + std::to_string(t->pending_deps) +
             " pending arguments but waits on " + std::to_string(edges[t.get()]);
    if (t->in_lane && std::find(t->in_lane->begin(), t->in_lane->end(), t.get()) == t->in_lane->end())
      return "task " + std::to_string(key) + " is not in the lane it names";
  }
  std::map<demand, std::size_t> asking;
  for (const task_spec* t : ready_) {
    if (!live(t) || t->in_lane != &ready_) return "the ready queue holds a task that is gone or elsewhere";
    if (!t->is_default()) ++asking[t->need()];
  }
  if (asking != ready_demands_) return "the ready queue's count of tasks by demand is off";
  return {};
}

}  // namespace manta::runtime
