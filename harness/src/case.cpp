// Case files (TOML, see case.hpp): parsed strictly, so a typo is an error naming the file and field, never a
// silently different case.
#include <parity/case.hpp>
#include <parity/error.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <toml++/toml.h>

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>

namespace parity {

namespace {

struct Where {
  std::string file;
  std::string entry;  // "case 'hc_post/tiny'"
  std::string at(const std::string& field) const {
    return entry.empty() ? fmt::format("{}: {}", file, field) : fmt::format("{}: {} field '{}'", file, entry, field);
  }
};

[[noreturn]] void fail(const Where& w, const std::string& field, const std::string& what) {
  throw InputError(fmt::format("{}: {}", w.at(field), what));
}

void reject_unknown_keys(const toml::table& t, const std::set<std::string>& known, const Where& w,
                         const std::string& prefix) {
  for (const auto& [k, _] : t) {
    const std::string key(k.str());
    if (!known.count(key)) {
      std::string list;
      for (const auto& s : known) list += (list.empty() ? "" : ", ") + s;
      fail(w, prefix + key, fmt::format("unknown field (known: {})", list));
    }
  }
}

std::string get_string(const toml::table& t, const std::string& key, const Where& w, bool required,
                       const std::string& fallback = "") {
  const toml::node* n = t.get(key);
  if (!n) {
    if (required) fail(w, key, "missing required field");
    return fallback;
  }
  if (auto v = n->value<std::string>()) return *v;
  fail(w, key, "must be a string");
}

std::vector<std::string> get_strings(const toml::table& t, const std::string& key, const Where& w) {
  std::vector<std::string> out;
  const toml::node* n = t.get(key);
  if (!n) return out;
  const toml::array* arr = n->as_array();
  if (!arr) fail(w, key, "must be an array of strings");
  for (const auto& e : *arr) {
    auto v = e.value<std::string>();
    if (!v) fail(w, key, "must be an array of strings");
    out.push_back(*v);
  }
  return out;
}

bool get_bool(const toml::table& t, const std::string& key, const Where& w, bool fallback) {
  const toml::node* n = t.get(key);
  if (!n) return fallback;
  if (auto v = n->value_exact<bool>()) return *v;
  fail(w, key, "must be true or false");
}

// Table `key` of t; nullptr where t has no such key. A key that holds something else is an error: it would otherwise
// be read as absent.
const toml::table* optional_table(const toml::table& t, const std::string& key, const Where& w) {
  const toml::node* n = t.get(key);
  if (!n) return nullptr;
  if (const toml::table* table = n->as_table()) return table;
  fail(w, key, "must be a table");
}

double number(const toml::node& n, const Where& w, const std::string& field) {
  if (auto i = n.value_exact<int64_t>()) return double(*i);
  if (auto d = n.value_exact<double>()) return *d;
  fail(w, field, "must be a number");
}

Constants read_constants(const toml::table* t, const Where& w, const std::string& prefix) {
  Constants c;
  if (!t) return c;
  for (const auto& [k, v] : *t) c[std::string(k.str())] = number(v, w, prefix + std::string(k.str()));
  return c;
}

std::map<std::string, Policy> read_policies(const toml::table& t, const std::string& key, const Where& w) {
  std::map<std::string, Policy> out;
  const toml::node* n = t.get(key);
  if (!n) return out;
  const toml::table* pt = n->as_table();
  if (!pt) fail(w, key, "must be a table of output = \"policy\"");
  for (const auto& [k, v] : *pt) {
    const std::string name(k.str());
    auto text = v.value<std::string>();
    if (!text) fail(w, key + "." + name, "must be a policy string");
    out.emplace(name, parse_policy(*text, w.at(key + "." + name)));
  }
  return out;
}

// Every output (and grad of every input when the case runs backward) needs a policy, and no policy may name
// a tensor the op does not have: both would let a check silently not happen.
void check_policy_names(const Case& c, const Op& op, const std::map<std::string, Policy>& policies,
                        const std::string& field, const Where& w, bool all_required) {
  std::set<std::string> expected(op.outputs.begin(), op.outputs.end());
  if (c.backward)
    for (const auto& g : op.grad_inputs) expected.insert("grad/" + g);
  for (const auto& [name, _] : policies)
    if (!expected.count(name)) fail(w, field + "." + name, fmt::format("'{}' is not an output of {}", name, op.name));
  if (all_required)
    for (const auto& name : expected)
      if (!policies.count(name)) fail(w, field + "." + name, "missing policy");
}

// The constants a case's op and its variants read.
std::set<std::string> known_constants(const Case& c, const Registry& reg) {
  const std::vector<std::string>& of_op = reg.op(c.op).constants;
  std::set<std::string> known(of_op.begin(), of_op.end());
  for (const Variant* v : reg.variants(c.op))
    if (std::find(c.variants.begin(), c.variants.end(), v->id) != c.variants.end())
      known.insert(v->constants.begin(), v->constants.end());
  return known;
}

Case parse_case(const toml::table& t, const Constants& file_constants, const std::filesystem::path& file,
                const Registry& reg, size_t index) {
  Where w{file.string(), fmt::format("case #{}", index + 1)};
  Case c;
  c.file = file;
  c.id = get_string(t, "id", w, true);
  w.entry = fmt::format("case '{}'", c.id);
  reject_unknown_keys(t,
                      {"id", "covers", "dims", "dtype", "seed", "golden", "reference", "variants", "suites",
                       "backward", "deterministic", "policy", "golden_policy", "skip", "constants", "notes",
                       "copy_target", "perf_threshold"},
                      w, "");
  const auto slash = c.id.find('/');
  if (slash == std::string::npos || slash == 0 || slash + 1 == c.id.size())
    fail(w, "id", "must be '<kernel>/<name>'");
  c.op = c.id.substr(0, slash);
  const Op* op = nullptr;
  try {
    op = &reg.op(c.op);
  } catch (const InputError& e) {
    fail(w, "id", e.what());
  }
  c.covers = get_string(t, "covers", w, true);

  const toml::table* dims = t["dims"].as_table();
  if (!dims) fail(w, "dims", "missing required table (e.g. dims = { tokens = 64, hc = 4, hidden = 64 })");
  for (const auto& [k, v] : *dims) {
    const std::string name(k.str());
    if (std::find(op->dims.begin(), op->dims.end(), name) == op->dims.end())
      fail(w, "dims." + name, fmt::format("not a dim of {} (its dims: {})", op->name, fmt::join(op->dims, ", ")));
    auto i = v.value_exact<int64_t>();
    if (!i || *i <= 0) fail(w, "dims." + name, "must be a positive integer");
    c.ctx.dims[name] = *i;
  }
  for (const std::string& name : op->dims)
    if (!c.ctx.dims.count(name)) fail(w, "dims." + name, "missing");
  const Constants overrides = read_constants(optional_table(t, "constants", w), w, "constants.");
  c.ctx.constants = file_constants;
  for (const auto& [k, v] : overrides) c.ctx.constants[k] = v;
  c.ctx.dtype = parse_dtype(get_string(t, "dtype", w, true), w.at("dtype"));

  if (const toml::node* s = t.get("seed")) {
    auto v = s->value_exact<int64_t>();
    if (!v || *v < 0) fail(w, "seed", "must be a non-negative integer");
    c.seed = uint64_t(*v);
  }
  if (t.contains("golden")) {
    c.golden = get_string(t, "golden", w, true);
    // Resolved in each golden directory in turn, and verified against that directory's MANIFEST.json: a path that
    // leaves it would be checked against another directory's manifest, or none.
    const std::filesystem::path g(*c.golden);
    if (g.is_absolute() || std::find(g.begin(), g.end(), "..") != g.end())
      fail(w, "golden", fmt::format("'{}': must be a relative path inside a golden directory, without '..'", *c.golden));
  }
  if (!c.seed && !c.golden) fail(w, "seed", "a case needs a seed or a golden file");
  c.reference = parse_numerics(get_string(t, "reference", w, false, "fp64"), w.at("reference"));
  c.suites = get_strings(t, "suites", w);
  if (c.suites.empty()) fail(w, "suites", "missing: list the suites this case belongs to (smoke, ci, full, perf)");
  c.backward = get_bool(t, "backward", w, !op->grad_inputs.empty());
  if (c.backward && op->grad_inputs.empty()) fail(w, "backward", fmt::format("{} has no backward", op->name));
  c.deterministic = get_bool(t, "deterministic", w, true);

  c.variants = get_strings(t, "variants", w);
  // Planted faults (harness/src/planted.cpp) run only where a case names them.
  if (c.variants.empty())
    for (const Variant* v : reg.variants(c.op))
      if (v->id.rfind("planted:", 0) != 0) c.variants.push_back(v->id);
  if (const toml::table* skip = optional_table(t, "skip", w))
    for (const auto& [k, v] : *skip) {
      auto reason = v.value<std::string>();
      if (!reason || reason->empty()) fail(w, "skip." + std::string(k.str()), "must give a reason");
      c.skip[std::string(k.str())] = *reason;
    }
  // Variants may be absent from this build (CUDA off): the runner reports them as skipped with that reason.
  for (const auto& id : c.variants) {
    const auto colon = id.find(':');
    if (colon == std::string::npos) fail(w, "variants", fmt::format("'{}' is not '<backend>:<version>'", id));
  }

  // An override that neither the op nor one of the case's variants reads would leave the case running the file's
  // value unnoticed.
  const std::set<std::string> known = known_constants(c, reg);
  for (const auto& [k, _] : overrides)
    if (!known.count(k))
      fail(w, "constants." + k, fmt::format("read by neither {} nor the case's variants (they read: {})", op->name,
                                            fmt::join(known, ", ")));

  c.policy = read_policies(t, "policy", w);
  check_policy_names(c, *op, c.policy, "policy", w, true);
  c.golden_policy = read_policies(t, "golden_policy", w);
  check_policy_names(c, *op, c.golden_policy, "golden_policy", w, false);
  if (c.golden && c.golden_policy.empty()) fail(w, "golden_policy", "a golden case needs golden_policy entries");
  if (const toml::table* notes = optional_table(t, "notes", w))
    for (const auto& [k, v] : *notes) {
      auto text = v.value<std::string>();
      if (!text) fail(w, "notes." + std::string(k.str()), "must be a string");
      c.notes[std::string(k.str())] = *text;
    }
  if (const toml::table* targets = optional_table(t, "copy_target", w))
    for (const auto& [k, v] : *targets) {
      const std::string key(k.str()), field = "copy_target." + key;
      const auto slash = key.rfind('/');
      const std::string variant = key.substr(0, slash == std::string::npos ? 0 : slash),
                        direction = slash == std::string::npos ? "" : key.substr(slash + 1);
      if (direction != "fwd" && direction != "bwd") fail(w, field, "must be '<variant>/fwd' or '<variant>/bwd'");
      if (std::find(c.variants.begin(), c.variants.end(), variant) == c.variants.end())
        fail(w, field, fmt::format("'{}' is not one of the case's variants", variant));
      if (direction == "bwd" && !c.backward) fail(w, field, "the case runs no backward");
      const double pct = number(v, w, field);
      if (!(pct > 0 && pct <= 100)) fail(w, field, "must be a percentage in (0, 100]");
      c.copy_targets[key] = pct;
    }
  if (t.contains("perf_threshold")) {
    c.perf_threshold = number(*t.get("perf_threshold"), w, "perf_threshold");
    if (!(c.perf_threshold > 0 && c.perf_threshold < 1)) fail(w, "perf_threshold", "must be a fraction in (0, 1)");
  }
  // The cost model reads every dim and constant the op needs: missing ones fail here, not halfway through a run.
  try {
    (void)op->cost(c.ctx, false);
  } catch (const InputError& e) {
    fail(w, "dims/constants", e.what());
  }
  return c;
}

}  // namespace

std::vector<Case> parse_cases(const std::string& text, const std::filesystem::path& file, const Registry& reg) {
  toml::table doc;
  try {
    doc = toml::parse(text, file.string());
  } catch (const toml::parse_error& e) {
    const auto& src = e.source();
    throw InputError(fmt::format("{}:{}:{}: TOML parse error: {}", file.string(), src.begin.line, src.begin.column,
                                 e.description()));
  }
  const Where w{file.string(), ""};
  reject_unknown_keys(doc, {"family", "constants", "case"}, w, "");
  get_string(doc, "family", w, true);
  const Constants constants = read_constants(optional_table(doc, "constants", w), w, "constants.");
  const toml::array* cases = doc["case"].as_array();
  if (!cases || cases->empty()) fail(w, "case", "no [[case]] entries");
  std::vector<Case> out;
  for (size_t i = 0; i < cases->size(); ++i) {
    const toml::table* t = (*cases)[i].as_table();
    if (!t) fail(w, fmt::format("case #{}", i + 1), "must be a table");
    out.push_back(parse_case(*t, constants, file, reg, i));
  }
  // A file's constants serve all its cases: each must be read by at least one of them.
  for (const auto& [k, _] : constants)
    if (std::none_of(out.begin(), out.end(), [&](const Case& c) { return known_constants(c, reg).count(k) > 0; }))
      fail(w, "constants." + k, "read by none of this file's cases (their ops and variants)");
  return out;
}

std::vector<Case> load_cases(const std::vector<std::filesystem::path>& dirs, const Registry& reg) {
  std::vector<Case> all;
  std::set<std::string> ids;
  for (const auto& dir : dirs) {
    if (!std::filesystem::is_directory(dir)) throw InputError(fmt::format("{}: case directory not found", dir.string()));
    std::vector<std::filesystem::path> files;
    for (const auto& e : std::filesystem::directory_iterator(dir))
      if (e.path().extension() == ".toml") files.push_back(e.path());
    std::sort(files.begin(), files.end());
    for (const auto& f : files) {
      std::ifstream in(f);
      std::stringstream ss;
      ss << in.rdbuf();
      for (auto& c : parse_cases(ss.str(), f, reg)) {
        if (!ids.insert(c.id).second) throw InputError(fmt::format("{}: duplicate case id '{}'", f.string(), c.id));
        all.push_back(std::move(c));
      }
    }
  }
  return all;
}

bool in_suite(const Case& c, const std::string& suite) {
  return suite == "all" || std::find(c.suites.begin(), c.suites.end(), suite) != c.suites.end();
}

}  // namespace parity
