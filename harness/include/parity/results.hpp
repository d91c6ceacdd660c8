// Result files and the terminal table. One JSON document per run:
//   { "schema": "parity.results/1", "environment": {...}, "cases": [ CaseResult... ] }
// The HTML report (report.hpp) and the CI gate read the same document.
#pragma once
#include <parity/runner.hpp>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <ostream>
#include <vector>

namespace parity {

// Where and with what a run happened: GPU, driver, CUDA, LibTorch, commit, build type.
nlohmann::json environment();

nlohmann::json to_json(const Metrics& m);
nlohmann::json to_json(const CaseResult& r);
nlohmann::json results_document(const std::vector<CaseResult>& results);
void write_json(const nlohmann::json& doc, const std::filesystem::path& path);
// A results document written by write_json: InputError naming the file and what is wrong with it.
nlohmann::json read_results(const std::filesystem::path& path);

// One line per case and variant (colored when `color`), then every failing check's and guard's details.
void print_table(std::ostream& os, const std::vector<CaseResult>& results, bool color);

// 0 all pass (skips allowed), 1 a parity failure, 2 an error (bad input or harness).
int exit_code(const std::vector<CaseResult>& results);

}  // namespace parity
