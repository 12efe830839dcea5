// process/registry.cpp: the table of remote functions, by pointer (for submitting)
// and by id, the hash of the name (for running them in any process of the binary).
#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_map>

#include <manta/registry.hpp>

#include "observe/crash_stack.hpp"

namespace manta::detail {
namespace {

struct registry {
  std::mutex mu;
  std::unordered_map<erased_fn, function_info*> by_fn;
  std::unordered_map<std::uint64_t, function_info*> by_id;
  std::unordered_map<std::uint64_t, bool> ambiguous;
  std::unordered_map<std::uint64_t, std::vector<function_info*>> methods;  ///< by class tag
  std::unordered_map<std::uint64_t, std::string> class_names;
  /// Bumped by every registration (one can make an id ambiguous): lookups
  /// cached under an older generation are stale.
  std::atomic<std::uint64_t> generation{0};
};

// Never destroyed: registrations happen during static initialisation and lookups
// may happen during static destruction.
registry& table() {
  static registry* r = [] {
    auto* t = new registry();
    // A fork while another thread looks a function up would leave the child's
    // copy locked forever (submitting there hung): the fork waits for the lookup.
    ::pthread_atfork([] { table().mu.lock(); }, [] { table().mu.unlock(); }, [] { table().mu.unlock(); });
    return t;
  }();
  return *r;
}

}  // namespace

const function_info& register_function(function_info info) {
  registry& r = table();
  std::lock_guard lock(r.mu);
  if (info.kind == callable_kind::function) {
    if (auto it = r.by_fn.find(info.fn); it != r.by_fn.end()) return *it->second;  // listed twice
  } else if (auto it = r.by_id.find(info.id); it != r.by_id.end() && it->second->kind == info.kind &&
                                               it->second->class_tag == info.class_tag &&
                                               it->second->member == info.member) {
    return *it->second;  // the same constructor or method again
  }
  auto* stored = new function_info(std::move(info));
  if (stored->kind == callable_kind::function) r.by_fn.emplace(stored->fn, stored);
  if (stored->kind == callable_kind::method) r.methods[stored->class_tag].push_back(stored);
  auto [it, inserted] = r.by_id.emplace(stored->id, stored);
  if (!inserted) r.ambiguous[stored->id] = true;
  r.generation.fetch_add(1, std::memory_order_release);
  return *stored;
}

const function_info& method_for(std::uint64_t class_tag, const void* member, std::size_t size) {
  registry& r = table();
  std::string class_name;
  {
    std::lock_guard lock(r.mu);
    for (function_info* m : r.methods[class_tag])
      if (std::memcmp(m->member.data(), member, size) == 0) {
        if (r.ambiguous.count(m->id))
          throw usage_error("manta: two different methods are registered as '" + m->name + "'");
        return *m;
      }
    auto it = r.class_names.find(class_tag);
    if (it != r.class_names.end()) class_name = it->second;
  }
  // Named without the lock: the first naming reads the binary's symbols.
  // A non-virtual member pointer starts with the function's address (Itanium C++ ABI; odd: virtual).
  std::string method = "this method";
  std::uintptr_t first = 0;
  if (size >= sizeof first) std::memcpy(&first, member, sizeof first);
  if (first && !(first & 1))
    if (std::string symbol = observe::name_of_address(reinterpret_cast<const void*>(first)); !symbol.empty())
      method = "method " + symbol;
  throw usage_error("manta: " + method + " of " + (class_name.empty() ? type_name_of_tag(class_tag) : class_name) +
                    " is not registered; list it in MANTA_ACTOR(" + (class_name.empty() ? "T" : class_name) +
                    ", &T::method, ...)");
}

void register_actor_class(std::uint64_t class_tag, std::string name) {
  registry& r = table();
  std::lock_guard lock(r.mu);
  r.class_names.emplace(class_tag, std::move(name));
}

void show_actor_class_as(std::uint64_t class_tag, std::string name) {
  registry& r = table();
  std::lock_guard lock(r.mu);
  r.class_names[class_tag] = std::move(name);
}

std::string actor_class_name(std::uint64_t class_tag) {
  {
    registry& r = table();
    std::lock_guard lock(r.mu);
    auto it = r.class_names.find(class_tag);
    if (it != r.class_names.end()) return it->second;
  }
  return type_name_of_tag(class_tag);
}

const function_info& function_for(erased_fn fn) {
  registry& r = table();
  {
    std::lock_guard lock(r.mu);
    auto it = r.by_fn.find(fn);
    if (it != r.by_fn.end()) {
      if (r.ambiguous.count(it->second->id))
        throw usage_error("manta: two different functions are registered as '" + it->second->name +
                          "'; give them distinct names");
      return *it->second;
    }
  }
  // Named without the lock, from the symbol table (static functions too), else by address.
  std::string name = observe::name_of_address(reinterpret_cast<const void*>(fn));
  if (name.empty()) name = "at " + std::to_string(reinterpret_cast<std::uintptr_t>(fn));
  else name = "'" + name + "'";
  throw usage_error("manta: function " + name + " is not registered; add MANTA_REMOTE(<name>) at namespace scope");
}

std::vector<std::string> registered_names() {
  registry& r = table();
  std::vector<std::string> names;
  {
    std::lock_guard lock(r.mu);
    for (const auto& [id, info] : r.by_id) names.push_back(info->name);
  }
  std::sort(names.begin(), names.end());
  return names;
}

const function_info* function_by_id(std::uint64_t id) {
  // A worker looks up every task's function, mostly the same one again: the
  // last answer is kept per thread until a registration changes the table.
  thread_local std::uint64_t cached_id = 0, cached_generation = ~std::uint64_t{0};
  thread_local const function_info* cached = nullptr;
  registry& r = table();
  const std::uint64_t generation = r.generation.load(std::memory_order_acquire);
  if (id == cached_id && generation == cached_generation) return cached;
  std::lock_guard lock(r.mu);
  auto it = r.by_id.find(id);
  cached = r.ambiguous.count(id) || it == r.by_id.end() ? nullptr : it->second;
  cached_id = id;
  cached_generation = generation;
  return cached;
}

std::vector<std::string> split_names(const char* names) {
  std::vector<std::string> out;
  std::string cur;
  int depth = 0;
  auto flush = [&] {
    auto b = cur.find_first_not_of(" \t\n");
    auto e = cur.find_last_not_of(" \t\n");
    out.push_back(b == std::string::npos ? std::string() : cur.substr(b, e - b + 1));
    cur.clear();
  };
  for (const char* p = names; *p; ++p) {
    char c = *p;
    if (c == '<' || c == '(' || c == '[') ++depth;
    if (c == '>' || c == ')' || c == ']') --depth;
    if (c == ',' && depth == 0) {
      flush();
      continue;
    }
    cur.push_back(c);
  }
  flush();
  // "&Counter::increment" registers as "Counter::increment".
  for (auto& n : out)
    if (!n.empty() && n[0] == '&') n.erase(0, 1);
  return out;
}

}  // namespace manta::detail
