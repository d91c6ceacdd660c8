// Baseline files: strict reading (a corrupt baseline must stop the gate, never read as "no baseline"), line-per-record
// writing, and the two ways they change (update from a results document, per-arch override).
#include <parity/baseline.hpp>
#include <parity/error.hpp>
#include <parity/files.hpp>
#include <parity/op.hpp>
#include <parity/results.hpp>

#include <fmt/chrono.h>
#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <set>

namespace parity {

namespace fs = std::filesystem;

namespace {

[[noreturn]] void fail(const fs::path& path, const std::string& field, const std::string& what) {
  throw InputError(fmt::format("{}: field '{}': {}", path.string(), field, what));
}

std::string command_output(const std::string& cmd) {
  std::string out;
  if (FILE* p = popen(cmd.c_str(), "r")) {
    char buf[256];
    while (fgets(buf, sizeof buf, p)) out += buf;
    pclose(p);
  }
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r' || out.back() == ' ')) out.pop_back();
  return out;
}

std::string now_utc() {
  return fmt::format("{:%Y-%m-%dT%H:%M:%SZ}", std::chrono::floor<std::chrono::seconds>(std::chrono::system_clock::now()));
}

std::string string_field(const nlohmann::json& j, const char* key, const fs::path& path, const std::string& field,
                         bool required) {
  const auto it = j.find(key);
  if (it == j.end()) {
    if (required) fail(path, field + "." + key, "missing");
    return "";
  }
  if (!it->is_string()) fail(path, field + "." + key, "must be a string");
  return it->get<std::string>();
}

BaselineUpdate update_from_json(const nlohmann::json& j, const fs::path& path, const std::string& field) {
  if (!j.is_object()) fail(path, field, "must be an object");
  return {string_field(j, "who", path, field, true), string_field(j, "what", path, field, true),
          string_field(j, "why", path, field, true), string_field(j, "date", path, field, true),
          string_field(j, "commit", path, field, false)};
}

PolicyOverride override_from_json(const nlohmann::json& j, const fs::path& path, const std::string& field) {
  if (!j.is_object()) fail(path, field, "must be an object");
  PolicyOverride o{string_field(j, "policy", path, field, true), string_field(j, "reason", path, field, true),
                   string_field(j, "worst_observed", path, field, true), string_field(j, "issue", path, field, false)};
  if (o.reason.empty()) fail(path, field + ".reason", "an override needs a reason");
  return o;
}

nlohmann::json to_json(const BaselineUpdate& u) {
  return {{"who", u.who}, {"what", u.what}, {"why", u.why}, {"date", u.date}, {"commit", u.commit}};
}

nlohmann::json to_json(const PolicyOverride& o) {
  return {{"policy", o.policy}, {"reason", o.reason}, {"worst_observed", o.worst_observed}, {"issue", o.issue}};
}

Baseline baseline_from_json(const nlohmann::json& j, const fs::path& path) {
  if (!j.is_object()) fail(path, "(root)", "must be an object");
  if (const std::string schema = string_field(j, "schema", path, "(root)", true); schema != kBaselineSchema)
    fail(path, "schema", fmt::format("is '{}', expected '{}'", schema, kBaselineSchema));
  Baseline b;
  b.path = path;
  const auto records = j.find("records");
  if (records == j.end() || !records->is_array()) fail(path, "records", "must be an array");
  for (size_t i = 0; i < records->size(); ++i) {
    HistoryRecord r = history_record_from_json((*records)[i], fmt::format("{}: records[{}]", path.string(), i));
    const std::string key = baseline_key(r);
    if (!b.records.emplace(key, std::move(r)).second)
      fail(path, fmt::format("records[{}]", i), "duplicate key and device " + key);
  }
  if (const auto u = j.find("updates"); u != j.end()) {
    if (!u->is_array()) fail(path, "updates", "must be an array");
    for (size_t i = 0; i < u->size(); ++i)
      b.updates.push_back(update_from_json((*u)[i], path, fmt::format("updates[{}]", i)));
  }
  if (const auto o = j.find("overrides"); o != j.end()) {
    if (!o->is_object()) fail(path, "overrides", "must be an object of arch -> {\"<case>|<tensor>\": {...}}");
    for (const auto& [arch, entries] : o->items()) {
      check_arch_name(arch, fmt::format("{}: field 'overrides.{}'", path.string(), arch));
      if (!entries.is_object()) fail(path, "overrides." + arch, "must be an object");
      for (const auto& [key, entry] : entries.items()) {
        const std::string field = fmt::format("overrides.{}.{}", arch, key);
        if (key.find('|') == std::string::npos) fail(path, field, "key must be '<case>|<tensor>'");
        b.overrides[arch][key] = override_from_json(entry, path, field);
      }
    }
  }
  return b;
}

std::string op_of(const std::string& case_id) { return case_id.substr(0, case_id.find('/')); }

// What an update did, short enough for a line: the cases whose records changed.
std::string describe_update(const std::vector<HistoryRecord>& records, const std::string& device) {
  std::set<std::string> cases;
  for (const auto& r : records) cases.insert(r.case_id);
  std::string list;
  for (const auto& c : cases) list += (list.empty() ? "" : ", ") + c;
  return fmt::format("{} records of {} on {}", records.size(), list,
                     device.empty() || device == "none" ? "the CPU (no GPU)" : device);
}

// A JSON array with one element per line.
template <typename Items, typename ToLine>
std::string json_lines(const Items& items, ToLine to_line) {
  if (items.empty()) return "[]";
  std::string s = "[";
  const char* sep = "\n  ";
  for (const auto& item : items) {
    s += sep + to_line(item);
    sep = ",\n  ";
  }
  return s + "\n ]";
}

}  // namespace

std::string baseline_key(const HistoryRecord& r) { return r.key() + "|" + r.device; }

Baseline read_baseline(const fs::path& path) {
  Baseline b;
  b.path = path;
  if (!fs::exists(path)) return b;
  std::ifstream in(path);
  if (!in) throw InputError(fmt::format("{}: cannot open baseline", path.string()));
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw InputError(fmt::format("{}: baseline is not valid JSON: {}", path.string(), e.what()));
  }
  return baseline_from_json(j, path);
}

std::string baseline_text(const Baseline& b) {
  nlohmann::json overrides = nlohmann::json::object();
  for (const auto& [arch, entries] : b.overrides)
    for (const auto& [key, o] : entries) overrides[arch][key] = to_json(o);
  std::string text = fmt::format("{{\n \"schema\": \"{}\",\n", kBaselineSchema);
  text += " \"records\": " + json_lines(b.records, [](const auto& kv) { return to_json(kv.second).dump(); }) + ",\n";
  text += " \"updates\": " + json_lines(b.updates, [](const BaselineUpdate& u) { return to_json(u).dump(); }) + ",\n";
  text += " \"overrides\": " + overrides.dump(2) + "\n}\n";
  return text;
}

void write_baseline(const Baseline& b) { write_text_file(b.path, baseline_text(b)); }

std::map<std::string, Baseline> load_baselines(const fs::path& dir) {
  std::map<std::string, Baseline> out;
  if (!fs::is_directory(dir)) return out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".json") out[e.path().stem().string()] = read_baseline(e.path());
  return out;
}

UpdateSummary update_baselines(const fs::path& dir, const nlohmann::json& results_doc, const std::string& who,
                               const std::string& why) {
  if (!results_doc.is_object() || results_doc.value("schema", "") != "parity.results/1")
    throw InputError("not a parity results document (schema 'parity.results/1')");
  UpdateSummary summary;
  std::set<std::string> passed;
  for (const auto& c : results_doc.at("cases")) {
    const std::string id = c.value("case", ""), status = c.value("status", "");
    if (status == "PASS")
      passed.insert(id);
    else
      summary.skipped.push_back(fmt::format("{} ({})", id, status));
  }
  std::map<std::string, std::vector<HistoryRecord>> by_op;
  for (auto& r : records_from_results(results_doc))
    if (passed.count(r.case_id)) by_op[op_of(r.case_id)].push_back(std::move(r));

  for (auto& [op, records] : by_op) {
    Baseline b = read_baseline(dir / (op + ".json"));
    std::string what = describe_update(records, records.front().device);
    const std::string commit = records.front().commit;  // stamped from the results' environment
    int kept = 0;
    for (auto& r : records) {
      summary.keys.push_back(r.key());
      HistoryRecord& slot = b.records[baseline_key(r)];
      if (r.n == 0 && slot.n > 0) {
        summary.kept_timings.push_back(fmt::format("{} (timed at {})", r.key(), slot.commit));
        ++kept;
        // The numbers and their commit are the new record's; the timing, and the source hash that attributes a
        // timing's change (history.hpp), stay the old one's.
        HistoryRecord timing = slot;
        timing.numerics = std::move(r.numerics);
        timing.commit = r.commit, timing.date = r.date, timing.platform = r.platform;
        r = std::move(timing);
      }
      slot = std::move(r);
    }
    if (kept) what += fmt::format("; {} untimed kept their earlier timings", kept);
    b.updates.push_back({who, what, why, now_utc(), commit});
    write_baseline(b);
    summary.files.push_back(b.path);
  }
  return summary;
}

fs::path add_override(const fs::path& dir, const std::string& arch, const std::string& case_id,
                      const std::string& tensor, const PolicyOverride& o, const std::string& who) {
  check_arch_name(arch, "--arch");
  if (o.reason.empty()) throw InputError("--reason: an override needs a reason");
  if (o.worst_observed.empty()) throw InputError("--worst: an override needs the worst value observed");
  Baseline b = read_baseline(dir / (op_of(case_id) + ".json"));
  const std::string key = case_id + "|" + tensor;
  const bool replaces = b.overrides[arch].count(key) > 0;
  b.overrides[arch][key] = o;
  b.updates.push_back({who,
                       fmt::format("{} override {} {}: policy {} (worst observed {})", replaces ? "replaced" : "added",
                                   arch, key, o.policy, o.worst_observed),
                       o.reason, now_utc(), environment().value("commit", "")});
  write_baseline(b);
  return b.path;
}

std::string current_arch(bool force_cpu) {
  if (force_cpu || !cuda_available()) return "cpu";
  // nvidia-smi numbers every GPU of the host; the device in use is the first one CUDA_VISIBLE_DEVICES names.
  std::string device = "0";
  if (const char* visible = std::getenv("CUDA_VISIBLE_DEVICES"); visible && *visible)
    device = std::string(visible).substr(0, std::string(visible).find(','));
  const std::string cap =
      command_output(fmt::format("nvidia-smi --query-gpu=compute_cap --format=csv,noheader -i '{}' 2>/dev/null", device));
  std::smatch m;
  if (!std::regex_match(cap, m, std::regex(R"((\d+)\.(\d+))")))
    throw InputError(fmt::format("cannot read the CUDA device's compute capability (nvidia-smi said '{}')", cap));
  return fmt::format("sm_{}{}", m[1].str(), m[2].str());
}

void check_arch_name(const std::string& arch, const std::string& where) {
  if (!std::regex_match(arch, std::regex(R"(cpu|sm_\d+)")))
    throw InputError(fmt::format("{}: arch '{}' is not 'cpu' or 'sm_<compute capability>' (e.g. sm_90)", where, arch));
}

std::string git_user_name() { return command_output("git -C '" PARITY_SOURCE_DIR "' config user.name 2>/dev/null"); }

}  // namespace parity
