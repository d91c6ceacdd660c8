// Files Parity writes: results documents, reports, baselines, the device-ceiling cache.
#pragma once
#include <filesystem>
#include <string_view>

namespace parity {

// `text` into `path`, its directory created first. A path that cannot be written is bad input named with the reason
// (InputError), as an input that cannot be read is (`--json` under a regular file was a harness error before).
void write_text_file(const std::filesystem::path& path, std::string_view text);

}  // namespace parity
