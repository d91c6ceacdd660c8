// Parity errors: the CLI maps InputError to exit code 2 (bad input or harness error); parity failures are
// results, never exceptions.
#pragma once
#include <exception>
#include <stdexcept>
#include <string>

namespace parity {

// Bad input: a case file, golden file, dataset or field that cannot be used. The message names it.
class InputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Bad input found inside a document, said where in it ("cases[3]: ..."), for its reader's caller to name the document
// (results.hpp naming_document).
class DocumentError : public InputError {
 public:
  using InputError::InputError;
};

// What to tell a user about e: its message, without the C++ stack trace that LibTorch's errors (c10::Error: a
// failed TORCH_CHECK, an allocation that does not fit) append to what().
std::string error_message(const std::exception& e);

}  // namespace parity
