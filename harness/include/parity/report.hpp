// The HTML report: one self-contained file (inline CSS and SVG, no scripts from elsewhere) from a results
// document (results.hpp).
#pragma once
#include <nlohmann/json.hpp>

#include <filesystem>

namespace parity {

void write_html_report(const nlohmann::json& results_doc, const std::filesystem::path& path);

}  // namespace parity
