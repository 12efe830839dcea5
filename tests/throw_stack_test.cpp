// throw_stack_test.cpp: the __cxa_throw hook alone (process/throw_stack.hpp):
// which throw's stack an escaping exception gets, in nested recording scopes,
// for rethrown objects, and before the program's main.
#include <exception>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "observe/crash_stack.hpp"
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

/// Its call of __cxa_throw is its last instruction: the return address is
/// the first byte of whatever follows it.
__attribute__((noinline)) void throws_an_int() { throw 42; }
__attribute__((noinline)) int right_after(int x) { return x * 3 + 1; }

TEST(throw_stack, a_program_may_throw_before_main) { EXPECT_EQ(thrown_before_main, 1); }

TEST(throw_stack, a_return_address_is_named_by_the_call_before_it_and_a_crash_by_its_instruction) {
  // A return address at a function's first byte belongs to the code before it
  // (a call that never returned); an interrupted instruction there, to the function.
  const void* frame[] = {reinterpret_cast<const void*>(&right_after)};
  const std::string returned = manta::observe::describe_frames(frame, 1, "", /*first_is_exact=*/false);
  const std::string crashed = manta::observe::describe_frames(frame, 1, "", /*first_is_exact=*/true);
  EXPECT_EQ(returned.find("right_after"), std::string::npos) << returned;
  EXPECT_NE(crashed.find("right_after"), std::string::npos) << crashed;
}

TEST(throw_stack, a_throw_that_ends_its_function_is_named_by_that_function) {
  manta::process::throw_recording record;
  try {
    throws_an_int();
  } catch (int) {
    record.stop();
    const std::string stack = manta::process::take_throw_stack();
    EXPECT_EQ(stack.rfind("  #0 ", 0), 0u) << stack;
    EXPECT_NE(stack.substr(0, stack.find('\n')).find("throws_an_int"), std::string::npos) << stack;
    EXPECT_EQ(right_after(1), 4);
  }
}

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
