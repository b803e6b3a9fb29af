// libFuzzer's entry points for one target of fuzz_targets.h, chosen by PARITY_FUZZ_TARGET at
// compile time (tests/fuzz/fuzz.cmake builds one binary per target). Half the mutations are
// structure-aware (mutate_json_leaf: one JSON value changed, the document kept valid); for
// safetensors (PARITY_FUZZ_FRAMED) that is the header, whose 8-byte length is then rewritten.
#include <cstring>
#include <string>

#include "fuzz/fuzz_targets.h"

extern "C" size_t LLVMFuzzerMutate(uint8_t* data, size_t size, size_t max_size);

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  (void)parity::fuzz::PARITY_FUZZ_TARGET(data, size);
  return 0;
}

extern "C" size_t LLVMFuzzerCustomMutator(uint8_t* data, size_t size, size_t max_size, unsigned int seed) {
  if (seed % 2 == 0) {
    const std::string in(reinterpret_cast<const char*>(data), size);
    std::string out;
#if PARITY_FUZZ_FRAMED
    uint64_t n = 0;
    for (int i = 7; i >= 0 && size >= 8; --i) n = (n << 8) | data[i];
    if (size >= 8 && n <= size - 8) {
      const std::string header = parity::fuzz::mutate_json_leaf(in.substr(8, n), seed / 2);
      if (!header.empty()) {
        out.assign(8, '\0');
        for (size_t i = 0; i < 8; ++i) out[i] = static_cast<char>(static_cast<uint64_t>(header.size()) >> (8 * i));
        out += header + in.substr(8 + n);
      }
    }
#else
    out = parity::fuzz::mutate_json_leaf(in, seed / 2);
#endif
    if (!out.empty() && out.size() <= max_size) {
      std::memcpy(data, out.data(), out.size());
      return out.size();
    }
  }
  return LLVMFuzzerMutate(data, size, max_size);
}
