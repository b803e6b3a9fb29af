// core/buffer.h: zeros() gives zeros on every device; a cuda Buffer is device-accessible
// managed memory from the pool, reused across steps; a cpu Buffer is plain heap memory.
#include "core/buffer.h"

#include <gtest/gtest.h>

#include <vector>

#include "core/device.h"
#include "core/tensor.h"

namespace parity {
namespace {

TEST(Buffer, ZerosAreZeroOnTheCpu) {
  use_device(Device::cpu);
  {
    Buffer<double> dirty(1000, 7.0);  // freed below: zeros() of the same size may get this memory
  }
  Buffer<double> b = zeros<double>(1000);
  ASSERT_EQ(b.size(), 1000u);
  for (double x : b) EXPECT_EQ(x, 0.0);
  for (double& x : b) x = 5.0;
  b.clear();
  b.resize(10);  // value-initialised again: the skip of zeros()'s device fill must not leak here
  for (double x : b) EXPECT_EQ(x, 0.0);
  EXPECT_EQ(buffer_stats().pool_bytes, 0);
}

TEST(Buffer, ConvertsAndComparesWithVectors) {
  const std::vector<int64_t> v{3, 1, 4};
  Buffer<int64_t> b = to_buffer(v);
  EXPECT_TRUE(b == v);
  EXPECT_EQ(to_vector(b), v);
  Tensor<float> t({3}, {1.f, 2.f, 3.f});
  EXPECT_EQ(t.numel(), 3);
  EXPECT_EQ(t.data[2], 3.f);
}

// borrow(): a buffer over memory inside a lent range reads it in place, its value-initialization leaves the
// values alone, freeing it frees nothing (the lender's memory: operator delete on it would abort), a copy of it
// is a buffer of its own, and the next allocation is an ordinary one again.
TEST(Buffer, BorrowedBuffersReadTheLendersMemoryInPlace) {
  use_device(Device::cpu);
  std::vector<double> lender{1.0, 2.0, 3.0, 4.0, 5.0, 6.0};
  buffer_detail::lend(lender.data(), lender.size() * sizeof(double));
  EXPECT_TRUE(buffer_detail::lent(lender.data() + 5));
  EXPECT_FALSE(buffer_detail::lent(lender.data() + 6));
  Buffer<double> copy;
  {
    Buffer<double> b = borrow<double>(lender.data() + 2, 3);
    EXPECT_EQ(b.data(), lender.data() + 2);
    EXPECT_EQ(to_vector(b), (std::vector<double>{3.0, 4.0, 5.0}));
    copy = b;
    Buffer<double> next(3);  // allocated after: fresh memory, value-initialized
    EXPECT_NE(next.data(), lender.data() + 2);
    EXPECT_EQ(to_vector(next), (std::vector<double>{0.0, 0.0, 0.0}));
  }
  EXPECT_NE(copy.data(), lender.data() + 2);
  copy[0] = 9.0;
  EXPECT_EQ(lender[2], 3.0);
  buffer_detail::unlend(lender.data());
  EXPECT_FALSE(buffer_detail::lent(lender.data() + 1));
}

TEST(Buffer, CudaBuffersComeFromTheManagedPoolAndAreReused) {
  const std::string why = cuda_unavailable_reason();
  if (!why.empty()) GTEST_SKIP() << "no GPU: " << why;
  use_device(Device::cuda);
  const void* first = nullptr;
  {
    Buffer<float> a = zeros<float>(1 << 20);
    first = a.data();
    for (size_t i = 0; i < a.size(); i += 4099) EXPECT_EQ(a[i], 0.f);  // zero-filled on the device
    a[5] = 7.f;
  }
  Buffer<float> b = zeros<float>(1 << 20);  // the same size class: the freed block comes back
  EXPECT_EQ(b.data(), first);
  EXPECT_EQ(b[5], 0.f);  // and it is zeroed again
  EXPECT_GT(buffer_stats().pool_bytes, 0);
  use_device(Device::cpu);
}

}  // namespace
}  // namespace parity
