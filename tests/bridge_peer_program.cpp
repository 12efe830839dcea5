// bridge_peer_program: a cluster member in a process of its own, for
// bridge_test (exec'd, so it runs under every sanitizer).
//   bridge_peer_program node ADDRESS TOKEN   joins; prints "joined"; exits 0 when
//                                            the cluster is stopped, 3 when the head is lost
//   bridge_peer_program head TOKEN           serves; prints its port; runs until killed
#include <unistd.h>

#include <cstdio>
#include <future>
#include <string>

#include "bridge/head.hpp"
#include "bridge/node_link.hpp"

int main(int argc, char** argv) {
  using namespace manta::bridge;
  if (argc == 4 && std::string(argv[1]) == "node") {
    try {
      std::promise<std::string> ended;
      node_link link(argv[2], argv[3], {"localhost", static_cast<int>(::getpid()), {{"CPU", 1}}, {"f", "g"}},
                     [&](const std::string& why) { ended.set_value(why); });
      std::printf("joined %s\n", link.node_id().c_str());
      std::fflush(stdout);
      std::string why = ended.get_future().get();
      return why.find("stopped") != std::string::npos ? 0 : 3;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "%s\n", e.what());
      return 5;
    }
  }
  if (argc == 3 && std::string(argv[1]) == "head") {
    head h({.token = argv[2]});
    std::printf("port %u\n", h.port());
    std::fflush(stdout);
    for (;;) ::pause();
  }
  return 2;
}
