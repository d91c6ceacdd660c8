#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <parity/error.hpp>
#include <parity/tensor.hpp>

namespace parity {
namespace {

// Raw bits of element 0, widened; works for 1, 2, 4 and 8 byte dtypes.
uint64_t bits_of_first(const at::Tensor& t) {
  const at::Tensor c = t.contiguous().cpu();
  uint64_t out = 0;
  std::memcpy(&out, c.data_ptr(), c.element_size());
  return out;
}

TEST(ParseDtype, CanonicalNamesAndPyTorchAliases) {
  EXPECT_EQ(parse_dtype("bf16", "w"), at::kBFloat16);
  EXPECT_EQ(parse_dtype("bfloat16", "w"), at::kBFloat16);
  EXPECT_EQ(parse_dtype("fp16", "w"), at::kHalf);
  EXPECT_EQ(parse_dtype("float16", "w"), at::kHalf);
  EXPECT_EQ(parse_dtype("fp32", "w"), at::kFloat);
  EXPECT_EQ(parse_dtype("float32", "w"), at::kFloat);
  EXPECT_EQ(parse_dtype("fp64", "w"), at::kDouble);
  EXPECT_EQ(parse_dtype("float64", "w"), at::kDouble);
  EXPECT_EQ(parse_dtype("int32", "w"), at::kInt);
  EXPECT_EQ(parse_dtype("int64", "w"), at::kLong);
  EXPECT_EQ(parse_dtype("uint8", "w"), at::kByte);
}

TEST(ParseDtype, UnknownNameThrowsNamingWhereAndName) {
  try {
    parse_dtype("f32", "cases/hc.toml: case 'hc_post/tiny' dtype");
    FAIL() << "no InputError";
  } catch (const InputError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("cases/hc.toml: case 'hc_post/tiny' dtype"), std::string::npos) << what;
    EXPECT_NE(what.find("'f32'"), std::string::npos) << what;
    EXPECT_NE(what.find("bf16, fp16, fp32, fp64"), std::string::npos) << what;
  }
}

TEST(DtypeName, RoundTripsThroughParseDtype) {
  for (const char* name : {"bf16", "fp16", "fp32", "fp64", "int32", "int64", "uint8"}) {
    EXPECT_EQ(dtype_name(parse_dtype(name, "test")), name);
  }
}

TEST(DtypeName, TypesWithoutAParityNameStillHaveOne) {
  EXPECT_FALSE(dtype_name(at::kFloat8_e4m3fn).empty());
  EXPECT_NE(dtype_name(at::kFloat8_e4m3fn), dtype_name(at::kFloat8_e5m2));
}

TEST(Poison, FloatTensorsBecomeQuietNaNInTheirOwnDtype) {
  const struct {
    at::ScalarType type;
    uint64_t quiet_nan;
  } cases[] = {
      {at::kDouble, 0x7FF8000000000000ull}, {at::kFloat, 0x7FC00000u}, {at::kHalf, 0x7E00u}, {at::kBFloat16, 0x7FC0u}};
  for (const auto& c : cases) {
    at::Tensor t = at::randn({3, 5}).to(c.type);
    poison(t);
    EXPECT_TRUE(t.isnan().all().item<bool>()) << dtype_name(c.type);
    EXPECT_EQ(bits_of_first(t), c.quiet_nan) << dtype_name(c.type);
    EXPECT_TRUE(
        bitwise_equal(t, at::full({3, 5}, std::numeric_limits<double>::quiet_NaN(), at::TensorOptions(c.type))));
  }
}

TEST(Poison, IntegerTensorsBecomeTheirMinimum) {
  at::Tensor i32 = at::arange(6, at::kInt);
  poison(i32);
  EXPECT_TRUE(i32.eq(std::numeric_limits<int32_t>::min()).all().item<bool>());
  at::Tensor i64 = at::arange(6, at::kLong);
  poison(i64);
  EXPECT_TRUE(i64.eq(std::numeric_limits<int64_t>::min()).all().item<bool>());
  at::Tensor u8 = at::ones({6}, at::kByte);
  poison(u8);
  EXPECT_TRUE(u8.eq(0).all().item<bool>());
}

TEST(Poison, OtherDtypesAreRefusedByName) {
  at::Tensor c = at::zeros({2}, at::kComplexFloat);
  try {
    poison(c);
    FAIL() << "no InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(dtype_name(at::kComplexFloat)), std::string::npos) << e.what();
  }
}

TEST(BitwiseEqual, IdenticalTensorsAreEqual) {
  const at::Tensor a = at::randn({4, 7}).to(at::kBFloat16);
  EXPECT_TRUE(bitwise_equal(a, a.clone()));
  EXPECT_EQ(bitwise_diff_count(a, a.clone()), 0);
}

TEST(BitwiseEqual, DistinguishesSignedZero) {
  const at::Tensor pos = at::zeros({3});
  const at::Tensor neg = at::full({3}, -0.0);
  EXPECT_TRUE(pos.eq(neg).all().item<bool>());  // the values are equal ...
  EXPECT_FALSE(bitwise_equal(pos, neg));        // ... the bits are not
  EXPECT_EQ(bitwise_diff_count(pos, neg), 3);
}

TEST(BitwiseEqual, DistinguishesNaNPayloads) {
  const at::Tensor quiet = at::full({2}, 0x7FC00000, at::kInt).view(at::kFloat);
  const at::Tensor payload = at::full({2}, 0x7FC00001, at::kInt).view(at::kFloat);
  ASSERT_TRUE(quiet.isnan().all().item<bool>());
  ASSERT_TRUE(payload.isnan().all().item<bool>());
  EXPECT_TRUE(bitwise_equal(quiet, quiet.clone()));
  EXPECT_FALSE(bitwise_equal(quiet, payload));
}

TEST(BitwiseEqual, DifferentShapeOrDtypeIsNotEqual) {
  const at::Tensor a = at::zeros({2, 3});
  EXPECT_FALSE(bitwise_equal(a, at::zeros({3, 2})));
  EXPECT_FALSE(bitwise_equal(a, at::zeros({2, 3}, at::kDouble)));
}

TEST(BitwiseEqual, WorksForIntegerAndComplexDtypes) {
  const at::Tensor i = at::arange(10, at::kLong);
  at::Tensor j = i.clone();
  j[7] = 70;
  EXPECT_EQ(bitwise_diff_count(i, j), 1);
  const at::Tensor c = at::randn({5}, at::kComplexDouble);
  at::Tensor d = c.clone();
  d[2] = c[2] * 2;
  EXPECT_EQ(bitwise_diff_count(c, d), 1);
  EXPECT_TRUE(bitwise_equal(c, c.clone()));
}

TEST(BitwiseDiffCount, CountsEveryDifferingElementOfNonContiguousTensors) {
  const at::Tensor a = at::randn({6, 4}).t();  // non-contiguous
  at::Tensor b = a.clone();
  b[0][1] = 100;
  b[3][5] = -100;
  EXPECT_EQ(bitwise_diff_count(a, b), 2);
}

TEST(BitwiseDiffCount, ShapeOrDtypeMismatchThrowsNamingBoth) {
  try {
    bitwise_diff_count(at::zeros({2, 3}), at::zeros({2, 3}, at::kHalf));
    FAIL() << "no InputError";
  } catch (const InputError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("[2, 3] fp32"), std::string::npos) << what;
    EXPECT_NE(what.find("[2, 3] fp16"), std::string::npos) << what;
  }
}

TEST(Describe, ShapeThenDtype) {
  EXPECT_EQ(describe(at::zeros({4096, 4, 16}, at::kBFloat16)), "[4096, 4, 16] bf16");
  EXPECT_EQ(describe(at::zeros({}, at::kDouble)), "[] fp64");
  EXPECT_EQ(describe(at::zeros({0, 3}, at::kInt)), "[0, 3] int32");
}

}  // namespace
}  // namespace parity
