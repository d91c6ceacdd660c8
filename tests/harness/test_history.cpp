// The history store and the statistics drawn from it (harness/src/history.cpp): Mann-Whitney p-values against an
// independent reference, perf verdicts on synthetic samples (an A/A test first: the comparator must not invent
// changes), numeric growth, the JSONL store, records from a results document, and step detection.
#include <parity/baseline.hpp>
#include <parity/bisect.hpp>
#include <parity/error.hpp>
#include <parity/gate.hpp>
#include <parity/history.hpp>
#include <parity/results.hpp>
#include <parity/timing.hpp>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <fstream>
#include <random>

namespace parity {
namespace {

namespace fs = std::filesystem;

// ---- Mann-Whitney ------------------------------------------------------------------------------------------
// Reference values: a throwaway Python script (no scipy) computing the exact p by enumerating every split of the
// pooled values (itertools.combinations) and the asymptotic p by the textbook formula: U = max(U1, U2),
// z = (U - n1 n2 / 2 - 0.5) / sqrt(n1 n2 / 12 ((n + 1) - sum(t^3 - t) / (n (n - 1)))), p = erfc(z / sqrt 2),
// which is what scipy.stats.mannwhitneyu(method="asymptotic") computes.

TEST(MannWhitney, ExactWithoutTies) {
  EXPECT_NEAR(mann_whitney_p({1, 2, 3}, {4, 5, 6}), 0.1, 1e-12);  // 2 of C(6,3) = 20 splits as extreme
  EXPECT_NEAR(mann_whitney_p({1.1, 2.2, 3.3, 4.4}, {1.5, 2.5, 3.5, 4.5, 5.5}), 0.4126984126984127, 1e-12);
  // Complete separation of 5 against 5 cannot reach p < 0.002: 2/252. Hence min_samples = 10.
  EXPECT_NEAR(mann_whitney_p({1, 2, 3, 4, 5}, {6, 7, 8, 9, 10}), 0.007936507936507936, 1e-12);
  std::vector<double> a, b;
  for (int i = 0; i < 7; ++i) a.push_back(0.5 + 0.37 * i);
  for (int j = 0; j < 8; ++j) b.push_back(0.9 + 0.41 * j);
  EXPECT_NEAR(mann_whitney_p(a, b), 0.151981351981352, 1e-12);
  EXPECT_NEAR(mann_whitney_p(b, a), 0.151981351981352, 1e-12);  // two-sided: symmetric
}

TEST(MannWhitney, TiesUseTheCorrectedNormalApproximation) {
  EXPECT_NEAR(mann_whitney_p({1, 2, 2, 3, 3, 3, 4, 5}, {3, 4, 4, 5, 5, 6, 6, 7}), 0.010515245935858918, 1e-12);
  std::vector<double> a(6, 1.0), b(6, 2.0);
  a.insert(a.end(), 6, 2.0);
  b.insert(b.end(), 6, 3.0);
  EXPECT_NEAR(mann_whitney_p(a, b), 0.0007800870786341557, 1e-12);
}

TEST(MannWhitney, LargeSamplesUseTheNormalApproximation) {
  std::vector<double> a, b;  // 3600 pairs: past the exact recursion's limit
  for (int i = 0; i < 60; ++i) {
    a.push_back(2.0 * i);
    b.push_back(2.0 * i + 21);
  }
  EXPECT_NEAR(mann_whitney_p(a, b), 0.0025668879435241797, 1e-12);
}

TEST(MannWhitney, DegenerateInputsGiveNoEvidence) {
  EXPECT_EQ(mann_whitney_p({}, {1, 2}), 1.0);
  EXPECT_EQ(mann_whitney_p(std::vector<double>(12, 1.0), std::vector<double>(12, 1.0)), 1.0);
}

// ---- Perf verdicts ------------------------------------------------------------------------------------------

HistoryRecord timed(const std::vector<double>& samples) {
  const Timing t = summarize(samples, "cpu");
  HistoryRecord r;
  r.case_id = "hc_post/tiny";
  r.path = "cpu:v1";
  r.direction = "fwd";
  r.device = "test cpu (2 threads)";
  r.build_type = "release";
  set_timing(r, t);
  return r;
}

// Timing-like samples: 2% Gaussian jitter plus a 5% chance of a 20-50% outlier (preemption, a cache miss storm).
std::vector<double> draw(std::mt19937_64& rng, double center, int n) {
  std::normal_distribution<double> jitter(0, 0.02);
  std::uniform_real_distribution<double> u(0, 1);
  std::vector<double> s;
  for (int i = 0; i < n; ++i) s.push_back(center * (1 + jitter(rng)) * (u(rng) < 0.05 ? 1.2 + 0.3 * u(rng) : 1.0));
  return s;
}

TEST(ComparePerf, AATestNeverInventsAChange) {
  std::mt19937_64 rng(20260901);
  std::map<Verdict, int> seen;
  for (int i = 0; i < 200; ++i) ++seen[compare_perf(timed(draw(rng, 1.0, 30)), timed(draw(rng, 1.0, 30))).verdict];
  EXPECT_EQ(seen[Verdict::slower], 0);
  EXPECT_EQ(seen[Verdict::faster], 0);
  EXPECT_GE(seen[Verdict::same], 190) << "AMBIGUOUS " << seen[Verdict::ambiguous];  // the comparator is useful too
}

TEST(ComparePerf, TwoXShiftIsSlowerAndBackIsFaster) {
  std::mt19937_64 rng(7);
  const HistoryRecord base = timed(draw(rng, 1.0, 30)), slow = timed(draw(rng, 2.0, 30));
  const PerfVerdict v = compare_perf(base, slow);
  EXPECT_EQ(v.verdict, Verdict::slower) << v.reason;
  EXPECT_NEAR(v.ratio, 2.0, 0.1);
  EXPECT_LT(v.p_value, 0.002);
  EXPECT_EQ(compare_perf(slow, base).verdict, Verdict::faster);
}

TEST(ComparePerf, ShiftBelowTheThresholdIsNeverSlower) {
  std::mt19937_64 rng(11);
  for (int i = 0; i < 100; ++i) {
    const PerfVerdict v = compare_perf(timed(draw(rng, 1.0, 30)), timed(draw(rng, 1.03, 30)), {.threshold = 0.05});
    ASSERT_NE(v.verdict, Verdict::slower) << "draw " << i << ": " << v.reason;
  }
}

TEST(ComparePerf, FewSamplesAreAmbiguousWithANextStep) {
  std::mt19937_64 rng(3);
  const PerfVerdict v = compare_perf(timed(draw(rng, 1.0, 30)), timed(draw(rng, 2.0, 5)));
  EXPECT_EQ(v.verdict, Verdict::ambiguous);
  EXPECT_NE(v.reason.find("candidate has 5 samples"), std::string::npos) << v.reason;
  EXPECT_NE(v.next.find("--time-cap"), std::string::npos) << v.next;
}

TEST(ComparePerf, ThrottledSamplesAreAmbiguous) {
  std::mt19937_64 rng(5);
  HistoryRecord base = timed(draw(rng, 1.0, 30)), cand = timed(draw(rng, 2.0, 30));
  base.mode = cand.mode = "cold";
  cand.dropped_throttled = 4;  // 4 of 34 > 10%
  const PerfVerdict v = compare_perf(base, cand);
  EXPECT_EQ(v.verdict, Verdict::ambiguous);
  EXPECT_NE(v.reason.find("candidate dropped 4 of 34 samples"), std::string::npos) << v.reason;
  EXPECT_NE(v.next.find("throttling"), std::string::npos) << v.next;
}

// A GPU timing with dropped samples is AMBIGUOUS; a CPU one is judged on what its host probe kept.
TEST(ComparePerf, ThrottledGpuSamplesAreAmbiguousCpuOnesAreFiltered) {
  std::mt19937_64 rng(7);
  HistoryRecord base = timed(draw(rng, 1.0, 30)), cand = timed(draw(rng, 2.0, 30));
  cand.dropped_throttled = 12;
  EXPECT_EQ(compare_perf(base, cand).verdict, Verdict::slower);
  base.mode = cand.mode = "cold";
  EXPECT_EQ(compare_perf(base, cand).verdict, Verdict::ambiguous);
}

TEST(ComparePerf, NoisyOverlapIsAmbiguous) {
  std::vector<double> base, cand;  // IQR of 40%: a 10% median shift proves nothing
  for (int i = 0; i < 20; ++i) {
    base.push_back(0.6 + 0.04 * i);
    cand.push_back(0.7 + 0.04 * i);
  }
  const PerfVerdict v = compare_perf(timed(base), timed(cand), {.threshold = 0.05});
  EXPECT_EQ(v.verdict, Verdict::ambiguous);
  EXPECT_NE(v.reason.find("too noisy"), std::string::npos) << v.reason;
}

// The same 15% slowdown: SLOWER on the GPU, AMBIGUOUS on the CPU (inside what A/A runs there can show), SLOWER on
// the CPU under an explicit --threshold.
TEST(ComparePerf, DefaultThresholdFollowsTheTimingMode) {
  std::mt19937_64 rng(19);
  HistoryRecord base = timed(draw(rng, 1.0, 30)), cand = timed(draw(rng, 1.15, 30));
  const PerfVerdict cpu = compare_perf(base, cand);
  EXPECT_EQ(cpu.verdict, Verdict::ambiguous) << cpu.reason;
  EXPECT_NE(cpu.reason.find("(<= 25.0%)"), std::string::npos) << cpu.reason;
  EXPECT_EQ(compare_perf(base, cand, {.threshold = 0.05}).verdict, Verdict::slower);
  base.mode = cand.mode = "cold";
  const PerfVerdict gpu = compare_perf(base, cand);
  EXPECT_EQ(gpu.verdict, Verdict::slower) << gpu.reason;
  EXPECT_NE(gpu.reason.find("(> 5.0%)"), std::string::npos) << gpu.reason;
}

// A case's perf_threshold replaces the mode's default, and travels with its records through the history's JSON; an
// explicit --threshold still wins.
TEST(ComparePerf, TheCasesThresholdReplacesTheDefault) {
  std::mt19937_64 rng(19);
  HistoryRecord base = timed(draw(rng, 1.0, 30)), cand = timed(draw(rng, 1.15, 30));
  base.mode = cand.mode = "cold";
  cand.threshold = 0.3;
  const HistoryRecord stored = history_record_from_json(to_json(cand), "test");
  EXPECT_EQ(stored.threshold, 0.3);
  const PerfVerdict v = compare_perf(base, stored);
  EXPECT_EQ(v.verdict, Verdict::ambiguous) << v.reason;
  EXPECT_NE(v.reason.find("(<= 30.0%)"), std::string::npos) << v.reason;
  EXPECT_EQ(compare_perf(base, stored, {.threshold = 0.05}).verdict, Verdict::slower);
  cand.threshold = 0;
  EXPECT_EQ(history_record_from_json(to_json(cand), "test").threshold, 0);
  EXPECT_EQ(compare_perf(base, cand).verdict, Verdict::slower);
}

TEST(ComparePerf, ChangedSetupIsNotComparable) {
  std::mt19937_64 rng(13);
  const HistoryRecord base = timed(draw(rng, 1.0, 30));
  HistoryRecord cand = timed(draw(rng, 2.0, 30));
  cand.driver = "580.2";
  PerfVerdict v = compare_perf(base, cand);
  EXPECT_EQ(v.verdict, Verdict::not_comparable);
  EXPECT_NE(v.reason.find("driver changed: '' -> '580.2'"), std::string::npos) << v.reason;
  EXPECT_FALSE(v.next.empty());

  // The same mode timed another way (perf.hpp's timing_method: cold mode's lead kernel) is not comparable either.
  cand = timed(draw(rng, 1.0, 30));
  cand.method = 2;
  v = compare_perf(base, cand);
  EXPECT_EQ(v.verdict, Verdict::not_comparable);
  EXPECT_NE(v.reason.find("timing method changed: 1 -> 2"), std::string::npos) << v.reason;

  cand = timed(draw(rng, 1.0, 30));
  cand.sm_clock_mhz = 1700;
  HistoryRecord clocked = base;
  clocked.sm_clock_mhz = 1980;
  v = compare_perf(clocked, cand);
  EXPECT_EQ(v.verdict, Verdict::not_comparable);
  EXPECT_NE(v.reason.find("SM clocks 1980 -> 1700 MHz"), std::string::npos) << v.reason;
  cand.sm_clock_mhz = 1950;  // 1.5% apart
  EXPECT_NE(compare_perf(clocked, cand).verdict, Verdict::not_comparable);

  // The CPU's counterpart: a host probe 1.5x slower under the candidate may be the whole of a 2x kernel slowdown.
  cand = timed(draw(rng, 2.0, 30));
  HistoryRecord probed = base;
  probed.host_probe_us = 20.0;
  cand.host_probe_us = 30.0;
  v = compare_perf(probed, cand);
  EXPECT_EQ(v.verdict, Verdict::not_comparable);
  EXPECT_NE(v.reason.find("host probe 20.0 -> 30.0 us (more than x1.3 apart)"), std::string::npos) << v.reason;
  EXPECT_NE(v.next.find("quiet"), std::string::npos) << v.next;
  cand.host_probe_us = 15.0;  // faster counts alike
  EXPECT_EQ(compare_perf(probed, cand).verdict, Verdict::not_comparable);
  cand.host_probe_us = 24.0;  // x1.2: comparable; the 2x is judged at the baseline's host speed (x1.67)
  v = compare_perf(probed, cand);
  EXPECT_EQ(v.verdict, Verdict::slower);
  EXPECT_NE(v.reason.find("candidate at the baseline's host speed: x0.833"), std::string::npos) << v.reason;
  // 1.25x slower with a 1.25x slower host: SAME at the baseline's host speed, SLOWER as measured. The probe does not
  // always move as the region does (on an H200 host's CPU: probe 1.29x faster, the same code as fast as before), so
  // its correction alone decides nothing either way.
  cand = timed(draw(rng, 1.25, 30));
  cand.host_probe_us = 25.0;
  v = compare_perf(probed, cand);
  EXPECT_EQ(v.verdict, Verdict::ambiguous) << v.reason;
  EXPECT_NE(v.reason.find("the probe's correction alone would decide"), std::string::npos) << v.reason;
  cand = timed(draw(rng, 1.0, 30));  // the same as measured, with a probe 1.25x faster: not SLOWER
  cand.host_probe_us = 16.0;
  v = compare_perf(probed, cand);
  EXPECT_EQ(v.verdict, Verdict::ambiguous) << v.reason;
  cand.host_probe_us = 20.0;  // the same probe: SAME
  EXPECT_EQ(compare_perf(probed, cand).verdict, Verdict::same) << compare_perf(probed, cand).reason;
  cand.host_probe_us = 18.0;  // x1.11: within the probe's own noise between processes, no correction
  v = compare_perf(probed, cand);
  EXPECT_EQ(v.verdict, Verdict::same) << v.reason;
  EXPECT_EQ(v.reason.find("host speed"), std::string::npos) << v.reason;
  cand = timed(draw(rng, 2.0, 30));
  cand = timed(draw(rng, 2.0, 3));  // one probe reading of three samples says nothing: too few samples first
  cand.host_probe_us = 30.0;
  EXPECT_EQ(compare_perf(probed, cand).verdict, Verdict::ambiguous);
  EXPECT_NE(compare_perf(probed, cand).reason.find("candidate has 3 samples"), std::string::npos);
  cand = timed(draw(rng, 2.0, 30));
  cand.host_probe_us = 0;  // a record from before the probe: nothing to check
  EXPECT_EQ(compare_perf(probed, cand).verdict, Verdict::slower);
}

// A kernel edit is what the history must judge: a changed source hash only attributes the change.
TEST(ComparePerf, ChangedSourceIsJudgedAndAttributed) {
  std::mt19937_64 rng(17);
  HistoryRecord base = timed(draw(rng, 1.0, 30)), cand = timed(draw(rng, 2.0, 30));
  base.source_hash = std::string(64, 'a');
  cand.source_hash = std::string(64, 'b');
  const PerfVerdict v = compare_perf(base, cand);
  EXPECT_EQ(v.verdict, Verdict::slower);
  EXPECT_NE(v.reason.find("source changed (aaaaaaaa -> bbbbbbbb)"), std::string::npos) << v.reason;
}

// ---- Numerics -----------------------------------------------------------------------------------------------

TEST(CompareNumerics, FlagsGrowthEvenInsideTolerance) {
  HistoryRecord base, cand;
  base.numerics = {{"out vs ref:fp64", {1, 1e-3, 1e-4}}, {"grad/x vs ref:fp64", {2, 2e-3, 1e-4}},
                   {"post vs golden", {0, 0.0, 0.0}}};
  cand.numerics = {{"out vs ref:fp64", {2, 1.005e-3, 1e-4}},  // ulp grew; max_abs within print rounding
                   {"grad/x vs ref:fp64", {1, 2.1e-3, 1e-4}},  // ulp shrank; max_abs grew 5%
                   {"post vs golden", {0, std::nan(""), 0.0}},  // turned non-finite
                   {"new vs ref:fp64", {9, 9.0, 9.0}}};         // no baseline: not a regression
  const auto r = compare_numerics(base, cand);
  ASSERT_EQ(r.size(), 3u);
  EXPECT_EQ(r[0].tensor, "grad/x vs ref:fp64");
  EXPECT_EQ(r[0].metric, "max_abs");
  EXPECT_EQ(r[1].tensor, "out vs ref:fp64");
  EXPECT_EQ(r[1].metric, "max_ulp");
  EXPECT_EQ(r[1].baseline, 1);
  EXPECT_EQ(r[1].candidate, 2);
  EXPECT_EQ(r[2].tensor, "post vs golden");
  EXPECT_TRUE(compare_numerics(cand, cand).empty());
}

// ---- The store ----------------------------------------------------------------------------------------------

class HistoryDir : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = fs::temp_directory_path() / fmt::format("parity-history-{}", ::getpid()); }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(HistoryDir, JsonlRoundTrip) {
  HistoryRecord a = timed({1.0, 1.1, 0.9, 1.05, 1.2});
  a.driver = "580.65.06";
  a.commit = "abc123";
  a.source_hash = std::string(64, 'f');
  a.date = "2026-09-01T00:00:00Z";
  a.sm_clock_mhz = 1980;
  a.host_probe_us = 19.5;
  a.dropped_throttled = 1;
  a.method = 2;
  a.numerics["out vs ref:fp64"] = {3, std::nan(""), 1e-5};
  HistoryRecord b;  // numerics only, another op
  b.case_id = "hc_pre/tiny";
  b.path = "ref:hf";
  b.direction = "fwd";
  b.numerics["out vs golden"] = {0, 0.0, 0.0};
  append_history(dir_, {a, b});
  append_history(dir_, {a});
  EXPECT_TRUE(fs::exists(dir_ / "hc_post.jsonl"));
  const auto loaded = load_history(dir_);
  ASSERT_EQ(loaded.size(), 3u);
  EXPECT_EQ(loaded[0].key(), "hc_post/tiny|cpu:v1|fwd");  // files by name: hc_post before hc_pre
  EXPECT_EQ(loaded[2].key(), "hc_pre/tiny|ref:hf|fwd");
  const HistoryRecord& r = loaded[0];
  EXPECT_EQ(to_json(r).dump(), to_json(a).dump());  // dumps: NaN != NaN, but both write null
  EXPECT_EQ(r.samples_ms, a.samples_ms);
  EXPECT_EQ(r.mode, "cpu");
  EXPECT_EQ(r.median_ms, a.median_ms);
  EXPECT_EQ(r.dropped_throttled, 1);
  EXPECT_EQ(r.method, 2);
  EXPECT_EQ(r.host_probe_us, 19.5);
  EXPECT_TRUE(std::isnan(r.numerics.at("out vs ref:fp64").max_abs));
  EXPECT_EQ(loaded[2].n, 0);
  EXPECT_EQ(loaded[2].numerics.at("out vs golden").max_ulp, 0);
}

TEST_F(HistoryDir, BadLineNamesFileAndLine) {
  fs::create_directories(dir_);
  HistoryRecord a = timed({1.0, 1.1, 0.9});
  std::ofstream(dir_ / "hc_post.jsonl") << to_json(a).dump() << "\n\n{\"schema\": \"parity.history/1\", \"case\": \n";
  try {
    load_history(dir_);
    FAIL() << "no InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("hc_post.jsonl:3:"), std::string::npos) << e.what();
  }
  std::ofstream(dir_ / "hc_post.jsonl") << R"({"schema": "parity.history/1", "case": "x/y", "path": "cpu:v1"})" << "\n";
  try {
    load_history(dir_);
    FAIL() << "no InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("hc_post.jsonl:1:"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("direction"), std::string::npos) << e.what();
  }
  EXPECT_THROW(load_history(dir_ / "missing"), InputError);
}

// ---- Records from a results document ------------------------------------------------------------------------

nlohmann::json metrics(int64_t ulp, double abs) { return {{"max_ulp", ulp}, {"max_abs", abs}, {"mean_abs", abs / 10}}; }

nlohmann::json entry(const std::string& path, const std::string& dir, double median, int n) {
  return {{"path", path}, {"direction", dir},   {"mode", "cpu"},  {"median_ms", median}, {"q1_ms", 0.9 * median},
          {"q3_ms", 1.1 * median}, {"min_ms", 0.8 * median}, {"n", n}, {"rel_noise", 0.2},
          {"samples_ms", std::vector<double>(size_t(n), median)}, {"sm_clock_mhz", 0}, {"dropped_throttled", 0}};
}

TEST(RecordsFromResults, OneRecordPerTimedOrCheckedPath) {
  const nlohmann::json doc = {
      {"schema", "parity.results/1"},
      {"environment",
       {{"gpu", "none"}, {"commit", "abc123"}, {"dirty", true}, {"build_type", "release"}, {"date", "2026-09-01"}}},
      {"cases",
       {{{"case", "hc_post/tiny"},
         {"op", "hc_post"},
         {"checks",
          {{{"variant", "cpu:v1"}, {"tensor", "out"}, {"against", "ref:fp64"}, {"metrics", metrics(1, 2e-3)}},
           {{"variant", "cpu:v1"}, {"tensor", "grad/x"}, {"against", "ref:fp64"}, {"metrics", metrics(2, 3e-3)}},
           {{"variant", "ref:hf"}, {"tensor", "out"}, {"against", "golden"}, {"metrics", metrics(0, 0)}}}},
         {"perf",
          {{"ceilings", {{"device", "Test CPU (2 threads)"}, {"driver", ""}}},
           {"entries",
            {entry("cpu:v1", "fwd", 1.0, 12), entry("cpu:v1", "bwd", 3.0, 12), entry("eager", "fwd", 2.0, 12),
             entry("cuda:v1", "fwd", 0, 0)}}}}}}}};
  const auto records = records_from_results(doc);
  std::vector<std::string> keys;
  for (const auto& r : records) keys.push_back(r.key());
  EXPECT_EQ(keys, (std::vector<std::string>{"hc_post/tiny|cpu:v1|fwd", "hc_post/tiny|cpu:v1|bwd",
                                            "hc_post/tiny|eager|fwd", "hc_post/tiny|ref:hf|fwd"}));
  const HistoryRecord& fwd = records[0];
  EXPECT_EQ(fwd.n, 12);
  EXPECT_EQ(fwd.median_ms, 1.0);
  EXPECT_EQ(fwd.mode, "cpu");
  EXPECT_EQ(fwd.device, "Test CPU (2 threads)");
  EXPECT_EQ(fwd.commit, "abc123-dirty");
  EXPECT_EQ(fwd.build_type, "release");
  ASSERT_EQ(fwd.numerics.size(), 2u);  // the gradient check lands on the fwd record of its variant
  EXPECT_EQ(fwd.numerics.at("grad/x vs ref:fp64").max_ulp, 2);
  EXPECT_TRUE(records[1].numerics.empty());
  EXPECT_EQ(records[3].n, 0);
  EXPECT_EQ(fwd.method, 1);  // no timing_method in the entry: written before it was recorded
  EXPECT_EQ(fwd.source_hash, source_hash("cpu:v1", "hc"));
  EXPECT_EQ(records[2].source_hash, source_hash("eager", "hc"));
  EXPECT_NE(fwd.source_hash, records[2].source_hash);
}

// Untimed records take their device from the environment: the GPU where there was one, else the CPU platform (whose
// LibTorch sums in its own order), else, in documents written before that was recorded, "none".
TEST(RecordsFromResults, DeviceOfUntimedRecords) {
  const auto device_with = [](const nlohmann::json& env) {
    const nlohmann::json doc = {
        {"schema", "parity.results/1"},
        {"environment", env},
        {"cases",
         {{{"case", "hc_post/tiny"},
           {"op", "hc_post"},
           {"checks",
            {{{"variant", "ref:hf"}, {"tensor", "out"}, {"against", "golden"}, {"metrics", metrics(0, 0)}}}}}}}};
    const auto records = records_from_results(doc);
    return records.size() == 1 ? records[0].device : "(" + std::to_string(records.size()) + " records)";
  };
  EXPECT_EQ(device_with({{"gpu", "none"}, {"cpu", "cpu GenuineIntel AVX512"}}), "cpu GenuineIntel AVX512");
  EXPECT_EQ(device_with({{"gpu", "NVIDIA H200, 580.159.04"}, {"cpu", "cpu GenuineIntel AVX512"}}), "NVIDIA H200");
  EXPECT_EQ(device_with({{"gpu", "none"}}), "none");
  EXPECT_EQ(cpu_platform().rfind("cpu ", 0), 0u) << cpu_platform();
}

// Its readers take each field where they need it: one of another type is bad input naming the document and the case
// (`parity history append`, `bisect verdict`, `baseline update --from`), not a harness error.
TEST_F(HistoryDir, AFieldOfAnotherTypeNamesTheDocumentAndTheCase) {
  fs::create_directories(dir_);
  const fs::path file = dir_ / "results.json";
  std::ofstream(file) << R"({"schema": "parity.results/1", "environment": {},
                             "cases": [{"case": "hc_post/a", "op": "hc_post"}, {"case": 5, "op": "hc_post"}]})";
  try {
    with_results(file, records_from_results);
    FAIL() << "no InputError";
  } catch (const InputError& e) {
    const std::string want = ": cases[1]: [json.exception.type_error.302] type must be string, but is number";
    EXPECT_NE(std::string(e.what()).find(file.string() + want), std::string::npos) << e.what();
  }
}

// A document carries the hashes of the build that ran it (a worktree's, in commit bisection): they win over this
// checkout's; a path it has none for falls back to this checkout.
TEST(RecordsFromResults, SourceHashFromTheDocument) {
  nlohmann::json doc = {{"schema", "parity.results/1"},
                        {"environment", nlohmann::json::object()},
                        {"cases",
                         {{{"case", "hc_post/tiny"},
                           {"op", "hc_post"},
                           {"source_hashes", {{"cpu:v1", "feed"}}},
                           {"perf", {{"entries", {entry("cpu:v1", "fwd", 1.0, 12), entry("eager", "fwd", 2.0, 12)}}}}}}}};
  const auto records = records_from_results(doc);
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(records[0].source_hash, "feed");
  EXPECT_EQ(records[1].source_hash, source_hash("eager", "hc"));
}

// ---- One step of a perf bisection --------------------------------------------------------------------------

// A timing of 15 samples spread evenly over +-`spread` about `median`.
nlohmann::json timed(const std::string& path, const std::string& direction, double median, double spread = 0.02,
                     double probe_us = 0) {
  nlohmann::json e = entry(path, direction, median, 15);
  std::vector<double> samples;
  for (int i = 0; i < 15; ++i) samples.push_back(median * (1 - spread + 2 * spread * i / 14.0));
  e["samples_ms"] = samples, e["q1_ms"] = (1 - spread / 2) * median, e["q3_ms"] = (1 + spread / 2) * median;
  e["min_ms"] = (1 - spread) * median, e["rel_noise"] = spread / 2;
  if (probe_us > 0) e["host_probe_us"] = probe_us;
  return e;
}

// A results document of one case with these timings.
nlohmann::json case_doc(const nlohmann::json& entries, const std::string& eager_source = "") {
  nlohmann::json c = {{"case", "hc_post/tiny"},
                      {"op", "hc_post"},
                      {"perf", {{"ceilings", {{"device", "Test CPU (1 threads)"}, {"driver", ""}}}, {"entries", entries}}}};
  if (!eager_source.empty()) c["source_hashes"] = {{"eager", eager_source}};
  return {{"schema", "parity.results/1"}, {"environment", {{"commit", "abc123"}}}, {"cases", {c}}};
}

// A results document of one case, its planted path and eager timed forward (15 samples spread 2% about each
// median); `eager_source`, when given, is the eager path's source hash in the document; `probe_us`, when given, the
// host probe of both timings.
nlohmann::json step_doc(double path_ms, double eager_ms, const std::string& eager_source = "", double probe_us = 0) {
  return case_doc({timed("planted:slow", "fwd", path_ms, 0.02, probe_us), timed("eager", "fwd", eager_ms, 0.02, probe_us)},
                  eager_source);
}

// Eager beside the judged path is the machine's control: the same code slower (or faster) in the candidate's run
// means the host changed speed, and the step is a skip (125), not a bad commit. Where eager's own code changed it
// tells nothing, and the path is judged on its own.
TEST(JudgePerfStep, EagerThatMovedOnTheSameCodeMakesTheStepNotComparable) {
  const auto step = [](double path_ms, double eager_ms, const std::string& eager_source = "") {
    return records_from_results(step_doc(path_ms, eager_ms, eager_source));
  };
  const std::vector<HistoryRecord> base = step(3.0, 1.0);
  PerfStepVerdict v = judge_perf_step(base, step(4.8, 1.0));
  EXPECT_EQ(v.exit_code, 1) << v.text;
  EXPECT_NE(v.text.find("planted:slow fwd: SLOWER x1.600"), std::string::npos) << v.text;
  v = judge_perf_step(base, step(4.8, 1.6));
  EXPECT_EQ(v.exit_code, 125) << v.text;
  EXPECT_NE(v.text.find("planted:slow fwd: NOT-COMPARABLE x1.600"), std::string::npos) << v.text;
  EXPECT_NE(v.text.find("the machine ran at another speed: eager, the same code in both, SLOWER x1.600"),
            std::string::npos)
      << v.text;
  v = judge_perf_step(base, step(3.0, 1.0));
  EXPECT_EQ(v.exit_code, 0) << v.text;
  v = judge_perf_step(step(3.0, 1.0, "before"), step(4.8, 1.6, "after"));
  EXPECT_EQ(v.exit_code, 1) << v.text;
}

// The gate's perf verdict on the planted path of `candidate` against a baseline made of the results `baseline`.
PerfVerdict gate_verdict(const nlohmann::json& baseline, const nlohmann::json& candidate) {
  Baseline b;
  for (const auto& r : records_from_results(baseline)) b.records[baseline_key(r)] = r;
  for (const auto& c : compare_with_baselines(candidate, {{"hc_post", b}}))
    if (c.path == "planted:slow" && c.perf) return *c.perf;
  ADD_FAILURE() << "no perf verdict for planted:slow";
  return PerfVerdict{};
}

// The gate's comparison with its baselines takes the same control.
TEST(GateBaselines, EagerThatMovedOnTheSameCodeMakesThePathNotComparable) {
  const nlohmann::json base = step_doc(3.0, 1.0);
  EXPECT_EQ(gate_verdict(base, step_doc(4.8, 1.0)).verdict, Verdict::slower);
  EXPECT_EQ(gate_verdict(base, step_doc(4.8, 1.6)).verdict, Verdict::not_comparable);
  // eager's code changed: no control
  EXPECT_EQ(gate_verdict(base, step_doc(4.8, 1.6, "after")).verdict, Verdict::slower);
}

// A path that moved far beyond eager is judged all the same; one that moved about as eager did, or up to twice its
// shift (the unchanged path seen at x1.58 beside eager's x1.36), is not.
TEST(GateBaselines, APathThatMovedBeyondEagerIsJudged) {
  const nlohmann::json base = step_doc(3.0, 1.0);
  const PerfVerdict v = gate_verdict(base, step_doc(1.0, 0.7));  // x0.333 beside eager's x0.7
  EXPECT_EQ(v.verdict, Verdict::faster) << v.reason;
  EXPECT_NE(v.reason.find("beyond the machine's own change (eager, the same code in both, FASTER x0.700): x0.476 at "
                          "eager's speed"),
            std::string::npos)
      << v.reason;
  EXPECT_EQ(gate_verdict(base, step_doc(9.0, 1.4)).verdict, Verdict::slower);
  EXPECT_EQ(gate_verdict(base, step_doc(2.1, 0.7)).verdict, Verdict::not_comparable);
  EXPECT_EQ(gate_verdict(base, step_doc(4.74, 1.36)).verdict, Verdict::not_comparable);
  // Faster as measured but slower at eager's speed: the machine's change decides, not the path.
  EXPECT_EQ(gate_verdict(base, step_doc(2.0, 0.55)).verdict, Verdict::not_comparable);
}

// A path that moved against the machine (slower beside an eager that ran faster) is judged: the machine's speed does
// not explain it, and at eager's speed it is slower still (it was NOT-COMPARABLE, which passes a gate).
TEST(GateBaselines, APathThatMovedAgainstEagerIsJudged) {
  const nlohmann::json base = step_doc(3.0, 1.0);
  const PerfVerdict v = gate_verdict(base, step_doc(3.9, 0.8));  // x1.30 beside eager's x0.80
  EXPECT_EQ(v.verdict, Verdict::slower) << v.reason;
  EXPECT_NE(v.reason.find("against the machine's own change (eager, the same code in both, FASTER x0.800): x1.625 at "
                          "eager's speed"),
            std::string::npos)
      << v.reason;
  EXPECT_EQ(gate_verdict(base, step_doc(2.0, 1.3)).verdict, Verdict::faster);  // x0.667 beside eager's x1.30
}

// Eager that moved by less than the CPU threshold (x1.21: AMBIGUOUS on its own) still explains a path that moved by
// about as much (x1.37, SLOWER on its own; run27's self-check on an H100 host under ctest -j 8), while a path far
// beyond it is judged; eager's samples overlapping say nothing, and the path's verdict stands.
TEST(GateBaselines, EagerThatMovedUnderTheThresholdStillControls) {
  const nlohmann::json base = step_doc(3.0, 1.0);
  PerfVerdict v = gate_verdict(base, step_doc(4.11, 1.21));
  EXPECT_EQ(v.verdict, Verdict::not_comparable) << v.reason;
  EXPECT_NE(v.reason.find("the machine ran at another speed: eager, the same code in both, SLOWER x1.210"),
            std::string::npos)
      << v.reason;
  v = gate_verdict(base, step_doc(6.0, 1.1));
  EXPECT_EQ(v.verdict, Verdict::slower) << v.reason;
  EXPECT_NE(v.reason.find("beyond the machine's own change (eager, the same code in both, SLOWER x1.100)"),
            std::string::npos)
      << v.reason;
  EXPECT_EQ(gate_verdict(base, step_doc(4.11, 1.005)).verdict, Verdict::slower);
}

// Eager the same in both runs says the host ran at one speed, whatever the host probes say: the probe moves between
// processes on its own (history.hpp). Eager itself moving, or too noisy to say, leaves the probes in charge.
TEST(GateBaselines, EagerTheSameOverridesHostProbesThatMoved) {
  const nlohmann::json base = step_doc(3.0, 1.0, "", 4.8);
  const PerfVerdict v = gate_verdict(base, step_doc(6.0, 1.0, "", 7.2));  // probes x1.5 apart
  EXPECT_EQ(v.verdict, Verdict::slower) << v.reason;
  EXPECT_NE(v.reason.find("host probes 4.8 -> 7.2 us not used"), std::string::npos) << v.reason;
  EXPECT_EQ(gate_verdict(base, step_doc(3.0, 1.0, "", 7.2)).verdict, Verdict::same);
  EXPECT_EQ(gate_verdict(base, step_doc(3.0, 1.0, "", 5.4)).verdict, Verdict::same);  // probes x1.125: unused anyway
  // Without the control (eager's code changed) the same probes refuse the comparison...
  EXPECT_EQ(gate_verdict(base, step_doc(6.0, 1.0, "after", 7.2)).verdict, Verdict::not_comparable);
  // ...and eager that moved (x1.2: apart, but under the CPU threshold, AMBIGUOUS) tells nothing either.
  EXPECT_EQ(gate_verdict(base, step_doc(6.0, 1.2, "", 7.2)).verdict, Verdict::not_comparable);
}

// Eager too noisy to call its x1.2 a change (SAME) still explains most of a path's x1.4 (the CI VM under ctest -j 2:
// an unchanged path x1.41 beside eager x1.24); a path at x2, x1.67 at eager's speed, is judged all the same.
TEST(GateBaselines, EagerTheSameStillExplainsAShiftAtItsSpeed) {
  const auto doc = [](double path, double eager) {
    return case_doc({timed("planted:slow", "fwd", path), timed("eager", "fwd", eager, 0.6)});
  };
  const nlohmann::json base = doc(3.0, 1.0);
  PerfVerdict v = gate_verdict(base, doc(4.2, 1.2));
  EXPECT_EQ(v.verdict, Verdict::not_comparable) << v.reason;
  EXPECT_NE(v.reason.find("not at the speed of eager beside it (the same code in both, SAME x1.200"),
            std::string::npos)
      << v.reason;
  EXPECT_EQ(gate_verdict(base, doc(6.0, 1.2)).verdict, Verdict::slower);
  EXPECT_EQ(gate_verdict(base, doc(4.2, 1.0)).verdict, Verdict::slower);  // eager unmoved: the path moved
}

// Where eager in the path's direction cannot say (too noisy: AMBIGUOUS), eager in the other direction of the same
// runs is the control: a tiny backward at x1.6 beside eager fwd x1.28 was the machine (run12 on an H100; here x1.59
// beside x1.4, the CPU threshold being 25%), and a path that moved beyond it is judged all the same.
TEST(GateBaselines, EagerOfTheOtherDirectionControlsWhereItsOwnCannotSay) {
  const auto doc = [](double path_bwd, double eager_fwd, double eager_bwd) {
    return case_doc({timed("planted:slow", "bwd", path_bwd), timed("eager", "fwd", eager_fwd),
                     timed("eager", "bwd", eager_bwd, 0.6)});
  };
  const nlohmann::json base = doc(2.2, 1.3, 4.8);
  PerfVerdict v = gate_verdict(base, doc(3.5, 1.82, 3.4));  // eager bwd x0.71, its samples overlapping: AMBIGUOUS
  EXPECT_EQ(v.verdict, Verdict::not_comparable) << v.reason;
  EXPECT_NE(v.reason.find("the machine ran at another speed: eager fwd, the same code in both, SLOWER x1.400"),
            std::string::npos)
      << v.reason;
  v = gate_verdict(base, doc(6.6, 1.82, 3.4));  // x3 beside the machine's x1.4
  EXPECT_EQ(v.verdict, Verdict::slower) << v.reason;
  EXPECT_NE(v.reason.find("beyond the machine's own change (eager fwd, the same code in both, SLOWER x1.400)"),
            std::string::npos)
      << v.reason;
  EXPECT_EQ(gate_verdict(base, doc(3.5, 1.3, 3.4)).verdict, Verdict::slower);  // eager fwd the same: the path moved
  // Without eager in either direction the same x1.59 is SLOWER: the control decides it.
  const auto alone = [](double ms) { return case_doc(nlohmann::json::array({timed("planted:slow", "bwd", ms)})); };
  EXPECT_EQ(gate_verdict(alone(2.2), alone(3.5)).verdict, Verdict::slower);
}

TEST_F(HistoryDir, SourceHashFollowsTheFiles) {
  fs::create_directories(dir_ / "kernels/cpu");
  const std::string absent = source_hash("cpu:v1", "f", dir_);
  std::ofstream(dir_ / "kernels/cpu/f.cpp") << "";
  const std::string empty = source_hash("cpu:v1", "f", dir_);
  std::ofstream(dir_ / "kernels/cpu/f.cpp") << "int x;";
  const std::string edited = source_hash("cpu:v1", "f", dir_);
  EXPECT_NE(absent, empty);
  EXPECT_NE(empty, edited);
  EXPECT_EQ(edited, source_hash("cpu:hf", "f", dir_));  // same file, same hash
  EXPECT_EQ(edited.size(), 64u);
}

// ---- Step detection -----------------------------------------------------------------------------------------

std::vector<double> noisy(std::mt19937_64& rng, const std::vector<double>& levels, double rel_noise) {
  std::normal_distribution<double> e(0, rel_noise);
  std::vector<double> y;
  for (double l : levels) y.push_back(l * (1 + e(rng)));
  return y;
}

TEST(DetectSteps, FindsASingleStep) {
  std::mt19937_64 rng(1);
  std::vector<double> levels(15, 1.0);
  levels.insert(levels.end(), 15, 1.2);
  const auto steps = detect_steps(noisy(rng, levels, 0.01));
  ASSERT_EQ(steps.size(), 1u);
  EXPECT_EQ(steps[0].index, 15u);
  EXPECT_NEAR(steps[0].before, 1.0, 0.01);
  EXPECT_NEAR(steps[0].after, 1.2, 0.012);
}

TEST(DetectSteps, FindsNoneInPureNoise) {
  std::mt19937_64 rng(2);
  for (int i = 0; i < 50; ++i) {
    const auto steps = detect_steps(noisy(rng, std::vector<double>(40, 1.0), 0.02));
    ASSERT_TRUE(steps.empty()) << "series " << i << ": step at " << steps[0].index;
  }
}

TEST(DetectSteps, FlagsSlowCreepAgainstTheFirstLevel) {
  std::mt19937_64 rng(3);
  std::vector<double> levels;
  for (int i = 0; i < 20; ++i) levels.push_back(std::pow(1.01, i));  // +1% per commit, each within noise of a run
  const auto steps = detect_steps(noisy(rng, levels, 0.002));
  ASSERT_FALSE(steps.empty());
  EXPECT_GT(steps.back().after / steps.front().before, 1.1);
}

TEST(DetectSteps, PerPointNoiseRaisesTheBar) {
  std::mt19937_64 rng(4);
  std::vector<double> levels(10, 1.0);
  levels.insert(levels.end(), 10, 1.03);
  const auto y = noisy(rng, levels, 0.002);
  EXPECT_EQ(detect_steps(y).size(), 1u);
  EXPECT_TRUE(detect_steps(y, std::vector<double>(20, 0.05)).empty());  // 3% inside 5% per-point noise
}

TEST(DetectSteps, DegenerateSeries) {
  EXPECT_TRUE(detect_steps({}).empty());
  EXPECT_TRUE(detect_steps({1.0}).empty());
  EXPECT_TRUE(detect_steps(std::vector<double>(10, 2.0)).empty());
  EXPECT_TRUE(detect_steps(std::vector<double>(10, 0.0)).empty());
  const auto exact = detect_steps({1, 1, 1, 1, 1, 2, 2, 2, 2, 2});  // noise-free: any change is a step
  ASSERT_EQ(exact.size(), 1u);
  EXPECT_EQ(exact[0].index, 5u);
}

}  // namespace
}  // namespace parity
