// progress_program.cpp: a program with long waits and options.progress on, run
// by progress_test in a terminal (tmux) and with stderr in a file.
// Usage: progress_program map|imap|get|wait|chatty LOG_DIR (chatty: the tasks print)
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include <manta/manta.hpp>

int slow_square(int x) {
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  return x * x;
}
int chatty_square(int x) {
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  std::printf("worker says %d\n", x);
  std::fflush(stdout);
  return x * x;
}
MANTA_REMOTE(slow_square, chatty_square);

int main(int argc, char** argv) {
  if (argc < 3) return 2;
  const std::string mode = argv[1];
  manta::init({.num_workers = 2, .log_dir = argv[2], .progress = true});
  std::vector<int> items(100);
  for (int i = 0; i < 100; ++i) items[i] = i;
  long sum = 0;
  if (mode == "map") {
    manta::pool p;
    for (int v : p.map(slow_square, items, 1)) sum += v;
  } else if (mode == "imap") {
    manta::pool p;
    for (int v : p.imap(slow_square, items, 1)) sum += v;
  } else {
    std::vector<manta::object_ref<int>> refs;
    for (int i : items) refs.push_back(manta::task(mode == "chatty" ? chatty_square : slow_square).remote(i));
    if (mode == "wait") manta::wait(refs, refs.size());
    for (int v : manta::get(refs)) sum += v;
  }
  std::printf("sum %ld\n", sum);
  manta::shutdown();
  return sum == 328350 ? 0 : 1;
}
