// process/registry.cpp: the table of remote functions, by pointer (for submitting)
// and by id, the hash of the name (for running them in any process of the binary).
#include <dlfcn.h>

#include <mutex>
#include <string>
#include <unordered_map>

#include <manta/registry.hpp>

namespace manta::detail {
namespace {

struct registry {
  std::mutex mu;
  std::unordered_map<erased_fn, function_info*> by_fn;
  std::unordered_map<std::uint64_t, function_info*> by_id;
  std::unordered_map<std::uint64_t, bool> ambiguous;
};

// Never destroyed: registrations happen during static initialisation and lookups
// may happen during static destruction.
registry& table() {
  static registry* r = new registry();
  return *r;
}

}  // namespace

void register_function(function_info info) {
  registry& r = table();
  std::lock_guard lock(r.mu);
  if (r.by_fn.count(info.fn)) return;  // the same function listed twice
  auto* stored = new function_info(std::move(info));
  r.by_fn.emplace(stored->fn, stored);
  auto [it, inserted] = r.by_id.emplace(stored->id, stored);
  if (!inserted && it->second->fn != stored->fn) r.ambiguous[stored->id] = true;
}

const function_info& function_for(erased_fn fn) {
  registry& r = table();
  std::lock_guard lock(r.mu);
  auto it = r.by_fn.find(fn);
  if (it == r.by_fn.end()) {
    Dl_info info{};
    std::string name = ::dladdr(reinterpret_cast<void*>(fn), &info) && info.dli_sname
                           ? info.dli_sname
                           : "at " + std::to_string(reinterpret_cast<std::uintptr_t>(fn));
    throw usage_error("manta: function " + name +
                      " is not registered; add MANTA_REMOTE(<name>) at namespace scope");
  }
  if (r.ambiguous.count(it->second->id))
    throw usage_error("manta: two different functions are registered as '" + it->second->name +
                      "'; give them distinct names");
  return *it->second;
}

const function_info* function_by_id(std::uint64_t id) {
  registry& r = table();
  std::lock_guard lock(r.mu);
  if (r.ambiguous.count(id)) return nullptr;
  auto it = r.by_id.find(id);
  return it == r.by_id.end() ? nullptr : it->second;
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
