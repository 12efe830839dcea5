// runtime/directory.cpp: lookups that count under the element lock, so an entry
// is never revived by one thread while another frees it.
#include "runtime/directory.hpp"

namespace manta::runtime {

object_entry::~object_entry() {
  if (store) store->forget(this);
  for (auto* c : contained) detail::release(c);
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

}  // namespace manta::runtime
