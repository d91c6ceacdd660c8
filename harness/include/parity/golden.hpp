// Golden files (HDF5) and their manifest.
//
// Schema of one file (written by golden/generate.py, read here):
//   /                attrs: schema_version (int), op, generator, generator_sha256, torch_version,
//                           transformers_version, seed, config_json, created (ISO 8601 UTC), cpu_platform
//                           (results.hpp cpu_platform; absent from files made before 2026-11-28)
//   /inputs/<name>   tensors fed to the op (activations and parameters)
//   /stages/<name>   named intermediate results of the upstream forward
//   /outputs/<name>  forward outputs
//   /grad_outputs/<name>  upstream gradients (random, never all-ones) for the backward
//   /grads/<name>    gradients with respect to inputs
// Every dataset carries attr `dtype` ("fp32", "bf16", ...). Types h5py cannot store natively (bf16) are
// stored as their raw bits (uint16) and restored from the attr.
//
// golden/MANIFEST.json lists every file with its sha256 and size; load_verified() refuses a file whose
// hash differs.
#pragma once
#include <parity/tensor.hpp>

#include <filesystem>
#include <map>
#include <string>

namespace parity {

inline constexpr const char* kGoldenGroups[] = {"inputs", "stages", "outputs", "grad_outputs", "grads"};
// The root attributes that say where a golden came from (the schema above); `parity golden verify` requires them.
inline constexpr const char* kProvenanceAttrs[] = {"schema_version", "op",   "generator",   "generator_sha256",
                                                   "torch_version",  "transformers_version", "seed", "config_json",
                                                   "created"};

struct GoldenFile {
  std::filesystem::path path;
  std::map<std::string, std::string> attrs;  // root attributes as strings (ints/floats formatted)
  std::map<std::string, TensorMap> groups;    // group name -> tensors
  const TensorMap& group(const std::string& name) const;  // empty map if absent
};

// Throws InputError naming the file and dataset on any problem.
GoldenFile read_golden(const std::filesystem::path& path);
void write_golden(const GoldenFile& golden, const std::filesystem::path& path);

std::string sha256_file(const std::filesystem::path& path);

struct ManifestEntry {
  std::string sha256;
  int64_t bytes = 0;
};
struct Manifest {
  std::filesystem::path path;  // the MANIFEST.json
  std::map<std::string, ManifestEntry> files;  // relative to the manifest's directory
};
Manifest read_manifest(const std::filesystem::path& manifest_json);
void write_manifest(const Manifest& m);

// Reads `relative` (a path relative to the manifest's directory) after checking its size and sha256 against the
// manifest. Throws InputError for a file missing from the manifest or whose size or hash differs. (read_manifest
// refuses a file listed twice.)
GoldenFile load_verified(const Manifest& m, const std::string& relative);

}  // namespace parity
