// throw_stack_test.cpp: the __cxa_throw hook alone (process/throw_stack.hpp):
// which throw's stack an escaping exception gets, in nested recording scopes,
// for rethrown objects, and before the program's main.
#include <exception>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "process/throw_stack.hpp"

namespace {

// Thrown and caught while the program starts, before the hook's own
// initialiser may have run: the program must start (it used to abort).
const int thrown_before_main = [] {
  try {
    throw std::runtime_error("during static initialisation");
  } catch (const std::exception&) {
    return 1;
  }
}();

__attribute__((noinline)) void nested_task_body() {
  try {
    throw std::runtime_error("caught inside the nested task");
  } catch (const std::runtime_error&) {
  }
}
__attribute__((noinline)) void outer_thrower() { throw std::runtime_error("escapes the outer task"); }

TEST(throw_stack, a_program_may_throw_before_main) { EXPECT_EQ(thrown_before_main, 1); }

TEST(throw_stack, the_escaping_object_gets_its_own_throws_stack_across_nested_scopes) {
  manta::process::throw_recording outer;
  {
    manta::process::throw_recording nested;  // a task run while the outer one waits
    nested_task_body();
  }
  try {
    outer_thrower();
  } catch (const std::runtime_error&) {
    outer.stop();
    std::string stack = manta::process::take_throw_stack();
    EXPECT_NE(stack.find("outer_thrower"), std::string::npos) << stack;
    EXPECT_EQ(stack.find("nested_task_body"), std::string::npos) << stack;
  }
}

TEST(throw_stack, a_rethrown_earlier_exception_gets_no_stranger_stack) {
  manta::process::throw_recording record;
  std::exception_ptr earlier;
  try {
    outer_thrower();
  } catch (...) {
    earlier = std::current_exception();
  }
  nested_task_body();  // another throw of the same type comes between
  try {
    std::rethrow_exception(earlier);
  } catch (const std::runtime_error&) {
    record.stop();
    std::string stack = manta::process::take_throw_stack();
    EXPECT_EQ(stack.find("nested_task_body"), std::string::npos) << stack;
  }
}

TEST(throw_stack, nothing_is_recorded_outside_a_scope) {
  try {
    outer_thrower();
  } catch (...) {
    EXPECT_EQ(manta::process::take_throw_stack(), "");
  }
}

}  // namespace
