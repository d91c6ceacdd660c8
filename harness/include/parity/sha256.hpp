// SHA-256 (FIPS 180-4) for golden-file manifests. Self-contained so the build needs no OpenSSL headers.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace parity {

// Streaming form: update() any number of times, then hex_digest() once.
class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t n);
  std::string hex_digest();  // lower-case, 64 characters; finalises the hash

 private:
  void compress(const uint8_t* block);

  std::array<uint32_t, 8> state_;
  std::array<uint8_t, 64> block_{};
  size_t block_used_ = 0;
  uint64_t total_bytes_ = 0;
};

std::string sha256_hex(const void* data, size_t n);

}  // namespace parity
