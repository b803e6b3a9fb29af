// The tests' check that a call is refused with one error type: runs `fn`, which must throw
// E, and returns its message (an ADD_FAILURE naming what happened instead, and "", when it
// throws another exception or nothing). Header-only: tests/CMakeLists.txt compiles
// *_test.cpp only.
#pragma once
#include <gtest/gtest.h>

#include <exception>
#include <functional>
#include <string>

#include "core/error.h"

namespace parity::testing {

template <class E> std::string thrown_message(const std::function<void()>& fn, const char* type) {
  try {
    fn();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected " << type << ", got another exception: " << e.what();
    return "";
  }
  ADD_FAILURE() << "expected " << type << ", nothing was thrown";
  return "";
}

inline std::string io_error(const std::function<void()>& fn) { return thrown_message<IoError>(fn, "IoError"); }
inline std::string config_error(const std::function<void()>& fn) {
  return thrown_message<ConfigError>(fn, "ConfigError");
}

}  // namespace parity::testing
