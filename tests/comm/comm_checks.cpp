#include "comm_checks.h"

#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <span>

namespace parity::comm::testing {

namespace {

// Rank r's element i: small integers, exact in every dtype and under any summation order
// (|sum| < 2^24 for 8 ranks).
template <class T> T val(int r, int64_t i) { return T((r + 1) * 3 + (i % 113)); }
// Signed values for max / min, different winners per element.
template <class T> T val_signed(int r, int64_t i) { return T(((i + 5 * r) % 17) - 8); }
// alltoall(v) payload: who sent it to whom, and which element.
template <class T> T tagged(int src, int dst, int64_t i) { return T(src * 10000 + dst * 100 + (i % 100)); }

template <class T> int64_t wrong(const std::vector<T>& got, const std::vector<T>& want) {
  if (got.size() != want.size()) return static_cast<int64_t>(std::max(got.size(), want.size()));
  int64_t w = 0;
  for (size_t i = 0; i < got.size(); ++i) w += got[i] != want[i];
  return w;
}

template <class T> std::string label(const char* op, int64_t n, const Communicator& c) {
  return std::string(op) + " " + std::string(dtype_name(dtype_of<T>())) + " n=" + std::to_string(n) +
         " " + c.name();
}

template <class T> void check_allreduce(Communicator& c, int64_t n, Tally& t) {
  int p = c.size(), me = c.rank();
  for (ReduceOp op : {ReduceOp::sum, ReduceOp::max, ReduceOp::min}) {
    std::vector<T> buf(static_cast<size_t>(n)), want(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      auto f = [&](int r) { return op == ReduceOp::sum ? val<T>(r, i) : val_signed<T>(r, i); };
      buf[static_cast<size_t>(i)] = f(me);
      T acc = f(0);
      for (int r = 1; r < p; ++r)
        acc = op == ReduceOp::sum ? T(acc + f(r)) : op == ReduceOp::max ? std::max(acc, f(r)) : std::min(acc, f(r));
      want[static_cast<size_t>(i)] = acc;
    }
    c.allreduce(std::span<T>(buf), op);
    t.add(label<T>("allreduce", n, c) + " " + std::string(reduce_op_name(op)), wrong(buf, want));
  }
}

template <class T> void check_broadcast(Communicator& c, int64_t n, Tally& t) {
  for (int root : {0, c.size() - 1}) {
    std::vector<T> buf(static_cast<size_t>(n)), want(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      buf[static_cast<size_t>(i)] = val<T>(c.rank(), i);
      want[static_cast<size_t>(i)] = val<T>(root, i);
    }
    c.broadcast(std::span<T>(buf), root);
    t.add(label<T>("broadcast", n, c) + " root=" + std::to_string(root), wrong(buf, want));
  }
}

template <class T> void check_allgather(Communicator& c, int64_t n, Tally& t) {
  int p = c.size();
  std::vector<T> in(static_cast<size_t>(n)), out(static_cast<size_t>(n * p)), want(static_cast<size_t>(n * p));
  for (int64_t i = 0; i < n; ++i) in[static_cast<size_t>(i)] = val<T>(c.rank(), i);
  for (int r = 0; r < p; ++r)
    for (int64_t i = 0; i < n; ++i) want[static_cast<size_t>(r * n + i)] = val<T>(r, i);
  c.allgather(std::span<const T>(in), std::span<T>(out));
  t.add(label<T>("allgather", n, c), wrong(out, want));
}

// Uneven counts with zeros: rank r holds (r * 3 + n) % 5 * scale elements.
std::vector<int64_t> uneven(int p, int64_t n) {
  std::vector<int64_t> c(static_cast<size_t>(p));
  for (int r = 0; r < p; ++r) c[static_cast<size_t>(r)] = ((r * 3 + n) % 5) * std::max<int64_t>(1, n / 4);
  return c;
}

template <class T> void check_allgatherv(Communicator& c, int64_t n, Tally& t) {
  auto counts = uneven(c.size(), n);
  std::vector<T> in(static_cast<size_t>(counts[static_cast<size_t>(c.rank())])), want;
  for (size_t i = 0; i < in.size(); ++i) in[i] = val<T>(c.rank(), static_cast<int64_t>(i));
  for (int r = 0; r < c.size(); ++r)
    for (int64_t i = 0; i < counts[static_cast<size_t>(r)]; ++i) want.push_back(val<T>(r, i));
  std::vector<T> out(want.size());
  c.allgatherv(std::span<const T>(in), std::span<T>(out), std::span<const int64_t>(counts));
  t.add(label<T>("allgatherv", static_cast<int64_t>(want.size()), c), wrong(out, want));
}

template <class T> void check_reduce_scatter(Communicator& c, int64_t n, Tally& t) {
  int p = c.size(), me = c.rank();
  for (bool even : {true, false}) {
    std::vector<int64_t> counts = even ? std::vector<int64_t>(static_cast<size_t>(p), n) : uneven(p, n);
    int64_t total = std::accumulate(counts.begin(), counts.end(), int64_t{0});
    int64_t off = std::accumulate(counts.begin(), counts.begin() + me, int64_t{0});
    std::vector<T> in(static_cast<size_t>(total)), out(static_cast<size_t>(counts[static_cast<size_t>(me)]));
    std::vector<T> want(out.size());
    for (int64_t i = 0; i < total; ++i) in[static_cast<size_t>(i)] = val<T>(me, i);
    for (size_t i = 0; i < want.size(); ++i) {
      T acc = 0;
      for (int r = 0; r < p; ++r) acc = T(acc + val<T>(r, off + static_cast<int64_t>(i)));
      want[i] = acc;
    }
    c.reduce_scatterv(std::span<const T>(in), std::span<T>(out), std::span<const int64_t>(counts), ReduceOp::sum);
    t.add(label<T>(even ? "reduce_scatter" : "reduce_scatterv", total, c), wrong(out, want));
  }
}

template <class T> void check_alltoall(Communicator& c, int64_t n, Tally& t) {
  int p = c.size(), me = c.rank();
  std::vector<T> in(static_cast<size_t>(n * p)), out(in.size()), want(in.size());
  for (int j = 0; j < p; ++j)
    for (int64_t i = 0; i < n; ++i) {
      in[static_cast<size_t>(j * n + i)] = tagged<T>(me, j, i);
      want[static_cast<size_t>(j * n + i)] = tagged<T>(j, me, i);
    }
  c.alltoall(std::span<const T>(in), std::span<T>(out));
  t.add(label<T>("alltoall", n * p, c), wrong(out, want));
}

// send count from src to dst, zeros included.
int64_t a2av_count(int src, int dst, int64_t n) { return ((src * 7 + dst * 3 + n) % 4) * std::max<int64_t>(1, n / 3); }

template <class T> void check_alltoallv(Communicator& c, int64_t n, Tally& t) {
  int p = c.size(), me = c.rank();
  std::vector<int64_t> send(static_cast<size_t>(p)), recv(static_cast<size_t>(p));
  std::vector<T> in, want;
  for (int j = 0; j < p; ++j) {
    send[static_cast<size_t>(j)] = a2av_count(me, j, n);
    recv[static_cast<size_t>(j)] = a2av_count(j, me, n);
    for (int64_t i = 0; i < send[static_cast<size_t>(j)]; ++i) in.push_back(tagged<T>(me, j, i));
    for (int64_t i = 0; i < recv[static_cast<size_t>(j)]; ++i) want.push_back(tagged<T>(j, me, i));
  }
  std::vector<T> out(want.size());
  c.alltoallv(std::span<const T>(in), std::span<const int64_t>(send), std::span<T>(out),
              std::span<const int64_t>(recv));
  t.add(label<T>("alltoallv", static_cast<int64_t>(in.size()), c), wrong(out, want));
}

template <class T> void check_type(Communicator& c, Tally& t, const std::vector<int64_t>& sizes) {
  for (int64_t n : sizes) {
    check_allreduce<T>(c, n, t);
    check_broadcast<T>(c, n, t);
    check_allgather<T>(c, n, t);
    check_allgatherv<T>(c, n, t);
    check_reduce_scatter<T>(c, n, t);
    check_alltoall<T>(c, n, t);
    check_alltoallv<T>(c, n, t);
  }
}

}  // namespace

void check_collectives(Communicator& c, Tally& t, bool include_large) {
  check_type<float>(c, t, {0, 1, 7, 1001});
  check_type<double>(c, t, {0, 1, 13});
  check_type<int64_t>(c, t, {0, 1, 5, 257});
  c.barrier();
  if (include_large) {
    // Gloo cuts messages into 1 MiB segments: > 2 segments per rank for any world size.
    int64_t n = (int64_t{3} << 20) / 8 * c.size() + 5;
    check_allreduce<double>(c, n, t);
    check_reduce_scatter<float>(c, n / c.size(), t);
    check_alltoallv<float>(c, (int64_t{1} << 19) + 3, t);
  }
}

void check_groups(Communicator& w, Tally& t) {
  int p = w.size(), me = w.rank();
  std::vector<int> evens, odds, reversed;
  for (int r = 0; r < p; ++r) (r % 2 ? odds : evens).push_back(r);
  for (int r = p - 1; r >= 0; --r) reversed.push_back(r);
  Communicator& half = w.group(me % 2 ? odds : evens);
  check_type<float>(half, t, {0, 3, 64});
  check_type<int64_t>(half, t, {5});
  Communicator& rev = w.group(reversed);
  check_type<double>(rev, t, {1, 9});
  Communicator& solo = w.group({me});
  check_type<float>(solo, t, {0, 4});
  // The cache: the same member list gives the same communicator.
  t.add("group cache " + half.name(), &w.group(me % 2 ? odds : evens) == &half ? 0 : 1);
  std::vector<int> all(static_cast<size_t>(p));
  std::iota(all.begin(), all.end(), 0);
  t.add("group of all ranks is the world", &w.group(all) == &w ? 0 : 1);
}

int64_t report(Communicator& w, const Tally& t) {
  std::vector<int64_t> wrong = t.wrong;
  w.allreduce(std::span<int64_t>(wrong), ReduceOp::sum);
  int64_t total = std::accumulate(wrong.begin(), wrong.end(), int64_t{0});
  if (w.rank() == 0) {
    std::printf("# backend %s (%s), world %d: %zu cases, #wrong over all ranks = %lld\n",
                std::string(backend_name(w.backend())).c_str(), w.transport().c_str(), w.size(), wrong.size(),
                static_cast<long long>(total));
    for (size_t i = 0; i < wrong.size(); ++i)
      if (wrong[i] != 0 || std::getenv("PARITY_COMM_VERBOSE"))
        std::printf("%-60s #wrong %lld\n", t.names[i].c_str(), static_cast<long long>(wrong[i]));
    std::fflush(stdout);
  }
  return total;
}

}  // namespace parity::comm::testing
