// Result files and the terminal table. One JSON document per run:
//   { "schema": "parity.results/1", "environment": {...}, "cases": [ CaseResult... ] }
// The HTML report (report.hpp) and the CI gate read the same document.
#pragma once
#include <parity/error.hpp>
#include <parity/runner.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <ostream>
#include <vector>

namespace parity {

// Where and with what a run happened: GPU, driver, CUDA, LibTorch, the CPU platform, commit, build type.
nlohmann::json environment();
// The CPU as LibTorch's kernels choose their code: vendor and ATen's CPU capability ("cpu GenuineIntel AVX512").
// MKL and ATen's vectorised kernels pick their code paths by these, and with them the order of their fp32 sums: the
// HF goldens, made on this project's CPU machines of the time (AMD EPYC, Zen 4), differ from the same generator run on
// an Intel Xeon in 39 of their datasets (`parity golden verify --regenerate`), and the reference's fp32 mirror of HF
// is bitwise the goldens only on the former.
// Results of a run without a GPU are recorded on this "device" (history.hpp), so that the gate compares their numbers
// only with baselines taken on the same platform.
std::string cpu_platform();
// The first /proc/cpuinfo line starting with `field` ("vendor_id", "model name"): its value, else `absent`.
std::string cpuinfo_field(const std::string& field, const std::string& absent);

nlohmann::json to_json(const Metrics& m);
nlohmann::json to_json(const CaseResult& r);
nlohmann::json results_document(const std::vector<CaseResult>& results);
void write_json(const nlohmann::json& doc, const std::filesystem::path& path);
// A results document written by write_json: InputError naming the file and what is wrong with it.
nlohmann::json read_results(const std::filesystem::path& path);
// f() reading a document that came from `source`. Its readers take each field where they need it, not all when the
// file is read: one missing or of another type there (a DocumentError, or nlohmann's exception) is bad input naming
// the document, not a harness error. (nlohmann's JSON_DIAGNOSTICS would name the field itself, but with GCC before 15
// it brings false -Warray-bounds warnings wherever documents are built: nlohmann/json#4819.)
template <typename F>
decltype(auto) naming_document(const std::string& source, F&& f) {
  try {
    return std::forward<F>(f)();
  } catch (const DocumentError& e) {
    throw InputError(fmt::format("{}: {}", source, e.what()));
  } catch (const nlohmann::json::exception& e) {
    throw InputError(fmt::format("{}: {}", source, e.what()));
  }
}
// f(doc) on the results document at `path`, as naming_document.
template <typename F>
auto with_results(const std::filesystem::path& path, F&& f) {
  const nlohmann::json doc = read_results(path);
  return naming_document(path.string(), [&] { return std::forward<F>(f)(doc); });
}

// One line per case and variant (colored when `color`), then every failing check's and guard's details.
void print_table(std::ostream& os, const std::vector<CaseResult>& results, bool color);

// 0 all pass (skips allowed), 1 a parity failure, 2 an error (bad input or harness).
int exit_code(const std::vector<CaseResult>& results);

}  // namespace parity
