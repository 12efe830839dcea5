// process/task_wire.hpp: how a task's options travel in a submit message.
#pragma once

#include <cstdint>
#include <string>

#include <manta/detail/task_request.hpp>

#include "ipc/frame.hpp"

namespace manta::process {

inline void write_options(ipc::frame_writer& w, const detail::task_options& o) {
  w.put(o.num_cpus);
  w.put(o.num_gpus);
  w.put(static_cast<std::int32_t>(o.max_retries));
  w.put(static_cast<std::uint8_t>(o.retry_exceptions));
  w.put(static_cast<std::int32_t>(o.max_restarts));
  w.put(static_cast<std::int32_t>(o.max_task_retries));
  w.put(static_cast<std::int32_t>(o.max_concurrency));
  w.string(o.name);
  w.put(static_cast<std::uint32_t>(o.resources.size()));
  for (const auto& [name, amount] : o.resources) {
    w.string(name);
    w.put(amount);
  }
}

inline detail::task_options read_options(ipc::frame_reader& r) {
  detail::task_options o;
  o.num_cpus = r.get<double>();
  o.num_gpus = r.get<double>();
  o.max_retries = r.get<std::int32_t>();
  o.retry_exceptions = r.get<std::uint8_t>() != 0;
  o.max_restarts = r.get<std::int32_t>();
  o.max_task_retries = r.get<std::int32_t>();
  o.max_concurrency = r.get<std::int32_t>();
  o.name = r.string();
  auto n = r.get<std::uint32_t>();
  for (std::uint32_t i = 0; i < n; ++i) {
    std::string name = r.string();
    o.resources[name] = r.get<double>();
  }
  return o;
}

}  // namespace manta::process
