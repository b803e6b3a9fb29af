// Issue 8, properties 7, 8 and 9: a checkpoint round trip across two random layouts gives
// the bitwise-equal unsharded state, the same case twice is bitwise identical, and gloo and
// mpi agree. Each case is two real `parity run` launches.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include "properties.h"

namespace parity::property {
namespace {

RC_GTEST_PROP(RunProps, CheckpointSavedUnderOneLayoutLoadsBitwiseUnderAnother, ()) { prop_ckpt_round_trip(); }

RC_GTEST_PROP(RunProps, SameCaseTwiceIsBitwiseIdentical, ()) { prop_twice_bitwise(); }

RC_GTEST_PROP(RunProps, GlooAndMpiAgree, ()) { prop_gloo_mpi(); }

}  // namespace
}  // namespace parity::property
