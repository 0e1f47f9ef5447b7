#include "frontend/zip_reader.h"

#include <algorithm>
#include <limits>
#include <optional>

#include "base/mapped_file.h"
#include "base/message_text.h"

namespace kiln::frontend {

namespace {

// ---- bounds-checked little-endian reads ----------------------------------

constexpr uint32_t kLocalHeaderSig = 0x04034b50;
constexpr uint32_t kCentralHeaderSig = 0x02014b50;
constexpr uint32_t kEocdSig = 0x06054b50;
constexpr uint32_t kEocd64Sig = 0x06064b50;
constexpr uint32_t kEocd64LocatorSig = 0x07064b50;

constexpr uint64_t kLocalHeaderSize = 30;
constexpr uint64_t kCentralHeaderSize = 46;
constexpr uint64_t kEocdSize = 22;
constexpr uint64_t kEocd64LocatorSize = 20;
constexpr uint64_t kEocd64MinSize = 56;
constexpr uint64_t kMaxCommentLength = 0xFFFF;

constexpr uint16_t kZip64ExtraId = 0x0001;
constexpr uint32_t kSaturated32 = 0xFFFFFFFFu;
constexpr uint16_t kSaturated16 = 0xFFFFu;

// The archive's bytes. Readers take an offset the caller has checked with has().
class Bytes {
 public:
  explicit Bytes(std::span<const uint8_t> b) : b_(b) {}
  uint64_t size() const { return b_.size(); }
  // True when [off, off + len) lies inside the bytes (no overflow possible).
  bool has(uint64_t off, uint64_t len) const { return off <= b_.size() && len <= b_.size() - off; }
  uint16_t u16(uint64_t off) const { return static_cast<uint16_t>(b_[off] | (b_[off + 1] << 8)); }
  uint32_t u32(uint64_t off) const {
    return static_cast<uint32_t>(b_[off]) | (static_cast<uint32_t>(b_[off + 1]) << 8) |
           (static_cast<uint32_t>(b_[off + 2]) << 16) | (static_cast<uint32_t>(b_[off + 3]) << 24);
  }
  uint64_t u64(uint64_t off) const {
    return static_cast<uint64_t>(u32(off)) | (static_cast<uint64_t>(u32(off + 4)) << 32);
  }
  std::string_view str(uint64_t off, uint64_t len) const {
    return {reinterpret_cast<const char*>(b_.data() + off), static_cast<size_t>(len)};
  }

 private:
  std::span<const uint8_t> b_;
};

// Why `name` is unsafe as a path inside the archive, or empty when it is fine.
std::string unsafe_name_reason(std::string_view name) {
  if (name.empty()) return "an empty name";
  if (name.find('\0') != std::string_view::npos) return "a NUL byte in its name";
  if (name.front() == '/' || name.front() == '\\') return "an absolute path";
  if (name.size() >= 2 && name[1] == ':' && ((name[0] >= 'a' && name[0] <= 'z') || (name[0] >= 'A' && name[0] <= 'Z')))
    return "a drive-letter path";
  size_t start = 0;
  while (start <= name.size()) {
    size_t end = name.find_first_of("/\\", start);
    if (end == std::string_view::npos) end = name.size();
    if (name.substr(start, end - start) == "..") return "a '..' path component";
    start = end + 1;
  }
  return {};
}

// Reads archives; every error names the archive.
class Parser {
 public:
  Parser(std::span<const uint8_t> bytes, const std::string& path) : b_(bytes), path_(path) {}

  Expected<std::vector<ZipEntry>> parse();

 private:
  struct Directory {
    uint64_t count = 0;
    uint64_t offset = 0;
    uint64_t size = 0;
    uint64_t limit = 0;  // the central directory must end at or before this byte
  };

  Status error(FileFault fault, const std::string& what) const {
    return format_error(fault, "zip '" + path_ + "': " + what);
  }
  Status error(const std::string& what) const { return error(FileFault::kMalformed, what); }
  Status entry_error(FileFault fault, const std::string& name, uint64_t record, const std::string& what) const {
    return error(fault, "entry '" + printable(name) + "' (central directory record at byte " +
                            std::to_string(record) + "): " + what);
  }
  Status entry_error(const std::string& name, uint64_t record, const std::string& what) const {
    return entry_error(FileFault::kMalformed, name, record, what);
  }

  Expected<uint64_t> find_eocd() const;
  Expected<Directory> read_directory_location(uint64_t eocd) const;
  Expected<ZipEntry> read_central_record(uint64_t pos, uint64_t cd_end, uint64_t* next) const;
  Status locate_data(ZipEntry& e, uint64_t record, const Directory& dir) const;

  Bytes b_;
  const std::string& path_;
};

// The classic end-of-central-directory record sits in the last 22 + 65535
// bytes. Prefer a candidate whose comment ends exactly at the end of the file,
// so that a comment containing the signature cannot mislead.
Expected<uint64_t> Parser::find_eocd() const {
  if (b_.size() < kEocdSize)
    return error(FileFault::kTruncated, "file is " + std::to_string(b_.size()) +
                 " bytes, too small to be a zip archive (its end record alone is 22 bytes)");
  const uint64_t last = b_.size() - kEocdSize;
  const uint64_t first = last > kMaxCommentLength ? last - kMaxCommentLength : 0;
  std::optional<uint64_t> fitting;
  for (uint64_t pos = last + 1; pos-- > first;) {
    if (b_.u32(pos) != kEocdSig) continue;
    const uint64_t comment = b_.u16(pos + 20);
    if (pos + kEocdSize + comment == b_.size()) return pos;
    if (!fitting && pos + kEocdSize + comment <= b_.size()) fitting = pos;
  }
  if (fitting) return *fitting;
  return error(FileFault::kBadMagic, "no end-of-central-directory record in the last " + std::to_string(b_.size() - first) +
               " bytes: not a zip archive, or truncated");
}

Expected<Parser::Directory> Parser::read_directory_location(uint64_t eocd) const {
  const uint16_t disk = b_.u16(eocd + 4);
  const uint16_t cd_disk = b_.u16(eocd + 6);
  const uint16_t count_here = b_.u16(eocd + 8);
  const uint16_t count16 = b_.u16(eocd + 10);
  const uint32_t cd_size32 = b_.u32(eocd + 12);
  const uint32_t cd_offset32 = b_.u32(eocd + 16);
  const std::string at = " (end record at byte " + std::to_string(eocd) + ")";

  Directory dir{count16, cd_offset32, cd_size32, eocd};

  const bool has_locator = eocd >= kEocd64LocatorSize && b_.u32(eocd - kEocd64LocatorSize) == kEocd64LocatorSig;
  if (!has_locator) {
    if ((disk != 0 && disk != kSaturated16) || (cd_disk != 0 && cd_disk != kSaturated16))
      return Status(unsupported("zip '" + path_ + "': multi-disk archives are not supported (disk " +
                                std::to_string(disk) + ")" + at));
    if (count_here != count16)
      return error("end record counts " + std::to_string(count_here) + " entries on this disk but " +
                   std::to_string(count16) + " in total" + at);
  } else {
    const uint64_t loc = eocd - kEocd64LocatorSize;
    const std::string loc_at = " (zip64 locator at byte " + std::to_string(loc) + ")";
    const uint32_t total_disks = b_.u32(loc + 16);
    if (b_.u32(loc + 4) != 0 || total_disks > 1)
      return Status(unsupported("zip '" + path_ + "': multi-disk archives are not supported (" +
                                std::to_string(total_disks) + " disks)" + loc_at));
    const uint64_t rec = b_.u64(loc + 8);
    if (rec > loc || loc - rec < kEocd64MinSize)
      return error(FileFault::kOutOfBounds, "zip64 end record offset " + std::to_string(rec) + " leaves no room for its " +
                   std::to_string(kEocd64MinSize) + " bytes before the locator" + loc_at);
    if (b_.u32(rec) != kEocd64Sig)
      return error(FileFault::kBadMagic, "bad zip64 end record signature " + hex(b_.u32(rec)) + " at byte " + std::to_string(rec) + loc_at);
    const uint64_t rec_size = b_.u64(rec + 4);
    if (rec_size < kEocd64MinSize - 12 || rec_size > loc - rec - 12)
      return error(FileFault::kOutOfBounds, "zip64 end record at byte " + std::to_string(rec) + " claims " + std::to_string(rec_size) +
                   " bytes, which do not fit between it and the locator at byte " + std::to_string(loc));
    if (b_.u32(rec + 16) != 0 || b_.u32(rec + 20) != 0)
      return Status(unsupported("zip '" + path_ +
                                "': multi-disk archives are not supported (zip64 end record at byte " +
                                std::to_string(rec) + ")"));
    const uint64_t count64_here = b_.u64(rec + 24);
    dir = Directory{b_.u64(rec + 32), b_.u64(rec + 48), b_.u64(rec + 40), rec};
    if (count64_here != dir.count)
      return error("zip64 end record counts " + std::to_string(count64_here) + " entries on this disk but " +
                   std::to_string(dir.count) + " in total (at byte " + std::to_string(rec) + ")");
    // Where the classic record holds a real value rather than the zip64
    // marker, it must agree with the zip64 record.
    auto disagree = [&](const char* what, uint64_t classic, uint64_t saturated, uint64_t v64) -> std::optional<Status> {
      if (classic == saturated || classic == v64) return std::nullopt;
      return error(std::string("end record gives ") + what + " " + std::to_string(classic) +
                   " but the zip64 end record gives " + std::to_string(v64) + at);
    };
    if (auto s = disagree("entry count", count16, kSaturated16, dir.count)) return *s;
    if (auto s = disagree("central directory size", cd_size32, kSaturated32, dir.size)) return *s;
    if (auto s = disagree("central directory offset", cd_offset32, kSaturated32, dir.offset)) return *s;
  }

  if (dir.offset > dir.limit || dir.size > dir.limit - dir.offset)
    return error(FileFault::kOutOfBounds, "central directory [" + std::to_string(dir.offset) + ", +" + std::to_string(dir.size) +
                 ") runs past its end record at byte " + std::to_string(dir.limit));
  // Each central record is at least 46 bytes: this bounds the count before
  // anything is allocated from it.
  if (dir.count > dir.size / kCentralHeaderSize)
    return error(FileFault::kOutOfBounds, "central directory of " + std::to_string(dir.size) + " bytes at byte " + std::to_string(dir.offset) +
                 " cannot hold the " + std::to_string(dir.count) + " entries the end record claims");
  return dir;
}

Expected<ZipEntry> Parser::read_central_record(uint64_t pos, uint64_t cd_end, uint64_t* next) const {
  if (cd_end - pos < kCentralHeaderSize)
    return error(FileFault::kTruncated, "central directory record at byte " + std::to_string(pos) +
                 " is truncated by the end of the directory at byte " + std::to_string(cd_end));
  if (b_.u32(pos) != kCentralHeaderSig)
    return error(FileFault::kBadMagic, "bad central directory record signature " + hex(b_.u32(pos)) + " at byte " + std::to_string(pos));
  const uint16_t flags = b_.u16(pos + 8);
  const uint16_t method = b_.u16(pos + 10);
  const uint32_t crc = b_.u32(pos + 16);
  uint64_t csize = b_.u32(pos + 20);
  uint64_t usize = b_.u32(pos + 24);
  const uint16_t name_len = b_.u16(pos + 28);
  const uint16_t extra_len = b_.u16(pos + 30);
  const uint16_t comment_len = b_.u16(pos + 32);
  uint64_t disk = b_.u16(pos + 34);
  uint64_t local = b_.u32(pos + 42);

  const uint64_t record_len = kCentralHeaderSize + name_len + extra_len + comment_len;
  if (cd_end - pos < record_len)
    return error(FileFault::kOutOfBounds, "central directory record at byte " + std::to_string(pos) + " (" + std::to_string(record_len) +
                 " bytes with its name, extra field and comment) runs past the end of the directory at byte " +
                 std::to_string(cd_end));
  *next = pos + record_len;

  const std::string name(b_.str(pos + kCentralHeaderSize, name_len));
  if (std::string why = unsafe_name_reason(name); !why.empty())
    return entry_error(FileFault::kPathEscape, name, pos, "unsafe entry name: " + why);
  if (flags & 0x0041u)
    return Status(unsupported("zip '" + path_ + "': entry '" + printable(name) +
                              "' (central directory record at byte " + std::to_string(pos) +
                              ") is encrypted; encrypted entries are not supported"));

  // Zip64 extended information: 64-bit values for exactly the fields saturated
  // in the fixed record, in this order.
  const uint64_t extra = pos + kCentralHeaderSize + name_len;
  const bool need64 = usize == kSaturated32 || csize == kSaturated32 || local == kSaturated32 || disk == kSaturated16;
  bool found64 = false;
  for (uint64_t off = extra; extra + extra_len - off >= 4;) {
    const uint16_t id = b_.u16(off);
    const uint16_t len = b_.u16(off + 2);
    if (extra + extra_len - off - 4 < len)
      return entry_error(FileFault::kOutOfBounds, name, pos,
                         "extra field record " + hex(id) + " at byte " + std::to_string(off) + " claims " +
                             std::to_string(len) + " bytes, past the end of the extra field");
    if (id == kZip64ExtraId && !found64) {
      found64 = true;
      uint64_t p = off + 4;
      const uint64_t end = p + len;
      auto take = [&](uint64_t& field, uint64_t marker, uint64_t width, const char* what) -> Status {
        if (field != marker) return Status::ok();
        if (end - p < width)
          return entry_error(FileFault::kTruncated, name, pos,
                             std::string("zip64 extra field at byte ") + std::to_string(off) + " (" +
                                 std::to_string(len) + " bytes) lacks the " + what +
                                 " that the record marks as stored there");
        field = width == 8 ? b_.u64(p) : b_.u32(p);
        p += width;
        return Status::ok();
      };
      KILN_TRY(take(usize, kSaturated32, 8, "uncompressed size"));
      KILN_TRY(take(csize, kSaturated32, 8, "compressed size"));
      KILN_TRY(take(local, kSaturated32, 8, "local header offset"));
      KILN_TRY(take(disk, kSaturated16, 4, "disk number"));
    }
    off += 4 + len;
  }
  if (need64 && !found64)
    return entry_error(name, pos,
                       "sizes or offset hold the zip64 marker 0xffffffff but the record has no zip64 extra field");
  if (disk != 0)
    return Status(unsupported("zip '" + path_ + "': entry '" + printable(name) + "' starts on disk " +
                              std::to_string(disk) + "; multi-disk archives are not supported"));
  if (method == 0 && csize != usize)
    return entry_error(FileFault::kSizeMismatch, name, pos,
                       "stored entry has compressed size " + std::to_string(csize) + " but uncompressed size " +
                           std::to_string(usize));
  return ZipEntry{name, local, 0, usize, csize, method, crc};
}

// Reads the local header: the data starts after the LOCAL name and extra
// field (PyTorch pads the local extra field only), and must end before the
// central directory.
Status Parser::locate_data(ZipEntry& e, uint64_t record, const Directory& dir) const {
  const uint64_t lh = e.local_header_offset;
  const std::string at = "local header at byte " + std::to_string(lh);
  if (lh > dir.offset || dir.offset - lh < kLocalHeaderSize)
    return entry_error(FileFault::kOutOfBounds, e.name, record,
                       at + " does not lie before the central directory at byte " + std::to_string(dir.offset));
  if (b_.u32(lh) != kLocalHeaderSig)
    return entry_error(FileFault::kBadMagic, e.name, record,
                       "bad local header signature " + hex(b_.u32(lh)) + " at byte " + std::to_string(lh));
  const uint16_t method = b_.u16(lh + 8);
  const uint16_t name_len = b_.u16(lh + 26);
  const uint16_t extra_len = b_.u16(lh + 28);
  const uint64_t data = lh + kLocalHeaderSize + name_len + extra_len;  // cannot overflow: lh < file size
  if (data > dir.offset)
    return entry_error(FileFault::kOverlap, e.name, record,
                       at + " with its name and extra field (" + std::to_string(data - lh) +
                           " bytes) runs into the central directory at byte " + std::to_string(dir.offset));
  if (b_.str(lh + kLocalHeaderSize, name_len) != e.name)
    return entry_error(
        e.name, record,
        at + " names '" + printable(b_.str(lh + kLocalHeaderSize, name_len)) + "', not the central directory's name");
  if (method != e.method)
    return entry_error(e.name, record,
                       at + " gives method " + std::to_string(method) + " but the central directory gives " +
                           std::to_string(e.method));
  if (e.compressed_size > dir.offset - data)
    return entry_error(FileFault::kOutOfBounds, e.name, record,
                       "data of " + std::to_string(e.compressed_size) + " bytes at byte " + std::to_string(data) +
                           " runs past the start of the central directory at byte " + std::to_string(dir.offset));
  e.data_offset = data;
  return Status::ok();
}

Expected<std::vector<ZipEntry>> Parser::parse() {
  KILN_ASSIGN_OR_RETURN(const uint64_t eocd, find_eocd());
  KILN_ASSIGN_OR_RETURN(const Directory dir, read_directory_location(eocd));

  std::vector<ZipEntry> entries;
  std::vector<uint64_t> records;  // central record offset per entry, for messages
  entries.reserve(static_cast<size_t>(dir.count));
  records.reserve(static_cast<size_t>(dir.count));
  const uint64_t cd_end = dir.offset + dir.size;
  uint64_t pos = dir.offset;
  for (uint64_t i = 0; i < dir.count; ++i) {
    uint64_t next = pos;
    KILN_ASSIGN_OR_RETURN(ZipEntry e, read_central_record(pos, cd_end, &next));
    KILN_TRY(locate_data(e, pos, dir));
    records.push_back(pos);
    entries.push_back(std::move(e));
    pos = next;
  }
  if (pos != cd_end)
    return error("central directory has " + std::to_string(cd_end - pos) + " bytes left at byte " +
                 std::to_string(pos) + " after the " + std::to_string(dir.count) + " entries the end record counts");

  // No two entries may share bytes: each entry's header and data end before
  // the next entry's header begins.
  std::vector<size_t> order(entries.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return entries[a].local_header_offset < entries[b].local_header_offset; });
  for (size_t k = 1; k < order.size(); ++k) {
    const ZipEntry& a = entries[order[k - 1]];
    const ZipEntry& b = entries[order[k]];
    if (a.data_offset + a.compressed_size > b.local_header_offset)
      return entry_error(FileFault::kOverlap, b.name, records[order[k]],
                         "local header at byte " + std::to_string(b.local_header_offset) + " overlaps entry '" +
                             printable(a.name) + "', whose data runs from byte " + std::to_string(a.data_offset) +
                             " to " + std::to_string(a.data_offset + a.compressed_size));
  }
  return entries;
}

}  // namespace

Expected<ZipArchive> ZipArchive::open(const std::string& path) {
  KILN_ASSIGN_OR_RETURN(std::shared_ptr<MappedFile> file, MappedFile::open(path));
  uint8_t* data = file->data();
  const size_t size = file->size();
  return from_bytes(Storage::borrow(data, size, std::move(file)), path);
}

Expected<ZipArchive> ZipArchive::from_bytes(std::shared_ptr<Storage> bytes, std::string display_name) {
  if (bytes == nullptr) return invalid_argument("zip '" + display_name + "': no bytes given");
  ZipArchive z;
  z.path_ = std::move(display_name);
  Parser parser({bytes->data(), bytes->nbytes()}, z.path_);
  KILN_ASSIGN_OR_RETURN(z.entries_, parser.parse());
  z.bytes_ = std::move(bytes);

  z.by_name_.resize(z.entries_.size());
  for (size_t i = 0; i < z.by_name_.size(); ++i) z.by_name_[i] = i;
  const auto& es = z.entries_;
  std::sort(z.by_name_.begin(), z.by_name_.end(), [&](size_t a, size_t b) { return es[a].name < es[b].name; });
  for (size_t k = 1; k < z.by_name_.size(); ++k) {
    const ZipEntry& a = es[z.by_name_[k - 1]];
    const ZipEntry& b = es[z.by_name_[k]];
    if (a.name == b.name)
      return format_error(FileFault::kDuplicateName, "zip '" + z.path_ + "': entry name '" + printable(a.name) +
                          "' appears twice (local headers at bytes " +
                          std::to_string(std::min(a.local_header_offset, b.local_header_offset)) + " and " +
                          std::to_string(std::max(a.local_header_offset, b.local_header_offset)) + ")");
  }
  return z;
}

const ZipEntry* ZipArchive::find(std::string_view name) const {
  auto it = std::lower_bound(by_name_.begin(), by_name_.end(), name,
                             [&](size_t i, std::string_view n) { return std::string_view(entries_[i].name) < n; });
  if (it == by_name_.end() || entries_[*it].name != name) return nullptr;
  return &entries_[*it];
}

Expected<std::span<const uint8_t>> ZipArchive::read(const ZipEntry& e, bool verify_crc) const {
  if (e.method != 0) {
    const std::string how = e.method == 8 ? "deflate" : "method " + std::to_string(e.method);
    return unsupported(
        "zip '" + path_ + "': entry '" + printable(e.name) + "' is compressed (" + how +
        "); compressed entries are not supported, only stored ones (PyTorch's writer stores every entry)");
  }
  const uint64_t total = bytes_ ? bytes_->nbytes() : 0;
  if (e.size != e.compressed_size || e.data_offset > total || e.size > total - e.data_offset)
    return invalid_argument("zip '" + path_ + "': entry '" + printable(e.name) + "' (data at byte " +
                            std::to_string(e.data_offset) + ", " + std::to_string(e.size) +
                            " bytes) does not lie inside this archive of " + std::to_string(total) + " bytes");
  std::span<const uint8_t> data(bytes_->data() + e.data_offset, static_cast<size_t>(e.size));
  if (verify_crc) {
    const uint32_t got = crc32(data);
    if (got != e.crc32)
      return format_error(FileFault::kChecksumMismatch, "zip '" + path_ + "': entry '" + printable(e.name) + "' (data at byte " +
                          std::to_string(e.data_offset) + ", " + std::to_string(e.size) + " bytes) has CRC-32 " +
                          hex(got) + " but the central directory records " + hex(e.crc32) + ": the archive is corrupt");
  }
  return data;
}

Expected<std::shared_ptr<Storage>> ZipArchive::storage(const ZipEntry& e, bool verify_crc) const {
  KILN_ASSIGN_OR_RETURN(std::span<const uint8_t> data, read(e, verify_crc));
  // The span points into bytes_, which is writable memory (a private mapping or an owned buffer).
  uint8_t* p = bytes_->data() + (data.data() - bytes_->data());
  return Storage::borrow(p, data.size(), bytes_);
}

}  // namespace kiln::frontend
