// HTML report writer (report.hpp). Every chart is drawn here from the numbers of the results documents and the
// history store, as inline SVG, so the page needs nothing but itself.
#include <parity/compare.hpp>
#include <parity/error.hpp>
#include <parity/files.hpp>
#include <parity/history.hpp>
#include <parity/op.hpp>
#include <parity/report.hpp>
#include <parity/results.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <regex>

namespace parity {

namespace {

using json = nlohmann::json;

constexpr double kInf = std::numeric_limits<double>::infinity();

std::string esc(std::string_view s) {
  std::string o;
  o.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '&': o += "&amp;"; break;
      case '"': o += "&quot;"; break;
      case '\'': o += "&#39;"; break;
      default: o += c;
    }
  }
  return o;
}

// Field readers: a document from an older build may lack a field; it then reads as empty.
std::string str(const json& j, const char* key) {
  const auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : "";
}
double num(const json& j, const char* key) {
  const auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : 0.0;
}
const json& field(const json& j, const char* key) {
  static const json null;
  const auto it = j.find(key);
  return it != j.end() ? *it : null;
}
const json& items(const json& j, const char* key) {
  static const json empty = json::array();
  const auto it = j.find(key);
  return it != j.end() && it->is_array() ? *it : empty;
}

// Times below 0.1 ms read better in µs; `scale` picks the unit, so the ticks of one axis share it.
std::string format_ms(double ms, double scale) {
  if (scale > 0 && scale < 0.1) return fmt::format("{:.3g} µs", ms * 1e3);
  return fmt::format("{:.3g} ms", ms);
}
std::string format_ms(double ms) { return format_ms(ms, ms); }

// Counts above histogram bars get a few pixels: 262144 -> "262k".
std::string compact_count(int64_t n) {
  if (n < 1000) return std::to_string(n);
  if (n < 1000000) return fmt::format("{:.3g}k", double(n) / 1e3);
  return fmt::format("{:.3g}M", double(n) / 1e6);
}

std::string percent(double ratio) {
  if (std::isinf(ratio)) return "over";
  return fmt::format("{:.0f}%", 100 * ratio);
}

// ---- How close a check came to its tolerance ----------------------------------------------------------------

struct Usage {
  bool pass = true;
  double ratio = 0;  // measured / allowed; +Inf past a zero allowance or on a NaN/Inf mismatch
  std::string text;  // "max ulp 1 / 1 allowed"
};

double ratio_of(double measured, double allowed) {
  if (allowed > 0) return measured / allowed;
  return measured > 0 ? kInf : 0.0;
}

// The tightest bound a check's summary names. policy.cpp writes one "<metric> <value> [in <dtype>] (<= <bound>
// allowed" per bound it applies (naive_relative has two), and "<n> / <numel> elements differ bitwise in <dtype>
// (<budget> allowed)" for bitwise (documents from before bitwise(max_fraction=) lack the budget: it was 0).
Usage check_usage(const json& check) {
  Usage u;
  u.pass = check.value("pass", false);
  const json& m = field(check, "metrics");
  const auto nan_inf = int64_t(num(m, "nan_mismatch") + num(m, "inf_mismatch"));
  if (nan_inf > 0) {
    u.ratio = kInf;
    u.text = fmt::format("{} NaN/Inf mismatches", nan_inf);
    return u;
  }
  static const std::regex bound(R"(([a-z]+ [a-z]+) ([0-9][0-9.e+-]*)(?: in [a-z0-9]+)? \(<= ([0-9][0-9.e+-]*) allowed)");
  static const std::regex bitwise(R"((\d+) / (\d+) elements differ bitwise(?: in [a-z0-9]+ \((\d+) allowed\))?)");
  const std::string summary = str(check, "summary");
  bool found = false;
  for (auto it = std::sregex_iterator(summary.begin(), summary.end(), bound); it != std::sregex_iterator(); ++it) {
    const auto& match = *it;
    const double r = ratio_of(std::stod(match[2]), std::stod(match[3]));
    if (!found || r > u.ratio) {
      u.ratio = r;
      u.text = fmt::format("{} {} / {} allowed", match[1].str(), match[2].str(), match[3].str());
      found = true;
    }
  }
  std::smatch match;
  if (!found && std::regex_search(summary, match, bitwise)) {
    const std::string budget = match[3].matched ? match[3].str() : "0";
    u.ratio = ratio_of(std::stod(match[1]), std::stod(budget));
    u.text = fmt::format("bitwise: {} of {} differ / {} allowed", match[1].str(), match[2].str(), budget);
    found = true;
  }
  if (!found) {
    u.ratio = u.pass ? 0 : kInf;
    u.text = summary;
  }
  return u;
}

// A failing check is worse than any passing one; among equals, the one nearer its bound.
bool worse(const Usage& a, const Usage& b) {
  if (a.pass != b.pass) return !a.pass;
  return a.ratio > b.ratio;
}

// ---- Verdicts against the history ---------------------------------------------------------------------------

// One key of a run (case|path|direction) against the latest record of another run in the history.
struct Baselined {
  HistoryRecord candidate;
  std::optional<HistoryRecord> baseline;
  std::optional<PerfVerdict> perf;
  std::vector<NumericRegression> numeric;
};

bool timed(const HistoryRecord& r) { return r.n > 0 && r.median_ms > 0; }
bool same_run(const HistoryRecord& a, const HistoryRecord& b) { return a.commit == b.commit && a.date == b.date; }

// The latest other run of the candidate's key that `fits` (the history may already hold the run being reported,
// appended before the report was drawn: skipped).
template <typename Fits>
std::optional<HistoryRecord> baseline_of(const HistoryRecord& candidate, const std::vector<HistoryRecord>& history,
                                         Fits fits) {
  for (auto it = history.rbegin(); it != history.rend(); ++it)
    if (it->key() == candidate.key() && !same_run(*it, candidate) && fits(*it)) return *it;
  return std::nullopt;
}

std::vector<Baselined> baselined(const json& doc, const std::vector<HistoryRecord>& history) {
  std::vector<Baselined> out;
  const auto records = records_from_results(doc);
  for (const auto& candidate : records) {
    Baselined b;
    b.candidate = candidate;
    b.baseline = baseline_of(b.candidate, history, [](const HistoryRecord&) { return true; });
    if (b.baseline && timed(b.candidate) && timed(*b.baseline))
      b.perf = compare_perf_controlled(*b.baseline, b.candidate, controls_of(*b.baseline, history),
                                       controls_of(b.candidate, records));
    // Numbers only against numbers from the same platform and build type: another device's differ by design.
    if (const auto numbers = baseline_of(b.candidate, history, [&](const HistoryRecord& r) {
          return !r.numerics.empty() && same_numerics_setup(r, b.candidate);
        }))
      b.numeric = compare_numerics(*numbers, b.candidate);
    out.push_back(std::move(b));
  }
  return out;
}

bool regressed(const Baselined& b) { return (b.perf && b.perf->verdict == Verdict::slower) || !b.numeric.empty(); }
bool ambiguous(const Baselined& b) { return b.perf && b.perf->verdict == Verdict::ambiguous; }

std::string verdict_class(Verdict v) {
  switch (v) {
    case Verdict::slower: return "v-slower";
    case Verdict::faster: return "v-faster";
    case Verdict::same: return "v-same";
    case Verdict::ambiguous: return "v-ambiguous";
    case Verdict::not_comparable: return "v-nc";
  }
  return "";
}

// ---- The model the page is drawn from -----------------------------------------------------------------------

struct CaseView {
  int run = 0;  // index into the runs
  const json* c = nullptr;
  std::string anchor;
  std::vector<const Baselined*> verdicts;
  bool regressed = false, ambiguous = false;
  std::string trend_anchor;  // the first view of a case id draws its history; later runs link to it
};

struct Model {
  const std::vector<ReportRun>& runs;
  const std::vector<HistoryRecord>& history;
  std::vector<std::vector<Baselined>> verdicts;  // per run
  std::vector<CaseView> cases;
};

Model build_model(const std::vector<ReportRun>& runs, const std::vector<HistoryRecord>& history) {
  Model m{runs, history, {}, {}};
  for (const auto& r : runs) m.verdicts.push_back(naming_document(r.source, [&] { return baselined(r.doc, history); }));
  std::map<std::string, std::string> trended;  // case id -> anchor of the view that draws its trends
  for (size_t ri = 0; ri < runs.size(); ++ri) {
    int ci = 0;
    for (const auto& c : items(runs[ri].doc, "cases")) {
      CaseView v;
      v.run = int(ri);
      v.c = &c;
      v.anchor = fmt::format("r{}c{}", ri + 1, ci++);
      for (const auto& b : m.verdicts[ri])
        if (b.candidate.case_id == str(c, "case")) {
          v.verdicts.push_back(&b);
          v.regressed = v.regressed || regressed(b);
          v.ambiguous = v.ambiguous || ambiguous(b);
        }
      v.ambiguous = v.ambiguous && !v.regressed;
      v.trend_anchor = trended.try_emplace(str(c, "case"), v.anchor).first->second;
      m.cases.push_back(v);
    }
  }
  return m;
}

// ---- Charts --------------------------------------------------------------------------------------------------

// ULP histogram: one bar per non-empty bucket, heights log-scaled so a single outlier bucket stays visible.
std::string ulp_histogram_svg(const json& hist) {
  if (!hist.is_array() || hist.size() != size_t(kUlpBuckets) ||
      !std::all_of(hist.begin(), hist.end(), [](const json& c) { return c.is_number_integer() && c >= 0; }))
    return R"(<span class="muted">no histogram</span>)";
  static const char* const kShort[kUlpBuckets] = {"0",   "1",   "2",    "≤4",  "≤8",  "≤16",
                                                  "≤32", "≤64", "≤256", "≤1k", ">1k", "NaN"};
  constexpr int kBar = 20, kGap = 2, kPlot = 44, kTop = 10;
  const int width = kUlpBuckets * (kBar + kGap);
  double max_log = 0;
  for (const auto& c : hist) max_log = std::max(max_log, std::log10(1.0 + c.get<double>()));
  std::string s = fmt::format(
      R"(<svg class="hist" width="{0}" height="{1}" viewBox="0 0 {0} {1}" role="img" aria-label="ULP histogram">)",
      width, kTop + kPlot + 12);
  for (int b = 0; b < kUlpBuckets; ++b) {
    const auto count = hist[b].get<int64_t>();
    const int x = b * (kBar + kGap);
    if (count > 0) {
      const double h = std::max(2.0, kPlot * std::log10(1.0 + double(count)) / max_log);
      const char* cls = b == 0 ? "bar exact" : b == kUlpBuckets - 1 ? "bar bad" : "bar";
      s += fmt::format(R"(<rect x="{}" y="{:.1f}" width="{}" height="{:.1f}" class="{}"><title>{} ulp: {}</title></rect>)",
                       x, kTop + kPlot - h, kBar, h, cls, ulp_bucket_label(b), count);
      s += fmt::format(R"(<text x="{}" y="{:.1f}" class="cnt">{}</text>)", x + kBar / 2, kTop + kPlot - h - 2,
                       compact_count(count));
    }
    s += fmt::format(R"(<text x="{}" y="{}" class="lbl">{}</text>)", x + kBar / 2, kTop + kPlot + 10, kShort[b]);
  }
  s += fmt::format(R"(<line x1="0" x2="{}" y1="{}" y2="{}" class="axis"/></svg>)", width, kTop + kPlot, kTop + kPlot);
  return s;
}

// Heatmap shade of a cell: 0 exact, 1..8 over the three decades below the grid's max (log scale), -1 NaN/Inf.
int heat_level(const json& cell, double vmax) {
  if (!cell.is_number()) return -1;
  const double v = cell.get<double>();
  if (v <= 0 || vmax <= 0) return 0;
  const double decades_below = std::log10(vmax / v);
  return 1 + std::clamp(int(std::floor((3.0 - decades_below) / 3.0 * 8.0)), 0, 7);
}

// Error heatmap: the metrics' grid of max |actual - expected| over the tensor viewed as [rows, last dim]. One
// path per shade, runs of equal shade in a row one subpath: a noisy 32x32 grid stays a few kilobytes.
std::string heatmap_svg(const json& hm) {
  const auto rows = int64_t(num(hm, "rows")), cols = int64_t(num(hm, "cols"));
  const json& cells = field(hm, "cells");
  if (rows <= 0 || cols <= 0 || !cells.is_array() || cells.size() != size_t(rows * cols))
    return R"(<span class="muted">no heatmap</span>)";
  const int px = int(std::clamp<int64_t>(128 / std::max(rows, cols), 3, 16));
  double vmax = 0;
  for (const auto& c : cells)
    if (c.is_number()) vmax = std::max(vmax, c.get<double>());
  std::map<int, std::string> paths;  // shade -> subpaths
  for (int64_t r = 0; r < rows; ++r) {
    int64_t start = 0;
    for (int64_t c = 1; c <= cols; ++c) {
      const int level = heat_level(cells[r * cols + start], vmax);
      if (c < cols && heat_level(cells[r * cols + c], vmax) == level) continue;
      const int64_t w = (c - start) * px;
      paths[level] += fmt::format("M{} {}h{}v{}h-{}z", start * px, r * px, w, px, w);
      start = c;
    }
  }
  const double cell_rows = num(hm, "tensor_rows") / double(rows), cell_cols = num(hm, "tensor_cols") / double(cols);
  std::string s = fmt::format(
      R"(<svg class="heat" width="{0}" height="{1}" viewBox="0 0 {0} {1}" role="img" aria-label="error heatmap">)"
      R"(<title>max |a-e| per cell of {2:.4g} x {3:.4g} elements of the [{4:.0f}, {5:.0f}] view; max {6:.3g})"
      R"(</title>)",
      cols * px, rows * px, cell_rows, cell_cols, num(hm, "tensor_rows"), num(hm, "tensor_cols"), vmax);
  for (const auto& [level, d] : paths)
    s += fmt::format(R"(<path class="{}" d="{}"/>)", level < 0 ? "hbad" : fmt::format("h{}", level), d);
  s += "</svg>";
  std::string scale = vmax > 0 ? fmt::format("max {:.2e}, log scale over 3 decades", vmax) : "no finite error";
  if (paths.contains(-1)) scale += "; purple: NaN/Inf mismatch";
  return fmt::format(R"(<figure class="heatfig">{}<figcaption>{}; cell {:.3g}×{:.3g}</figcaption></figure>)", s, scale,
                     cell_rows, cell_cols);
}

// Linear or logarithmic map of [lo, hi] onto [a, b] pixels.
struct Scale {
  double lo, hi, a, b;
  bool log = false;
  double operator()(double v) const {
    if (hi <= lo) return (a + b) / 2;
    const double t = log ? std::log(std::max(v, lo) / lo) / std::log(hi / lo) : (v - lo) / (hi - lo);
    return a + t * (b - a);
  }
};

// Time against what bounds it, per direction: the roofline floor (the op's bytes at the measured copy
// bandwidth: what moving its data once costs), each path's median (bar) with [q1, q3] (whisker), and eager.
std::string perf_bars_svg(const json& perf, const std::string& direction,
                          const std::map<std::string, const Baselined*>& verdict_of) {
  struct Row {
    std::string label, cls, note;
    double median = 0, q1 = 0, q3 = 0;
  };
  std::vector<Row> rows;
  const double copy_gbps = num(field(perf, "ceilings"), "copy_gbps");
  double bytes = 0;
  std::vector<Row> paths;
  std::optional<Row> eager;
  for (const auto& e : items(perf, "entries")) {
    if (str(e, "direction") != direction) continue;
    bytes = std::max(bytes, num(e, "bytes"));
    const std::string path = str(e, "path");
    Row r{path, path == "eager" ? "eager" : "path", "", num(e, "median_ms"), num(e, "q1_ms"), num(e, "q3_ms")};
    if (!str(e, "error").empty()) {
      r.note = "not timed: " + str(e, "error");
    } else {
      r.note = format_ms(r.median);
      if (num(e, "pct_copy_bw") > 0) r.note += fmt::format(" · {:.1f}% copy bw", num(e, "pct_copy_bw"));
      if (const double target = num(e, "target_pct_copy"); target > 0)
        r.note += fmt::format(" (target {:g}%: {})", target, num(e, "pct_copy_bw") < target ? "missed" : "met");
      if (path != "eager" && num(e, "speedup_vs_eager") > 0)
        r.note += fmt::format(" · {:.2f}× eager", num(e, "speedup_vs_eager"));
      if (auto it = verdict_of.find(path + "|" + direction); it != verdict_of.end() && it->second->perf)
        r.note += fmt::format(" · {} ×{:.3f} vs {}", verdict_name(it->second->perf->verdict),
                              it->second->perf->ratio, it->second->baseline->commit);
    }
    if (path == "eager")
      eager = r;
    else
      paths.push_back(r);
  }
  if (paths.empty() && !eager) return "";
  if (copy_gbps > 0 && bytes > 0) {
    const double floor_ms = bytes / (copy_gbps * 1e6);
    rows.push_back({"roofline floor", "floor",
                    fmt::format("{} · {:.3g} MB at {:.0f} GB/s", format_ms(floor_ms), bytes / 1e6, copy_gbps),
                    floor_ms, floor_ms, floor_ms});
  }
  std::sort(paths.begin(), paths.end(), [](const Row& a, const Row& b) { return a.label < b.label; });
  rows.insert(rows.end(), paths.begin(), paths.end());
  if (eager) rows.push_back(*eager);

  constexpr int kLabel = 110, kPlot = 300, kRow = 20, kNote = 600;
  double lo = kInf, hi = 0;
  for (const auto& r : rows)
    if (r.median > 0) {
      lo = std::min({lo, r.median, r.q1 > 0 ? r.q1 : r.median});
      hi = std::max({hi, r.median, r.q3});
    }
  // A fused path a hundred times faster than eager would be an invisible sliver on a linear axis.
  const bool log_axis = hi > 20 * lo;
  const Scale x = log_axis ? Scale{lo / 2, hi * 1.05, double(kLabel), double(kLabel + kPlot), true}
                           : Scale{0, hi > 0 ? hi : 1, double(kLabel), double(kLabel + kPlot)};
  const int height = int(rows.size()) * kRow + 20;
  std::string s = fmt::format(
      R"(<svg class="perf" width="{0}" height="{1}" viewBox="0 0 {0} {1}" role="img" aria-label="{2} time">)",
      kLabel + kPlot + kNote, height, direction);
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    const double y = 3 + double(i) * kRow;
    s += fmt::format(R"(<text x="{}" y="{:.1f}" class="rl">{}</text>)", kLabel - 6, y + 13, esc(r.label));
    if (r.median > 0) {
      s += fmt::format(R"(<rect x="{}" y="{:.1f}" width="{:.1f}" height="{}" class="pb {}"/>)", kLabel, y + 3,
                       x(r.median) - kLabel, kRow - 6, r.cls);
      if (r.q3 > r.q1)
        s += fmt::format(R"(<line x1="{:.1f}" x2="{:.1f}" y1="{:.1f}" y2="{:.1f}" class="whisker"/>)", x(r.q1),
                         x(r.q3), y + kRow / 2.0, y + kRow / 2.0);
    }
    s += fmt::format(R"(<text x="{}" y="{:.1f}" class="note">{}</text>)", kLabel + kPlot + 8, y + 13, esc(r.note));
  }
  s += fmt::format(R"(<text x="{}" y="{}" class="scale">{} scale, {} to {}; whiskers: [q1, q3]</text></svg>)", kLabel,
                   height - 3, log_axis ? "log" : "linear", format_ms(x.lo), format_ms(x.hi));
  return s;
}

// One timed path of a case over the history, on one device in one timing mode (other devices or modes are other
// series: their times do not compare): its records in append order, the order commits were measured in.
struct Series {
  std::string path, direction, device, mode;
  std::vector<HistoryRecord> records;
};

// The history's timed records of a case, with the reported runs' records appended where the history lacks them.
std::vector<Series> series_of(const std::string& case_id, const Model& m) {
  std::vector<Series> out;
  auto add = [&](const HistoryRecord& r) {
    if (r.case_id != case_id || !timed(r)) return;
    auto it = std::find_if(out.begin(), out.end(), [&](const Series& s) {
      return s.path == r.path && s.direction == r.direction && s.device == r.device && s.mode == r.mode;
    });
    if (it == out.end()) it = out.insert(out.end(), Series{r.path, r.direction, r.device, r.mode, {}});
    if (std::none_of(it->records.begin(), it->records.end(), [&](const HistoryRecord& h) { return same_run(h, r); }))
      it->records.push_back(r);
  };
  for (const auto& r : m.history) add(r);
  for (const auto& run : m.verdicts)
    for (const auto& b : run) add(b.candidate);
  return out;
}

// Medians over the records (band: [q1, q3]); each point colored by its verdict against the record before it (with
// the eager records of `history` as the control), detected steps drawn where a new level starts (red when the level
// rose past 5%: asv's regression rule).
std::string trend_svg(const Series& series, const std::vector<HistoryRecord>& history) {
  constexpr int kLeft = 64, kRight = 36, kTop = 12, kPlot = 130, kWidth = 640, kBottom = 34;
  const auto& rec = series.records;
  const size_t n = rec.size();
  double lo = kInf, hi = 0;
  for (const auto& r : rec) {
    lo = std::min({lo, r.q1_ms > 0 ? r.q1_ms : r.median_ms, r.median_ms});
    hi = std::max({hi, r.q3_ms, r.median_ms});
  }
  const double pad = std::max((hi - lo) * 0.1, hi * 0.02);
  const Scale y{std::max(0.0, lo - pad), hi + pad, double(kTop + kPlot), double(kTop)};
  const Scale x{0, double(std::max<size_t>(n, 2) - 1), double(kLeft), double(kWidth - kRight)};
  std::string s = fmt::format(
      R"(<svg class="trend" width="{0}" height="{1}" viewBox="0 0 {0} {1}" role="img" aria-label="trend of {2} {3}">)",
      kWidth, kTop + kPlot + kBottom, esc(series.path), esc(series.direction));
  s += fmt::format(R"(<rect x="{}" y="{}" width="{}" height="{}" class="plotbg"/>)", kLeft, kTop,
                    kWidth - kLeft - kRight, kPlot);
  for (int t = 0; t <= 2; ++t) {
    const double v = y.lo + (y.hi - y.lo) * t / 2.0;
    s += fmt::format(R"(<line x1="{}" x2="{}" y1="{:.1f}" y2="{:.1f}" class="grid"/>)", kLeft, kWidth - kRight, y(v),
                      y(v));
    s += fmt::format(R"(<text x="{}" y="{:.1f}" class="ytick">{}</text>)", kLeft - 4, y(v) + 3, format_ms(v, y.hi));
  }
  std::string band_top, band_bottom, line;
  for (size_t i = 0; i < n; ++i) {
    band_top += fmt::format("{:.1f},{:.1f} ", x(double(i)), y(rec[i].q3_ms > 0 ? rec[i].q3_ms : rec[i].median_ms));
    band_bottom = fmt::format("{:.1f},{:.1f} ", x(double(i)), y(rec[i].q1_ms > 0 ? rec[i].q1_ms : rec[i].median_ms)) +
                  band_bottom;
    line += fmt::format("{:.1f},{:.1f} ", x(double(i)), y(rec[i].median_ms));
  }
  s += fmt::format(R"(<polygon points="{}{}" class="band"/>)", band_top, band_bottom);
  s += fmt::format(R"(<polyline points="{}" class="median"/>)", line);

  std::vector<double> medians, noise;
  for (const auto& r : rec) {
    medians.push_back(r.median_ms);
    noise.push_back((r.q3_ms - r.q1_ms) / 2);  // asv's error of a median: half the interquartile range
  }
  for (const Step& st : detect_steps(medians, noise)) {
    const double gx = x(double(st.index) - 0.5);
    const double change = st.before > 0 ? st.after / st.before - 1 : 0;
    const char* dir = change > 0.05 ? "up" : change < -0.05 ? "down" : "flat";
    s += fmt::format(R"(<line x1="{0:.1f}" x2="{0:.1f}" y1="{1}" y2="{2}" class="step {3}"><title>step at {4}: {5} -> )"
                      R"({6}</title></line><text x="{7:.1f}" y="{8}" class="steplbl {3}">{9:+.1f}%</text>)",
                      gx, kTop, kTop + kPlot, dir, esc(rec[st.index].commit), format_ms(st.before),
                      format_ms(st.after), gx + 3, kTop + kPlot - 4, 100 * change);
  }
  for (size_t i = 0; i < n; ++i) {
    std::string cls = "pt", why = "first record";
    if (i > 0) {
      const PerfVerdict v =
          compare_perf_controlled(rec[i - 1], rec[i], controls_of(rec[i - 1], history), controls_of(rec[i], history));
      cls.append(" ").append(verdict_class(v.verdict));  // GCC 12 misreads " " + string&& (-Wstringop-overflow)
      why = fmt::format("{} ×{:.3f} vs {}: {}", verdict_name(v.verdict), v.ratio, rec[i - 1].commit, v.reason);
    }
    s += fmt::format(R"(<circle cx="{:.1f}" cy="{:.1f}" r="3.5" class="{}"><title>{} {} · median {} [{}, {}] n={})"
                      R"( · {}</title></circle>)",
                      x(double(i)), y(rec[i].median_ms), cls, esc(rec[i].commit), esc(rec[i].date),
                      format_ms(rec[i].median_ms), format_ms(rec[i].q1_ms), format_ms(rec[i].q3_ms), rec[i].n, esc(why));
  }
  const size_t every = std::max<size_t>(1, (n + 7) / 8);
  for (size_t i = 0; i < n; i += every)
    s += fmt::format(R"(<text x="{:.1f}" y="{}" class="xtick">{}</text>)", x(double(i)), kTop + kPlot + 14,
                      esc(rec[i].commit.substr(0, 8)));
  s += fmt::format(R"(<text x="{}" y="{}" class="axislbl">records in append order (commit)</text></svg>)",
                    (kLeft + kWidth) / 2, kTop + kPlot + 30);
  return s;
}

// ---- Tables --------------------------------------------------------------------------------------------------

// The tensors of a case in stage order: the op's outputs stage by stage, then its input gradients; tensors the
// registry does not name (a document from another build) follow in the order the checks name them.
struct StageRow {
  std::string stage, tensor;
};

std::vector<StageRow> stage_rows(const json& c) {
  std::vector<StageRow> rows;
  auto add = [&](const std::string& stage, const std::string& tensor) {
    if (std::none_of(rows.begin(), rows.end(), [&](const StageRow& r) { return r.tensor == tensor; }))
      rows.push_back({stage, tensor});
  };
  const Registry& reg = Registry::global();
  if (reg.has_op(str(c, "op"))) {
    const Op& op = reg.op(str(c, "op"));
    for (const Stage& st : op.stages)
      for (const auto& t : st.outputs) add(st.name, t);
    for (const auto& t : op.outputs) add("", t);
    for (const auto& g : op.grad_inputs) add("backward", "grad/" + g);
  }
  for (const auto& k : items(c, "checks")) {
    const std::string t = str(k, "tensor");
    add(t.starts_with("grad/") ? "backward" : "", t);
  }
  std::erase_if(rows, [&](const StageRow& r) {
    return std::none_of(items(c, "checks").begin(), items(c, "checks").end(),
                        [&](const json& k) { return str(k, "tensor") == r.tensor; });
  });
  return rows;
}

// The columns of the stage table: each (variant, against) pair in the order the checks first name it.
std::vector<std::pair<std::string, std::string>> comparisons(const json& c) {
  std::vector<std::pair<std::string, std::string>> cols;
  for (const auto& k : items(c, "checks")) {
    std::pair<std::string, std::string> p{str(k, "variant"), str(k, "against")};
    if (std::find(cols.begin(), cols.end(), p) == cols.end()) cols.push_back(p);
  }
  return cols;
}

const json* find_check(const json& c, const std::string& variant, const std::string& against,
                       const std::string& tensor) {
  for (const auto& k : items(c, "checks"))
    if (str(k, "variant") == variant && str(k, "against") == against && str(k, "tensor") == tensor) return &k;
  return nullptr;
}

// Outputs in stage order against every comparison; the first failing stage of each column is marked, so a reader
// sees where a divergence starts rather than every output it spreads to.
std::string stage_table(const json& c) {
  const auto rows = stage_rows(c);
  const auto cols = comparisons(c);
  if (rows.empty()) return "";
  std::string h = R"(<table class="stages"><thead><tr><th>stage</th><th>tensor</th>)";
  for (const auto& [variant, against] : cols)
    h += fmt::format("<th>{}<br><span class=\"muted\">vs {}</span></th>", esc(variant), esc(against));
  h += "</tr></thead><tbody>";
  std::vector<bool> diverged(cols.size(), false);
  for (const auto& row : rows) {
    h += fmt::format("<tr><td>{}</td><td>{}</td>", esc(row.stage), esc(row.tensor));
    for (size_t i = 0; i < cols.size(); ++i) {
      const json* k = find_check(c, cols[i].first, cols[i].second, row.tensor);
      if (!k) {
        h += R"(<td class="muted">—</td>)";
        continue;
      }
      const Usage u = check_usage(*k);
      const bool first = !u.pass && !diverged[i];
      diverged[i] = diverged[i] || !u.pass;
      const json& m = field(*k, "metrics");
      // 0 ulp with a non-zero error: correctly rounded against a wider reference, not exact.
      const std::string metric = num(m, "bitwise_diff") == 0 && num(m, "max_abs") == 0
                                     ? "exact"
                                     : fmt::format("{:.0f} ulp · {:.2e}", num(m, "max_ulp"), num(m, "max_abs"));
      h += fmt::format(R"(<td class="{}{}" title="{}">{}<br><span class="small">{} of tol{}</span></td>)",
                       u.pass ? "PASS" : "FAIL", first ? " first-fail" : "", esc(str(*k, "summary")), metric,
                       percent(u.ratio), first ? " · first failing stage" : "");
    }
    h += "</tr>";
  }
  return h + "</tbody></table>";
}

// Every check in stage order with its histogram and heatmap; failing checks keep their mismatch report.
std::string checks_table(const json& c) {
  const auto rows = stage_rows(c);
  std::vector<const json*> checks;
  for (const auto& k : items(c, "checks")) checks.push_back(&k);
  auto rank = [&](const json* k) {
    const auto it = std::find_if(rows.begin(), rows.end(), [&](const StageRow& r) { return r.tensor == str(*k, "tensor"); });
    return it - rows.begin();
  };
  std::stable_sort(checks.begin(), checks.end(), [&](const json* a, const json* b) { return rank(a) < rank(b); });
  std::string h =
      R"(<table class="checks"><thead><tr><th>tensor</th><th>variant</th><th>vs</th><th>policy</th><th>result</th>)"
      R"(<th>ULP histogram</th><th>error heatmap</th></tr></thead><tbody>)";
  for (const json* k : checks) {
    const Usage u = check_usage(*k);
    const json& m = field(*k, "metrics");
    h += fmt::format(
        R"(<tr><td>{}</td><td>{}</td><td>{}</td><td><code>{}</code></td><td class="{}">{}<br><span class="small">{}</span></td>)"
        R"(<td>{}</td><td>{}</td></tr>)",
        esc(str(*k, "tensor")), esc(str(*k, "variant")), esc(str(*k, "against")), esc(str(*k, "policy")),
        u.pass ? "PASS" : "FAIL", esc(u.text), esc(str(*k, "summary")), ulp_histogram_svg(field(m, "ulp_hist")),
        heatmap_svg(field(m, "heatmap")));
    if (!u.pass) h += fmt::format(R"(<tr><td colspan="7"><pre>{}</pre></td></tr>)", esc(str(*k, "detail")));
  }
  return h + "</tbody></table>";
}

std::string guards_table(const json& c) {
  if (items(c, "guards").empty()) return "";
  std::string h = R"(<table class="guards"><thead><tr><th>variant</th><th>guard</th><th>result</th></tr></thead><tbody>)";
  for (const auto& g : items(c, "guards")) {
    const bool pass = g.value("pass", false);
    h += fmt::format(R"(<tr><td>{}</td><td>{}</td><td class="{}">{}</td></tr>)", esc(str(g, "variant")),
                     esc(str(g, "guard")), pass ? "PASS" : "FAIL", pass ? "PASS" : esc(str(g, "message")));
  }
  return h + "</tbody></table>";
}

std::optional<Usage> worst_check(const json& c) {
  std::optional<Usage> worst;
  for (const auto& k : items(c, "checks")) {
    const Usage u = check_usage(k);
    if (!worst || worse(u, *worst)) worst = u;
  }
  return worst;
}

// The worst-check cell: sorts failing checks above passing ones, each by how much of its tolerance it used.
std::string worst_cell(const std::optional<Usage>& w) {
  if (!w) return R"(<td class="muted" data-sort="-1">no checks</td>)";
  // atan keeps the order of any two ratios within a status (1e200 + ratio tied every finite failure).
  const double key = (w->pass ? 0 : 4) + (std::isinf(w->ratio) ? 2 : std::atan(w->ratio));
  return fmt::format(R"(<td class="{}" data-sort="{}">{}</td>)", w->pass ? "PASS" : "FAIL", key, esc(w->text));
}

int status_rank(const std::string& s) { return s == "ERROR" ? 0 : s == "FAIL" ? 1 : s == "SKIP" ? 3 : 2; }

std::string verdict_text(const Baselined& b) {
  std::string t;
  if (b.perf) t = fmt::format("{} ×{:.3f}", verdict_name(b.perf->verdict), b.perf->ratio);
  for (const auto& r : b.numeric)
    t += fmt::format("{}{} {} {:.3g}→{:.3g}", t.empty() ? "" : "; ", r.tensor, r.metric, r.baseline, r.candidate);
  return t;
}

std::string cases_table(const Model& m) {
  std::string h =
      R"(<table id="cases" class="sortable"><thead><tr><th>case</th><th>run</th><th>status</th><th>variants</th>)"
      R"(<th>worst check vs tolerance</th><th>perf median</th><th>vs baseline</th><th>seconds</th></tr></thead><tbody>)";
  for (const auto& v : m.cases) {
    const json& c = *v.c;
    std::string variants;
    for (const auto& x : items(c, "variants"))
      variants += fmt::format(R"(<span class="{0}">{1}</span> )", esc(str(x, "status")), esc(str(x, "variant")));
    std::string perf;
    double first_median = -1;
    for (const auto& e : items(field(c, "perf"), "entries")) {
      if (str(e, "path") == "eager" || num(e, "median_ms") <= 0) continue;
      if (first_median < 0) first_median = num(e, "median_ms");
      perf += fmt::format("{} {} {}<br>", esc(str(e, "path")), esc(str(e, "direction")), format_ms(num(e, "median_ms")));
    }
    std::string vs;
    int vs_rank = 0;
    for (const Baselined* b : v.verdicts) {
      const std::string t = verdict_text(*b);
      if (t.empty()) continue;
      const std::string cls = regressed(*b) ? "v-slower" : b->perf ? verdict_class(b->perf->verdict) : "";
      vs += fmt::format(R"(<span class="{}">{} {}: {}</span><br>)", cls, esc(b->candidate.path),
                        esc(b->candidate.direction), esc(t));
      vs_rank = std::max(vs_rank, regressed(*b) ? 2 : ambiguous(*b) ? 1 : 0);
    }
    const std::string status = str(c, "status");
    const std::string shown_status = v.regressed ? status + " · REGRESSED" : v.ambiguous ? status + " · AMBIGUOUS" : status;
    h += fmt::format(
        R"(<tr><td><a href="#{}">{}</a></td><td data-sort="{}">{}</td><td class="{}" data-sort="{}">{}</td><td>{}</td>)"
        R"({}<td data-sort="{}">{}</td><td data-sort="{}">{}</td>)"
        R"(<td data-sort="{:.3f}">{:.2f}</td></tr>)",
        v.anchor, esc(str(c, "case")), v.run + 1, v.run + 1, esc(status), status_rank(status) * 4 - vs_rank,
        esc(shown_status), variants, worst_cell(worst_check(c)), first_median, perf, -vs_rank,
        vs.empty() ? R"(<span class="muted">no baseline</span>)" : vs, num(c, "seconds"), num(c, "seconds"));
  }
  return h + "</tbody></table>";
}

std::string split_gpu(const std::string& gpu, bool driver) {
  const auto comma = gpu.rfind(", ");
  if (comma == std::string::npos) return driver ? "" : gpu;
  return driver ? gpu.substr(comma + 2) : gpu.substr(0, comma);
}

std::string environment_table(const Model& m) {
  std::string h = R"(<table id="environment"><thead><tr><th></th>)";
  for (size_t i = 0; i < m.runs.size(); ++i)
    h += fmt::format(R"(<th>run {}<br><span class="muted">{}</span></th>)", i + 1, esc(m.runs[i].source));
  h += "</tr></thead><tbody>";
  using Getter = std::string (*)(const json&);
  const std::pair<const char*, Getter> rows[] = {
      {"GPU", [](const json& e) { return split_gpu(str(e, "gpu"), false); }},
      {"driver", [](const json& e) { return split_gpu(str(e, "gpu"), true); }},
      {"CUDA", [](const json& e) { return str(e, "cuda_runtime"); }},
      {"LibTorch", [](const json& e) { return str(e, "libtorch"); }},
      {"commit", [](const json& e) { return str(e, "commit") + (e.value("dirty", false) ? " (dirty)" : ""); }},
      {"build type", [](const json& e) { return str(e, "build_type"); }},
      {"host", [](const json& e) { return str(e, "host"); }},
      {"date", [](const json& e) { return str(e, "date"); }},
  };
  for (const auto& [name, get] : rows) {
    h += fmt::format("<tr><th>{}</th>", name);
    for (const auto& r : m.runs) h += fmt::format("<td>{}</td>", esc(get(field(r.doc, "environment"))));
    h += "</tr>";
  }
  return h + "</tbody></table>";
}

std::string summary_section(const Model& m) {
  std::map<std::string, int> n;
  for (const auto& v : m.cases) {
    n[str(*v.c, "status")]++;
    n["REGRESSED"] += v.regressed;
    n["AMBIGUOUS"] += v.ambiguous;
  }
  const std::pair<const char*, const char*> counters[] = {
      {"PASS", "pass"},           {"FAIL", "fail"},
      {"REGRESSED", "regressed"}, {"AMBIGUOUS", "ambiguous"},
      {"SKIP", "skip"},           {"ERROR", "error"}};
  std::string h = R"(<section id="summary"><h2>Summary</h2><div class="counts">)";
  for (const auto& [key, label] : counters)
    h += fmt::format(R"(<div class="count {}"><b>{}</b>{}</div>)", key, n[key], label);
  h += "</div>";
  h += fmt::format(R"(<p class="muted">{} cases from {} results document(s); {} history records. Regressed: a SLOWER )"
                   R"(verdict or a grown max_ulp/max_abs against the latest other run in the history; ambiguous: an )"
                   R"(AMBIGUOUS verdict and no regression.</p>)",
                   m.cases.size(), m.runs.size(), m.history.size());
  h += environment_table(m);
  h += "<h3>Regressions</h3>";
  std::string list;
  for (const auto& v : m.cases)
    for (const Baselined* b : v.verdicts) {
      if (!regressed(*b) && !ambiguous(*b)) continue;
      list += fmt::format(R"(<li class="{}"><a href="#{}">{}</a> {} {} vs {} ({}): {}{}</li>)",
                          regressed(*b) ? "v-slower" : "v-ambiguous", v.anchor, esc(b->candidate.case_id),
                          esc(b->candidate.path), esc(b->candidate.direction), esc(b->baseline->commit),
                          esc(b->baseline->date), esc(verdict_text(*b)),
                          b->perf && !b->perf->reason.empty()
                              ? esc(" — " + b->perf->reason + (b->perf->next.empty() ? "" : "; next: " + b->perf->next))
                              : "");
    }
  if (!list.empty())
    h += "<ul class=\"regressions\">" + list + "</ul>";
  else
    h += m.history.empty() ? R"(<p class="muted">No history given: no verdicts.</p>)"
                           : R"(<p class="muted">No regression or ambiguous verdict against the history.</p>)";
  return h + "</section>";
}

std::string case_section(const CaseView& v, const Model& m) {
  const json& c = *v.c;
  const std::string status = str(c, "status");
  std::string h = fmt::format(R"(<section class="case" id="{}"><h3>{} <span class="{}">{}</span>{}</h3>)", v.anchor,
                              esc(str(c, "case")), esc(status), esc(status),
                              m.runs.size() > 1 ? fmt::format(R"( <span class="muted">run {}</span>)", v.run + 1) : "");
  h += fmt::format(R"(<p class="covers">{}</p>)", esc(str(c, "covers")));
  if (!str(c, "error").empty()) h += "<pre>" + esc(str(c, "error")) + "</pre>";
  for (const auto& x : items(c, "variants"))
    if (!str(x, "reason").empty())
      h += fmt::format(R"(<p><span class="{}">{} {}</span>: {}</p>)", esc(str(x, "status")), esc(str(x, "variant")),
                       esc(str(x, "status")), esc(str(x, "reason")));
  if (!items(c, "checks").empty()) {
    h += "<h4>Stages</h4>" + stage_table(c);
    // A passing case's checks fold away: its stage table already says how close each came to its tolerance.
    h += fmt::format("<details{}><summary>Checks: ULP histograms and error heatmaps</summary>{}</details>",
                     status == "PASS" ? "" : " open", checks_table(c));
    h += "<details><summary>Guards</summary>" + guards_table(c) + "</details>";
  }
  std::map<std::string, const Baselined*> verdict_of;
  for (const Baselined* b : v.verdicts) verdict_of[b->candidate.path + "|" + b->candidate.direction] = b;
  const json& perf = field(c, "perf");
  for (const char* direction : {"fwd", "bwd"})
    if (const std::string bars = perf_bars_svg(perf, direction, verdict_of); !bars.empty())
      h += fmt::format("<h4>Time {} vs roofline and eager</h4>{}", direction, bars);
  const auto series = series_of(str(c, "case"), m);
  if (v.trend_anchor != v.anchor && !series.empty())
    h += fmt::format(R"(<p class="muted">Trends of this case: <a href="#{}">above</a>.</p>)", v.trend_anchor);
  else
    for (const auto& s : series)
      h += fmt::format(R"(<h4>Trend: {} {} on {} <span class="muted">({}, {} records)</span></h4>{})", esc(s.path),
                       esc(s.direction), esc(s.device), esc(s.mode.empty() ? "mode not recorded" : s.mode),
                       s.records.size(), trend_svg(s, m.history));
  return h + "</section>";
}

constexpr const char* kStyle = R"(
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222;max-width:1500px}
h1{margin:.2em 0}h3{margin-top:1.8em;border-top:1px solid #ddd;padding-top:.6em}h4{margin:1em 0 .3em}
table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;padding:3px 8px;text-align:left;vertical-align:top}
th{background:#f3f3f3}table.sortable th{cursor:pointer}table.sortable th:hover{background:#e6e6e6}
.PASS{color:#176f2c;font-weight:600}.FAIL,.ERROR{color:#b00020;font-weight:600}.SKIP{color:#8a6d00;font-weight:600}
.muted{color:#777;font-weight:400}.small{font-size:11px;color:#555;font-weight:400}.covers{color:#444;margin:.2em 0}
pre{background:#f7f7f7;padding:6px;overflow:auto;max-width:100%;font-size:12px}
.counts{display:flex;gap:1em;margin:.5em 0}.count{border:1px solid #ccc;border-radius:6px;padding:.4em 1em;min-width:5em}
.count b{display:block;font-size:22px}.count.PASS b{color:#176f2c}.count.FAIL b,.count.ERROR b,.count.REGRESSED b{color:#b00020}
.count.AMBIGUOUS b{color:#8a5a00}.count.SKIP b{color:#8a6d00}
td.first-fail{outline:3px solid #b00020;outline-offset:-3px;background:#fde7ea}
.v-slower{color:#b00020;font-weight:600}.v-faster{color:#176f2c}.v-ambiguous{color:#8a5a00}.v-nc{color:#6a4c93}
svg text{font-family:system-ui,sans-serif}
.hist .bar{fill:#4a78c2}.hist .exact{fill:#3d9a5b}.hist .bad{fill:#b00020}.hist .lbl{font-size:8px;text-anchor:middle;fill:#444}
.hist .cnt{font-size:7px;text-anchor:middle;fill:#222}.axis{stroke:#888}
.heatfig{margin:0}.heatfig figcaption{font-size:10px;color:#555}.heat{border:1px solid #ccc}
.h0{fill:#f7f9fc}.h1{fill:#fff5c2}.h2{fill:#fee391}.h3{fill:#fec44f}.h4{fill:#fe9929}.h5{fill:#ec7014}.h6{fill:#cc4c02}
.h7{fill:#993404}.h8{fill:#662506}.hbad{fill:#7b1fa2}
.perf .rl{font-size:11px;text-anchor:end}.perf .note{font-size:11px;fill:#333}.pb.path{fill:#4a78c2}.pb.eager{fill:#9aa5b1}
.pb.floor{fill:#3d9a5b}.whisker{stroke:#222;stroke-width:1.5}.perf .scale{font-size:10px;fill:#666}
.trend .plotbg{fill:#fafbfc;stroke:#ddd}.trend .grid{stroke:#e3e3e3}.trend .ytick{font-size:10px;text-anchor:end;fill:#444}
.trend .xtick{font-size:9px;text-anchor:middle;fill:#444}.trend .axislbl{font-size:10px;text-anchor:middle;fill:#666}
.band{fill:#4a78c2;fill-opacity:.18;stroke:none}.median{fill:none;stroke:#4a78c2;stroke-width:1.6}
.pt{fill:#4a78c2;stroke:#fff}.pt.v-slower{fill:#b00020}.pt.v-faster{fill:#176f2c}.pt.v-ambiguous{fill:#fff;stroke:#8a5a00;stroke-width:1.5}
.pt.v-nc{fill:#6a4c93}.pt.v-same{fill:#4a78c2}
.step{stroke:#888;stroke-dasharray:4 3;stroke-width:1.3}.step.up{stroke:#b00020}.step.down{stroke:#176f2c}
.steplbl{font-size:10px;fill:#555;stroke:none}.steplbl.up{fill:#b00020}.steplbl.down{fill:#176f2c}
.legend span{margin-right:1.2em}details{margin:.4em 0}summary{cursor:pointer;color:#333}
)";

// Sorts a table by the clicked column: numbers by data-sort where a cell has it, text otherwise. The headers get
// their hint from the script, so a page whose script did not run does not promise sorting.
constexpr const char* kSortScript = R"(
(function () {
  function key(cell) {
    var v = cell.getAttribute('data-sort');
    return v !== null && v !== '' && !isNaN(v) ? parseFloat(v) : cell.textContent.trim().toLowerCase();
  }
  document.querySelectorAll('table.sortable').forEach(function (table) {
    table.querySelectorAll('thead th').forEach(function (th, col) {
      th.title = 'sort by this column';
      th.addEventListener('click', function () {
        var body = table.tBodies[0];
        var asc = th.getAttribute('data-dir') !== 'asc';
        th.setAttribute('data-dir', asc ? 'asc' : 'desc');
        Array.prototype.slice.call(body.rows).sort(function (a, b) {
          var x = key(a.cells[col]), y = key(b.cells[col]);
          return (x < y ? -1 : x > y ? 1 : 0) * (asc ? 1 : -1);
        }).forEach(function (row) { body.appendChild(row); });
      });
    });
  });
})();
)";

}  // namespace

ReportRun read_results_document(const std::filesystem::path& path) { return {read_results(path), path.string()}; }

std::string render_html_report(const std::vector<ReportRun>& runs, const std::vector<HistoryRecord>& history) {
  const Model m = build_model(runs, history);
  std::string h =
      R"(<!doctype html><html lang="en"><head><meta charset="utf-8">)"
      R"(<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'">)"
      R"(<meta name="viewport" content="width=device-width, initial-scale=1"><title>Parity report</title><style>)";
  h += kStyle;
  h += "</style></head><body><main><h1>Parity report</h1>";
  h += summary_section(m);
  h += R"(<section id="cases-section"><h2>Cases</h2><p class="muted">Click a column header to sort.</p>)";
  h += cases_table(m) + "</section>";
  h += R"(<section id="details"><h2>Per case</h2>)";
  for (const auto& v : m.cases) h += case_section(v, m);
  h += "</section></main><script>";
  h += kSortScript;
  h += "</script></body></html>\n";
  return h;
}

void write_html_report(const std::vector<ReportRun>& runs, const std::vector<HistoryRecord>& history,
                       const std::filesystem::path& path) {
  write_text_file(path, render_html_report(runs, history));
}

void write_html_report(const nlohmann::json& results_doc, const std::filesystem::path& path) {
  write_html_report({ReportRun{results_doc, "parity run"}}, {}, path);
}

}  // namespace parity
