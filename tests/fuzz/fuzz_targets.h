// The three readers of untrusted bytes, as fuzz targets (docs/fuzz.md): a scenario file
// (load and validate), a checkpoint's metadata.json, a safetensors file. Each feeds one input
// to the real entry point and returns when the reader accepted it or refused it with a
// parity::Error, whose message must be printable (core/text.h). Anything else escapes: another
// exception, a failed check (abort), a crash, and under libFuzzer a hang or an allocation
// beyond -malloc_limit_mb. The same functions run under libFuzzer (PARITY_FUZZ=ON, clang) and
// under RapidCheck's generators in the ordinary build (ctest -L fuzz).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace parity::fuzz {

// Each returns whether the reader accepted the input (for the share of accepted cases).
bool scenario_reader(const uint8_t* data, size_t size);
bool ckpt_metadata_reader(const uint8_t* data, size_t size);
bool safetensors_reader(const uint8_t* data, size_t size);

// A structure-aware mutation of a JSON document: one leaf (a string, number, boolean or null)
// replaced by a value at the edges, a character of a string changed, or a key removed,
// chosen by `random`; "" when `text` is not JSON within the readers' limits. Byte mutations
// rarely keep a document valid, so the deep checks (a checksum's hex digits, a layout's
// degrees) are reached through this one: the libFuzzer binaries use it as their custom
// mutator half of the time, the RapidCheck driver as one of its mutation kinds.
std::string mutate_json_leaf(const std::string& text, uint64_t random);

// The seed corpus of a target: every regular file of tests/fuzz/corpus/<target>/, and for the
// scenario reader every file of scenarios/ (and scenarios/gpu/).
std::vector<std::string> seed_files(const std::string& source_dir, const std::string& target);

}  // namespace parity::fuzz
