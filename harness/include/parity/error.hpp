// Parity errors: the CLI maps InputError to exit code 2 (bad input or harness error); parity failures are
// results, never exceptions.
#pragma once
#include <stdexcept>
#include <string>

namespace parity {

// Bad input: a case file, golden file, dataset or field that cannot be used. The message names it.
class InputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace parity
