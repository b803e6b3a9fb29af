#pragma once
#include <cstdint>
#include <vector>

#include "core/buffer.h"

namespace parity {

inline constexpr double kRopeThetaDefault = 10000.0;  // RoFormer's and Llama 2's base; Llama 3 uses 500000

// Rotary position embedding (RoFormer; Llama, Qwen3), the half-split pairing of Hugging Face's
// rotate_half: within each head of Dh = 2·F columns, column f pairs with f + F (f < F) and the
// pair of row i turns by the angle pos[i] · theta^(-2f / Dh).
//
// The rotation's table for n rows at global positions pos (n): cos, sin (n, F), each angle and
// its cos / sin computed in fp64 on the host and rounded to T once (the GPU kernels read the
// same table, so both sides rotate by the same numbers). Dh must be even.
template <class T> void rope_table(const int64_t* pos, int64_t n, int64_t Dh, double theta, T* cos, T* sin);

// x, y (n, H·Dh); per row i, head h, f < F, with c = cos[i][f], s = sin[i][f]:
//   y[f] = x[f]·c - x[f+F]·s,   y[f+F] = x[f+F]·c + x[f]·s.
// y may be x (in place). y is a storage point of the precision policy (core/precision.h).
template <class T>
void rope_forward(const T* x, const T* cos, const T* sin, int64_t n, int64_t H, int64_t Dh, T* y);
// dx (n, H·Dh) += the transposed rotation of dy:
//   dx[f] += dy[f]·c + dy[f+F]·s,   dx[f+F] += dy[f+F]·c - dy[f]·s.
template <class T>
void rope_backward(const T* dy, const T* cos, const T* sin, int64_t n, int64_t H, int64_t Dh, T* dx);

// The global positions of nseq sequences' rows when each holds `rows` consecutive positions
// starting at p0 (the one-device model: p0 = 0, rows = seq; a context-parallel rank: its chunk's
// offset and length): (nseq · rows), row r at p0 + r % rows.
std::vector<int64_t> rope_positions(int64_t nseq, int64_t rows, int64_t p0);

// The table of a block of rows (pos.size() of them, H heads of Dh), for the model's q and k:
// apply() rotates x (rows, H·Dh) in place, undo() returns the gradient of the unrotated x
// from the rotated one's (a fresh buffer). The table lives in Buffers, device memory on cuda.
template <class T> struct Rope {
  Rope(const std::vector<int64_t>& pos, int64_t H, int64_t Dh, double theta);
  void apply(Buffer<T>& x) const;
  Buffer<T> undo(const Buffer<T>& dy) const;
  int64_t n, H, Dh;
  Buffer<T> cos, sin;  // (n, Dh / 2)
};

}  // namespace parity
