#include <parity/sha256.hpp>

#include <gtest/gtest.h>

#include <string>

namespace {

std::string sha(const std::string& s) { return parity::sha256_hex(s.data(), s.size()); }

// FIPS 180-4 example vectors (NIST CSRC "Examples with Intermediate Values", SHA-256).
TEST(Sha256, NistEmpty) { EXPECT_EQ(sha(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"); }

TEST(Sha256, NistAbc) { EXPECT_EQ(sha("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"); }

// 448 bits: the padding no longer fits the first block, so this exercises the two-block tail.
TEST(Sha256, Nist448Bits) {
  EXPECT_EQ(sha("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

TEST(Sha256, Nist896Bits) {
  EXPECT_EQ(
      sha("abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopq"
          "rstu"),
      "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
}

TEST(Sha256, NistOneMillionA) {
  EXPECT_EQ(sha(std::string(1'000'000, 'a')), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

// Files are hashed in chunks: chunk boundaries that split blocks must not change the digest.
TEST(Sha256, StreamingMatchesOneShot) {
  const std::string message(1'000'000, 'a');
  for (size_t chunk : {1, 7, 63, 64, 65, 4096}) {
    parity::Sha256 h;
    for (size_t at = 0; at < message.size(); at += chunk) {
      h.update(message.data() + at, std::min(chunk, message.size() - at));
    }
    EXPECT_EQ(h.hex_digest(), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0") << "chunk " << chunk;
  }
}

}  // namespace
