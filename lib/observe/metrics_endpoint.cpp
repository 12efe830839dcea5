// observe/metrics_endpoint.cpp: /metrics served by the runtime itself.
#include "observe/metrics_endpoint.hpp"

#include <stdexcept>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/system/system_error.hpp>

#include "observe/http_server.hpp"
#include "observe/log.hpp"
#include "observe/thread_name.hpp"

namespace manta::observe {

metrics_endpoint::metrics_endpoint(const std::string& host_port, std::function<std::string()> scrape) {
  const auto at = parse_endpoint(host_port);
  try {
    server_ = std::make_unique<http_server>(io_, at, [scrape = std::move(scrape)](std::string_view target) {
      const std::string_view path = target.substr(0, target.find('?'));
      if (path != "/metrics") return http_reply{404, "only /metrics is served here\n"};
      return http_reply{200, scrape(), "text/plain; version=0.0.4"};
    });
  } catch (const boost::system::system_error& e) {
    throw std::runtime_error("cannot serve metrics on " + host_port + ": " + e.code().message());
  }
  const auto bound = server_->local_endpoint();
  address_ = (bound.address().is_v6() ? "[" + bound.address().to_string() + "]" : bound.address().to_string()) +
             ":" + std::to_string(bound.port());
}

void metrics_endpoint::start() {
  thread_ = std::thread([this] {
    name_runtime_thread("manta-metrics");  // (joined at shutdown: never parks)
    try {
      io_.run();
    } catch (const std::exception& e) {
      MANTA_ERROR << "metrics endpoint " << address_ << ": " << e.what();
    }
  });
}

metrics_endpoint::~metrics_endpoint() {
  io_.stop();
  if (thread_.joinable()) thread_.join();
  server_.reset();
}

}  // namespace manta::observe
