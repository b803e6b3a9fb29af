// Counter-based random numbers (Philox4x32-10 from Random123). Every value is a pure
// function of (key, counter), so any rank can draw exactly the elements it owns.
#pragma once
#include <array>
#include <cstdint>
#include <string_view>

namespace parity {

using PhiloxWords = std::array<uint32_t, 4>;

// Philox4x32-10 of the 128-bit counter (c0, c1) under the 64-bit key.
PhiloxWords philox(uint64_t key, uint64_t c0, uint64_t c1);

// 64-bit FNV-1a of a name: separates the random streams of different parameters.
uint64_t name_hash(std::string_view name);

// Uniform in the open interval (0, 1) from 52 random bits.
double uniform_open(uint32_t hi, uint32_t lo);

// N(0, 1) for element `index` of the stream (seed, name): Box-Muller on one Philox block.
double philox_normal(uint64_t seed, std::string_view name, uint64_t index);
// The same with the name's hash taken once (name_key = name_hash(name)): a tensor's elements.
double philox_normal_keyed(uint64_t seed, uint64_t name_key, uint64_t index);

}  // namespace parity
