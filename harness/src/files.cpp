#include <parity/error.hpp>
#include <parity/files.hpp>

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <system_error>

namespace parity {

void write_text_file(const std::filesystem::path& path, std::string_view text) {
  std::error_code ec;
  if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path(), ec);
  if (ec) throw InputError(fmt::format("{}: cannot create its directory: {}", path.string(), ec.message()));
  std::ofstream out(path, std::ios::binary);
  out << text;
  if (!out.flush()) throw InputError(fmt::format("{}: cannot write: {}", path.string(), std::strerror(errno)));
}

}  // namespace parity
