// CRC-32C (Castagnoli, the iSCSI / ext4 / safetensors-tools polynomial 0x1EDC6F41, reflected
// 0x82F63B78), the checksum of every checkpoint file and chunk block. Written by hand: a
// portable slice-by-8 table version and, where the CPU has SSE4.2, the crc32 instruction
// behind a per-function target attribute; both give the same bits (checked by the tests).
// crc32c("123456789") == 0xE3069283.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace parity::ckpt {

// Continues a running CRC: crc32c(b, crc32c(a)) == crc32c(a ++ b). Start from 0.
uint32_t crc32c(const void* data, size_t n, uint32_t crc = 0);
uint32_t crc32c_portable(const void* data, size_t n, uint32_t crc = 0);

// "crc32c:e3069283", the form written in metadata.json.
std::string checksum_str(uint32_t crc);

}  // namespace parity::ckpt
