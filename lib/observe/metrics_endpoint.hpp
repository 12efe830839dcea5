// observe/metrics_endpoint.hpp: a runtime serving its own /metrics over HTTP,
// from a thread of its own, so Prometheus can scrape a program for its whole
// life without a dashboard started by hand (MANTA_METRICS_ADDRESS=HOST:PORT).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include <boost/asio/io_context.hpp>

namespace manta::observe {

class http_server;

class metrics_endpoint {
 public:
  /// Listens on `host_port` ("127.0.0.1:9464"; port 0: any free one); once
  /// started, answers GET /metrics with `scrape()` (Prometheus text).
  /// @throws std::runtime_error naming the address when it cannot listen there
  metrics_endpoint(const std::string& host_port, std::function<std::string()> scrape);
  /// Starts answering on a thread of its own (after the owner has stored this:
  /// a scrape may read it).
  void start();
  /// Stops serving (joins its thread).
  ~metrics_endpoint();
  metrics_endpoint(const metrics_endpoint&) = delete;
  metrics_endpoint& operator=(const metrics_endpoint&) = delete;

  /// Where it listens, HOST:PORT.
  const std::string& address() const noexcept { return address_; }

 private:
  boost::asio::io_context io_{1};
  std::unique_ptr<http_server> server_;
  std::string address_;
  std::thread thread_;
};

}  // namespace manta::observe
