// The HTML report (`parity report`, `parity run --html`): one self-contained file, readable offline and
// attachable to a CI run (inline CSS, SVG drawn here, one small inline script for table sorting; a
// Content-Security-Policy forbids every network load). From one or more results documents (results.hpp) and the
// history store (history.hpp) it shows
//   - a summary: pass / fail / regressed / ambiguous / skip / error counts, each run's environment, regressions;
//   - a sortable table of cases: status, the worst check against its tolerance, perf median and verdict;
//   - per case: the stage table (outputs in stage order, each variant's metric: where a divergence starts), each
//     check's ULP histogram and error heatmap, time against the roofline floor and eager, and the trend of every
//     timed path over the history's records with detected steps and per-record verdicts.
#pragma once
#include <parity/history.hpp>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <string>
#include <vector>

namespace parity {

// One results document and where it came from (named in the report).
struct ReportRun {
  nlohmann::json doc;
  std::string source;
};

// Reads a parity.results/1 document; InputError naming the file when it is unreadable, not JSON, or not one.
ReportRun read_results_document(const std::filesystem::path& path);

std::string render_html_report(const std::vector<ReportRun>& runs, const std::vector<HistoryRecord>& history);
void write_html_report(const std::vector<ReportRun>& runs, const std::vector<HistoryRecord>& history,
                       const std::filesystem::path& path);
// One run, no history (`parity run --html`).
void write_html_report(const nlohmann::json& results_doc, const std::filesystem::path& path);

}  // namespace parity
