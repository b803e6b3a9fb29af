// Issue 8, properties 1-6: drawn layouts (W 2..8, every folding mode), model sizes and seeds
// checked against the one-device baseline through real rank processes (`parity run`).
// Each property runs RC_PARAMS' max_success cases (15 by default, case_run.h); ci/soak runs
// thousands. A failure leaves the shrunk case in property-failures/PROPERTY.json (or
// $PARITY_PROPERTY_OUT) and prints the `parity run` line that replays it; RapidCheck prints
// the RC_PARAMS="reproduce=..." that redraws it.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include "properties.h"

namespace parity::property {
namespace {

RC_GTEST_PROP(ParityProps, EveryGradientMatchesPerFamily, ()) { prop_gradients(); }

RC_GTEST_PROP(ParityProps, RouterRoutingTokensAndBiasMatch, ()) { prop_routing(); }

RC_GTEST_PROP(ParityProps, LayerNormMatchesWithAndWithoutSP, ()) { prop_layernorm(); }

RC_GTEST_PROP(ParityProps, ExpertWeightsMatchAfterOneSgdStepAtLr1, ()) { prop_expert_sgd_step(); }

RC_GTEST_PROP(ParityProps, ParamsMatchAfterAdamSteps, ()) { prop_adam_params(); }

RC_GTEST_PROP(ParityProps, GradNormAndClipCoefMatch, ()) { prop_grad_norm_clip(); }

}  // namespace
}  // namespace parity::property
