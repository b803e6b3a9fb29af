#include "ckpt/collective.h"

#include <cstring>
#include <span>

#include "core/error.h"

namespace parity::ckpt {

void agreed(comm::Communicator& world, const std::string& what, const std::function<void()>& f) {
  std::exception_ptr err;
  try {
    f();
  } catch (...) {
    err = std::current_exception();
  }
  std::vector<int64_t> mine{err ? 1 : 0}, all(static_cast<size_t>(world.size()));
  world.allgather(std::span<const int64_t>(mine), std::span<int64_t>(all));
  if (err) std::rethrow_exception(err);
  std::string bad;
  for (size_t r = 0; r < all.size(); ++r)
    if (all[r] != 0) bad += (bad.empty() ? "" : ", ") + std::to_string(world.members()[r]);
  if (!bad.empty()) throw IoError("checkpoint " + what + " failed on rank(s) " + bad + " (see their errors)");
}

std::vector<std::string> allgather_strings(comm::Communicator& world, const std::string& mine) {
  const size_t n = static_cast<size_t>(world.size());
  std::vector<int64_t> len{static_cast<int64_t>(mine.size())}, lens(n);
  world.allgather(std::span<const int64_t>(len), std::span<int64_t>(lens));
  auto words = [](int64_t bytes) { return (bytes + 7) / 8; };
  std::vector<int64_t> packed(static_cast<size_t>(words(len[0])), 0), counts(n);
  if (!mine.empty()) std::memcpy(packed.data(), mine.data(), mine.size());
  int64_t total = 0;
  for (size_t r = 0; r < n; ++r) total += counts[r] = words(lens[r]);
  std::vector<int64_t> all(static_cast<size_t>(total));
  world.allgatherv(std::span<const int64_t>(packed), std::span<int64_t>(all), std::span<const int64_t>(counts));
  std::vector<std::string> out(n);
  int64_t at = 0;
  for (size_t r = 0; r < n; ++r) {
    out[r].assign(reinterpret_cast<const char*>(all.data() + at), static_cast<size_t>(lens[r]));
    at += counts[r];
  }
  return out;
}

}  // namespace parity::ckpt
