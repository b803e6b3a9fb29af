// Cross-backend digest and the RapidCheck properties run inside every rank.
#include <rapidcheck.h>

#include <chrono>
#include <cstdlib>
#include <numeric>
#include <span>

#include "comm_checks.h"

namespace parity::comm::testing {

namespace {

uint64_t splitmix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Non-exact values in [-1, 1): sums of these depend on the order of summation.
template <class T> T noise(int r, int64_t i) {
  uint64_t h = splitmix((static_cast<uint64_t>(r) << 40) ^ static_cast<uint64_t>(i));
  return T(static_cast<double>(h >> 11) * 0x1.0p-53 * 2.0 - 1.0);
}

struct Fnv {
  uint64_t h = 1469598103934665603ULL;
  template <class T> void add(const std::vector<T>& v) {
    auto* p = reinterpret_cast<const unsigned char*>(v.data());
    for (size_t i = 0; i < v.size() * sizeof(T); ++i) h = (h ^ p[i]) * 1099511628211ULL;
  }
};

template <class T> void digest_type(Communicator& w, Fnv& f) {
  int p = w.size(), me = w.rank();
  std::vector<int64_t> counts(static_cast<size_t>(p));
  for (int r = 0; r < p; ++r) counts[static_cast<size_t>(r)] = (r * 5 + 3) % 7 * 11;
  int64_t total = std::accumulate(counts.begin(), counts.end(), int64_t{0});
  std::vector<T> in(static_cast<size_t>(total)), out(static_cast<size_t>(counts[static_cast<size_t>(me)]));
  for (int64_t i = 0; i < total; ++i) in[static_cast<size_t>(i)] = noise<T>(me, i);
  w.reduce_scatterv(std::span<const T>(in), std::span<T>(out), std::span<const int64_t>(counts), ReduceOp::sum);
  f.add(out);
  std::vector<T> gathered(static_cast<size_t>(total));
  w.allgatherv(std::span<const T>(out), std::span<T>(gathered), std::span<const int64_t>(counts));
  f.add(gathered);
  for (ReduceOp op : {ReduceOp::max, ReduceOp::min}) {
    std::vector<T> buf(1009);
    for (size_t i = 0; i < buf.size(); ++i) buf[i] = noise<T>(me, static_cast<int64_t>(i) + 77);
    w.allreduce(std::span<T>(buf), op);
    f.add(buf);
  }
  std::vector<int64_t> send(static_cast<size_t>(p)), recv(static_cast<size_t>(p));
  for (int j = 0; j < p; ++j) {
    send[static_cast<size_t>(j)] = (me + 2 * j) % 3 * 17;
    recv[static_cast<size_t>(j)] = (j + 2 * me) % 3 * 17;
  }
  std::vector<T> a(static_cast<size_t>(std::accumulate(send.begin(), send.end(), int64_t{0})));
  for (size_t i = 0; i < a.size(); ++i) a[i] = noise<T>(me, static_cast<int64_t>(i) + 999);
  std::vector<T> b(static_cast<size_t>(std::accumulate(recv.begin(), recv.end(), int64_t{0})));
  w.alltoallv(std::span<const T>(a), std::span<const int64_t>(send), std::span<T>(b), std::span<const int64_t>(recv));
  f.add(b);
  std::vector<T> bc(333);
  for (size_t i = 0; i < bc.size(); ++i) bc[i] = noise<T>(me, static_cast<int64_t>(i));
  w.broadcast(std::span<T>(bc), p - 1);
  f.add(bc);
}

}  // namespace

template <class T> void digest_sum(Communicator& w, Fnv& f, size_t n) {
  std::vector<T> buf(n);
  for (size_t i = 0; i < n; ++i) buf[i] = noise<T>(w.rank(), static_cast<int64_t>(i) + 5);
  w.allreduce(std::span<T>(buf), ReduceOp::sum);
  f.add(buf);
}

uint64_t digest_collectives(Communicator& w, bool with_sum) {
  Fnv f;
  digest_type<float>(w, f);
  digest_type<double>(w, f);
  if (with_sum) {
    digest_sum<float>(w, f, 1009);
    digest_sum<double>(w, f, 1009);
    digest_sum<double>(w, f, 20000);
  }
  std::vector<int64_t> mine = {static_cast<int64_t>(f.h)};
  std::vector<int64_t> all(static_cast<size_t>(w.size()));
  w.allgather(std::span<const int64_t>(mine), std::span<int64_t>(all));
  Fnv g;
  g.add(all);
  return g.h;
}

namespace {

// Rank me's view of a random counts matrix (p x p, row = sender): send row, recv column.
int64_t check_alltoallv_case(Communicator& w, const std::vector<int64_t>& m) {
  int p = w.size(), me = w.rank();
  std::vector<int64_t> send(static_cast<size_t>(p)), recv(static_cast<size_t>(p));
  std::vector<double> in, want;
  for (int j = 0; j < p; ++j) {
    send[static_cast<size_t>(j)] = m[static_cast<size_t>(me * p + j)];
    recv[static_cast<size_t>(j)] = m[static_cast<size_t>(j * p + me)];
    for (int64_t i = 0; i < send[static_cast<size_t>(j)]; ++i)
      in.push_back(me * 1e6 + j * 1e3 + static_cast<double>(i));
    for (int64_t i = 0; i < recv[static_cast<size_t>(j)]; ++i)
      want.push_back(j * 1e6 + me * 1e3 + static_cast<double>(i));
  }
  std::vector<double> out(want.size());
  w.alltoallv(std::span<const double>(in), std::span<const int64_t>(send), std::span<double>(out),
              std::span<const int64_t>(recv));
  std::vector<int64_t> bad = {0};
  for (size_t i = 0; i < out.size(); ++i) bad[0] += out[i] != want[i];
  w.allreduce(std::span<int64_t>(bad), ReduceOp::sum);
  return bad[0];
}

int64_t check_allgatherv_case(Communicator& w, const std::vector<int64_t>& counts) {
  int me = w.rank();
  std::vector<float> in(static_cast<size_t>(counts[static_cast<size_t>(me)])), want;
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(me * 1000 + static_cast<int>(i));
  for (size_t r = 0; r < counts.size(); ++r)
    for (int64_t i = 0; i < counts[r]; ++i) want.push_back(static_cast<float>(static_cast<int64_t>(r) * 1000 + i));
  std::vector<float> out(want.size());
  w.allgatherv(std::span<const float>(in), std::span<float>(out), std::span<const int64_t>(counts));
  std::vector<int64_t> bad = {0};
  for (size_t i = 0; i < out.size(); ++i) bad[0] += out[i] != want[i];
  w.allreduce(std::span<int64_t>(bad), ReduceOp::sum);
  return bad[0];
}

rc::Gen<int64_t> count_gen() {
  return rc::gen::oneOf(rc::gen::just<int64_t>(0), rc::gen::inRange<int64_t>(0, 40));
}

}  // namespace

bool run_properties(Communicator& w, int cases) {
  // Same seed on every rank: every rank generates (and shrinks) the same cases.
  std::vector<int64_t> seed = {std::chrono::steady_clock::now().time_since_epoch().count() % 1000003};
  w.broadcast(std::span<int64_t>(seed), 0);
  std::string params = "seed=" + std::to_string(seed[0]) + " max_success=" + std::to_string(cases);
  setenv("RC_PARAMS", params.c_str(), 1);
  size_t p = static_cast<size_t>(w.size());
  bool ok = rc::check("alltoallv delivers every block, random counts with zeros", [&] {
    auto m = *rc::gen::container<std::vector<int64_t>>(p * p, count_gen());
    RC_CLASSIFY(std::count(m.begin(), m.end(), 0) > 0, "some counts are zero");
    RC_CLASSIFY(std::accumulate(m.begin(), m.begin() + static_cast<long>(p), int64_t{0}) == 0, "rank 0 sends nothing");
    RC_ASSERT(check_alltoallv_case(w, m) == 0);
  });
  ok = rc::check("allgatherv gathers every block, random counts with zeros", [&] {
    auto counts = *rc::gen::container<std::vector<int64_t>>(p, count_gen());
    RC_CLASSIFY(std::count(counts.begin(), counts.end(), 0) > 0, "some counts are zero");
    RC_CLASSIFY(std::accumulate(counts.begin(), counts.end(), int64_t{0}) == 0, "all empty");
    RC_ASSERT(check_allgatherv_case(w, counts) == 0);
  }) && ok;
  return ok;
}

}  // namespace parity::comm::testing
