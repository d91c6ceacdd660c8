#include <parity/error.hpp>

#include <c10/util/Exception.h>

namespace parity {

std::string error_message(const std::exception& e) {
  if (const auto* c10_error = dynamic_cast<const c10::Error*>(&e)) return c10_error->what_without_backtrace();
  return e.what();
}

}  // namespace parity
