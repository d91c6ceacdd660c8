// parity report: the HTML report from results documents and the history store.
#include "harness/cli/command.hpp"

#include <parity/history.hpp>
#include <parity/report.hpp>

#include <fmt/format.h>

#include <iostream>

namespace parity::cli {

Command add_report(CLI::App& app) {
  struct State {
    std::vector<std::string> results;
    std::string history, out;
  };
  auto st = std::make_shared<State>();
  CLI::App* sub = app.add_subcommand("report", "write the HTML report of results documents and the history");
  sub->add_option("--results", st->results, "a results document (parity run --json; repeatable)")->required();
  sub->add_option("--history", st->history, "history store directory (e.g. reports/history): trends and verdicts");
  sub->add_option("--out", st->out, "the HTML file to write")->required();
  return {sub, [st] {
            std::vector<ReportRun> runs;
            for (const auto& r : st->results) runs.push_back(read_results_document(r));
            const std::vector<HistoryRecord> history =
                st->history.empty() ? std::vector<HistoryRecord>{} : load_history(st->history);
            write_html_report(runs, history, st->out);
            size_t cases = 0;
            for (const auto& r : runs) cases += r.doc.at("cases").size();
            std::cout << fmt::format("parity: wrote {} ({} cases from {} results document(s), {} history records)\n",
                                     st->out, cases, runs.size(), history.size());
            return 0;
          }};
}

}  // namespace parity::cli
