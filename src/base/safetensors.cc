#include "base/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <tuple>

#include "base/mapped_file.h"

namespace kiln {

// Tensor bytes are read and written as they lie in memory; safetensors data
// is little-endian.
static_assert(std::endian::native == std::endian::little, "safetensors I/O assumes a little-endian host");

namespace {

using Json = nlohmann::json;

// Python's library refuses larger headers too.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;
// A well-formed header nests three deep (header, tensor, shape).
constexpr size_t kMaxJsonDepth = 16;
constexpr std::string_view kMetadataKey = "__metadata__";

// Builds the header's JSON value, refusing duplicate keys (which a plain
// parse would silently collapse) and deep nesting.
class HeaderBuilder {
 public:
  explicit HeaderBuilder(Json& root) : root_(root) {}

  bool null() { return put(nullptr) != nullptr; }
  bool boolean(bool v) { return put(v) != nullptr; }
  bool number_integer(Json::number_integer_t v) { return put(v) != nullptr; }
  bool number_unsigned(Json::number_unsigned_t v) { return put(v) != nullptr; }
  bool number_float(Json::number_float_t v, const Json::string_t&) { return put(v) != nullptr; }
  bool string(Json::string_t& v) { return put(std::move(v)) != nullptr; }
  bool binary(Json::binary_t&) { return put(nullptr) != nullptr; }  // not produced by the JSON lexer
  bool start_object(std::size_t) { return open(Json::object()); }
  bool start_array(std::size_t) { return open(Json::array()); }
  bool end_object() { return close(); }
  bool end_array() { return close(); }
  bool key(Json::string_t& k) {
    Frame& f = stack_.back();
    if (f.value->contains(k)) {
      duplicate_ = k;
      duplicate_in_ = path();
      return false;
    }
    f.key = std::move(k);
    return true;
  }
  template <class Exception>
  bool parse_error(std::size_t position, const std::string&, const Exception& ex) {
    error_position_ = position;
    error_ = ex.what();
    return false;
  }

  // Set when parsing stopped early; empty otherwise.
  std::optional<std::string> duplicate_;
  std::string duplicate_in_;
  bool too_deep_ = false;
  std::optional<std::string> error_;
  size_t error_position_ = 0;

 private:
  struct Frame {
    Json* value;
    std::string key;  // of the member being read, for objects
  };

  // Stores v in the open container (or as the root) and returns where it lives.
  Json* put(Json v) {
    if (stack_.empty()) {
      root_ = std::move(v);
      return &root_;
    }
    Frame& f = stack_.back();
    if (f.value->is_array()) {
      f.value->push_back(std::move(v));
      return &f.value->back();
    }
    Json& slot = (*f.value)[f.key];
    slot = std::move(v);
    return &slot;
  }
  // An open container is the last element of its parent, and the parent only
  // grows after the container closes, so the pointers held here stay valid.
  bool open(Json v) {
    if (stack_.size() >= kMaxJsonDepth) {
      too_deep_ = true;
      return false;
    }
    Json* p = put(std::move(v));
    stack_.push_back({p, {}});
    return true;
  }
  bool close() {
    stack_.pop_back();
    return true;
  }
  std::string path() const {
    std::string s;
    for (size_t i = 0; i + 1 < stack_.size(); ++i) s += (s.empty() ? "" : ".") + stack_[i].key;
    return s.empty() ? "the top-level object" : "'" + s + "'";
  }

  Json& root_;
  std::vector<Frame> stack_;
};

// Names of safetensors dtypes that are valid but that kiln has no type for.
bool is_known_foreign_dtype(std::string_view s) {
  for (std::string_view d : {"U16", "U32", "U64", "C64", "F8_E4M3", "F8_E5M2", "F8_E8M0", "F4", "F6_E2M3", "F6_E3M2"})
    if (s == d) return true;
  return false;
}

// A JSON value as a non-negative int64, if it is one.
std::optional<int64_t> as_index(const Json& v) {
  if (!v.is_number_unsigned()) return std::nullopt;
  const uint64_t u = v.get<uint64_t>();
  if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
  return static_cast<int64_t>(u);
}

struct Record {
  std::string name;
  DType dtype;
  Shape shape;
  uint64_t begin;
  uint64_t end;
};

class Parser {
 public:
  explicit Parser(const std::string& name) : name_(name) {}

  Status error(FileFault fault, const std::string& what) const {
    return format_error(fault, "safetensors '" + name_ + "': " + what);
  }
  Status error(const std::string& what) const { return error(FileFault::kMalformed, what); }
  Status tensor_error(FileFault fault, const std::string& tensor, const std::string& what) const {
    return error(fault, "tensor '" + tensor + "': " + what);
  }
  Status tensor_error(const std::string& tensor, const std::string& what) const {
    return tensor_error(FileFault::kMalformed, tensor, what);
  }

  Expected<Json> parse_header(std::string_view text) const {
    Json root;
    HeaderBuilder builder(root);
    bool ok = false;
    try {
      ok = Json::sax_parse(text.data(), text.data() + text.size(), &builder);
    } catch (const std::exception& e) {  // allocation failure, or an unexpected library error
      return error(std::string("cannot parse the JSON header: ") + e.what());
    }
    if (builder.error_)
      return error("the JSON header is malformed at file byte " + std::to_string(8 + builder.error_position_) + ": " +
                   *builder.error_);
    if (builder.too_deep_) return error("the JSON header nests more than " + std::to_string(kMaxJsonDepth) + " deep");
    if (builder.duplicate_)
      return error(FileFault::kDuplicateName,
                   "the JSON header repeats the key '" + *builder.duplicate_ + "' in " + builder.duplicate_in_);
    if (!ok) return error("cannot parse the JSON header");
    if (!root.is_object()) return error("the JSON header is a " + std::string(root.type_name()) + ", not an object");
    return root;
  }

  Status read_metadata(const Json& v, std::map<std::string, std::string>& out) const {
    if (!v.is_object())
      return error("\"__metadata__\" is a " + std::string(v.type_name()) + ", not an object of strings");
    for (const auto& [k, val] : v.items()) {
      if (!val.is_string())
        return error("\"__metadata__\" value of key '" + k + "' is a " + std::string(val.type_name()) +
                     ", not a string");
      out.emplace(k, val.get<std::string>());
    }
    return Status::ok();
  }

  Expected<Record> read_record(const std::string& name, const Json& v, uint64_t data_size) const {
    if (!v.is_object()) return tensor_error(name, "entry is a " + std::string(v.type_name()) + ", not an object");
    auto dt = v.find("dtype");
    auto sh = v.find("shape");
    auto offs = v.find("data_offsets");
    if (dt == v.end() || !dt->is_string()) return tensor_error(name, "\"dtype\" is missing or not a string");
    if (sh == v.end() || !sh->is_array()) return tensor_error(name, "\"shape\" is missing or not an array");
    if (offs == v.end() || !offs->is_array() || offs->size() != 2)
      return tensor_error(name, "\"data_offsets\" is missing or not an array of two offsets");

    Record r;
    r.name = name;
    const std::string& dts = dt->get_ref<const std::string&>();
    std::optional<DType> dtype = dtype_from_safetensors(dts);
    if (!dtype) {
      if (is_known_foreign_dtype(dts))
        return Status(unsupported("safetensors '" + name_ + "': tensor '" + name + "': dtype " + dts +
                                  " is not supported by kiln"));
      return tensor_error(FileFault::kUnknownDtype, name, "unknown dtype \"" + dts + "\"");
    }
    r.dtype = *dtype;
    for (const Json& d : *sh) {
      std::optional<int64_t> size = as_index(d);
      if (!size) return tensor_error(name, "shape entry " + d.dump() + " is not a non-negative 64-bit integer");
      r.shape.push_back(*size);
    }
    Expected<int64_t> numel = checked_numel(r.shape);
    const uint64_t item = dtype_size(r.dtype);
    if (!numel || static_cast<uint64_t>(*numel) > std::numeric_limits<uint64_t>::max() / item)
      return tensor_error(FileFault::kSizeOverflow, name,
                          "shape " + shape_to_string(r.shape) + " has too many elements");
    const uint64_t nbytes = static_cast<uint64_t>(*numel) * item;

    std::optional<int64_t> begin = as_index((*offs)[0]);
    std::optional<int64_t> end = as_index((*offs)[1]);
    if (!begin || !end)
      return tensor_error(name, "\"data_offsets\" " + offs->dump() + " are not non-negative integers");
    r.begin = static_cast<uint64_t>(*begin);
    r.end = static_cast<uint64_t>(*end);
    const std::string range = "data_offsets [" + std::to_string(r.begin) + ", " + std::to_string(r.end) + "]";
    if (r.end < r.begin) return tensor_error(FileFault::kOverlap, name, range + " end before they begin");
    if (r.end > data_size)
      return tensor_error(FileFault::kOutOfBounds, name,
                          range + " run past the end of the data section (" + std::to_string(data_size) + " bytes)");
    if (r.end - r.begin != nbytes)
      return tensor_error(FileFault::kSizeMismatch, name,
                          range + " hold " + std::to_string(r.end - r.begin) + " bytes but " + std::string(dts) +
                              shape_to_string(r.shape) + " needs " + std::to_string(nbytes));
    return r;
  }

 private:
  const std::string& name_;
};

// A bool element must be 0 or 1; any other byte is not a valid C++ bool.
std::optional<size_t> first_invalid_bool(const uint8_t* p, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (p[i] > 1) return i;
  return std::nullopt;
}

// Data rank in Python's safetensors library; it writes higher ranks first.
int write_rank(DType t) {
  switch (t) {
    case DType::Bool: return 0;
    case DType::UInt8: return 1;
    case DType::Int8: return 2;
    case DType::Int16: return 3;
    case DType::Float16: return 4;
    case DType::BFloat16: return 5;
    case DType::Int32: return 6;
    case DType::Float32: return 7;
    case DType::Float64: return 8;
    case DType::Int64: return 9;
    case DType::Complex64:
    case DType::Complex128: break;  // never written (see DType)
  }
  return 0;
}

std::string errno_text(int err) { return std::string(std::strerror(err)) + " (errno " + std::to_string(err) + ")"; }

Status write_all(int fd, const uint8_t* p, size_t n, const std::string& path) {
  while (n > 0) {
    const ssize_t w = ::write(fd, p, std::min<size_t>(n, size_t{1} << 30));
    if (w < 0) {
      if (errno == EINTR) continue;
      return io_error("cannot write '" + path + "': " + errno_text(errno));
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return Status::ok();
}

// A file that is removed unless release() is called.
class TempFile {
 public:
  TempFile() = default;
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  ~TempFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!path_.empty()) ::unlink(path_.c_str());
  }

  // Creates a new file beside `target`; the umask applies as for any new file.
  Status create(const std::string& target) {
    const auto pid = static_cast<unsigned long>(::getpid());
    const auto now = static_cast<unsigned long long>(std::chrono::steady_clock::now().time_since_epoch().count());
    for (int attempt = 0; attempt < 100; ++attempt) {
      std::string candidate =
          target + ".tmp." + std::to_string(pid) + "." + std::to_string(now) + "." + std::to_string(attempt);
      int fd = ::open(candidate.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
      if (fd >= 0) {
        fd_ = fd;
        path_ = std::move(candidate);
        return Status::ok();
      }
      if (errno != EEXIST && errno != EINTR)
        return io_error("cannot create a temporary file for '" + target + "' (" + candidate +
                        "): " + errno_text(errno));
    }
    return io_error("cannot create a temporary file for '" + target + "': every name tried exists");
  }
  int fd() const { return fd_; }
  const std::string& path() const { return path_; }

  // Flushes, closes and renames the file to `target`.
  Status commit(const std::string& target) {
    if (::fsync(fd_) != 0) return io_error("cannot flush '" + path_ + "': " + errno_text(errno));
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) return io_error("cannot close '" + path_ + "': " + errno_text(errno));
    if (::rename(path_.c_str(), target.c_str()) != 0)
      return io_error("cannot rename '" + path_ + "' to '" + target + "': " + errno_text(errno));
    path_.clear();
    return Status::ok();
  }

 private:
  int fd_ = -1;
  std::string path_;
};

}  // namespace

const Tensor* SafetensorsFile::find(std::string_view name) const {
  for (const auto& [n, t] : tensors)
    if (n == name) return &t;
  return nullptr;
}

Expected<SafetensorsFile> read_safetensors(const std::string& path) {
  KILN_ASSIGN_OR_RETURN(std::shared_ptr<MappedFile> file, MappedFile::open(path));
  uint8_t* data = file->data();
  const size_t size = file->size();
  return base::parse_safetensors(Storage::borrow(data, size, std::move(file)), path);
}

Expected<SafetensorsFile> base::parse_safetensors(std::shared_ptr<Storage> bytes, const std::string& display_name) {
  Parser parser(display_name);
  if (bytes == nullptr) return invalid_argument("safetensors '" + display_name + "': no bytes given");
  const uint64_t total = bytes->nbytes();
  if (total < 8)
    return parser.error(FileFault::kTruncated,
                        "file is " + std::to_string(total) + " bytes, too small for the 8-byte header length");
  uint64_t header_len = 0;
  std::memcpy(&header_len, bytes->data(), 8);
  if (header_len > kMaxHeaderBytes)
    return parser.error("header length " + std::to_string(header_len) + " exceeds the limit of " +
                        std::to_string(kMaxHeaderBytes) + " bytes");
  if (header_len > total - 8)
    return parser.error(FileFault::kOutOfBounds, "header length " + std::to_string(header_len) +
                                                     " runs past the end of the file (" + std::to_string(total) +
                                                     " bytes)");
  const std::string_view text(reinterpret_cast<const char*>(bytes->data()) + 8, static_cast<size_t>(header_len));
  const uint64_t data_start = 8 + header_len;
  const uint64_t data_size = total - data_start;

  KILN_ASSIGN_OR_RETURN(Json header, parser.parse_header(text));

  SafetensorsFile out;
  std::vector<Record> records;
  for (const auto& [key, value] : header.items()) {
    if (key == kMetadataKey) {
      KILN_TRY(parser.read_metadata(value, out.metadata));
      continue;
    }
    KILN_ASSIGN_OR_RETURN(Record r, parser.read_record(key, value, data_size));
    records.push_back(std::move(r));
  }
  std::sort(records.begin(), records.end(), [](const Record& a, const Record& b) {
    return std::tie(a.begin, a.end, a.name) < std::tie(b.begin, b.end, b.name);
  });
  // Ranges are sorted by start: a non-empty range overlaps an earlier one
  // exactly when it starts before the furthest end seen so far.
  uint64_t reach = 0;
  const Record* reacher = nullptr;
  for (const Record& r : records) {
    if (r.begin == r.end) continue;
    if (reacher != nullptr && r.begin < reach)
      return parser.tensor_error(FileFault::kOverlap, r.name,
                                 "bytes [" + std::to_string(r.begin) + ", " + std::to_string(r.end) +
                                     ") overlap those of tensor '" + reacher->name + "' [" +
                                     std::to_string(reacher->begin) + ", " + std::to_string(reacher->end) + ")");
    reach = r.end;
    reacher = &r;
  }

  out.tensors.reserve(records.size());
  for (Record& r : records) {
    const size_t nbytes = static_cast<size_t>(r.end - r.begin);
    uint8_t* p = bytes->data() + data_start + r.begin;
    if (r.dtype == DType::Bool) {
      if (auto bad = first_invalid_bool(p, nbytes))
        return parser.tensor_error(r.name, "bool element " + std::to_string(*bad) + " is byte " +
                                               std::to_string(p[*bad]) + " (at file byte " +
                                               std::to_string(data_start + r.begin + *bad) + "), not 0 or 1");
    }
    std::shared_ptr<Storage> storage;
    if (reinterpret_cast<uintptr_t>(p) % dtype_size(r.dtype) == 0) {
      storage = Storage::borrow(p, nbytes, bytes);
    } else {
      storage = Storage::allocate(nbytes);
      if (nbytes > 0) std::memcpy(storage->data(), p, nbytes);
    }
    Shape strides = contiguous_strides(r.shape);
    Expected<Tensor> t = Tensor::from_storage(std::move(storage), r.dtype, std::move(r.shape), std::move(strides), 0);
    if (!t) return parser.tensor_error(r.name, t.status().message());
    out.tensors.emplace_back(std::move(r.name), std::move(t).value());
  }
  return out;
}

Status write_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                         const std::map<std::string, std::string>& metadata) {
  const std::string where = "cannot write safetensors '" + path + "': ";
  std::vector<size_t> order(tensors.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const int ra = write_rank(tensors[a].second.dtype()), rb = write_rank(tensors[b].second.dtype());
    if (ra != rb) return ra > rb;
    return tensors[a].first < tensors[b].first;
  });
  for (const auto& [name, t] : tensors) {
    if (!t.defined()) return invalid_argument(where + "tensor '" + name + "' is undefined");
    if (name == kMetadataKey) return invalid_argument(where + "\"__metadata__\" cannot name a tensor");
  }
  {
    std::vector<std::string_view> names;
    names.reserve(tensors.size());
    for (const auto& [name, t] : tensors) names.push_back(name);
    std::sort(names.begin(), names.end());
    if (auto it = std::adjacent_find(names.begin(), names.end()); it != names.end())
      return invalid_argument(where + "tensor name '" + std::string(*it) + "' appears twice");
  }

  // The header, built as text so its key order is the data order.
  std::vector<Tensor> data;
  data.reserve(tensors.size());
  std::string header = "{";
  try {
    if (!metadata.empty()) {
      Json m = Json::object();
      for (const auto& [k, v] : metadata) m[k] = v;
      header += "\"__metadata__\":" + m.dump();
    }
    uint64_t offset = 0;
    for (size_t i : order) {
      const auto& [name, t] = tensors[i];
      Tensor c = t.contiguous();
      const uint64_t nbytes = c.nbytes();
      Json shape = Json::array();
      for (int64_t s : c.sizes()) shape.push_back(s);
      if (header.size() > 1) header += ',';
      header += Json(name).dump() + ":{\"dtype\":\"" + std::string(dtype_to_safetensors(c.dtype())) +
                "\",\"shape\":" + shape.dump() + ",\"data_offsets\":[" + std::to_string(offset) + "," +
                std::to_string(offset + nbytes) + "]}";
      offset += nbytes;
      data.push_back(std::move(c));
    }
  } catch (const Json::exception& e) {  // a name or metadata string that is not valid UTF-8
    return invalid_argument(where + e.what());
  }
  header += '}';
  header.append((8 - header.size() % 8) % 8, ' ');

  TempFile tmp;
  KILN_TRY(tmp.create(path));
  uint8_t len[8];
  const uint64_t header_len = header.size();
  std::memcpy(len, &header_len, 8);
  KILN_TRY(write_all(tmp.fd(), len, 8, tmp.path()));
  KILN_TRY(write_all(tmp.fd(), reinterpret_cast<const uint8_t*>(header.data()), header.size(), tmp.path()));
  for (const Tensor& t : data)
    if (t.nbytes() > 0)
      KILN_TRY(write_all(tmp.fd(), static_cast<const uint8_t*>(t.raw_data()), t.nbytes(), tmp.path()));
  return tmp.commit(path);
}

}  // namespace kiln
