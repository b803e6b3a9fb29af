// Typed errors. Library code throws these and never exits; a binary turns them into its
// exit code (ConfigError -> 2, UnavailableError -> 77, anything else -> 1).
#pragma once
#include <stdexcept>
#include <string>

namespace parity {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Bad user input: names the JSON path (or file) and the rule that was broken.
class ConfigError : public Error {
 public:
  ConfigError(std::string path, std::string rule)
      : Error(path + ": " + rule), path_(std::move(path)), rule_(std::move(rule)) {}
  const std::string& path() const { return path_; }
  const std::string& rule() const { return rule_; }

 private:
  std::string path_, rule_;
};

// A failed collective or rendezvous: names rank, group and operation.
class CommError : public Error {
 public:
  using Error::Error;
};

// The run needs hardware this machine lacks (a CUDA device for layout.device "cuda" or the
// nccl backend). Exit 77, which ctest reports as skipped (SKIP_RETURN_CODE): never a pass.
class UnavailableError : public Error {
 public:
  using Error::Error;
};

// A file that cannot be read or written, or whose contents are not what they claim.
class IoError : public Error {
 public:
  using Error::Error;
};

}  // namespace parity
