// Strict numeric options (cli/numbers.h).
#include "cli/numbers.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>

#include "core/text.h"

namespace parity::cli {
namespace {

constexpr int64_t kMax = std::numeric_limits<int64_t>::max(), kMin = std::numeric_limits<int64_t>::min();

std::string bound(int64_t v) {
  if (v == kMax) return "2^63 - 1";
  if (v == kMin) return "-2^63";
  return std::to_string(v);
}

std::string bound(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

std::string quote_arg(const std::string& s) { return "'" + printable(s, 40) + "'"; }

// The integer `s` writes in decimal, or why not.
std::optional<int64_t> read_integer(const std::string& s, std::string& why) {
  size_t i = (!s.empty() && (s[0] == '-' || s[0] == '+')) ? 1 : 0;
  if (i == s.size() || s.find_first_not_of("0123456789", i) != std::string::npos) {
    why = "must be an integer written in decimal digits, got " + quote_arg(s);
    return std::nullopt;
  }
  errno = 0;
  const long long v = std::strtoll(s.c_str(), nullptr, 10);
  if (errno == ERANGE) {
    why = "is beyond the 64-bit range [-2^63, 2^63 - 1], got " + quote_arg(s);
    return std::nullopt;
  }
  // CLI11 converts with base 0: "010" would be octal 8. A leading zero is refused.
  if (s.size() > i + 1 && s[i] == '0') {
    why = "must be written without leading zeros, got " + quote_arg(s);
    return std::nullopt;
  }
  return static_cast<int64_t>(v);
}

std::optional<double> read_real(const std::string& s, std::string& why) {
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(s.c_str(), &end);
  if (s.empty() || end != s.c_str() + s.size()) {
    why = "must be a number, got " + quote_arg(s);
    return std::nullopt;
  }
  if (!std::isfinite(v) || (errno == ERANGE && std::fabs(v) > 1.0)) {
    why = "must be a finite number, got " + quote_arg(s);
    return std::nullopt;
  }
  if (errno == ERANGE) {
    why = "is too small to represent as a double (it would be read as " + bound(v) + "), got " + quote_arg(s);
    return std::nullopt;
  }
  return v;
}

CLI::Validator real_in(double lo, bool lo_open, double hi, const std::string& name) {
  return CLI::Validator(
      [=](std::string& s) -> std::string {
        std::string why;
        const auto v = read_real(s, why);
        if (!v) return why;
        if ((lo_open ? *v <= lo : *v < lo) || *v > hi)
          return "must be a number in " + std::string(lo_open ? "(" : "[") + bound(lo) + ", " + bound(hi) + "], got " +
                 quote_arg(s);
        return "";
      },
      name);
}

void add_strict(CLI::App& app) {
  for (CLI::Option* opt : app.get_options()) {
    const std::string type = opt->get_type_name();
    if (type.rfind("INT", 0) == 0 || type.rfind("UINT", 0) == 0)
      opt->check(CLI::Validator(
          [](std::string& s) -> std::string {
            std::string why;
            return read_integer(s, why) ? "" : why;
          },
          ""));
    else if (type.rfind("FLOAT", 0) == 0)
      opt->check(CLI::Validator(
          [](std::string& s) -> std::string {
            std::string why;
            return read_real(s, why) ? "" : why;
          },
          ""));
  }
  for (CLI::App* sub : app.get_subcommands({})) add_strict(*sub);
}

}  // namespace

CLI::Validator integer_in(int64_t lo, int64_t hi) {
  return CLI::Validator(
      [=](std::string& s) -> std::string {
        std::string why;
        const auto v = read_integer(s, why);
        if (!v) return why;
        if (*v < lo || *v > hi)
          return "must be an integer in [" + bound(lo) + ", " + bound(hi) + "], got " + quote_arg(s);
        return "";
      },
      lo == 0 ? "NONNEGATIVE" : lo == 1 ? "POSITIVE" : "");
}

CLI::Validator positive_real(double hi) { return real_in(0.0, true, hi, "POSITIVE"); }
CLI::Validator non_negative_real(double hi) { return real_in(0.0, false, hi, "NONNEGATIVE"); }
CLI::Validator positive_seconds() { return real_in(0.0, true, 365.0 * 24 * 3600, "SECONDS"); }

void strict_numbers(CLI::App& app) { add_strict(app); }

}  // namespace parity::cli
