// The one exit-code table of every parity command (README "Exit codes", docs/architecture.md).
// CI tells a parity bug from a flaky machine by the code alone.
#pragma once
#include <exception>

namespace parity::exit_code {

inline constexpr int ok = 0;              // success; the layout computes what one device computes
inline constexpr int parity_broken = 1;   // a verdict failed (or a golden / zoo check did)
inline constexpr int bad_input = 2;       // the input is wrong; nothing ran (ConfigError, CLI misuse)
inline constexpr int infrastructure = 3;  // a rank died or hung, a collective timed out, I/O failed
inline constexpr int diverged = 4;        // the one-device baseline went non-finite (DivergedError): the
                                          // inputs diverge on one device; no layout was judged
inline constexpr int not_run = 77;        // could not run here: no CUDA device, not enough memory
                                          // (ctest's SKIP_RETURN_CODE: shown as skipped, never passed)

// The code for an exception escaping a command: ConfigError -> bad_input, UnavailableError ->
// not_run, CommError / IoError / a std::system_error -> infrastructure, DivergedError -> diverged;
// anything else, a bug
// in parity itself or a broken invariant, -> parity_broken.
int of(const std::exception& e);

// A short name for a code ("parity broken", "infrastructure failed", ...), for summaries.
const char* name(int code);

}  // namespace parity::exit_code
