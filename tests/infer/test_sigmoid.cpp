// sigmoid over arrays: close to the exact logistic function, a value's result independent of its
// position and of n (the vector path pads the tail), in place as out of place.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include <torch/torch.h>

#include "fbt/infer/sigmoid.h"

namespace fbt {
namespace {

TEST(Sigmoid, IsTheLogisticFunctionWhateverThePositionAndLength) {
  torch::manual_seed(3);
  auto x = torch::randn({203}) * 6;
  x[0] = -100.0f;  // exp(100) overflows: 0
  x[1] = 100.0f;   // exp(−100) underflows: 1
  x[2] = 0.0f;
  const float* in = x.data_ptr<float>();
  std::vector<float> all(203);
  sigmoid(in, 203, all.data());
  for (int64_t i = 0; i < 203; ++i) {
    const double exact = 1.0 / (1.0 + std::exp(-double(in[i])));
    EXPECT_NEAR(all[i], exact, 1e-6 * exact + 1e-37) << "x " << in[i];  // a few ulp of float
    for (int64_t n : {1, 5, 8, 9}) {  // the same value first in arrays of other lengths
      std::vector<float> copy(in + i, in + std::min<int64_t>(203, i + n)), out(copy.size());
      sigmoid(copy.data(), int64_t(copy.size()), out.data());
      ASSERT_EQ(out[0], all[i]) << "x " << in[i] << " n " << n;
    }
  }
  EXPECT_EQ(all[0], 0.0f);
  EXPECT_EQ(all[1], 1.0f);
  EXPECT_EQ(all[2], 0.5f);
  std::vector<float> inplace(in, in + 203);
  sigmoid(inplace.data(), 203, inplace.data());
  EXPECT_EQ(inplace, all);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  float out = 0;
  sigmoid(&nan, 1, &out);
  EXPECT_TRUE(std::isnan(out));
}

}  // namespace
}  // namespace fbt
