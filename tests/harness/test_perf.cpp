// run_perf on a tiny seeded hc_post case: one entry per path and direction, every field consistent with the cost
// model, the timing and the ceilings; a path that throws becomes an entry with its error, the others are still
// timed. The device ceilings come from (and on first use go to) the cache under $PARITY_HOME/device.
#include "references/hc.hpp"
#include "tests/harness/hc_post_case_text.hpp"

#include <parity/error.hpp>
#include <parity/perf.hpp>
#include <parity/results.hpp>
#include <parity/runner.hpp>
#include <parity/timing.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <sstream>

namespace parity {
namespace {

std::string post_case(const std::string& variants, const std::string& extra = "") {
  return test::hc_post_case_text("id = \"hc_post/perf_tiny\"\ncovers = \"perf test\"\n"
                                 "dims = { tokens = 16, hc = 4, hidden = 32 }\ndtype = \"bf16\"\nseed = 5\n"
                                 "suites = [\"x\"]\nvariants = " +
                                 variants + "\n" + extra +
                                 "\n[case.notes]\nupstream = \"xtuner fused hc_post ~21x fwd over eager\"");
}

Case parse_one(const std::string& text, const Registry& reg) {
  auto cases = parse_cases(text, "cases/perf_test.toml", reg);
  EXPECT_EQ(cases.size(), 1u);
  return cases.at(0);
}

TimingOptions quick() {
  TimingOptions t;
  t.warmup = 1;
  t.min_samples = 5;
  t.max_samples = 30;
  t.time_cap_s = 2;
  return t;
}

RunOptions cpu_only() {
  RunOptions o;
  o.force_cpu = true;
  return o;
}

const PerfEntry* find(const PerfResult& r, const std::string& path, const std::string& dir) {
  auto it = std::find_if(r.entries.begin(), r.entries.end(),
                         [&](const PerfEntry& e) { return e.path == path && e.direction == dir; });
  return it == r.entries.end() ? nullptr : &*it;
}

TEST(Perf, TimesEagerAndEveryCpuVariantBothWays) {
  const Registry& reg = Registry::global();
  const Case c = parse_one(post_case(R"(["cpu:v1", "cpu:hf"])"), reg);
  const TimingOptions t = quick();
  const PerfResult r = run_perf(c, reg, cpu_only(), t);

  EXPECT_EQ(r.upstream.at("upstream"), "xtuner fused hc_post ~21x fwd over eager");
  EXPECT_FALSE(r.ceilings.device.empty());
  EXPECT_GT(r.ceilings.copy_gbps, 0);
  EXPECT_GT(r.ceilings.fp32_tflops, 0);
  EXPECT_EQ(r.ceilings.bf16_tflops, 0);  // no bf16 ceiling on the CPU

  ASSERT_EQ(r.entries.size(), 6u);
  const Op& op = reg.op("hc_post");
  for (const char* path : {"eager", "cpu:v1", "cpu:hf"})
    for (const char* dir : {"fwd", "bwd"}) {
      const PerfEntry* e = find(r, path, dir);
      ASSERT_NE(e, nullptr) << path << " " << dir;
      SCOPED_TRACE(fmt::format("{} {}", path, dir));
      EXPECT_EQ(e->error, "");
      EXPECT_EQ(e->timing.mode, "cpu");
      EXPECT_GE(e->timing.n, t.min_samples);
      EXPECT_EQ(size_t(e->timing.n), e->timing.samples_ms.size());
      EXPECT_FALSE(e->timing.stop.empty());
      EXPECT_GT(e->timing.median_ms, 0);
      EXPECT_LE(e->timing.q1_ms, e->timing.median_ms);
      EXPECT_LE(e->timing.median_ms, e->timing.q3_ms);
      const Cost cost = op.cost(c.ctx, std::string(dir) == "bwd");
      EXPECT_EQ(e->bytes, cost.bytes);
      EXPECT_EQ(e->flops_fp32, cost.flops_fp32);
      EXPECT_NEAR(e->achieved_gbps, cost.bytes / (e->timing.median_ms * 1e-3) / 1e9, 1e-9 * e->achieved_gbps);
      EXPECT_NEAR(e->pct_copy_bw, 100 * e->achieved_gbps / r.ceilings.copy_gbps, 1e-9 * e->pct_copy_bw);
      EXPECT_GT(e->pct_flops, 0);
      EXPECT_GT(e->speedup_vs_eager, 0);
      EXPECT_EQ(e->peak_extra_bytes, -1);  // CPU
    }
  EXPECT_DOUBLE_EQ(find(r, "eager", "fwd")->speedup_vs_eager, 1.0);
  EXPECT_DOUBLE_EQ(find(r, "cpu:v1", "bwd")->speedup_vs_eager,
                   find(r, "eager", "bwd")->timing.median_ms / find(r, "cpu:v1", "bwd")->timing.median_ms);
}

TEST(Perf, FollowsTheRunnersVariantSelection) {
  const Registry& reg = Registry::global();
  RunOptions only_v1 = cpu_only();
  only_v1.only_variant = "cpu:v1";
  const PerfResult a = run_perf(parse_one(post_case(R"(["cpu:v1", "cpu:hf"])"), reg), reg, only_v1, quick());
  EXPECT_EQ(a.entries.size(), 4u);
  EXPECT_EQ(find(a, "cpu:hf", "fwd"), nullptr);

  const std::string skip_hf = "[case.skip]\n\"cpu:hf\" = \"not today\"";
  const Case skipping = parse_one(post_case(R"(["cpu:v1", "cpu:hf"])", skip_hf), reg);
  const PerfResult b = run_perf(skipping, reg, cpu_only(), quick());
  EXPECT_EQ(b.entries.size(), 4u);
  EXPECT_EQ(find(b, "cpu:hf", "bwd"), nullptr);
}

TEST(Perf, AFailingPathIsAnEntryWithItsError) {
  Registry reg;
  hc::register_hc_reference(reg);
  hc::register_hc_cpu(reg);
  const Variant& v1 = reg.variant("hc_post", "cpu:v1");
  Variant broken = v1;
  broken.id = "cpu:broken";
  broken.backward = [](const OpContext&, const TensorMap&, const TensorMap&, const TensorMap&, TensorMap&) {
    throw InputError("planted backward failure");
  };
  reg.add(broken);
  const PerfResult r = run_perf(
      parse_one(post_case(R"(["cpu:v1", "cpu:broken"])", "[case.copy_target]\n\"cpu:broken/bwd\" = 50"), reg), reg,
      cpu_only(), quick());
  ASSERT_EQ(r.entries.size(), 6u);
  EXPECT_EQ(find(r, "cpu:broken", "fwd")->error, "");
  const PerfEntry* failed = find(r, "cpu:broken", "bwd");
  EXPECT_EQ(failed->error, "planted backward failure");
  EXPECT_EQ(failed->timing.n, 0);
  EXPECT_FALSE(below_target(*failed));  // not timed: neither met nor missed
  EXPECT_EQ(failed->speedup_vs_eager, 0);
  EXPECT_EQ(find(r, "cpu:v1", "bwd")->error, "");
}

TEST(Perf, JsonCarriesEveryEntryAndTheCeilings) {
  const Registry& reg = Registry::global();
  const PerfResult r = run_perf(parse_one(post_case(R"(["cpu:v1"])"), reg), reg, cpu_only(), quick());
  const nlohmann::json j = to_json(r);
  EXPECT_EQ(j.at("ceilings").at("device"), r.ceilings.device);
  EXPECT_EQ(j.at("upstream").at("upstream"), "xtuner fused hc_post ~21x fwd over eager");
  ASSERT_EQ(j.at("entries").size(), r.entries.size());
  const auto& e = j.at("entries").at(0);
  for (const char* key : {"path", "direction", "mode", "median_ms", "min_ms", "q1_ms", "q3_ms", "rel_noise", "n",
                          "samples_ms", "sm_clock_mhz", "dropped_throttled", "stop", "bytes", "flops_fp32",
                          "flops_tensor", "achieved_gbps", "achieved_tflops", "pct_copy_bw", "pct_flops",
                          "speedup_vs_eager", "peak_extra_bytes", "target_pct_copy", "error"})
    EXPECT_TRUE(e.contains(key)) << key;
  EXPECT_EQ(e.at("samples_ms").size(), e.at("n").get<size_t>());
}

// A floor far below any timing is met, one at the whole copy rate (which a 16-token case on the CPU cannot reach) is
// missed; paths without one have none; the table says which.
TEST(Perf, CopyTargetsAreMetOrMissedAndPrinted) {
  const Registry& reg = Registry::global();
  const Case c = parse_one(
      post_case(R"(["cpu:v1"])", "[case.copy_target]\n\"cpu:v1/fwd\" = 1e-9\n\"cpu:v1/bwd\" = 100"), reg);
  const PerfResult r = run_perf(c, reg, cpu_only(), quick());
  const PerfEntry &fwd = *find(r, "cpu:v1", "fwd"), &bwd = *find(r, "cpu:v1", "bwd"), &eager = *find(r, "eager", "fwd");
  EXPECT_EQ(fwd.target_pct_copy, 1e-9);
  EXPECT_FALSE(below_target(fwd)) << fwd.pct_copy_bw;
  EXPECT_EQ(bwd.target_pct_copy, 100);
  EXPECT_LT(bwd.pct_copy_bw, 100);
  EXPECT_TRUE(below_target(bwd));
  EXPECT_EQ(eager.target_pct_copy, 0);
  EXPECT_FALSE(below_target(eager));
  EXPECT_EQ(to_json(r).at("entries").at(1).at("target_pct_copy"), r.entries.at(1).target_pct_copy);

  CaseResult result;
  result.case_id = c.id;
  result.perf = r;
  std::ostringstream table;
  print_table(table, {result}, false);
  EXPECT_NE(table.str().find(">= 100% MISSED"), std::string::npos) << table.str();
  EXPECT_NE(table.str().find(">= 1e-09% met"), std::string::npos) << table.str();
  EXPECT_NE(table.str().find("BELOW TARGET hc_post/perf_tiny  cpu:v1 bwd"), std::string::npos) << table.str();
  EXPECT_EQ(table.str().find("BELOW TARGET hc_post/perf_tiny  cpu:v1 fwd"), std::string::npos) << table.str();
}

TEST(Perf, CeilingsAreCachedPerDevice) {
  const DeviceCeilings first = device_ceilings(false, true);
  EXPECT_TRUE(std::filesystem::exists(ceilings_file(first))) << ceilings_file(first);
  const DeviceCeilings again = device_ceilings(false, true);
  EXPECT_EQ(again.measured, first.measured);
  EXPECT_EQ(again.copy_gbps, first.copy_gbps);
  EXPECT_FALSE(first.method.empty());
}

TEST(Perf, GpuPathsInEveryMode) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  const Registry& reg = Registry::global();
  const Case c = parse_one(post_case(R"(["cpu:v1", "cuda:v1"])"), reg);
  for (const char* mode : {"cold", "hot", "graph"}) {
    TimingOptions t = quick();
    t.mode = mode;
    const PerfResult r = run_perf(c, reg, RunOptions{}, t);
    EXPECT_EQ(find(r, "cpu:v1", "fwd"), nullptr) << "only the GPU's paths are timed on a GPU run";
#ifdef PARITY_WITH_CUDA
    EXPECT_EQ(r.entries.size(), 4u) << mode;
#else
    EXPECT_EQ(r.entries.size(), 2u) << mode;
#endif
    for (const PerfEntry& e : r.entries) {
      SCOPED_TRACE(fmt::format("{} {} {}", mode, e.path, e.direction));
      EXPECT_EQ(e.error, "");
      EXPECT_EQ(e.timing.mode, mode);
      EXPECT_GE(e.timing.n, t.min_samples);
      EXPECT_GE(e.peak_extra_bytes, 0);
      EXPECT_GT(e.speedup_vs_eager, 0);
      EXPECT_GT(e.pct_copy_bw, 0);
    }
  }
}

}  // namespace
}  // namespace parity
