// JSON results, the terminal table and the exit-code rule.
#include <parity/op.hpp>
#include <parity/error.hpp>
#include <parity/files.hpp>
#include <parity/history.hpp>
#include <parity/results.hpp>

#include <fmt/format.h>
#include <ATen/Version.h>
#include <torch/version.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>

namespace parity {

namespace {

std::string shell(const char* cmd) {
  std::string out;
  if (FILE* p = popen(cmd, "r")) {
    char buf[256];
    while (fgets(buf, sizeof buf, p)) out += buf;
    pclose(p);
  }
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return out;
}

}  // namespace

std::string cpuinfo_field(const std::string& field, const std::string& absent) {
  std::ifstream f("/proc/cpuinfo");
  for (std::string line; std::getline(f, line);)
    if (line.rfind(field, 0) == 0) {
      const auto start = line.find_first_not_of(" \t", line.find(':') + 1);
      return start == std::string::npos ? absent : line.substr(start);
    }
  return absent;
}

std::string cpu_platform() {
  return fmt::format("cpu {} {}", cpuinfo_field("vendor_id", "unknown-vendor"), at::get_cpu_capability());
}

nlohmann::json environment() {
  nlohmann::json env;
  env["libtorch"] = TORCH_VERSION;
  // A copy of the tree whose .git is not its own (a device machine gets the files of the commit, not its .git) is
  // told its commit through PARITY_COMMIT, and whether it holds uncommitted changes through PARITY_DIRTY=1.
  const char* commit = std::getenv("PARITY_COMMIT");
  const char* dirty = std::getenv("PARITY_DIRTY");
  env["commit"] = commit ? std::string(commit) : shell("git -C " PARITY_SOURCE_DIR " rev-parse --short=12 HEAD 2>/dev/null");
  env["dirty"] = commit ? dirty != nullptr && std::string(dirty) == "1"
                        : !shell("git -C " PARITY_SOURCE_DIR " status --porcelain --untracked-files=no 2>/dev/null").empty();
#ifdef NDEBUG
  env["build_type"] = "release";
#else
  env["build_type"] = "debug";
#endif
#ifdef PARITY_WITH_CUDA
  env["cuda_build"] = true;
#else
  env["cuda_build"] = false;
#endif
  env["gpu"] = cuda_available()
                   ? shell("nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1")
                   : "none";
  env["cuda_runtime"] = cuda_available() ? shell("nvidia-smi 2>/dev/null | grep -o 'CUDA Version: [0-9.]*' | head -1") : "";
  env["cpu"] = cpu_platform();
  env["host"] = shell("hostname");
  env["date"] = shell("date -u +%Y-%m-%dT%H:%M:%SZ");
  return env;
}

nlohmann::json to_json(const Metrics& m) {
  nlohmann::json j{{"dtype", m.dtype},           {"numel", m.numel},         {"bitwise_diff", m.bitwise_diff},
                   {"nan_mismatch", m.nan_mismatch}, {"inf_mismatch", m.inf_mismatch},
                   {"max_abs", m.max_abs},       {"mean_abs", m.mean_abs},   {"max_rel", m.max_rel},
                   {"mean_rel", m.mean_rel},     {"rel_l2", m.rel_l2},       {"cosine", m.cosine},
                   {"max_ulp", m.max_ulp},       {"mean_ulp", m.mean_ulp},   {"ulp_hist", m.ulp_hist},
                   {"abs_p50", m.abs_pct[0]},    {"abs_p90", m.abs_pct[1]},  {"abs_p99", m.abs_pct[2]},
                   {"abs_p999", m.abs_pct[3]},   {"max_abs_expected", m.max_abs_expected_value},
                   {"worst_abs_index", m.worst_abs_index}};
  nlohmann::json first = nlohmann::json::array();
  for (const auto& mm : m.first)
    first.push_back({{"index", mm.index}, {"actual", mm.actual}, {"expected", mm.expected}, {"ulp", mm.ulp}});
  j["first_mismatches"] = first;
  // JSON has no Inf: a cell holding a NaN or Inf mismatch is null. Three digits are all a heatmap shows, and
  // keep the grids from dominating the document.
  nlohmann::json cells = nlohmann::json::array();
  for (const double v : m.error_grid.cells)
    cells.push_back(std::isfinite(v) ? nlohmann::json(std::strtod(fmt::format("{:.3g}", v).c_str(), nullptr))
                                     : nlohmann::json());  // strtod: a subnormal cell is no error (stod threw)
  j["heatmap"] = {{"rows", m.error_grid.rows},
                  {"cols", m.error_grid.cols},
                  {"tensor_rows", m.error_grid.tensor_rows},
                  {"tensor_cols", m.error_grid.tensor_cols},
                  {"cells", cells}};
  return j;
}

nlohmann::json to_json(const CaseResult& r) {
  nlohmann::json j{{"case", r.case_id}, {"op", r.op},       {"covers", r.covers},
                   {"status", status_name(r.status)}, {"error", r.error}, {"seconds", r.seconds}};
  j["variants"] = nlohmann::json::array();
  for (const auto& v : r.variants)
    j["variants"].push_back({{"variant", v.variant}, {"status", status_name(v.status)}, {"reason", v.skip_reason}});
  j["checks"] = nlohmann::json::array();
  for (const auto& c : r.checks) {
    nlohmann::json cj{{"variant", c.variant}, {"tensor", c.tensor},          {"against", c.against},
                      {"policy", c.policy},   {"pass", c.result.pass},       {"summary", c.result.summary},
                      {"detail", c.result.detail}, {"metrics", to_json(c.result.metrics)}};
    if (c.result.naive_metrics) cj["naive_metrics"] = to_json(*c.result.naive_metrics);
    j["checks"].push_back(cj);
  }
  j["guards"] = nlohmann::json::array();
  for (const auto& g : r.guards)
    j["guards"].push_back({{"variant", g.variant}, {"guard", g.name}, {"pass", g.pass}, {"message", g.message}});
  if (r.perf) j["perf"] = to_json(*r.perf);
  // Each path's source, hashed by the build that ran it: a document judged by another build (a commit bisection
  // judges a worktree's runs) still attributes a change to the code that ran.
  const Registry& reg = Registry::global();
  const std::string family = reg.has_op(r.op) ? reg.op(r.op).family : r.op;
  nlohmann::json hashes = nlohmann::json::object();
  for (const auto& c : r.checks)
    if (!c.variant.empty()) hashes[c.variant] = source_hash(c.variant, family);
  if (r.perf)
    for (const auto& e : r.perf->entries) hashes[e.path] = source_hash(e.path, family);
  j["source_hashes"] = std::move(hashes);
  return j;
}

nlohmann::json results_document(const std::vector<CaseResult>& results) {
  nlohmann::json doc{{"schema", "parity.results/1"}, {"environment", environment()}};
  doc["cases"] = nlohmann::json::array();
  for (const auto& r : results) doc["cases"].push_back(to_json(r));
  return doc;
}

nlohmann::json read_results(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) throw InputError(fmt::format("{}: cannot read the results document", path.string()));
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw InputError(fmt::format("{}: not JSON: {}", path.string(), e.what()));
  }
  if (!doc.is_object() || doc.value("schema", "") != "parity.results/1")
    throw InputError(fmt::format("{}: field 'schema' is not \"parity.results/1\" (write one with parity run --json)",
                                 path.string()));
  if (!doc.contains("cases") || !doc["cases"].is_array())
    throw InputError(fmt::format("{}: field 'cases' is not an array", path.string()));
  return doc;
}

void write_json(const nlohmann::json& doc, const std::filesystem::path& path) {
  write_text_file(path, doc.dump(1) + "\n");
}

namespace {

// One row per timed path: where it stands against eager and the device's copy ceiling.
void print_perf(std::ostream& os, const CaseResult& r) {
  const PerfResult& p = *r.perf;
  // The CPU's ceilings time no bf16 product: "-" there.
  const std::string bf16 = p.ceilings.bf16_tflops > 0 ? fmt::format("{:.1f}", p.ceilings.bf16_tflops) : "-";
  os << fmt::format("\nperf {}  [{} on {}: copy {:.1f} GB/s, bf16 {} / fp32 {:.2f} TFLOP/s, measured {}]\n",
                    r.case_id, p.entries.empty() ? "-" : p.entries.front().timing.mode, p.ceilings.device,
                    p.ceilings.copy_gbps, bf16, p.ceilings.fp32_tflops, p.ceilings.measured);
  for (const auto& [k, v] : p.upstream) os << fmt::format("  upstream {}: {}\n", k, v);
  os << fmt::format("  {:<9} {:<4} {:>10} {:>7} {:>9} {:>9} {:>9} {:>9}  {}\n", "path", "dir", "median ms", "noise",
                    "GB/s", "%copy BW", "vs eager", "peak MB", "target");
  for (const auto& e : p.entries) {
    if (!e.error.empty()) {
      os << fmt::format("  {:<9} {:<4} ERROR {}\n", e.path, e.direction, e.error);
      continue;
    }
    const std::string speedup = e.speedup_vs_eager > 0 ? fmt::format("{:.2f}x", e.speedup_vs_eager) : "-";
    const std::string peak = e.peak_extra_bytes >= 0 ? fmt::format("{:.1f}", e.peak_extra_bytes / 1e6) : "-";
    const std::string target =
        e.target_pct_copy > 0 ? fmt::format(">= {:g}% {}", e.target_pct_copy, below_target(e) ? "MISSED" : "met") : "";
    os << fmt::format("  {:<9} {:<4} {:>10.4f} {:>6.1f}% {:>9.1f} {:>8.1f}% {:>9} {:>9}  {}\n", e.path, e.direction,
                      e.timing.median_ms, 100 * e.timing.rel_noise, e.achieved_gbps, e.pct_copy_bw, speedup, peak,
                      target);
  }
}

}  // namespace

void print_table(std::ostream& os, const std::vector<CaseResult>& results, bool color) {
  auto paint = [&](Status s) {
    const std::string name = status_name(s);
    if (!color) return name;
    const char* code = s == Status::pass ? "32" : s == Status::skip ? "33" : "31";
    return fmt::format("\033[{}m{}\033[0m", code, name);
  };
  os << fmt::format("{:<34} {:<9} {:<6} {}\n", "case", "variant", "status", "worst check / reason");
  for (const auto& r : results) {
    if (r.status == Status::error && r.variants.empty()) {
      os << fmt::format("{:<34} {:<9} {:<6} {}\n", r.case_id, "-", paint(r.status), r.error);
      continue;
    }
    bool ref_row = false;
    for (const auto& c : r.checks)
      if (c.variant == "ref:hf") ref_row = true;
    std::vector<std::string> rows = ref_row ? std::vector<std::string>{"ref:hf"} : std::vector<std::string>{};
    for (const auto& v : r.variants) rows.push_back(v.variant);
    for (const auto& vid : rows) {
      Status st = Status::pass;
      std::string note;
      int n = 0, npass = 0;
      for (const auto& c : r.checks) {
        if (c.variant != vid) continue;
        ++n;
        if (c.result.pass) {
          ++npass;
        } else if (note.empty()) {
          st = Status::fail;
          note = fmt::format("{} vs {}: {}", c.tensor, c.against, c.result.summary);
        }
      }
      for (const auto& g : r.guards)
        if (g.variant == vid && !g.pass) {
          st = Status::fail;
          if (note.empty()) note = g.name + ": " + g.message;
        }
      for (const auto& v : r.variants)
        if (v.variant == vid && (v.status == Status::skip || v.status == Status::error)) {
          st = v.status;
          note = v.skip_reason;
        }
      if (note.empty()) note = fmt::format("{}/{} checks", npass, n);
      os << fmt::format("{:<34} {:<9} {:<6} {}\n", r.case_id, vid, paint(st), note);
    }
  }
  for (const auto& r : results)
    if (r.perf) print_perf(os, r);
  for (const auto& r : results)
    if (r.perf)
      for (const auto& e : r.perf->entries)
        if (below_target(e))
          os << fmt::format("\nBELOW TARGET {}  {} {}: {:.1f}% of the copy rate, the case asks >= {:g}%\n", r.case_id,
                            e.path, e.direction, e.pct_copy_bw, e.target_pct_copy);
  for (const auto& r : results) {
    for (const auto& c : r.checks)
      if (!c.result.pass)
        os << fmt::format("\nFAIL {}  {} {} vs {}  policy {}\n  {}\n{}", r.case_id, c.variant, c.tensor, c.against,
                          c.policy, c.result.summary, c.result.detail);
    for (const auto& g : r.guards)
      if (!g.pass) os << fmt::format("\nFAIL {}  {} guard '{}': {}\n", r.case_id, g.variant, g.name, g.message);
    if (r.status == Status::error) os << fmt::format("\nERROR {}\n  {}\n", r.case_id, r.error);
  }
}

int exit_code(const std::vector<CaseResult>& results) {
  int code = 0;
  for (const auto& r : results) {
    if (r.status == Status::error) return 2;
    if (r.status == Status::fail) code = 1;
  }
  return code;
}

}  // namespace parity
