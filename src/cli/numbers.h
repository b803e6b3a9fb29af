// Numbers on the command line, read strictly, in one place (issue 26). CLI11 2.1 reads an
// integer with strtoll and never looks at errno: a value past 2^63 - 1 became 2^63 - 1
// (`--steps 99999999999999999999` ran for ever); its PositiveNumber / NonNegativeNumber
// print their bound, DBL_MAX, as a 309-digit number; a double takes "nan" and "inf", and NaN
// passes every range check (it compares false). Every numeric option of every subcommand
// gets strict_number (run_cli calls strict_numbers once the commands are registered); an
// option with a range says so with the validators below, whose messages print readable bounds.
#pragma once
#include <cstdint>
#include <limits>

#include <CLI/CLI.hpp>

namespace parity::cli {

// An integer in [lo, hi] written in decimal ("must be an integer in [1, 2^63 - 1], got ...").
CLI::Validator integer_in(int64_t lo, int64_t hi = std::numeric_limits<int64_t>::max());
inline CLI::Validator positive_integer() { return integer_in(1); }
inline CLI::Validator non_negative_integer() { return integer_in(0); }

// A finite number > 0 (positive_real) or >= 0 (non_negative_real), at most `hi`.
CLI::Validator positive_real(double hi = 1e300);
CLI::Validator non_negative_real(double hi = 1e300);
// Seconds: a finite number > 0 and at most a year (a larger one overflows the milliseconds).
CLI::Validator positive_seconds();

// Adds the strict check of its type to every INT, UINT and FLOAT option of `app` and of its
// subcommands, recursively: an integer out of the 64-bit range, a number that is not finite
// (nan, inf, 1e999) or that underflows (1e-400) is refused with a readable message (exit 2).
void strict_numbers(CLI::App& app);

}  // namespace parity::cli
