#include <parity/error.hpp>
#include <parity/golden.hpp>
#include <parity/sha256.hpp>
#include <parity/tensor.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <hdf5.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <set>
#include <string_view>
#include <utility>
#include <vector>

namespace parity {
namespace {

// HDF5 ids are plain integers; this closes each exactly once, even when a read throws halfway.
class Handle {
 public:
  using Closer = herr_t (*)(hid_t);
  Handle(hid_t id, Closer close) : id_(id), close_(close) {}
  Handle(Handle&& other) noexcept : id_(std::exchange(other.id_, H5I_INVALID_HID)), close_(other.close_) {}
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  Handle& operator=(Handle&&) = delete;
  ~Handle() {
    if (id_ >= 0) close_(id_);
  }
  hid_t get() const { return id_; }
  // For a file being written, where a failed close can mean data that never reached the disk.
  herr_t close() { return close_(std::exchange(id_, H5I_INVALID_HID)); }

 private:
  hid_t id_;
  Closer close_;
};

[[noreturn]] void fail(const std::string& where, const std::string& what) {
  throw InputError(fmt::format("{}: {}", where, what));
}

// The innermost message of HDF5's error stack: the most specific one ("truncated file: eof = ...").
std::string hdf5_reason() {
  std::string reason;
  auto innermost = [](unsigned, const H5E_error2_t* err, void* out) -> herr_t {
    if (err->desc != nullptr && *err->desc != '\0') *static_cast<std::string*>(out) = err->desc;
    return 0;
  };
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, innermost, &reason);
  return reason;
}

// Reads HDF5's reason before anything else can clear its error stack.
void check(herr_t status, const std::string& where, std::string_view what) {
  if (status < 0) fail(where, fmt::format("{} (HDF5: {})", what, hdf5_reason()));
}

Handle checked(hid_t id, Handle::Closer close, const std::string& where, std::string_view what) {
  if (id < 0) fail(where, fmt::format("{} (HDF5: {})", what, hdf5_reason()));
  return Handle(id, close);
}

// Our messages replace HDF5's own stack dump on stderr.
void silence_hdf5() { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); }

Handle copy_type(hid_t predefined) { return Handle(H5Tcopy(predefined), H5Tclose); }

// IEEE binary16, built the way h5py builds it so that H5Tequal accepts h5py's float16 datasets.
Handle half_type() {
  Handle t = copy_type(H5T_IEEE_F32LE);
  H5Tset_fields(t.get(), 15, 10, 5, 0, 10);
  H5Tset_size(t.get(), 2);
  H5Tset_ebias(t.get(), 15);
  return t;
}

// The one file type each dtype is stored as. Reading and writing with the file type itself as the memory type
// makes HDF5 copy bytes without conversion, so NaN payloads survive.
Handle storage_type(at::ScalarType t, const std::string& where) {
  switch (t) {
    case at::kDouble:
      return copy_type(H5T_IEEE_F64LE);
    case at::kFloat:
      return copy_type(H5T_IEEE_F32LE);
    case at::kHalf:
      return half_type();
    case at::kBFloat16:
      return copy_type(H5T_STD_U16LE);  // raw bits: h5py has no bf16 type
    case at::kLong:
      return copy_type(H5T_STD_I64LE);
    case at::kInt:
      return copy_type(H5T_STD_I32LE);
    case at::kByte:
      return copy_type(H5T_STD_U8LE);
    default:
      fail(where, fmt::format("dtype {} cannot be stored in a golden file", dtype_name(t)));
  }
}

std::string describe_type(hid_t type) {
  const size_t bits = H5Tget_size(type) * 8;
  switch (H5Tget_class(type)) {
    case H5T_FLOAT:
      return fmt::format("{}-bit float", bits);
    case H5T_INTEGER:
      return fmt::format("{}-bit {} integer", bits, H5Tget_sign(type) == H5T_SGN_NONE ? "unsigned" : "signed");
    case H5T_STRING:
      return "string";
    default:
      return fmt::format("HDF5 type class {}", static_cast<int>(H5Tget_class(type)));
  }
}

// --- attributes ----------------------------------------------------------------------------------------------

std::string read_string(hid_t attr, hid_t type, const std::string& where) {
  if (H5Tis_variable_str(type) > 0) {
    Handle mem = copy_type(H5T_C_S1);
    H5Tset_size(mem.get(), H5T_VARIABLE);
    H5Tset_cset(mem.get(), H5Tget_cset(type));
    char* value = nullptr;
    check(H5Aread(attr, mem.get(), &value), where, "cannot read");
    std::string out = value != nullptr ? value : "";
    H5free_memory(value);
    return out;
  }
  std::string value(H5Tget_size(type), '\0');
  check(H5Aread(attr, type, value.data()), where, "cannot read");
  value.resize(std::min(value.size(), value.find('\0')));
  return value;
}

template <typename T>
std::string read_number(hid_t attr, hid_t mem_type, const std::string& where) {
  T value{};
  check(H5Aread(attr, mem_type, &value), where, "cannot read");
  return fmt::format("{}", value);
}

std::string read_attr(hid_t obj, const std::string& name, const std::string& where) {
  Handle attr = checked(H5Aopen(obj, name.c_str(), H5P_DEFAULT), H5Aclose, where, "cannot open");
  Handle type = checked(H5Aget_type(attr.get()), H5Tclose, where, "cannot read its type");
  Handle space = checked(H5Aget_space(attr.get()), H5Sclose, where, "cannot read its shape");
  if (H5Sget_simple_extent_npoints(space.get()) != 1) fail(where, "not a single value");
  switch (H5Tget_class(type.get())) {
    case H5T_STRING:
      return read_string(attr.get(), type.get(), where);
    case H5T_INTEGER:
      return H5Tget_sign(type.get()) == H5T_SGN_NONE ? read_number<uint64_t>(attr.get(), H5T_NATIVE_UINT64, where)
                                                     : read_number<int64_t>(attr.get(), H5T_NATIVE_INT64, where);
    case H5T_FLOAT:
      return H5Tget_size(type.get()) <= 4 ? read_number<float>(attr.get(), H5T_NATIVE_FLOAT, where)
                                          : read_number<double>(attr.get(), H5T_NATIVE_DOUBLE, where);
    default:
      fail(where, fmt::format("unsupported attribute type ({})", describe_type(type.get())));
  }
}

std::vector<std::string> attr_names(hid_t obj, const std::string& where) {
  std::vector<std::string> names;
  auto collect = [](hid_t, const char* name, const H5A_info_t*, void* out) -> herr_t {
    static_cast<std::vector<std::string>*>(out)->emplace_back(name);
    return 0;
  };
  check(H5Aiterate2(obj, H5_INDEX_NAME, H5_ITER_INC, nullptr, collect, &names), where, "cannot list attributes");
  return names;
}

std::map<std::string, std::string> read_attrs(hid_t obj, const std::string& where) {
  std::map<std::string, std::string> attrs;
  for (const auto& name : attr_names(obj, where)) {
    attrs[name] = read_attr(obj, name, fmt::format("{}: attr '{}'", where, name));
  }
  return attrs;
}

// Variable-length UTF-8, as h5py writes Python strings.
void write_attr(hid_t obj, const std::string& name, const std::string& value, const std::string& where) {
  Handle type = copy_type(H5T_C_S1);
  H5Tset_size(type.get(), H5T_VARIABLE);
  H5Tset_cset(type.get(), H5T_CSET_UTF8);
  Handle space = checked(H5Screate(H5S_SCALAR), H5Sclose, where, "cannot create attr space");
  const std::string attr_where = fmt::format("{}: attr '{}'", where, name);
  Handle attr = checked(H5Acreate2(obj, name.c_str(), type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose,
                        attr_where, "cannot create");
  const char* chars = value.c_str();
  check(H5Awrite(attr.get(), type.get(), &chars), attr_where, "cannot write");
}

// --- datasets and groups -------------------------------------------------------------------------------------

std::vector<std::string> link_names(hid_t group, const std::string& where) {
  H5G_info_t info;
  check(H5Gget_info(group, &info), where, "cannot list");
  std::vector<std::string> names;
  for (hsize_t i = 0; i < info.nlinks; ++i) {
    const ssize_t size = H5Lget_name_by_idx(group, ".", H5_INDEX_NAME, H5_ITER_INC, i, nullptr, 0, H5P_DEFAULT);
    if (size < 0) fail(where, fmt::format("cannot read link name #{} (HDF5: {})", i, hdf5_reason()));
    std::string name(static_cast<size_t>(size), '\0');
    H5Lget_name_by_idx(group, ".", H5_INDEX_NAME, H5_ITER_INC, i, name.data(), name.size() + 1, H5P_DEFAULT);
    // The manifest hashes this file only: a soft or external link (or, below, a virtual or external dataset) would
    // read data from elsewhere that no hash covers.
    H5L_info_t link;
    check(H5Lget_info(group, name.c_str(), &link, H5P_DEFAULT), where, "cannot read link " + name);
    if (link.type != H5L_TYPE_HARD)
      fail(where, fmt::format("'{}' is a soft or external link: golden data must be stored in the file itself", name));
    names.push_back(std::move(name));
  }
  return names;
}

std::vector<int64_t> dataset_shape(hid_t dataset, const std::string& where) {
  Handle space = checked(H5Dget_space(dataset), H5Sclose, where, "cannot read its shape");
  // A null dataspace (h5py.Empty) holds no element, not a 0-dim tensor's one.
  if (H5Sget_simple_extent_type(space.get()) == H5S_NULL) fail(where, "has a null dataspace (no data)");
  const int rank = H5Sget_simple_extent_ndims(space.get());
  if (rank < 0) fail(where, "cannot read its rank");
  std::vector<hsize_t> dims(static_cast<size_t>(rank));
  H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
  return {dims.begin(), dims.end()};
}

at::Tensor read_dataset(hid_t dataset, const std::string& where) {
  if (H5Aexists(dataset, "dtype") <= 0) fail(where, "missing dtype attr");
  {
    Handle create = checked(H5Dget_create_plist(dataset), H5Pclose, where, "cannot read its layout");
    if (H5Pget_layout(create.get()) == H5D_VIRTUAL || H5Pget_external_count(create.get()) > 0)
      fail(where, "stores its data in other files (a virtual or external dataset): golden data must be in the file");
  }
  const std::string dtype = read_attr(dataset, "dtype", where + ": attr 'dtype'");
  const at::ScalarType scalar_type = parse_dtype(dtype, where + ": dtype attr");
  Handle want = storage_type(scalar_type, where);
  Handle stored = checked(H5Dget_type(dataset), H5Tclose, where, "cannot read its type");
  if (H5Tequal(stored.get(), want.get()) <= 0) {
    fail(where, fmt::format("dtype attr '{}' needs {} data, the file holds {}", dtype, describe_type(want.get()),
                            describe_type(stored.get())));
  }
  at::Tensor out = at::empty(dataset_shape(dataset, where), at::TensorOptions().dtype(scalar_type));
  if (out.numel() > 0) {
    check(H5Dread(dataset, want.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data_ptr()), where, "cannot read data");
  }
  return out;
}

TensorMap read_group(hid_t file, const std::string& group_name, const std::string& file_where) {
  const std::string where = fmt::format("{}: group '/{}'", file_where, group_name);
  Handle group = checked(H5Gopen2(file, group_name.c_str(), H5P_DEFAULT), H5Gclose, where, "not a group");
  TensorMap tensors;
  for (const auto& name : link_names(group.get(), where)) {
    const std::string ds_where = fmt::format("{}: dataset '/{}/{}'", file_where, group_name, name);
    Handle object = checked(H5Oopen(group.get(), name.c_str(), H5P_DEFAULT), H5Oclose, ds_where, "cannot open");
    if (H5Iget_type(object.get()) != H5I_DATASET) fail(ds_where, "not a dataset");
    tensors[name] = read_dataset(object.get(), ds_where);
  }
  return tensors;
}

bool is_golden_group(const std::string& name) {
  return std::ranges::find(kGoldenGroups, name) != std::end(kGoldenGroups);
}

// No object-header timestamps, so that writing the same content twice gives the same bytes.
Handle untimed(hid_t property_class) {
  Handle plist(H5Pcreate(property_class), H5Pclose);
  H5Pset_obj_track_times(plist.get(), false);
  return plist;
}

void write_dataset(hid_t group, const std::string& name, const at::Tensor& tensor, const std::string& where) {
  const at::Tensor t = tensor.contiguous().cpu();
  Handle type = storage_type(t.scalar_type(), where);
  const std::vector<hsize_t> dims(t.sizes().begin(), t.sizes().end());
  Handle space =
      checked(dims.empty() ? H5Screate(H5S_SCALAR) : H5Screate_simple(int(dims.size()), dims.data(), nullptr), H5Sclose,
              where, "cannot create its shape");
  Handle dcpl = untimed(H5P_DATASET_CREATE);
  Handle dataset =
      checked(H5Dcreate2(group, name.c_str(), type.get(), space.get(), H5P_DEFAULT, dcpl.get(), H5P_DEFAULT), H5Dclose,
              where, "cannot create");
  if (t.numel() > 0) {
    check(H5Dwrite(dataset.get(), type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, t.const_data_ptr()), where,
          "cannot write data");
  }
  write_attr(dataset.get(), "dtype", dtype_name(t.scalar_type()), where);
}

}  // namespace

const TensorMap& GoldenFile::group(const std::string& name) const {
  static const TensorMap kEmpty;
  const auto it = groups.find(name);
  return it == groups.end() ? kEmpty : it->second;
}

GoldenFile read_golden(const std::filesystem::path& path) {
  silence_hdf5();
  const std::string where = path.string();
  if (!std::filesystem::is_regular_file(path)) fail(where, "no such file");
  Handle file =
      checked(H5Fopen(where.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose, where, "not a readable HDF5 file");
  GoldenFile golden{.path = path, .attrs = read_attrs(file.get(), where), .groups = {}};
  for (const auto& name : link_names(file.get(), where)) {
    if (!is_golden_group(name)) {
      fail(where, fmt::format("unexpected object '/{}' (golden groups are {})", name, fmt::join(kGoldenGroups, ", ")));
    }
    golden.groups[name] = read_group(file.get(), name, where);
  }
  return golden;
}

void write_golden(const GoldenFile& golden, const std::filesystem::path& path) {
  silence_hdf5();
  const std::string where = path.string();
  Handle file =
      checked(H5Fcreate(where.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), H5Fclose, where, "cannot create");
  for (const auto& [name, value] : golden.attrs) write_attr(file.get(), name, value, where);
  Handle gcpl = untimed(H5P_GROUP_CREATE);
  for (const auto& [group_name, tensors] : golden.groups) {
    const std::string group_where = fmt::format("{}: group '/{}'", where, group_name);
    if (!is_golden_group(group_name)) fail(group_where, "not a golden group");
    Handle group = checked(H5Gcreate2(file.get(), group_name.c_str(), H5P_DEFAULT, gcpl.get(), H5P_DEFAULT), H5Gclose,
                           group_where, "cannot create");
    for (const auto& [name, tensor] : tensors) {
      write_dataset(group.get(), name, tensor, fmt::format("{}: dataset '/{}/{}'", where, group_name, name));
    }
  }
  check(file.close(), where, "cannot close (data may not have reached the disk)");
}

std::string sha256_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path.string(), "cannot open for reading");
  Sha256 hash;
  std::vector<char> buffer(1 << 16);
  while (in.read(buffer.data(), std::streamsize(buffer.size())) || in.gcount() > 0) {
    hash.update(buffer.data(), size_t(in.gcount()));
  }
  if (in.bad()) fail(path.string(), "read error");
  return hash.hex_digest();
}

namespace {

ManifestEntry parse_entry(const nlohmann::json& j, const std::string& where) {
  if (!j.is_object()) fail(where, "not an object");
  const auto sha = j.find("sha256");
  const auto bytes = j.find("bytes");
  const bool sha_ok = sha != j.end() && sha->is_string() && sha->get<std::string>().size() == 64 &&
                      sha->get<std::string>().find_first_not_of("0123456789abcdef") == std::string::npos;
  if (!sha_ok) fail(where, "'sha256' must be 64 lower-case hex digits");
  if (bytes == j.end() || !bytes->is_number_integer()) fail(where, "'bytes' must be an integer");
  return {.sha256 = sha->get<std::string>(), .bytes = bytes->get<int64_t>()};
}

}  // namespace

Manifest read_manifest(const std::filesystem::path& manifest_json) {
  const std::string where = manifest_json.string();
  std::ifstream in(manifest_json);
  if (!in) fail(where, "cannot open manifest");
  nlohmann::json j;
  // A file listed twice (JSON keeps the last of two equal keys) could pair a stale hash with a current one.
  std::set<std::string> listed;
  std::string twice;
  const auto once = [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
    if (event == nlohmann::json::parse_event_t::key && depth == 2 && !listed.insert(parsed.get<std::string>()).second)
      twice = parsed.get<std::string>();
    return true;
  };
  try {
    j = nlohmann::json::parse(in, once);
  } catch (const nlohmann::json::exception& e) {
    fail(where, fmt::format("invalid JSON: {}", e.what()));
  }
  if (!twice.empty()) fail(where, fmt::format("'{}' is listed twice", twice));
  const auto files = j.find("files");
  if (!j.is_object() || files == j.end() || !files->is_object())
    fail(where, "expected an object with a 'files' object");
  Manifest m{.path = manifest_json, .files = {}};
  for (const auto& [relative, entry] : files->items()) {
    m.files[relative] = parse_entry(entry, fmt::format("{}: entry '{}'", where, relative));
  }
  return m;
}

void write_manifest(const Manifest& m) {
  nlohmann::json files = nlohmann::json::object();
  for (const auto& [relative, entry] : m.files) files[relative] = {{"sha256", entry.sha256}, {"bytes", entry.bytes}};
  // Same bytes as golden/generate.py's json.dumps(indent=2, sort_keys=True), so either writer leaves no diff.
  std::ofstream out(m.path);
  out << nlohmann::json{{"files", files}}.dump(2) << '\n';
  if (!out.flush()) fail(m.path.string(), "cannot write manifest");
}

GoldenFile load_verified(const Manifest& m, const std::string& relative) {
  const auto entry = m.files.find(relative);
  if (entry == m.files.end()) fail(m.path.string(), fmt::format("no entry for '{}'", relative));
  const std::filesystem::path path = m.path.parent_path() / relative;
  if (!std::filesystem::is_regular_file(path))
    fail(path.string(), fmt::format("missing (listed in {})", m.path.string()));
  if (const auto size = int64_t(std::filesystem::file_size(path)); size != entry->second.bytes)
    fail(path.string(), fmt::format("{} bytes, the manifest says {}: the file was modified; regenerate with "
                                    "golden/generate.py or restore it",
                                    size, entry->second.bytes));
  const std::string actual = sha256_file(path);
  if (actual != entry->second.sha256) {
    fail(path.string(), fmt::format("sha256 mismatch (manifest {}…, file {}…): the file was modified; regenerate with "
                                    "golden/generate.py or restore it",
                                    entry->second.sha256.substr(0, 12), actual.substr(0, 12)));
  }
  return read_golden(path);
}

}  // namespace parity
