// The CI gate on synthetic results: exit-code decisions, JUnit structure and escaping, the Markdown table, per-arch
// overrides, and baseline files.
#include <parity/baseline.hpp>
#include <parity/error.hpp>
#include <parity/gate.hpp>
#include <parity/results.hpp>
#include <parity/timing.hpp>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>

#include "tests/harness/hc_post_case_text.hpp"

namespace parity {
namespace {

namespace fs = std::filesystem;

#define EXPECT_CONTAINS(haystack, needle)                                                               \
  do {                                                                                                  \
    const std::string text_ = (haystack);                                                               \
    EXPECT_NE(text_.find(needle), std::string::npos) << "'" << text_ << "' lacks '" << (needle) << "'"; \
  } while (0)

#define EXPECT_LACKS(haystack, needle)                                                                  \
  do {                                                                                                  \
    const std::string text_ = (haystack);                                                               \
    EXPECT_EQ(text_.find(needle), std::string::npos) << "'" << text_ << "' has '" << (needle) << "'"; \
  } while (0)

size_t occurrences(const std::string& s, const std::string& needle) {
  size_t n = 0;
  for (size_t at = s.find(needle); at != std::string::npos; at = s.find(needle, at + 1)) ++n;
  return n;
}

// Well-formedness without an XML library: tags balance, and no '<' or '&' is left unescaped in text or attributes.
::testing::AssertionResult well_formed(const std::string& xml) {
  std::vector<std::string> open;
  size_t at = xml.find("?>") + 2;  // past the declaration
  while (at < xml.size()) {
    const size_t lt = xml.find('<', at);
    const std::string text = xml.substr(at, lt == std::string::npos ? std::string::npos : lt - at);
    for (size_t amp = text.find('&'); amp != std::string::npos; amp = text.find('&', amp + 1)) {
      const size_t semi = text.find(';', amp);
      const std::string entity = text.substr(amp, semi == std::string::npos ? 8 : semi - amp + 1);
      if (semi == std::string::npos || entity.find_first_of(" <&", 1) != std::string::npos)
        return ::testing::AssertionFailure() << "bare '&' at " << at + amp;
    }
    if (lt == std::string::npos) break;
    const size_t gt = xml.find('>', lt);
    if (gt == std::string::npos) return ::testing::AssertionFailure() << "unclosed tag at " << lt;
    const std::string tag = xml.substr(lt + 1, gt - lt - 1);
    if (tag.find('<') != std::string::npos) return ::testing::AssertionFailure() << "'<' inside tag: " << tag;
    const std::string name = tag.substr(tag[0] == '/' ? 1 : 0, tag.find_first_of(" />", 1) - (tag[0] == '/' ? 1 : 0));
    if (tag[0] == '/') {
      if (open.empty() || open.back() != name)
        return ::testing::AssertionFailure() << "</" << name << "> closes " << (open.empty() ? "nothing" : open.back());
      open.pop_back();
    } else if (tag.back() != '/') {
      open.push_back(name);
    }
    at = gt + 1;
  }
  if (!open.empty()) return ::testing::AssertionFailure() << "<" << open.back() << "> never closed";
  return ::testing::AssertionSuccess();
}

Check failed_check() {
  Check c{"cpu:v1", "out", "ref:fp64", "ulp<=1", {}};
  c.result.pass = false;
  c.result.summary = "max ulp 3 (<= 1 allowed) | \"quoted\" & 'single'";
  c.result.detail = "  first mismatches:\n  [0, 1, 2] actual 1.5 expected 1.25 (3 ulp)\n  ctrl\x01" "char";
  c.result.metrics.max_ulp = 3;
  return c;
}

CaseResult passing(const std::string& id) {
  CaseResult r;
  r.case_id = id;
  r.op = id.substr(0, id.find('/'));
  r.variants = {{"cpu:v1", Status::pass, ""}, {"cuda:v1", Status::skip, "no CUDA device"}};
  Check ok{"cpu:v1", "out", "ref:fp64", "ulp<=1", {}};
  ok.result.pass = true;
  ok.result.summary = "max ulp 0 (<= 1 allowed)";
  r.checks.push_back(ok);
  r.guards.push_back({"cpu:v1", "forward: inputs unchanged", true, ""});
  return r;
}

CaseResult failing(const std::string& id) {
  CaseResult r = passing(id);
  r.status = Status::fail;
  r.variants[0].status = Status::fail;
  r.checks.push_back(failed_check());
  return r;
}

CaseResult errored(const std::string& id) {
  CaseResult r;
  r.case_id = id;
  r.op = id.substr(0, id.find('/'));
  r.status = Status::error;
  r.error = "cases/hc.toml: case 'x' golden 'hc/none.h5' not found";
  return r;
}

GateReport report(std::vector<CaseResult> results) {
  GateReport g;
  g.arch = "cpu";
  g.suite = "ci";
  g.results = std::move(results);
  g.results_doc = results_document(g.results);
  return g;
}

BaselineComparison comparison(const std::string& case_id, const std::string& path) {
  BaselineComparison c;
  c.case_id = case_id;
  c.path = path;
  c.direction = "fwd";
  c.has_baseline = true;
  c.baseline_commit = c.numerics_commit = "abc123";
  return c;
}

BaselineComparison with_perf(BaselineComparison c, Verdict v) {
  c.perf = PerfVerdict{.verdict = v, .ratio = 1.3, .p_value = 0.001, .reason = "intervals apart", .next = "rerun"};
  return c;
}

// --- exit codes ------------------------------------------------------------------------------------------------

TEST(GateExitCode, PassFailError) {
  EXPECT_EQ(gate_exit_code(report({passing("hc_post/a")})), 0);
  EXPECT_EQ(gate_exit_code(report({passing("hc_post/a"), failing("hc_post/b")})), 1);
  EXPECT_EQ(gate_exit_code(report({failing("hc_post/b"), errored("hc_pre/c")})), 2);
  GateReport g = report({passing("hc_post/a")});
  g.errors.push_back("baselines/hc_post.json: not valid JSON");
  EXPECT_EQ(gate_exit_code(g), 2);
}

TEST(GateExitCode, NumericRegressionInsideToleranceFails) {
  GateReport g = report({passing("hc_post/a")});
  BaselineComparison c = comparison("hc_post/a", "cpu:v1");
  c.regressions.push_back({"out vs ref:fp64", "max_ulp", 0, 1});
  g.comparisons.push_back(c);
  EXPECT_EQ(gate_exit_code(g), 1);
  const std::string xml = junit_xml(g);
  EXPECT_CONTAINS(xml, R"(type="regression")");
  EXPECT_CONTAINS(xml, "numeric regression fwd out vs ref:fp64 max_ulp: 0 -&gt; 1 (baseline abc123)");
  EXPECT_CONTAINS(markdown_summary(g), "| 📉 REGRESSION | `hc_post/a` | `cpu:v1` | fwd out vs ref:fp64 max_ulp | 0 → 1");
  EXPECT_EQ(gate_document(g)["gate"]["counts"]["numeric_regressions"], 1);
}

// Numbers from another device pass, and the summary says which devices and how to record this one's.
TEST(GateExitCode, NumbersFromAnotherDeviceAreNotedNotFailed) {
  GateReport g = report({passing("hc_post/a")});
  BaselineComparison c = comparison("hc_post/a", "ref:hf");
  c.numerics_not_comparable = "baseline numbers from device 'cpu AuthenticAMD AVX512', this run on 'cpu X AVX2'";
  g.comparisons.push_back(c);
  EXPECT_EQ(gate_exit_code(g), 0);
  const std::string md = markdown_summary(g);
  EXPECT_CONTAINS(md, "1 paths' numbers were not compared: their baseline was recorded on another device (baseline "
                      "numbers from device 'cpu AuthenticAMD AVX512', this run on 'cpu X AVX2')");
  EXPECT_CONTAINS(md, "`parity baseline update --from <results.json> --why \"...\"` records this device's");
  EXPECT_EQ(gate_document(g)["gate"]["counts"]["numerics_not_comparable"], 1);
}

TEST(GateExitCode, SlowerVariantFailsFasterNotComparableAndEagerDoNot) {
  GateReport g = report({passing("hc_post/a")});
  g.comparisons = {with_perf(comparison("hc_post/a", "cpu:v1"), Verdict::faster),
                   with_perf(comparison("hc_post/a", "cpu:hf"), Verdict::not_comparable),
                   with_perf(comparison("hc_post/a", "eager"), Verdict::slower)};
  EXPECT_EQ(gate_exit_code(g), 0);
  EXPECT_CONTAINS(markdown_summary(g), "| 🐢 SLOWER (not gated) | `hc_post/a` | `eager` | fwd time |");
  EXPECT_CONTAINS(junit_xml(g), "<system-out>FASTER fwd: x1.300");
  g.comparisons.push_back(with_perf(comparison("hc_post/a", "cpu:v1"), Verdict::slower));
  EXPECT_EQ(gate_exit_code(g), 1);
  EXPECT_CONTAINS(markdown_summary(g), "| 🐢 SLOWER | `hc_post/a` | `cpu:v1` | fwd time | ×1.300, p=0.001");
}

TEST(GateExitCode, AmbiguousFailsOnlyWhenAsked) {
  GateReport g = report({passing("hc_post/a")});
  g.comparisons = {with_perf(comparison("hc_post/a", "cpu:v1"), Verdict::ambiguous)};
  g.ambiguous = AmbiguousMode::ignore;
  EXPECT_EQ(gate_exit_code(g), 0);
  EXPECT_LACKS(markdown_summary(g), "AMBIGUOUS");
  g.ambiguous = AmbiguousMode::warn;
  EXPECT_EQ(gate_exit_code(g), 0);
  EXPECT_CONTAINS(markdown_summary(g), "| ❓ AMBIGUOUS (not gated) | `hc_post/a`");
  EXPECT_CONTAINS(junit_xml(g), "<system-out>warning: AMBIGUOUS fwd");
  g.ambiguous = AmbiguousMode::fail;
  EXPECT_EQ(gate_exit_code(g), 1);
  EXPECT_CONTAINS(junit_xml(g), R"(<failure message="AMBIGUOUS fwd)");
  EXPECT_CONTAINS(markdown_summary(g), "| ❓ AMBIGUOUS | `hc_post/a`");
  EXPECT_THROW(parse_ambiguous_mode("maybe"), InputError);
}

TEST(GateExitCode, GpuOnlySuiteWithoutGpuIsAnError) {
  CaseResult r;
  r.case_id = "hc_post/v4flash_pack16k";
  r.op = "hc_post";
  r.status = Status::skip;
  r.variants = {{"cuda:v1", Status::skip, "no CUDA device"}, {"cuda:hf", Status::skip, "no CUDA device"}};
  const auto msg = gpu_suite_without_gpu({r}, false);
  ASSERT_TRUE(msg);
  EXPECT_CONTAINS(*msg, "no GPU for a GPU-only suite");
  EXPECT_FALSE(gpu_suite_without_gpu({r}, true));
  EXPECT_FALSE(gpu_suite_without_gpu({r, passing("hc_post/a")}, false));
  CaseResult cpu_skip = r;
  cpu_skip.variants.push_back({"cpu:v1", Status::skip, "not implemented yet"});
  EXPECT_FALSE(gpu_suite_without_gpu({cpu_skip}, false));
}

TEST(GateBaselines, NumbersThatGrewAreRegressionsOnTheSameDeviceOnly) {
  CaseResult r = passing("hc_post/a");
  r.checks[0].result.metrics.max_ulp = 2;
  const nlohmann::json doc = results_document({r});
  const auto records = records_from_results(doc);
  ASSERT_EQ(records.size(), 1u);
  HistoryRecord base = records[0];
  base.numerics.at("out vs ref:fp64").max_ulp = 1;
  Baseline b;
  b.records[baseline_key(base)] = base;

  auto cmp = compare_with_baselines(doc, {{"hc_post", b}});
  ASSERT_EQ(cmp.size(), 1u);
  EXPECT_TRUE(cmp[0].has_baseline);
  ASSERT_EQ(cmp[0].regressions.size(), 1u);
  EXPECT_EQ(cmp[0].regressions[0].metric, "max_ulp");
  EXPECT_FALSE(cmp[0].perf);  // neither side timed

  // The same key taken on another device too (another CPU platform), with smaller numbers: the run's own device's
  // record decides.
  HistoryRecord other = base;
  other.device = other.platform = "cpu AuthenticAMD AVX512-elsewhere";
  other.numerics.at("out vs ref:fp64").max_ulp = 0;
  b.records[baseline_key(other)] = other;
  base.numerics.at("out vs ref:fp64").max_ulp = 2;
  b.records[baseline_key(base)] = base;
  cmp = compare_with_baselines(doc, {{"hc_post", b}});
  EXPECT_TRUE(cmp[0].regressions.empty());
  EXPECT_TRUE(cmp[0].numerics_not_comparable.empty());

  // Only another platform's record: not compared, and said so.
  b.records.erase(baseline_key(base));
  cmp = compare_with_baselines(doc, {{"hc_post", b}});
  EXPECT_TRUE(cmp[0].has_baseline);
  EXPECT_TRUE(cmp[0].regressions.empty());
  EXPECT_CONTAINS(cmp[0].numerics_not_comparable, "the baseline's are from 'cpu AuthenticAMD AVX512-elsewhere'");

  // The same platform timed (a CPU run with --perf is stamped with the CPU model and its threads): its numbers are
  // compared all the same.
  HistoryRecord timed_there = base;
  timed_there.device = "Some CPU model (2 threads)";
  b.records[baseline_key(timed_there)] = timed_there;
  cmp = compare_with_baselines(doc, {{"hc_post", b}});
  ASSERT_EQ(cmp[0].regressions.size(), 0u) << "max_ulp 2 against 2";
  timed_there.numerics.at("out vs ref:fp64").max_ulp = 1;
  b.records[baseline_key(timed_there)] = timed_there;
  cmp = compare_with_baselines(doc, {{"hc_post", b}});
  EXPECT_TRUE(cmp[0].numerics_not_comparable.empty());
  ASSERT_EQ(cmp[0].regressions.size(), 1u);

  cmp = compare_with_baselines(doc, {});
  EXPECT_FALSE(cmp[0].has_baseline);
}

// --- JUnit -----------------------------------------------------------------------------------------------------

TEST(JUnit, Escaping) {
  EXPECT_EQ(xml_escape(R"(a<b>&"c"'d')"), "a&lt;b&gt;&amp;&quot;c&quot;&apos;d&apos;");
  EXPECT_EQ(xml_escape("line\nnext\ttab\r"), "line\nnext\ttab&#13;");
  EXPECT_EQ(xml_escape("line\nnext\ttab", true), "line&#10;next&#9;tab");
  EXPECT_EQ(xml_escape(std::string("nul\x01") + "\x1b[31m"), "nul\xEF\xBF\xBD\xEF\xBF\xBD[31m");
  EXPECT_EQ(xml_escape("±1 ulp → µ"), "±1 ulp → µ");  // UTF-8 passes through
  // A byte that is not UTF-8 (quoted from a user's file) would make the document unreadable: U+FFFD instead.
  EXPECT_EQ(xml_escape("a\xFF" "b\xC3" "c\xE2\x86" "d\xED\xA0\x80"),
            "a\xEF\xBF\xBD" "b\xEF\xBF\xBD" "c\xEF\xBF\xBD\xEF\xBF\xBD" "d\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
}

TEST(JUnit, OneTestcasePerCaseAndPath) {
  const GateReport g = report({passing("hc_post/a"), failing("hc_post/b"), errored("hc_pre/c")});
  const std::string xml = junit_xml(g);
  EXPECT_TRUE(well_formed(xml)) << xml;
  EXPECT_EQ(occurrences(xml, "<testcase "), 5u);  // a: cpu, cuda; b: cpu, cuda; c: the case itself
  EXPECT_CONTAINS(xml, R"(<testsuites name="parity gate" tests="5" failures="1" errors="1" skipped="2")");
  EXPECT_CONTAINS(xml, R"(<testsuite name="hc_post" tests="4" failures="1" errors="0" skipped="2")");
  EXPECT_CONTAINS(xml, R"(<testcase classname="hc_post" name="hc_post/a [cpu:v1]">)");
  EXPECT_CONTAINS(xml, R"(<skipped message="no CUDA device"/>)");
  EXPECT_CONTAINS(xml, R"(<testcase classname="hc_pre" name="hc_pre/c">)");
  EXPECT_CONTAINS(xml, R"(<error message="cases/hc.toml: case &apos;x&apos; golden)");
}

TEST(JUnit, FailureCarriesSummaryAndFirstMismatches) {
  const std::string xml = junit_xml(report({failing("hc_post/b")}));
  EXPECT_TRUE(well_formed(xml)) << xml;
  EXPECT_CONTAINS(xml, R"(<failure message="out vs ref:fp64: max ulp 3 (&lt;= 1 allowed) | &quot;quoted&quot; &amp; )"
                       R"(&apos;single&apos;" type="parity">)");
  EXPECT_CONTAINS(xml, "first mismatches:\n  [0, 1, 2] actual 1.5 expected 1.25 (3 ulp)");
  EXPECT_CONTAINS(xml, "ctrl\xEF\xBF\xBD" "char");
}

TEST(JUnit, GateErrorIsATestcase) {
  GateReport g = report({});
  g.errors.push_back("no case 'hc_post/nope' <here>");
  const std::string xml = junit_xml(g);
  EXPECT_TRUE(well_formed(xml)) << xml;
  EXPECT_CONTAINS(xml, R"(<error message="no case &apos;hc_post/nope&apos; &lt;here&gt;" type="harness">)");
  // The document's totals count it.
  EXPECT_CONTAINS(xml, R"(<testsuites name="parity gate" tests="1" failures="0" errors="1" skipped="0")");
}

// --- Markdown --------------------------------------------------------------------------------------------------

TEST(Markdown, CountsTableAndDetails) {
  const std::string md = markdown_summary(report({passing("hc_post/a"), failing("hc_post/b"), errored("hc_pre/c")}));
  EXPECT_CONTAINS(md, "## 💥 Parity gate: ERROR (exit 2)");
  EXPECT_CONTAINS(md, "**5 paths: 1 passed, 1 failed, 2 skipped, 1 errors**");
  EXPECT_CONTAINS(md, "| | case | path | check | numbers |");
  // Pipes and angle brackets of a summary must not break the table.
  EXPECT_CONTAINS(md, "| ❌ FAIL | `hc_post/b` | `cpu:v1` | out vs ref:fp64 · ulp&lt;=1 | max ulp 3 (&lt;= 1 allowed) \\| "
                      "\"quoted\" &amp; 'single' |");
  EXPECT_CONTAINS(md, "| 💥 ERROR | `hc_pre/c` | `-` |  | cases/hc.toml");
  EXPECT_CONTAINS(md, "<details><summary>hc_post/b [cpu:v1] · out vs ref:fp64");
  EXPECT_CONTAINS(md, "```text\npolicy ulp<=1\n");
  EXPECT_CONTAINS(md, "[0, 1, 2] actual 1.5 expected 1.25 (3 ulp)");
  EXPECT_EQ(occurrences(md, "```"), 2u);
}

TEST(Markdown, PassingRunHasNoTable) {
  const std::string md = markdown_summary(report({passing("hc_post/a")}));
  EXPECT_CONTAINS(md, "## ✅ Parity gate: PASS (exit 0)");
  EXPECT_LACKS(md, "| case |");
}

TEST(Markdown, PathsBelowTheirCopyTargetAreNotedNotFailed) {
  CaseResult r = passing("hc_pre/big");
  r.perf = PerfResult{};
  PerfEntry missed{.path = "cuda:v1", .direction = "bwd"};
  missed.pct_copy_bw = 52.1;
  missed.target_pct_copy = 75;
  PerfEntry met = missed;
  met.direction = "fwd";
  met.pct_copy_bw = 80;
  r.perf->entries = {missed, met};
  const GateReport g = report({r});
  const std::string md = markdown_summary(g);
  EXPECT_EQ(gate_exit_code(g), 0);
  EXPECT_CONTAINS(md, "1 paths below their copy-rate target (a goal, not a failure): `hc_pre/big` `cuda:v1` bwd "
                      "52.1% < 75%");
  EXPECT_LACKS(md, "fwd 80.0%");
}

// --- overrides -------------------------------------------------------------------------------------------------

std::vector<Case> post_case() {
  return parse_cases(test::hc_post_case_text("id = \"hc_post/t\"\ncovers = \"test\"\n"
                                             "dims = { tokens = 8, hc = 4, hidden = 16 }\ndtype = \"bf16\"\nseed = 3\n"
                                             "suites = [\"x\"]\nbackward = false",
                                             "[case.policy]\nout = \"ulp<=1\"\n"),
                     "cases/t.toml", Registry::global());
}

std::map<std::string, Baseline> override_baseline(const std::string& key, const std::string& policy) {
  Baseline b;
  b.path = "baselines/hc_post.json";
  b.overrides["sm_90"][key] = {policy, "wgmma accumulation order", "3 ulp", "https://example.org/issues/7"};
  return {{"hc_post", b}};
}

TEST(Overrides, ApplyOnTheirArchOnly) {
  auto cases = post_case();
  EXPECT_TRUE(apply_overrides(cases, override_baseline("hc_post/t|out", "ulp<=4"), "cpu").empty());
  EXPECT_EQ(cases[0].policy.at("out").text, "ulp<=1");

  const auto applied = apply_overrides(cases, override_baseline("hc_post/t|out", "ulp<=4"), "sm_90");
  ASSERT_EQ(applied.size(), 1u);
  EXPECT_EQ(cases[0].policy.at("out").text, "ulp<=4");
  EXPECT_EQ(std::get<Ulp>(cases[0].policy.at("out").kind).max_ulp, 4);
  EXPECT_EQ(applied[0].case_policy, "ulp<=1");
  EXPECT_EQ(applied[0].with.reason, "wgmma accumulation order");

  GateReport g = report({passing("hc_post/t")});
  g.arch = "sm_90";
  g.overrides = applied;
  EXPECT_CONTAINS(junit_xml(g), "override sm_90: out policy &apos;ulp&lt;=4&apos; instead of &apos;ulp&lt;=1&apos; "
                                "(wgmma accumulation order; worst observed 3 ulp; https://example.org/issues/7)");
  EXPECT_CONTAINS(markdown_summary(g), "| `sm_90` | `hc_post/t` | `out` | `ulp&lt;=1` → `ulp&lt;=4` | wgmma "
                                       "accumulation order | 3 ulp | https://example.org/issues/7 |");
  EXPECT_EQ(gate_document(g)["gate"]["overrides"][0]["policy"], "ulp<=4");
}

TEST(Overrides, StaleOrBadOverridesAreErrors) {
  auto cases = post_case();
  try {
    apply_overrides(cases, override_baseline("hc_post/t|grad/nope", "ulp<=4"), "sm_90");
    FAIL() << "expected an InputError";
  } catch (const InputError& e) {
    EXPECT_CONTAINS(e.what(), "baselines/hc_post.json: overrides.sm_90.hc_post/t|grad/nope: case 'hc_post/t' has no "
                              "policy for 'grad/nope' (it has: out)");
  }
  try {
    apply_overrides(cases, override_baseline("hc_post/t|out", "ulp<=lots"), "sm_90");
    FAIL() << "expected an InputError";
  } catch (const InputError& e) {
    EXPECT_CONTAINS(e.what(), "overrides.sm_90.hc_post/t|out.policy");
  }
  // An override of a case this run does not select is not this run's business.
  EXPECT_TRUE(apply_overrides(cases, override_baseline("hc_post/other|out", "ulp<=4"), "sm_90").empty());
}

// --- baseline files --------------------------------------------------------------------------------------------

class BaselineFile : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           fmt::format("parity_test_gate_{}_{}", getpid(), ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override {
    for (const auto& e : fs::directory_iterator(dir_)) ::remove(e.path().c_str());
    ::rmdir(dir_.c_str());
  }
  void write(const std::string& name, const std::string& text) { std::ofstream(dir_ / name) << text; }
  fs::path dir_;
};

HistoryRecord record(const std::string& case_id, int64_t max_ulp) {
  HistoryRecord r;
  r.case_id = case_id;
  r.path = "cpu:v1";
  r.direction = "fwd";
  r.device = "cpu";
  r.commit = "abc123";
  r.date = "2026-09-01T00:00:00Z";
  r.numerics["out vs ref:fp64"] = {max_ulp, 0.5 * double(max_ulp), 0.1};
  return r;
}

TEST_F(BaselineFile, RoundTripsOneRecordPerLine) {
  Baseline b;
  b.path = dir_ / "hc_post.json";
  HistoryRecord elsewhere = record("hc_post/a", 3);
  elsewhere.device = "cpu GenuineIntel AVX512";
  for (const auto& r : {record("hc_post/b", 2), record("hc_post/a", 1), elsewhere}) b.records[baseline_key(r)] = r;
  b.updates.push_back({"tester", "2 records", "first baseline", "2026-09-01T00:00:00Z", "abc123"});
  b.overrides["sm_90"]["hc_post/a|out"] = {"ulp<=4", "reason", "3 ulp", ""};
  write_baseline(b);
  const std::string text = baseline_text(b);
  EXPECT_LT(text.find("hc_post/a"), text.find("hc_post/b"));  // records sorted by key
  EXPECT_EQ(occurrences(text, "\n  {"), 4u) << text;            // a record a line, an update a line

  const Baseline back = read_baseline(b.path);
  ASSERT_EQ(back.records.size(), 3u);  // hc_post/a on two devices
  EXPECT_EQ(back.records.at(baseline_key(elsewhere)).numerics.at("out vs ref:fp64").max_ulp, 3);
  EXPECT_EQ(back.records.at(baseline_key(record("hc_post/b", 2))).numerics.at("out vs ref:fp64").max_ulp, 2);
  ASSERT_EQ(back.updates.size(), 1u);
  EXPECT_EQ(back.updates[0].why, "first baseline");
  EXPECT_EQ(back.overrides.at("sm_90").at("hc_post/a|out").worst_observed, "3 ulp");
  EXPECT_EQ(baseline_text(back), text);
  EXPECT_EQ(load_baselines(dir_).count("hc_post"), 1u);
  EXPECT_TRUE(load_baselines(dir_ / "absent").empty());
}

// A baseline update from a run without --perf keeps the timing it would replace (and says so); a baseline without
// one leaves a timed path NOT-COMPARABLE with what to do, not unjudged in silence.
TEST_F(BaselineFile, AnUntimedUpdateKeepsTheTimingItWouldReplace) {
  CaseResult timed_run = passing("hc_post/a");
  timed_run.perf = PerfResult{};
  PerfEntry e{.path = "cpu:v1", .direction = "fwd"};
  e.timing = summarize({1.0, 1.01, 0.99, 1.02, 0.98, 1.0, 1.01, 0.99, 1.0, 1.0, 1.01, 0.99}, "cpu");
  timed_run.perf->entries = {e};
  const nlohmann::json timed_doc = results_document({timed_run}), untimed_doc = results_document({passing("hc_post/a")});
  const auto timed_records = records_from_results(timed_doc);
  ASSERT_EQ(timed_records.size(), 1u);
  // Both runs stamped with one device, as on a GPU machine (a CPU timing names the CPU model instead).
  Baseline b;
  b.path = dir_ / "hc_post.json";
  HistoryRecord old = timed_records[0];
  old.device = records_from_results(untimed_doc).at(0).device;
  old.commit = "old111";
  old.numerics.at("out vs ref:fp64").max_ulp = 7;
  b.records[baseline_key(old)] = old;
  write_baseline(b);

  const UpdateSummary s = update_baselines(dir_, untimed_doc, "tester", "numbers only");
  ASSERT_EQ(s.kept_timings.size(), 1u);
  EXPECT_CONTAINS(s.kept_timings[0], "hc_post/a|cpu:v1|fwd (timed at old111)");
  const Baseline back = read_baseline(b.path);
  const HistoryRecord& kept = back.records.at(baseline_key(old));
  EXPECT_EQ(kept.n, old.n);
  EXPECT_EQ(kept.median_ms, old.median_ms);
  EXPECT_EQ(kept.numerics.at("out vs ref:fp64").max_ulp, 0) << "the numbers are the new run's";
  EXPECT_CONTAINS(back.updates.back().what, "1 untimed kept their earlier timings");

  Baseline untimed;
  HistoryRecord numbers_only = records_from_results(untimed_doc).at(0);
  numbers_only.device = timed_records[0].device;
  untimed.records[baseline_key(numbers_only)] = numbers_only;
  const auto cmp = compare_with_baselines(timed_doc, {{"hc_post", untimed}});
  ASSERT_EQ(cmp.size(), 1u);
  ASSERT_TRUE(cmp[0].perf);
  EXPECT_EQ(cmp[0].perf->verdict, Verdict::not_comparable);
  EXPECT_CONTAINS(cmp[0].perf->reason, "has no timing of this path");
}

TEST_F(BaselineFile, CorruptFilesNameFileAndField) {
  write("a.json", "{\"schema\": \"parity.baseline/1\", \"records\": [");
  write("b.json", R"({"schema": "parity.baseline/9", "records": []})");
  write("c.json", R"({"schema": "parity.baseline/1", "records": [], "overrides": {"hopper": {}}})");
  write("d.json", R"({"schema": "parity.baseline/1", "records": [],
                      "overrides": {"sm_90": {"hc_post/a|out": {"policy": "ulp<=2", "reason": "", "worst_observed": "2 ulp"}}}})");
  auto error_of = [&](const std::string& name) {
    try {
      read_baseline(dir_ / name);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_CONTAINS(error_of("a.json"), "a.json: baseline is not valid JSON");
  EXPECT_CONTAINS(error_of("b.json"), "b.json: field 'schema': is 'parity.baseline/9', expected 'parity.baseline/1'");
  EXPECT_CONTAINS(error_of("c.json"), "arch 'hopper' is not 'cpu' or 'sm_<compute capability>'");
  EXPECT_CONTAINS(error_of("d.json"), "field 'overrides.sm_90.hc_post/a|out.reason'");
}

TEST_F(BaselineFile, OverrideAppendsAnUpdate) {
  add_override(dir_, "sm_90", "hc_post/a", "out", {"ulp<=4", "wgmma order", "3 ulp", "#7"}, "tester");
  add_override(dir_, "sm_90", "hc_post/a", "out", {"ulp<=6", "wgmma order, larger K", "5 ulp", "#7"}, "tester");
  const Baseline b = read_baseline(dir_ / "hc_post.json");
  EXPECT_EQ(b.overrides.at("sm_90").at("hc_post/a|out").policy, "ulp<=6");
  ASSERT_EQ(b.updates.size(), 2u);
  EXPECT_CONTAINS(b.updates[1].what, "replaced override sm_90 hc_post/a|out: policy ulp<=6 (worst observed 5 ulp)");
  EXPECT_EQ(b.updates[1].who, "tester");
  EXPECT_THROW(add_override(dir_, "hopper", "hc_post/a", "out", {"ulp<=4", "r", "w", ""}, "t"), InputError);
  EXPECT_THROW(add_override(dir_, "sm_90", "hc_post/a", "out", {"ulp<=4", "", "w", ""}, "t"), InputError);
}

}  // namespace
}  // namespace parity
