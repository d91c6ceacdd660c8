#include <fmt/format.h>
#include <gtest/gtest.h>

#include <parity/error.hpp>
#include <parity/history.hpp>
#include <parity/report.hpp>

#include <filesystem>
#include <fstream>
#include <regex>
#include <string>

namespace parity {
namespace {

using json = nlohmann::json;

json metrics(std::vector<int64_t> ulp_hist, json heatmap = json::object()) {
  int64_t numel = 0, differ = 0;
  for (size_t b = 0; b < ulp_hist.size(); ++b) {
    numel += ulp_hist[b];
    if (b > 0) differ += ulp_hist[b];
  }
  return {{"dtype", "bf16"},      {"numel", numel},   {"bitwise_diff", differ}, {"nan_mismatch", 0},
          {"inf_mismatch", 0},    {"max_abs", 1e-3},  {"mean_abs", 1e-4},      {"max_ulp", differ ? 3 : 0},
          {"ulp_hist", ulp_hist}, {"heatmap", heatmap}};
}

json check(const std::string& tensor, bool pass, const std::string& summary, json m,
           const std::string& variant = "cpu:v1") {
  return {{"variant", variant}, {"tensor", tensor}, {"against", "ref:fp64"}, {"policy", "ulp<=1"},
          {"pass", pass},       {"summary", summary}, {"detail", pass ? "" : "Mismatched elements: 3 / 16"},
          {"metrics", m}};
}

json one_case(const std::string& id, const std::string& op, json checks, const std::string& status = "PASS") {
  return {{"case", id},
          {"op", op},
          {"covers", "covers <b>text</b>"},
          {"status", status},
          {"error", ""},
          {"seconds", 0.5},
          {"variants", json::array({{{"variant", "cpu:v1"}, {"status", status}, {"reason", ""}}})},
          {"checks", checks},
          {"guards", json::array({{{"variant", "cpu:v1"}, {"guard", "forward: inputs unchanged"}, {"pass", true},
                                   {"message", ""}}})}};
}

json document(json cases) {
  return {{"schema", "parity.results/1"},
          {"environment",
           {{"gpu", "none"}, {"libtorch", "2.11.0"}, {"commit", "abc123"}, {"build_type", "release"},
            {"date", "2025-01-01T00:00:00Z"}}},
          {"cases", cases}};
}

std::string render(const json& doc, const std::vector<HistoryRecord>& history = {}) {
  return render_html_report({ReportRun{doc, "test.json"}}, history);
}

size_t count(const std::string& text, const std::regex& re) {
  return size_t(std::distance(std::sregex_iterator(text.begin(), text.end(), re), std::sregex_iterator()));
}

size_t count(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + needle.size())) ++n;
  return n;
}

// The SVG elements of one class, each from its opening tag to its closing one.
std::vector<std::string> svgs(const std::string& html, const std::string& cls) {
  std::vector<std::string> out;
  const std::string open = "<svg class=\"" + cls + "\"";
  for (size_t at = html.find(open); at != std::string::npos; at = html.find(open, at + 1))
    out.push_back(html.substr(at, html.find("</svg>", at) + 6 - at));
  return out;
}

const json kGrid = {{"rows", 2}, {"cols", 2}, {"tensor_rows", 2}, {"tensor_cols", 2}, {"cells", {0.0, 1e-3, 0.0, 0.0}}};
const json kSmall = document(json::array({one_case(
    "hc_post/tiny", "hc_post",
    json::array({check("out", true, "max ulp 1 in bf16 (<= 1 allowed)", metrics({10, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, kGrid))}))}));

TEST(Report, MainTagsAreBalanced) {
  const std::string html = render(kSmall);
  EXPECT_TRUE(html.starts_with("<!doctype html>"));
  for (const std::string tag : {"html", "head", "body", "main", "section", "table", "thead", "tbody", "tr", "td",
                                "svg", "details", "figure", "script", "style", "h1", "h2", "h3", "p"}) {
    const std::regex opening("<" + tag + "[ >]"), closing("</" + tag + ">");
    EXPECT_EQ(count(html, opening), count(html, closing)) << tag;
    EXPECT_GT(count(html, opening), 0u) << tag;
  }
}

TEST(Report, EscapesCaseText) {
  json doc = kSmall;
  doc["cases"][0]["case"] = "hc_post/<script>alert(1)</script>";
  doc["cases"][0]["checks"][0]["detail"] = "</pre><img src=x onerror=alert(2)>";
  doc["cases"][0]["checks"][0]["pass"] = false;
  const std::string html = render(doc);
  EXPECT_EQ(count(html, "<script"), 1u) << "only the report's own sorting script";
  EXPECT_EQ(html.find("<img"), std::string::npos);
  EXPECT_NE(html.find("hc_post/&lt;script&gt;alert(1)&lt;/script&gt;"), std::string::npos);
  EXPECT_NE(html.find("covers &lt;b&gt;text&lt;/b&gt;"), std::string::npos);
}

TEST(Report, ReferencesNothingOutsideTheFile) {
  const std::string html = render(kSmall);
  EXPECT_EQ(html.find("http://"), std::string::npos);
  EXPECT_EQ(html.find("https://"), std::string::npos);
  EXPECT_NE(html.find("Content-Security-Policy"), std::string::npos);
}

TEST(Report, DrawsOneHistogramBarPerNonEmptyBucket) {
  const json doc = document(json::array({one_case(
      "hc_post/tiny", "hc_post",
      json::array({check("out", true, "max ulp 1 in bf16 (<= 1 allowed)", metrics({10, 0, 3, 0, 0, 0, 0, 0, 0, 0, 0, 2})),
                   check("grad/x", true, "max ulp 0 in bf16 (<= 1 allowed)", metrics({16, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}))}))}));
  const auto hists = svgs(render(doc), "hist");
  ASSERT_EQ(hists.size(), 2u);
  // Checks are listed in stage order: the op's output first, then the gradients.
  EXPECT_EQ(count(hists[0], "<rect"), 3u);
  EXPECT_EQ(count(hists[0], "class=\"bar bad\""), 1u);
  EXPECT_EQ(count(hists[1], "<rect"), 1u);
}

// The report draws what a document holds: a histogram with an entry that is no count is left out, not a failed report.
TEST(Report, AHistogramWithAnEntryThatIsNoCountIsNotDrawn) {
  json m = metrics({10, 0, 3, 0, 0, 0, 0, 0, 0, 0, 0, 2});
  m["ulp_hist"][11] = "x";
  const std::string html =
      render(document(json::array({one_case("hc_post/tiny", "hc_post", json::array({check("out", true, "", m)}))})));
  EXPECT_TRUE(svgs(html, "hist").empty());
  EXPECT_NE(html.find("no histogram"), std::string::npos);
}

TEST(Report, HeatmapShadesCellsAndMarksNonFiniteOnes) {
  const json hm = {{"rows", 2}, {"cols", 2}, {"tensor_rows", 4}, {"tensor_cols", 8}, {"cells", {0.0, 1e-3, nullptr, 1e-5}}};
  const json doc = document(json::array({one_case(
      "hc_post/tiny", "hc_post",
      json::array({check("out", false, "1 NaN mismatch; max ulp 3 in bf16 (<= 1 allowed)",
                         metrics({10, 0, 3, 0, 0, 0, 0, 0, 0, 0, 0, 1}, hm))}),
      "FAIL")}));
  const auto heat = svgs(render(doc), "heat");
  ASSERT_EQ(heat.size(), 1u);
  EXPECT_EQ(count(heat[0], "<path"), 4u);  // one per shade
  EXPECT_EQ(count(heat[0], "h-"), 4u);     // one subpath, one cell each
  EXPECT_EQ(count(heat[0], "class=\"h0\""), 1u);    // exact
  EXPECT_EQ(count(heat[0], "class=\"h8\""), 1u);    // the max
  EXPECT_EQ(count(heat[0], "class=\"hbad\""), 1u);  // NaN/Inf mismatch
}

TEST(Report, StageTableMarksTheFirstFailingStage) {
  const auto m = metrics({10, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0});
  // Listed out of stage order on purpose: hc_pre's stages are mixes -> gates (pre, post, comb) -> collapse.
  const json doc = document(json::array({one_case(
      "hc_pre/tiny", "hc_pre",
      json::array({check("collapsed", false, "max ulp 9 in bf16 (<= 1 allowed)", m),
                   check("pre", false, "max ulp 5 in bf16 (<= 1 allowed)", m),
                   check("mixes", true, "max ulp 1 in bf16 (<= 1 allowed)", m)}),
      "FAIL")}));
  const std::string html = render(doc);
  const size_t table = html.find("<table class=\"stages\"");
  ASSERT_NE(table, std::string::npos);
  const std::string stages = html.substr(table, html.find("</table>", table) - table);
  EXPECT_LT(stages.find("<td>mixes</td>"), stages.find("<td>pre</td>"));
  EXPECT_LT(stages.find("<td>pre</td>"), stages.find("<td>collapsed</td>"));
  EXPECT_EQ(count(stages, "first failing stage"), 1u);
  EXPECT_LT(stages.find("<td>pre</td>"), stages.find("first-fail"));
  EXPECT_GT(stages.find("<td>collapsed</td>"), stages.find("first-fail"));
}

TEST(Report, CasesTableShowsTheWorstCheckAgainstItsTolerance) {
  const std::string html = render(kSmall);
  EXPECT_NE(html.find("max ulp 1 / 1 allowed"), std::string::npos);
  EXPECT_NE(html.find("id=\"cases\""), std::string::npos);
  EXPECT_NE(html.find("id=\"summary\""), std::string::npos);
}

// The cases table sorts failing checks by how much of their tolerance they used: 9x above 2x (1e200 + ratio tied them).
TEST(Report, FailingChecksSortByTheirShareOfTheTolerance) {
  const auto m = metrics({10, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0});
  const json doc = document(json::array(
      {one_case("hc_post/twice", "hc_post", json::array({check("out", false, "max ulp 2 in bf16 (<= 1 allowed)", m)}), "FAIL"),
       one_case("hc_post/nine", "hc_post", json::array({check("out", false, "max ulp 9 in bf16 (<= 1 allowed)", m)}), "FAIL"),
       one_case("hc_post/ok", "hc_post", json::array({check("out", true, "max ulp 1 in bf16 (<= 1 allowed)", m)}))}));
  const std::string html = render(doc);
  const auto key = [&](const std::string& text) {
    const size_t at = html.rfind("data-sort=\"", html.find(">" + text + "<"));
    return std::stod(html.substr(at + 11));
  };
  EXPECT_GT(key("max ulp 9 / 1 allowed"), key("max ulp 2 / 1 allowed"));
  EXPECT_GT(key("max ulp 2 / 1 allowed"), key("max ulp 1 / 1 allowed"));
}

// bitwise(max_fraction=) allows some elements to differ: a check inside its budget uses part of it (run74's
// hc_post/v4flash_pack16k_hf was shown as "152 of 268435456 differ / 0 allowed", the case's worst check at +Inf).
TEST(Report, ABitwiseBudgetIsTheToleranceItsCheckUses) {
  const auto m = metrics({10, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0});
  const json doc = document(json::array({one_case(
      "hc_post/budget", "hc_post",
      json::array({check("out", true, "152 / 268435456 elements differ bitwise in bf16 (268 allowed)", m),
                   check("grad/x", true, "max ulp 1 in bf16 (<= 1 allowed)", m)}))}));
  const std::string html = render(doc);
  EXPECT_NE(html.find(">bitwise: 152 of 268435456 differ / 268 allowed<"), std::string::npos);
  const size_t cases = html.find("id=\"cases\"");
  ASSERT_NE(cases, std::string::npos);
  const std::string table = html.substr(cases, html.find("</table>", cases) - cases);
  EXPECT_NE(table.find(">max ulp 1 / 1 allowed<"), std::string::npos) << "the check nearer its bound is the worst";
  // A document from before the budget: any difference is past a bitwise policy's zero.
  const json old = document(json::array({one_case(
      "hc_post/old", "hc_post", json::array({check("out", false, "3 / 64 elements differ bitwise", m)}), "FAIL")}));
  EXPECT_NE(render(old).find(">bitwise: 3 of 64 differ / 0 allowed<"), std::string::npos);
}

HistoryRecord timed_record(const std::string& commit, double median, int i) {
  // Initialised, not assigned member by member: the assignments drew GCC 12's -Wstringop-overflow false positive.
  HistoryRecord r{.case_id = "hc_post/tiny",
                  .path = "cpu:v1",
                  .direction = "fwd",
                  .device = "cpu",
                  .commit = commit,
                  .build_type = "release",
                  .source_hash = "h",
                  .date = fmt::format("2025-01-{}", 10 + i),
                  .mode = "cpu"};
  r.n = 20;
  for (int k = 0; k < 20; ++k) r.samples_ms.push_back(median * (1 + 0.002 * (k % 5 - 2)));
  r.median_ms = median;
  r.q1_ms = median * 0.998;
  r.q3_ms = median * 1.002;
  r.min_ms = median * 0.996;
  r.rel_noise = 0.004;
  return r;
}

TEST(Report, TrendChartDrawsTheHistoryWithItsStep) {
  std::vector<HistoryRecord> history;
  for (int i = 0; i < 12; ++i) history.push_back(timed_record(fmt::format("c{}", i), i < 8 ? 1.0 : 1.3, i));
  const auto trends = svgs(render(kSmall, history), "trend");
  ASSERT_EQ(trends.size(), 1u);
  EXPECT_EQ(count(trends[0], "<polyline"), 1u);
  EXPECT_EQ(count(trends[0], "<circle"), 12u);
  EXPECT_GE(count(trends[0], "class=\"step up\""), 1u);
  EXPECT_GE(count(trends[0], "pt v-slower"), 1u);
}

TEST(Report, ReadsOnlyResultsDocuments) {
  const auto dir = std::filesystem::temp_directory_path() / "parity_test_report";
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "not_results.json") << R"({"schema": "parity.history/1"})";
  std::ofstream(dir / "broken.json") << "{";
  std::ofstream(dir / "ok.json") << kSmall.dump();
  EXPECT_EQ(read_results_document(dir / "ok.json").doc, kSmall);
  for (const char* name : {"not_results.json", "broken.json", "absent.json"}) {
    try {
      read_results_document(dir / name);
      ADD_FAILURE() << name;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
    }
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace parity
