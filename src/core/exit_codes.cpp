#include "core/exit_codes.h"

#include <new>
#include <system_error>

#include "core/error.h"

namespace parity::exit_code {

int of(const std::exception& e) {
  if (dynamic_cast<const ConfigError*>(&e) != nullptr) return bad_input;
  if (dynamic_cast<const UnavailableError*>(&e) != nullptr) return not_run;
  if (dynamic_cast<const DivergedError*>(&e) != nullptr) return diverged;
  if (dynamic_cast<const CommError*>(&e) != nullptr || dynamic_cast<const IoError*>(&e) != nullptr ||
      dynamic_cast<const std::system_error*>(&e) != nullptr || dynamic_cast<const std::bad_alloc*>(&e) != nullptr)
    return infrastructure;
  return parity_broken;
}

const char* name(int code) {
  switch (code) {
    case ok: return "ok";
    case parity_broken: return "parity broken";
    case bad_input: return "bad input";
    case infrastructure: return "infrastructure failed";
    case diverged: return "baseline diverged";
    case not_run: return "not run here";
    default: return code > 128 ? "killed by a signal" : "unknown";
  }
}

}  // namespace parity::exit_code
