// Typed errors. Library code throws these and never exits; a binary turns them into its
// exit code (core/exit_codes.h: ConfigError -> 2, CommError / IoError -> 3, DivergedError -> 4,
// UnavailableError -> 77, anything else -> 1).
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

// Throws ConfigError(path, rule) unless `ok`.
inline void require_config(bool ok, const std::string& path, const std::string& rule) {
  if (!ok) throw ConfigError(path, rule);
}

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

// The one-device baseline itself went non-finite (inf / NaN loss, gradients or parameters: a
// learning rate or route scale the training does not survive). Not a parity bug: the inputs
// diverge on one device, so no layout can be judged against them. Names the step and quantity.
class DivergedError : public Error {
 public:
  using Error::Error;
};

}  // namespace parity
