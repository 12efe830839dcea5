// Must not compile: a type cereal cannot serialise, stored with put. The test
// checks that the compiler names the problem in manta's words.
#include <manta/manta.hpp>

struct no_serialize {
  int x = 0;
  no_serialize() = default;
  no_serialize(const no_serialize&) = default;
  virtual ~no_serialize() = default;  // not trivially copyable either
};

int main() { manta::put(no_serialize{}); }
