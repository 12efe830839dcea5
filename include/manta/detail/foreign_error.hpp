// detail/foreign_error.hpp: an exception of another language (a Python task's),
// thrown out of a task so the runtime records it under that language's type name.
#pragma once

#include <stdexcept>
#include <string>

namespace manta::detail {

/// Becomes a task_error whose remote_type() is `type_name` and whose message()
/// is `message` (what the front end needs to rebuild the exception at `get`).
class foreign_error : public std::runtime_error {
 public:
  foreign_error(std::string type_name, const std::string& message)
      : std::runtime_error(message), type_name_(std::move(type_name)) {}
  const std::string& type_name() const noexcept { return type_name_; }

 private:
  std::string type_name_;
};

}  // namespace manta::detail
