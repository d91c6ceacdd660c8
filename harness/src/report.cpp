// HTML report writer. Everything is inline so the file opens offline and can be attached to a CI run.
#include <parity/compare.hpp>
#include <parity/report.hpp>

#include <fmt/format.h>

#include <fstream>
#include <sstream>

namespace parity {

namespace {

std::string esc(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '&': o += "&amp;"; break;
      case '"': o += "&quot;"; break;
      default: o += c;
    }
  }
  return o;
}

// ULP histogram as inline SVG bars (log-scaled counts so a single outlier bucket stays visible).
std::string ulp_histogram_svg(const nlohmann::json& hist) {
  const int w = 24, gap = 4, h = 60;
  std::ostringstream s;
  s << fmt::format(R"(<svg class="hist" width="{}" height="{}" role="img" aria-label="ULP histogram">)",
                   kUlpBuckets * (w + gap), h + 28);
  double max_log = 1;
  for (const auto& c : hist) max_log = std::max(max_log, std::log10(1.0 + c.get<double>()));
  for (int b = 0; b < kUlpBuckets && b < int(hist.size()); ++b) {
    const double v = hist[b].get<double>();
    const double bh = v > 0 ? std::max(2.0, h * std::log10(1.0 + v) / max_log) : 0;
    const int x = b * (w + gap);
    s << fmt::format(R"(<rect x="{}" y="{:.1f}" width="{}" height="{:.1f}" class="{}"><title>{} ulp: {}</title></rect>)",
                     x, h - bh, w, bh, b == kUlpBuckets - 1 ? "bad" : "bar", ulp_bucket_label(b), int64_t(v));
    s << fmt::format(R"(<text x="{}" y="{}" class="lbl">{}</text>)", x + w / 2, h + 12, ulp_bucket_label(b));
  }
  s << "</svg>";
  return s.str();
}

}  // namespace

void write_html_report(const nlohmann::json& doc, const std::filesystem::path& path) {
  std::ostringstream h;
  const auto& env = doc.at("environment");
  int counts[4] = {0, 0, 0, 0};
  for (const auto& c : doc.at("cases")) {
    const std::string s = c.at("status");
    counts[s == "PASS" ? 0 : s == "FAIL" ? 1 : s == "SKIP" ? 2 : 3]++;
  }
  h << R"(<!doctype html><html lang="en"><head><meta charset="utf-8"><title>Parity report</title><style>
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222}
table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;padding:3px 8px;text-align:left;vertical-align:top}
th{background:#f3f3f3}.PASS{color:#176f2c;font-weight:600}.FAIL,.ERROR{color:#b00020;font-weight:600}.SKIP{color:#8a6d00;font-weight:600}
pre{background:#f7f7f7;padding:6px;overflow:auto;max-width:100%}.hist .bar{fill:#4a78c2}.hist .bad{fill:#b00020}
.lbl{font-size:8px;text-anchor:middle}.summary span{margin-right:1.5em}details{margin:.3em 0}
</style></head><body><h1>Parity report</h1>)";
  h << fmt::format(R"(<p class="summary"><span class="PASS">{} pass</span><span class="FAIL">{} fail</span><span class="SKIP">{} skip</span><span class="ERROR">{} error</span></p>)",
                   counts[0], counts[1], counts[2], counts[3]);
  h << "<table id=\"environment\"><tr><th colspan=2>environment</th></tr>";
  for (const auto& [k, v] : env.items())
    h << fmt::format("<tr><td>{}</td><td>{}</td></tr>", esc(k), esc(v.is_string() ? v.get<std::string>() : v.dump()));
  h << "</table>";
  h << R"(<h2>Cases</h2><table id="cases"><tr><th>case</th><th>covers</th><th>status</th><th>variants</th></tr>)";
  for (const auto& c : doc.at("cases")) {
    std::string vs;
    for (const auto& v : c.at("variants"))
      vs += fmt::format(R"(<span class="{0}">{1} {0}</span> {2}<br>)", esc(v.at("status")), esc(v.at("variant")),
                        esc(v.at("reason")));
    h << fmt::format(R"(<tr><td><a href="#{0}">{0}</a></td><td>{1}</td><td class="{2}">{2}</td><td>{3}</td></tr>)",
                     esc(c.at("case")), esc(c.at("covers")), esc(c.at("status")), vs);
  }
  h << "</table>";
  for (const auto& c : doc.at("cases")) {
    h << fmt::format(R"(<h3 id="{0}">{0} <span class="{1}">{1}</span></h3>)", esc(c.at("case")), esc(c.at("status")));
    if (!c.at("error").get<std::string>().empty()) h << "<pre>" << esc(c.at("error")) << "</pre>";
    h << R"(<table><tr><th>variant</th><th>tensor</th><th>vs</th><th>policy</th><th>result</th><th>max ulp</th><th>max abs</th><th>ULP histogram</th></tr>)";
    for (const auto& k : c.at("checks")) {
      const bool pass = k.at("pass");
      h << fmt::format(R"(<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class="{}">{}</td><td>{}</td><td>{:.3g}</td><td>{}</td></tr>)",
                       esc(k.at("variant")), esc(k.at("tensor")), esc(k.at("against")), esc(k.at("policy")),
                       pass ? "PASS" : "FAIL", esc(k.at("summary")), k.at("metrics").at("max_ulp").get<int64_t>(),
                       k.at("metrics").at("max_abs").get<double>(), ulp_histogram_svg(k.at("metrics").at("ulp_hist")));
      if (!pass) h << "<tr><td colspan=8><pre>" << esc(k.at("detail")) << "</pre></td></tr>";
    }
    h << "</table><table><tr><th>variant</th><th>guard</th><th>result</th></tr>";
    for (const auto& g : c.at("guards"))
      h << fmt::format(R"(<tr><td>{}</td><td>{}</td><td class="{}">{}</td></tr>)", esc(g.at("variant")), esc(g.at("guard")),
                       g.at("pass").get<bool>() ? "PASS" : "FAIL",
                       g.at("pass").get<bool>() ? "PASS" : esc(g.at("message")));
    h << "</table>";
  }
  h << "</body></html>\n";
  if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path());
  std::ofstream out(path);
  out << h.str();
  if (!out) throw std::runtime_error("cannot write " + path.string());
}

}  // namespace parity
