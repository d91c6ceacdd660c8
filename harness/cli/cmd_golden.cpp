// parity golden verify [--regenerate]: every golden file against its manifest, and optionally a bitwise drift
// check against a fresh run of the generator.
#include "harness/cli/command.hpp"

#include <parity/compare.hpp>
#include <parity/error.hpp>
#include <parity/golden.hpp>
#include <parity/results.hpp>

#include <fmt/format.h>

#include <cstdlib>
#include <iostream>
#include <set>
#include <unistd.h>

namespace parity::cli {

namespace fs = std::filesystem;

namespace {

std::string python_for_golden() {
  if (const char* p = std::getenv("PARITY_PYTHON")) return p;
  const char* home = std::getenv("PARITY_HOME");
  const fs::path venv = home ? fs::path(home) / "venv/bin/python"
                             : fs::path(std::getenv("HOME") ? std::getenv("HOME") : "/root") / ".cache/parity/venv/bin/python";
  return fs::exists(venv) ? venv.string() : "python3";
}

// How far a drifted dataset moved: the elements that differ and, for floating data, the largest distances, so that
// a summation order's rounding reads apart from a changed computation.
std::string drift_size(const at::Tensor& committed, const at::Tensor& fresh) {
  const std::string differ =
      fmt::format("{} of {} elements differ", bitwise_diff_count(committed, fresh), committed.numel());
  if (!committed.is_floating_point()) return differ;
  const Metrics m = compare(fresh, committed);
  return fmt::format("{}, max {} ULP, max abs {:.3g}", differ, m.max_ulp, m.max_abs);
}

// Regenerates every golden file into a scratch directory and compares each dataset bitwise with the committed
// one: drift means the generator, torch or transformers changed the numbers, or the CPU platform did (LibTorch's
// fp32 kernels sum in the order of the platform's own: results.hpp cpu_platform), which the last lines name.
int golden_drift(const fs::path& golden_dir) {
  const Manifest committed = read_manifest(golden_dir / "MANIFEST.json");
  const fs::path scratch = fs::temp_directory_path() / fmt::format("parity-golden-{}", ::getpid());
  const std::string cmd = fmt::format("'{}' '{}/golden/generate.py' --out '{}'", python_for_golden(), PARITY_SOURCE_DIR,
                                      scratch.string());
  std::cout << "regenerating: " << cmd << "\n";
  if (std::system(cmd.c_str()) != 0) throw InputError("golden generator failed: " + cmd);
  const Manifest fresh = read_manifest(scratch / "MANIFEST.json");
  int drift = 0;
  std::set<std::string> made_on, generators;
  for (const auto& [rel, _] : committed.files) {
    if (!fresh.files.count(rel)) {
      std::cout << fmt::format("DRIFT {}: no longer generated\n", rel);
      ++drift;
      continue;
    }
    const GoldenFile a = load_verified(committed, rel), b = read_golden(scratch / rel);
    const auto platform = a.attrs.find("cpu_platform");
    made_on.insert(platform == a.attrs.end() ? "a CPU platform it does not record (made before the generator recorded it)"
                                             : platform->second);
    // What the data was made from: another op, seed or config is drift even where every dataset matched. The generator's
    // own hash is only named (an edit that leaves the numbers alone is no drift).
    for (const char* attr : {"op", "seed", "config_json"}) {
      const auto x = a.attrs.find(attr), y = b.attrs.find(attr);
      const std::string was = x == a.attrs.end() ? "(none)" : x->second, now = y == b.attrs.end() ? "(none)" : y->second;
      if (was != now) {
        std::cout << fmt::format("DRIFT {} @{}: '{}' committed, '{}' regenerated\n", rel, attr, was, now);
        ++drift;
      }
    }
    if (const auto x = a.attrs.find("generator_sha256"), y = b.attrs.find("generator_sha256");
        x != a.attrs.end() && y != b.attrs.end() && x->second != y->second)
      generators.insert(fmt::format("{} (committed) -> {} (now)", x->second.substr(0, 12), y->second.substr(0, 12)));
    for (const char* group : kGoldenGroups) {
      for (const auto& [name, _] : b.group(group))
        if (!a.group(group).count(name)) {
          std::cout << fmt::format("DRIFT {} /{}/{}: new in the regenerated file\n", rel, group, name);
          ++drift;
        }
      for (const auto& [name, t] : a.group(group)) {
        auto it = b.group(group).find(name);
        if (it == b.group(group).end()) {
          std::cout << fmt::format("DRIFT {} /{}/{}: missing in the regenerated file\n", rel, group, name);
          ++drift;
        } else if (t.sizes() != it->second.sizes() || t.scalar_type() != it->second.scalar_type() ||
                   !bitwise_equal(t, it->second)) {
          const bool same_shape = t.sizes() == it->second.sizes() && t.scalar_type() == it->second.scalar_type();
          std::cout << fmt::format("DRIFT {} /{}/{}: {}\n", rel, group, name,
                                   same_shape ? drift_size(t, it->second) : describe(t) + " vs " + describe(it->second));
          ++drift;
        }
      }
    }
  }
  for (const auto& [rel, _] : fresh.files)
    if (!committed.files.count(rel)) {
      std::cout << fmt::format("DRIFT {}: generated but not committed\n", rel);
      ++drift;
    }
  fs::remove_all(scratch);
  for (const auto& g : generators) std::cout << "golden: generate.py's sha256 changed since they were made: " << g << "\n";
  std::cout << (drift ? fmt::format("golden: {} datasets drifted\n", drift) : "golden: regenerated bitwise identical\n");
  if (drift) {
    for (const auto& p : made_on) std::cout << "golden: the committed files were made on " << p << "\n";
    std::cout << "golden: regenerated on " << cpu_platform()
              << "; on a platform other than the files', LibTorch's fp32 kernels sum in another order, and every "
                 "dataset downstream of such a sum moves by about its rounding (the max abs above: many ULP where "
                 "values are near zero; a bf16 value that then rounds the other way moves what follows it by more)\n";
  }
  return drift ? 1 : 0;
}

int verify(const Dirs& dirs, bool regenerate) {
  for (const auto& dir : dirs.golden_dirs()) {
    const Manifest m = read_manifest(dir / "MANIFEST.json");
    // Every golden of the directory is listed (a case could name one the manifest does not cover: run refuses it).
    for (const auto& f : fs::recursive_directory_iterator(dir))
      if (f.path().extension() == ".h5" && !m.files.count(fs::relative(f.path(), dir).generic_string()))
        throw InputError(fmt::format("{}: not listed in {}", f.path().string(), m.path.string()));
    for (const auto& [rel, e] : m.files) {
      const GoldenFile g = load_verified(m, rel);
      for (const char* attr : kProvenanceAttrs)
        if (!g.attrs.count(attr))
          throw InputError(fmt::format("{}: missing root attr '{}' (provenance: golden.hpp)", (dir / rel).string(), attr));
      size_t n = 0;
      for (const auto& [_, group] : g.groups) n += group.size();
      std::cout << fmt::format("OK {}  sha256 {}  {} datasets\n", (dir / rel).string(), e.sha256.substr(0, 12), n);
    }
  }
  if (!regenerate) return 0;
  // The generator writes the repository's goldens; a private directory's come from its owner's generator.
  if (dirs.golden_dirs().size() > 1)
    std::cout << fmt::format("golden: --regenerate checks {} only (golden/generate.py makes those); the other "
                             "directories were verified against their manifests above\n",
                             dirs.golden_dirs().front().string());
  return golden_drift(dirs.golden_dirs().front());
}

}  // namespace

Command add_golden(CLI::App& app) {
  struct State {
    Dirs dirs;
    bool regenerate = false;
  };
  auto st = std::make_shared<State>();
  CLI::App* golden = app.add_subcommand("golden", "golden data");
  golden->require_subcommand(1);
  CLI::App* sub = golden->add_subcommand("verify", "check every golden file against the manifest");
  sub->add_flag("--regenerate", st->regenerate, "re-run golden/generate.py and report any bitwise drift");
  st->dirs.add_to(sub);
  return {golden, [st] { return verify(st->dirs, st->regenerate); }};
}

}  // namespace parity::cli
