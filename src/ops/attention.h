#pragma once
#include <cstdint>

namespace parity {

// The heads of an attention call: H query heads and G key / value heads of Dh columns each, G
// dividing H. Query head h reads key / value head h / (H / G): G = H is multi-head attention,
// G = 1 multi-query, between grouped-query (model.kv_heads). q and out are (., H*Dh), k and v
// (., G*Dh); probs stay (H, ., .).
struct AttnHeads {
  int64_t H = 1, G = 1, Dh = 0;
  int64_t group() const { return G > 0 ? H / G : 1; }  // query heads per key / value head
};

// Causal multi-head attention core for ONE sequence (projections are done by the caller).
// q, k, v, out: (S, H*Dh), head h owns columns [h*Dh, (h+1)*Dh).
// probs (H, S, S): softmax(q k^T / sqrt(Dh)) with j > i masked (saved for the backward;
// masked entries are 0).
template <class T>
void attention_forward(const T* q, const T* k, const T* v, int64_t S, int64_t H, int64_t Dh, T* out, T* probs);
// dq, dk, dv (S, H*Dh) +=. Summation orders are written in attention.cpp.
template <class T>
void attention_backward(const T* q, const T* k, const T* v, const T* probs, const T* dout, int64_t S, int64_t H,
                        int64_t Dh, T* dq, T* dk, T* dv);

// The same attention for a contiguous block of query rows, as context parallel runs it: q,
// out (Sq, H*Dh) are the queries at global positions [q0, q0 + Sq) of a sequence whose keys
// and values k, v (Sk, H*Dh) hold positions [0, Sk), q0 + Sq <= Sk; the causal mask is in
// global positions (query q0 + i sees keys j <= q0 + i). probs (H, Sq, Sk).
// attention_forward is this with q0 = 0, Sq = Sk = S: the same loops, the same bits.
template <class T>
void attention_forward_rows(const T* q, const T* k, const T* v, int64_t Sq, int64_t q0, int64_t Sk, int64_t H,
                            int64_t Dh, T* out, T* probs);
// dq (Sq, H*Dh), dk, dv (Sk, H*Dh) +=: dk, dv get this block's queries' part only (the
// caller sums the blocks); each sum runs over this block's rows in ascending order.
template <class T>
void attention_backward_rows(const T* q, const T* k, const T* v, const T* probs, const T* dout, int64_t Sq, int64_t q0,
                             int64_t Sk, int64_t H, int64_t Dh, T* dq, T* dk, T* dv);

// The same four with G key / value heads (AttnHeads): the functions above are these with G = H,
// the same loops and bits. A shared key / value head's dk, dv get each of its query heads' sum
// added in head order (ascending h).
template <class T>
void attention_forward(const T* q, const T* k, const T* v, int64_t S, AttnHeads hd, T* out, T* probs);
template <class T>
void attention_backward(const T* q, const T* k, const T* v, const T* probs, const T* dout, int64_t S, AttnHeads hd,
                        T* dq, T* dk, T* dv);
template <class T>
void attention_forward_rows(const T* q, const T* k, const T* v, int64_t Sq, int64_t q0, int64_t Sk, AttnHeads hd,
                            T* out, T* probs);
template <class T>
void attention_backward_rows(const T* q, const T* k, const T* v, const T* probs, const T* dout, int64_t Sq, int64_t q0,
                             int64_t Sk, AttnHeads hd, T* dq, T* dk, T* dv);

}  // namespace parity
