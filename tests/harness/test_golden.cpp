#include <parity/error.hpp>
#include <parity/golden.hpp>
#include <parity/tensor.hpp>

#include <fmt/format.h>
#include <ftw.h>
#include <gtest/gtest.h>
#include <hdf5.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <sstream>

namespace fs = std::filesystem;
using parity::GoldenFile;
using parity::InputError;

namespace {

const fs::path kGoldenDir = fs::path(PARITY_SOURCE_DIR) / "golden";

// Not std::filesystem::remove_all: the torch wheel's libtorch.so exports its own, statically linked copy
// (pytorch/pytorch#133437), which crashes when the executable resolves to it.
void remove_tree(const fs::path& dir) {
  auto remove_one = [](const char* path, const struct stat*, int, struct FTW*) { return ::remove(path); };
  nftw(dir.c_str(), remove_one, 16, FTW_DEPTH | FTW_PHYS);
}

class GoldenTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() / fmt::format("parity_test_golden_{}_{}", getpid(), info->name());
    remove_tree(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { remove_tree(dir_); }
  fs::path dir_;
};

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an InputError";
  return "";
}

// A macro, not a function, so that a failure reports the line of the check.
#define EXPECT_CONTAINS(haystack, needle)                                                               \
  do {                                                                                                  \
    const std::string text_ = (haystack);                                                               \
    EXPECT_NE(text_.find(needle), std::string::npos) << "'" << text_ << "' lacks '" << (needle) << "'"; \
  } while (0)

// A tensor of `dtype` with exactly these bit patterns: NaN payloads and signalling NaNs survive only if every
// step copies bytes rather than converting values.
template <typename Bits>
at::Tensor from_bits(std::vector<Bits> bits, at::ScalarType dtype) {
  at::Tensor raw = at::empty({int64_t(bits.size())}, at::TensorOptions().dtype(at::CppTypeToScalarType<Bits>()));
  std::memcpy(raw.data_ptr(), bits.data(), bits.size() * sizeof(Bits));
  return raw.view(dtype);
}

parity::TensorMap every_dtype() {
  return {
      {"fp64", from_bits<int64_t>({0, std::numeric_limits<int64_t>::min(), 0x3ff8000000000000, 0x7ff0000000000000,
                                   0x7ff8000000000123, 0x7ff0000000000001, 1},
                                  at::kDouble)},
      {"fp32", from_bits<int32_t>({0, std::numeric_limits<int32_t>::min(), 0x3fc00000, 0x7f800000, 0x7fc00123,
                                   0x7f800001, 1, int32_t(0xffc00042)},
                                  at::kFloat)
                   .reshape({4, 2})},
      {"fp16", from_bits<int16_t>({0, int16_t(0x8000), 0x3c00, 0x7c00, 0x7e01, 0x7c01, 1}, at::kHalf)},
      {"bf16",
       from_bits<int16_t>({0, int16_t(0x8000), 0x3f80, 0x7f80, 0x7fc1, int16_t(0xffa5), 0x7f81, 1}, at::kBFloat16)
           .reshape({2, 2, 2})},
      {"int64",
       at::tensor({std::numeric_limits<int64_t>::min(), int64_t(-1), int64_t(0), std::numeric_limits<int64_t>::max()})},
      {"int32", at::tensor({std::numeric_limits<int32_t>::min(), -1, 0, std::numeric_limits<int32_t>::max()})},
      {"uint8", at::tensor(std::vector<uint8_t>{0, 1, 128, 255}, at::kByte)},
      {"scalar", at::scalar_tensor(2.5, at::kFloat)},
      {"empty", at::empty({0, 3}, at::kLong)},
  };
}

GoldenFile sample_golden() {
  return GoldenFile{
      .path = {},
      .attrs = {{"schema_version", "1"}, {"op", "hc_pre"}, {"config_json", R"({"hc_mult": 4})"}, {"note", "µ ü ✓"}},
      .groups = {{"inputs", every_dtype()},
                 {"outputs", {{"out", at::arange(6, at::kFloat).reshape({2, 3})}}},
                 {"stages", {}}},
  };
}

void expect_same_tensors(const parity::TensorMap& got, const parity::TensorMap& want) {
  ASSERT_EQ(got.size(), want.size());
  for (const auto& [name, tensor] : want) {
    ASSERT_TRUE(got.contains(name)) << name;
    EXPECT_EQ(parity::describe(got.at(name)), parity::describe(tensor)) << name;
    EXPECT_TRUE(parity::bitwise_equal(got.at(name), tensor)) << name;
  }
}

TEST_F(GoldenTest, EveryDtypeRoundTripsBitwise) {
  const GoldenFile golden = sample_golden();
  write_golden(golden, dir_ / "x.h5");
  const GoldenFile back = parity::read_golden(dir_ / "x.h5");
  ASSERT_EQ(back.groups.size(), golden.groups.size());
  for (const auto& [group, tensors] : golden.groups) expect_same_tensors(back.group(group), tensors);
  EXPECT_TRUE(back.group("grads").empty());
}

TEST_F(GoldenTest, AttrsRoundTrip) {
  const GoldenFile golden = sample_golden();
  write_golden(golden, dir_ / "x.h5");
  EXPECT_EQ(parity::read_golden(dir_ / "x.h5").attrs, golden.attrs);
}

// A regenerated golden must not differ from the old one unless its content does (no timestamps in the file).
TEST_F(GoldenTest, WritingIsDeterministic) {
  write_golden(sample_golden(), dir_ / "a.h5");
  write_golden(sample_golden(), dir_ / "b.h5");
  EXPECT_EQ(parity::sha256_file(dir_ / "a.h5"), parity::sha256_file(dir_ / "b.h5"));
}

TEST_F(GoldenTest, RefusesGroupsOutsideTheSchema) {
  GoldenFile golden = sample_golden();
  golden.groups["input"] = {};
  const std::string msg = error_of([&] { write_golden(golden, dir_ / "x.h5"); });
  EXPECT_CONTAINS(msg, "group '/input'");
}

// Rewrites the dtype attr of `dataset` behind write_golden's back, as a hand-edited or foreign file would have it.
void set_dtype_attr(const fs::path& file, const char* dataset, const char* value) {
  const hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  const hid_t d = H5Dopen2(f, dataset, H5P_DEFAULT);
  H5Adelete(d, "dtype");
  if (value != nullptr) {
    const hid_t type = H5Tcopy(H5T_C_S1);
    H5Tset_size(type, std::strlen(value));
    const hid_t space = H5Screate(H5S_SCALAR);
    const hid_t a = H5Acreate2(d, "dtype", type, space, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(a, type, value);
    H5Aclose(a);
    H5Sclose(space);
    H5Tclose(type);
  }
  H5Dclose(d);
  H5Fclose(f);
}

TEST_F(GoldenTest, UnknownDtypeAttrNamesFileAndDataset) {
  write_golden(sample_golden(), dir_ / "x.h5");
  set_dtype_attr(dir_ / "x.h5", "/outputs/out", "bf17");
  const std::string msg = error_of([&] { parity::read_golden(dir_ / "x.h5"); });
  EXPECT_CONTAINS(msg, (dir_ / "x.h5").string());
  EXPECT_CONTAINS(msg, "dataset '/outputs/out'");
  EXPECT_CONTAINS(msg, "'bf17'");
}

TEST_F(GoldenTest, DtypeAttrMustMatchStoredType) {
  write_golden(sample_golden(), dir_ / "x.h5");
  set_dtype_attr(dir_ / "x.h5", "/inputs/bf16", "fp16");  // same width, different bits: must not be accepted
  const std::string msg = error_of([&] { parity::read_golden(dir_ / "x.h5"); });
  EXPECT_CONTAINS(msg, "dataset '/inputs/bf16'");
  EXPECT_CONTAINS(msg, "16-bit unsigned integer");
}

TEST_F(GoldenTest, MissingDtypeAttr) {
  write_golden(sample_golden(), dir_ / "x.h5");
  set_dtype_attr(dir_ / "x.h5", "/inputs/int32", nullptr);
  const std::string msg = error_of([&] { parity::read_golden(dir_ / "x.h5"); });
  EXPECT_CONTAINS(msg, "dataset '/inputs/int32': missing dtype attr");
}

// A dataset the manifest's hash of this file does not cover: reached through an external link, stored in another
// file (external storage), or with no data at all (a null dataspace, which read as one uninitialised element).
TEST_F(GoldenTest, DataOutsideTheFileOrWithoutDataIsRefused) {
  const fs::path side = dir_ / "side.h5";
  write_golden(sample_golden(), side);
  const auto with = [&](const char* name, const std::function<void(hid_t outputs)>& add) {
    const fs::path file = dir_ / name;
    write_golden(sample_golden(), file);
    const hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    const hid_t g = H5Gopen2(f, "/outputs", H5P_DEFAULT);
    add(g);
    H5Gclose(g);
    H5Fclose(f);
    return error_of([&] { parity::read_golden(file); });
  };
  const auto dataset = [](hid_t g, hid_t space, hid_t create) {
    const hid_t d = H5Dcreate2(g, "more", H5T_NATIVE_FLOAT, space, H5P_DEFAULT, create, H5P_DEFAULT);
    const hid_t type = H5Tcopy(H5T_C_S1);
    H5Tset_size(type, 4);
    const hid_t scalar = H5Screate(H5S_SCALAR);
    const hid_t a = H5Acreate2(d, "dtype", type, scalar, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(a, type, "fp32");
    H5Aclose(a);
    H5Sclose(scalar);
    H5Tclose(type);
    H5Dclose(d);
  };
  EXPECT_CONTAINS(with("link.h5", [&](hid_t g) { H5Lcreate_external(side.c_str(), "/outputs/out", g, "more", H5P_DEFAULT, H5P_DEFAULT); }),
                  "'more' is a soft or external link");
  EXPECT_CONTAINS(with("external.h5",
                       [&](hid_t g) {
                         const hsize_t n = 3;
                         const hid_t space = H5Screate_simple(1, &n, nullptr);
                         const hid_t create = H5Pcreate(H5P_DATASET_CREATE);
                         H5Pset_external(create, "raw.bin", 0, 12);
                         dataset(g, space, create);
                         H5Pclose(create);
                         H5Sclose(space);
                       }),
                  "dataset '/outputs/more': stores its data in other files");
  EXPECT_CONTAINS(with("null.h5",
                       [&](hid_t g) {
                         const hid_t space = H5Screate(H5S_NULL);
                         dataset(g, space, H5P_DEFAULT);
                         H5Sclose(space);
                       }),
                  "dataset '/outputs/more': has a null dataspace");
}

TEST_F(GoldenTest, MissingFile) {
  EXPECT_CONTAINS(error_of([&] { parity::read_golden(dir_ / "nope.h5"); }), (dir_ / "nope.h5").string());
}

TEST_F(GoldenTest, TruncatedFileNamesIt) {
  const fs::path copy = dir_ / "truncated.h5";
  fs::copy_file(kGoldenDir / "hc/hc_pre_tiny_fp32.h5", copy);
  fs::resize_file(copy, fs::file_size(copy) / 2);
  EXPECT_CONTAINS(error_of([&] { parity::read_golden(copy); }), copy.string());
}

TEST_F(GoldenTest, NotHdf5) {
  std::ofstream(dir_ / "text.h5") << "not hdf5\n";
  EXPECT_CONTAINS(error_of([&] { parity::read_golden(dir_ / "text.h5"); }), "not a readable HDF5 file");
}

// --- manifest ---------------------------------------------------------------------------------------------------

// A copy of one committed golden under dir/hc/ with its own manifest.
parity::Manifest manifest_with_copy(const fs::path& dir, const std::string& name) {
  fs::create_directories(dir / "hc");
  fs::copy_file(kGoldenDir / "hc" / name, dir / "hc" / name);
  parity::Manifest m{.path = dir / "MANIFEST.json", .files = {}};
  m.files["hc/" + name] = {.sha256 = parity::sha256_file(dir / "hc" / name),
                           .bytes = int64_t(fs::file_size(dir / "hc" / name))};
  write_manifest(m);
  return parity::read_manifest(m.path);
}

void flip_byte(const fs::path& file, std::streamoff at) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(at);
  const char c = char(f.get() ^ 0x01);
  f.seekp(at);
  f.put(c);
}

TEST_F(GoldenTest, ManifestAcceptsUnmodifiedFile) {
  const parity::Manifest m = manifest_with_copy(dir_, "hc_pre_tiny_fp32.h5");
  EXPECT_EQ(parity::load_verified(m, "hc/hc_pre_tiny_fp32.h5").attrs.at("op"), "hc_pre");
}

TEST_F(GoldenTest, ManifestRefusesModifiedFile) {
  const parity::Manifest m = manifest_with_copy(dir_, "hc_pre_tiny_fp32.h5");
  const fs::path file = dir_ / "hc/hc_pre_tiny_fp32.h5";
  flip_byte(file, std::streamoff(fs::file_size(file) / 2));
  const std::string msg = error_of([&] { parity::load_verified(m, "hc/hc_pre_tiny_fp32.h5"); });
  EXPECT_CONTAINS(msg, file.string());
  EXPECT_CONTAINS(msg, "sha256 mismatch");
  EXPECT_CONTAINS(msg, "golden/generate.py");
}

TEST_F(GoldenTest, ManifestRefusesUnlistedFile) {
  const parity::Manifest m = manifest_with_copy(dir_, "hc_pre_tiny_fp32.h5");
  const std::string msg = error_of([&] { parity::load_verified(m, "hc/foo.h5"); });
  EXPECT_CONTAINS(msg, m.path.string());
  EXPECT_CONTAINS(msg, "no entry for 'hc/foo.h5'");
}

TEST_F(GoldenTest, ManifestListedFileMissing) {
  parity::Manifest m = manifest_with_copy(dir_, "hc_pre_tiny_fp32.h5");
  fs::remove(dir_ / "hc/hc_pre_tiny_fp32.h5");
  EXPECT_CONTAINS(error_of([&] { parity::load_verified(m, "hc/hc_pre_tiny_fp32.h5"); }), "missing");
}

TEST_F(GoldenTest, ManifestInvalidJsonNamesIt) {
  std::ofstream(dir_ / "MANIFEST.json") << "{\"files\": {";
  EXPECT_CONTAINS(error_of([&] { parity::read_manifest(dir_ / "MANIFEST.json"); }), (dir_ / "MANIFEST.json").string());
}

TEST_F(GoldenTest, ManifestBadEntryNamesIt) {
  std::ofstream(dir_ / "MANIFEST.json") << R"({"files": {"hc/a.h5": {"bytes": 3, "sha256": "xyz"}}})";
  EXPECT_CONTAINS(error_of([&] { parity::read_manifest(dir_ / "MANIFEST.json"); }), "entry 'hc/a.h5'");
}

std::string slurp(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Python (golden/generate.py) and C++ write the same manifest bytes, so neither leaves a spurious diff.
TEST_F(GoldenTest, ManifestWriterMatchesGenerator) {
  parity::Manifest m = parity::read_manifest(kGoldenDir / "MANIFEST.json");
  m.path = dir_ / "MANIFEST.json";
  write_manifest(m);
  EXPECT_EQ(slurp(m.path), slurp(kGoldenDir / "MANIFEST.json"));
}

// --- the committed golden files ---------------------------------------------------------------------------------

// group -> dataset -> parity::describe() of the tensor
using Layout = std::map<std::string, std::map<std::string, std::string>>;

Layout layout_of(const GoldenFile& golden) {
  Layout layout;
  for (const auto& [group, tensors] : golden.groups) {
    auto& names = layout[group];
    for (const auto& [name, t] : tensors) names[name] = parity::describe(t);
  }
  return layout;
}

// B=2, S=32, H=hc_mult=4, D=hidden=64, (2+H)*H = 24 (spec §15).
Layout hc_pre_layout(const std::string& x) {
  return {
      {"inputs",
       {{"x", "[2, 32, 4, 64] " + x}, {"fn", "[24, 256] fp32"}, {"base", "[24] fp32"}, {"scale", "[3] fp32"}}},
      {"stages", {{"mixes", "[2, 32, 24] fp32"}, {"pre", "[2, 32, 4] fp32"}}},
      {"outputs", {{"post", "[2, 32, 4] fp32"}, {"comb", "[2, 32, 4, 4] fp32"}, {"collapsed", "[2, 32, 64] " + x}}},
      {"grad_outputs",
       {{"post", "[2, 32, 4] fp32"}, {"comb", "[2, 32, 4, 4] fp32"}, {"collapsed", "[2, 32, 64] " + x}}},
      {"grads", {{"x", "[2, 32, 4, 64] " + x}, {"fn", "[24, 256] fp32"}, {"base", "[24] fp32"}, {"scale", "[3] fp32"}}},
  };
}

Layout hc_post_layout(const std::string& x) {
  const auto inputs = std::map<std::string, std::string>{{"x", "[2, 32, 64] " + x},
                                                         {"residual", "[2, 32, 4, 64] " + x},
                                                         {"post", "[2, 32, 4] fp32"},
                                                         {"comb", "[2, 32, 4, 4] fp32"}};
  return {{"inputs", inputs},
          {"stages", {}},
          {"outputs", {{"out", "[2, 32, 4, 64] " + x}}},
          {"grad_outputs", {{"out", "[2, 32, 4, 64] " + x}}},
          {"grads", inputs}};
}

Layout hc_head_layout() {
  const auto params = std::map<std::string, std::string>{
      {"x", "[2, 32, 4, 64] fp32"}, {"fn", "[4, 256] fp32"}, {"base", "[4] fp32"}, {"scale", "[1] fp32"}};
  return {{"inputs", params},
          {"stages", {{"mixes", "[2, 32, 4] fp32"}, {"pre", "[2, 32, 4] fp32"}}},
          {"outputs", {{"out", "[2, 32, 64] fp32"}}},
          {"grad_outputs", {{"out", "[2, 32, 64] fp32"}}},
          {"grads", params}};
}

struct CommittedGolden {
  std::string file;
  std::string op;
  std::string dtype;
  Layout layout;
};

class CommittedGoldenTest : public ::testing::TestWithParam<CommittedGolden> {};

TEST_P(CommittedGoldenTest, VerifiesAndHasTheSchema) {
  const CommittedGolden& want = GetParam();
  const parity::Manifest m = parity::read_manifest(kGoldenDir / "MANIFEST.json");
  const GoldenFile golden = parity::load_verified(m, "hc/" + want.file);

  EXPECT_EQ(layout_of(golden), want.layout);
  std::vector<std::string> attr_names;
  for (const auto& [name, value] : golden.attrs) attr_names.push_back(name);
  EXPECT_EQ(attr_names, (std::vector<std::string>{"config_json", "created", "generator", "generator_sha256", "op",
                                                  "schema_version", "seed", "torch_version", "transformers_version"}));
  EXPECT_EQ(golden.attrs.at("schema_version"), "1");
  EXPECT_EQ(golden.attrs.at("op"), want.op);
  EXPECT_EQ(golden.attrs.at("generator"), "golden/generate.py");
  const auto config = nlohmann::json::parse(golden.attrs.at("config_json"));
  EXPECT_EQ(config.at("hc_mult"), 4);
  EXPECT_EQ(config.at("hidden"), 64);
  EXPECT_EQ(config.at("sinkhorn_iters"), 20);
  EXPECT_EQ(config.at("post_mult"), 2.0);
  EXPECT_EQ(config.at("dtype"), want.dtype);
  for (const auto& [name, g] : golden.group("grad_outputs")) {
    EXPECT_FALSE(at::all(g.eq(1)).item<bool>()) << name << " is all ones";
  }
}

INSTANTIATE_TEST_SUITE_P(
    Golden, CommittedGoldenTest,
    ::testing::Values(CommittedGolden{"hc_pre_tiny_fp32.h5", "hc_pre", "fp32", hc_pre_layout("fp32")},
                      CommittedGolden{"hc_pre_tiny_bf16.h5", "hc_pre", "bf16", hc_pre_layout("bf16")},
                      CommittedGolden{"hc_post_tiny_fp32.h5", "hc_post", "fp32", hc_post_layout("fp32")},
                      CommittedGolden{"hc_post_tiny_bf16.h5", "hc_post", "bf16", hc_post_layout("bf16")},
                      CommittedGolden{"hc_head_tiny_fp32.h5", "hc_head", "fp32", hc_head_layout()}),
    [](const auto& info) { return info.param.file.substr(0, info.param.file.size() - 3); });

// Read back in C++, the data still satisfies the update it was captured from: element order and layout survived.
TEST(CommittedGolden, HcPostSatisfiesItsFormula) {
  const GoldenFile g = parity::read_golden(kGoldenDir / "hc/hc_post_tiny_fp32.h5");
  const auto& in = g.group("inputs");
  const at::Tensor expected = in.at("post").unsqueeze(-1) * in.at("x").unsqueeze(-2) +
                              at::matmul(in.at("comb").transpose(-1, -2), in.at("residual"));
  EXPECT_LT((g.group("outputs").at("out") - expected).abs().max().item<float>(), 1e-5f);
}

}  // namespace
