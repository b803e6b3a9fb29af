// The mesh tests' check of a refused layout: validate_layout must throw a ConfigError that
// names the field (`path`) and contains the rule. Header-only: tests/CMakeLists.txt compiles
// *_test.cpp only.
#pragma once
#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "mesh/mesh.h"

namespace parity::mesh::testing {

inline void expect_refused(const LayoutConfig& l, const ModelConfig& m, const std::string& path,
                           const std::string& rule) {
  try {
    validate_layout(l, m);
    ADD_FAILURE() << "accepted: expected " << path << ": " << rule;
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.path(), path);
    EXPECT_NE(e.rule().find(rule), std::string::npos) << e.what();
  }
}

}  // namespace parity::mesh::testing
