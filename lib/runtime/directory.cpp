// runtime/directory.cpp: lookups that count under the element lock, so an entry
// is never revived by one thread while another frees it.
#include "runtime/directory.hpp"

#include "ipc/futex.hpp"

#include <charconv>
#include <cstdio>

namespace manta::runtime {

object_entry::~object_entry() {
  if (store) store->forget(this);
  for (auto* c : contained) detail::release(c);
}

namespace {
// Entries freed on this thread and not deleted yet; non-null while a loop drains it.
thread_local std::vector<object_entry*>* freeing = nullptr;
}  // namespace

void free_entry(object_entry* e) noexcept {
  if (freeing) {  // inside the loop below: it deletes this one in turn
    freeing->push_back(e);
    return;
  }
  if (e->contained.empty()) {  // the common case: it releases nothing in turn
    delete e;
    return;
  }
  std::vector<object_entry*> pending{e};
  freeing = &pending;
  while (!pending.empty()) {
    object_entry* next = pending.back();
    pending.pop_back();
    delete next;  // releasing what it contains may append to `pending`
  }
  freeing = nullptr;
}

object_entry* directory::create(const object_id& id, std::int64_t count) const {
  auto* e = new object_entry();
  e->id = id;
  e->epoch = epoch_;
  e->count.store(count, std::memory_order_relaxed);
  e->store = store_;
  return e;
}

void directory::publish(object_entry* e, std::uint32_t status) {
  std::uint32_t old = e->state.exchange(status, std::memory_order_acq_rel);
  if (old & state_waiters) wake_all();
}

void directory::wake_all() {
  seal_seq_.fetch_add(1, std::memory_order_acq_rel);
  ipc::futex_wake_all(seal_seq_);
}

void directory::insert(object_entry* e) { map_.insert({e->id, e}); }

object_entry* directory::acquire(const object_id& id) {
  decltype(map_)::const_accessor a;
  if (!map_.find(a, id)) return nullptr;
  detail::acquire(a->second);
  return a->second;
}

object_entry* directory::find(const object_id& id) {
  decltype(map_)::const_accessor a;
  return map_.find(a, id) ? a->second : nullptr;
}

bool directory::erase_if_unused(object_entry* e) {
  decltype(map_)::accessor a;
  if (!map_.find(a, e->id)) return false;  // another releaser erased it first
  if (a->second != e || e->count.load(std::memory_order_acquire) != 0) return false;
  map_.erase(a);
  return true;
}

std::vector<object_entry*> directory::take_all() {
  std::vector<object_entry*> all;
  for (auto& kv : map_) all.push_back(kv.second);
  map_.clear();
  return all;
}

std::string id_text(const object_id& id) {
  char text[40];
  std::snprintf(text, sizeof text, "%016llx%016llx", static_cast<unsigned long long>(id.hi),
                static_cast<unsigned long long>(id.lo));
  return text;
}

std::optional<object_id> id_from_text(std::string_view text) {
  if (text.size() != 32) return std::nullopt;
  object_id id;
  const char* hex = text.data();
  if (std::from_chars(hex, hex + 16, id.hi, 16).ptr != hex + 16 ||
      std::from_chars(hex + 16, hex + 32, id.lo, 16).ptr != hex + 32)
    return std::nullopt;
  return id;
}

}  // namespace manta::runtime
