#include "base/section_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cassert>
#include <cerrno>
#include <cstring>
#include <limits>
#include <utility>

#include "base/crc32.h"
#include "base/message_text.h"

namespace kiln {

namespace {

// ---- layout (see section_file.h) ---------------------------------------------

constexpr size_t kMagicSize = SectionFileWriter::kMagicSize;
constexpr size_t kMaxNameLength = SectionFileWriter::kMaxNameLength;
constexpr uint64_t kAlignment = 64;

constexpr uint64_t kHeaderSize = 64;
constexpr uint64_t kVersionAt = 8;
constexpr uint64_t kCountAt = 12;
constexpr uint64_t kFileSizeAt = 16;
constexpr uint64_t kHeaderReservedAt = 24;

constexpr uint64_t kEntrySize = 96;
constexpr uint64_t kEntryNameLengthAt = 64;
constexpr uint64_t kEntryCrcAt = 68;
constexpr uint64_t kEntryOffsetAt = 72;
constexpr uint64_t kEntrySizeAt = 80;
constexpr uint64_t kEntryReservedAt = 88;

constexpr uint64_t kTrailerSize = 16;
constexpr uint64_t kTrailerReservedAt = 8;
constexpr uint64_t kTrailerCrcAt = 12;

static_assert(kEntryNameLengthAt == kMaxNameLength);
static_assert(kEntryReservedAt + 8 == kEntrySize);
static_assert(kTrailerCrcAt + 4 == kTrailerSize);
static_assert(kTrailerSize == 16, "SectionFileWriter::Layout::tail holds the trailer");

constexpr uint64_t align_up(uint64_t v) { return (v + kAlignment - 1) / kAlignment * kAlignment; }

// Padding before a section (less than kAlignment bytes).
constexpr std::array<uint8_t, kAlignment> kZeros{};

void put_u32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
void put_u64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint32_t get_u32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
uint64_t get_u64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// ---- message helpers ---------------------------------------------------------

// What a file with this magic is called in messages.
std::string kind_name(std::string_view magic) {
  if (magic == "KILNPLAN") return "kiln engine plan";
  if (magic == "KILNPROG") return "kiln program file";
  return "'" + printable(magic) + "' file";
}

// Why `name` cannot name a section, or empty when it can.
std::string name_problem(std::string_view name) {
  if (name.empty()) return "is empty";
  if (name.size() > kMaxNameLength)
    return "is " + std::to_string(name.size()) + " bytes long, more than " + std::to_string(kMaxNameLength);
  for (size_t i = 0; i < name.size(); ++i) {
    const auto c = static_cast<unsigned char>(name[i]);
    if (c < 0x20 || c >= 0x7f)
      return "has byte " + hex(c) + " at position " + std::to_string(i) + ", not printable ASCII";
  }
  return {};
}

bool all_zero(std::span<const uint8_t> b) {
  return std::all_of(b.begin(), b.end(), [](uint8_t v) { return v == 0; });
}

std::string errno_text(int err) { return std::string(std::strerror(err)) + " (errno " + std::to_string(err) + ")"; }

// ---- parsing -----------------------------------------------------------------

struct ParsedSection {
  std::string name;
  uint64_t offset;
  uint64_t size;
};

class Parser {
 public:
  Parser(std::span<const uint8_t> bytes, std::string_view magic, uint32_t max_version, std::string_view what)
      : b_(bytes), magic_(magic), max_version_(max_version), what_(what) {}

  // Checks everything; fills version and sections.
  Status parse(uint32_t* version, std::vector<ParsedSection>* sections) const;

 private:
  Status error(FileFault fault, const std::string& message) const {
    return format_error(fault, std::string(what_) + ": " + message);
  }
  Status error(const std::string& message) const { return error(FileFault::kMalformed, message); }
  const uint8_t* at(uint64_t offset) const { return b_.data() + offset; }

  Status check_magic() const;
  Status check_version(uint32_t version) const;
  Status check_size_and_checksum() const;
  Expected<ParsedSection> read_entry(uint32_t index, uint64_t table_end, uint64_t data_end) const;
  Status check_unique(const std::vector<ParsedSection>& sections) const;
  Status check_disjoint(const std::vector<ParsedSection>& sections) const;

  std::span<const uint8_t> b_;
  std::string_view magic_;
  uint32_t max_version_;
  std::string_view what_;
};

Status Parser::check_magic() const {
  const std::string_view found(reinterpret_cast<const char*>(b_.data()), kMagicSize);
  if (found == magic_) return Status::ok();
  std::string msg = "not a " + kind_name(magic_) + " (magic '" + printable(found) + "' at offset 0, expected '" +
                    printable(magic_) + "')";
  if (found == "KILNPLAN" || found == "KILNPROG") {
    msg += "; it is a " + kind_name(found);
  } else if (found.substr(0, 4) == std::string_view("PK\x03\x04", 4)) {
    msg += "; it looks like a zip archive, such as a PyTorch .pt2 export";
  }
  return error(FileFault::kBadMagic, msg);
}

Status Parser::check_version(uint32_t version) const {
  if (version == 0) return error(FileFault::kBadVersion, "format version 0 at offset " + std::to_string(kVersionAt) + " is not valid");
  if (version > max_version_)
    return format_error(FileFault::kBadVersion, std::string(what_) + ": " + kind_name(magic_) + " format version " + std::to_string(version) +
                       " is newer than this kiln reads (up to version " + std::to_string(max_version_) +
                       "); the file needs a newer kiln");
  return Status::ok();
}

// The declared size, the trailer and the whole-file CRC-32: after these, any
// remaining problem is in how the file was written, not in how it was stored.
Status Parser::check_size_and_checksum() const {
  const uint64_t size = b_.size();
  const uint64_t declared = get_u64(at(kFileSizeAt));
  if (declared != size)
    return error(declared > size ? FileFault::kTruncated : FileFault::kSizeMismatch,
                 "header (offset " + std::to_string(kFileSizeAt) + ") declares " + std::to_string(declared) +
                 " bytes but the file has " + std::to_string(size) + " bytes" +
                 (declared > size ? ": it is truncated" : ": it has bytes after its end"));
  const uint64_t trailer = size - kTrailerSize;
  if (std::memcmp(at(trailer), magic_.data(), kMagicSize) != 0)
    return error(FileFault::kTruncated, "no trailer: the last " + std::to_string(kTrailerSize) + " bytes (offset " + std::to_string(trailer) +
                 ") do not start with '" + printable(magic_) + "'; the file is corrupt or cut short");
  const uint32_t stored = get_u32(at(trailer + kTrailerCrcAt));
  const uint32_t actual = crc32(b_.first(static_cast<size_t>(trailer + kTrailerCrcAt)));
  if (stored != actual)
    return error(FileFault::kChecksumMismatch, "CRC-32 of the file is " + hex(actual) + " but its trailer (offset " +
                 std::to_string(trailer + kTrailerCrcAt) + ") records " + hex(stored) + "; the file is corrupt");
  if (!all_zero(b_.subspan(kHeaderReservedAt, kHeaderSize - kHeaderReservedAt)))
    return error("reserved header bytes at offsets " + std::to_string(kHeaderReservedAt) + ".." +
                 std::to_string(kHeaderSize - 1) + " are not zero");
  if (get_u32(at(trailer + kTrailerReservedAt)) != 0)
    return error("reserved trailer bytes at offset " + std::to_string(trailer + kTrailerReservedAt) + " are not zero");
  return Status::ok();
}

Expected<ParsedSection> Parser::read_entry(uint32_t index, uint64_t table_end, uint64_t data_end) const {
  const uint64_t e = kHeaderSize + kEntrySize * index;
  const std::string where = "section table entry " + std::to_string(index) + " (offset " + std::to_string(e) + ")";
  const uint32_t name_length = get_u32(at(e + kEntryNameLengthAt));
  if (name_length == 0 || name_length > kMaxNameLength)
    return error(where + ": name length " + std::to_string(name_length) + " is not 1.." +
                 std::to_string(kMaxNameLength));
  std::string name(reinterpret_cast<const char*>(at(e)), name_length);
  if (std::string why = name_problem(name); !why.empty())
    return error(where + ": section name '" + printable(name) + "' " + why);
  if (!all_zero(b_.subspan(e + name_length, kMaxNameLength - name_length)))
    return error(where + ": bytes after the name '" + name + "' are not zero");
  if (get_u64(at(e + kEntryReservedAt)) != 0) return error(where + ": reserved bytes are not zero");

  const std::string section = "section '" + name + "'";
  const uint64_t offset = get_u64(at(e + kEntryOffsetAt));
  const uint64_t size = get_u64(at(e + kEntrySizeAt));
  const std::string placed = section + " at offset " + std::to_string(offset) + " with size " + std::to_string(size);
  if (offset % kAlignment != 0) return error(placed + " does not start at a multiple of " + std::to_string(kAlignment));
  if (offset < table_end)
    return error(FileFault::kOverlap, placed + " starts inside the header and section table, which end at offset " +
                 std::to_string(table_end));
  if (offset > data_end || size > data_end - offset)
    return error(FileFault::kOutOfBounds, placed + " runs past the end of the section data at offset " + std::to_string(data_end) +
                 " (the file is " + std::to_string(b_.size()) + " bytes)");
  const uint32_t stored = get_u32(at(e + kEntryCrcAt));
  const uint32_t actual = crc32(b_.subspan(static_cast<size_t>(offset), static_cast<size_t>(size)));
  if (stored != actual)
    return error(FileFault::kChecksumMismatch, placed + " has CRC-32 " + hex(actual) + " but its table entry records " + hex(stored) +
                 "; the section is corrupt");
  return ParsedSection{std::move(name), offset, size};
}

Status Parser::check_unique(const std::vector<ParsedSection>& sections) const {
  std::vector<size_t> order(sections.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return sections[a].name != sections[b].name ? sections[a].name < sections[b].name : a < b;
  });
  for (size_t k = 1; k < order.size(); ++k) {
    if (sections[order[k - 1]].name == sections[order[k]].name)
      return error(FileFault::kDuplicateName, "section name '" + sections[order[k]].name + "' appears twice (table entries " +
                   std::to_string(order[k - 1]) + " and " + std::to_string(order[k]) + ")");
  }
  return Status::ok();
}

// Empty sections hold no bytes and so cannot overlap anything.
Status Parser::check_disjoint(const std::vector<ParsedSection>& sections) const {
  std::vector<const ParsedSection*> order;
  order.reserve(sections.size());
  for (const ParsedSection& s : sections)
    if (s.size != 0) order.push_back(&s);
  std::sort(order.begin(), order.end(),
            [](const ParsedSection* a, const ParsedSection* b) { return a->offset < b->offset; });
  for (size_t k = 1; k < order.size(); ++k) {
    const ParsedSection& a = *order[k - 1];
    const ParsedSection& b = *order[k];
    if (a.offset + a.size > b.offset)
      return error(FileFault::kOverlap, "section '" + b.name + "' at offset " + std::to_string(b.offset) + " overlaps section '" + a.name +
                   "', which runs from offset " + std::to_string(a.offset) + " to " +
                   std::to_string(a.offset + a.size));
  }
  return Status::ok();
}

Status Parser::parse(uint32_t* version, std::vector<ParsedSection>* sections) const {
  constexpr uint64_t kMinSize = kHeaderSize + kTrailerSize;
  // Say "not a ..." when the magic is wrong, however short the file.
  if (b_.size() >= kMagicSize) KILN_TRY(check_magic());
  if (b_.size() < kMinSize)
    return error(FileFault::kTruncated, "file is " + std::to_string(b_.size()) + " bytes, too small to be a " + kind_name(magic_) +
                 " (at least " + std::to_string(kMinSize) + ": a " + std::to_string(kHeaderSize) +
                 "-byte header and a " + std::to_string(kTrailerSize) + "-byte trailer)");
  *version = get_u32(at(kVersionAt));
  KILN_TRY(check_version(*version));
  KILN_TRY(check_size_and_checksum());

  // Bound the count by the bytes at hand before anything is allocated from it.
  const uint64_t data_end = b_.size() - kTrailerSize;
  const uint32_t count = get_u32(at(kCountAt));
  const uint64_t max_count = (data_end - kHeaderSize) / kEntrySize;
  if (count > max_count)
    return error(FileFault::kOutOfBounds, "header (offset " + std::to_string(kCountAt) + ") declares " + std::to_string(count) +
                 " sections, but a file of " + std::to_string(b_.size()) + " bytes has room for at most " +
                 std::to_string(max_count) + " table entries of " + std::to_string(kEntrySize) + " bytes");
  const uint64_t table_end = kHeaderSize + kEntrySize * count;

  sections->clear();
  sections->reserve(count);
  for (uint32_t i = 0; i < count; ++i) {
    KILN_ASSIGN_OR_RETURN(ParsedSection s, read_entry(i, table_end, data_end));
    sections->push_back(std::move(s));
  }
  KILN_TRY(check_unique(*sections));
  return check_disjoint(*sections);
}

}  // namespace

// ---- SectionFileWriter -------------------------------------------------------

SectionFileWriter::SectionFileWriter(std::string_view magic, uint32_t version) : magic_(magic), version_(version) {
  assert(magic.size() == kMagicSize && "a section file magic is exactly 8 bytes");
  assert(version >= 1 && "format versions start at 1");
  magic_.resize(kMagicSize, '\0');
}

Status SectionFileWriter::add(std::string name, std::vector<uint8_t> bytes) {
  if (std::string why = name_problem(name); !why.empty())
    return invalid_argument("section name '" + printable(name) + "' " + why + "; names are 1.." +
                            std::to_string(kMaxNameLength) + " printable ASCII characters");
  for (const Section& s : sections_)
    if (s.name == name) return invalid_argument("section name '" + name + "' is already used");
  if (sections_.size() == std::numeric_limits<uint32_t>::max())
    return invalid_argument("cannot add section '" + name + "': a section file holds at most " +
                            std::to_string(std::numeric_limits<uint32_t>::max()) + " sections");
  sections_.push_back({std::move(name), std::move(bytes)});
  return Status::ok();
}

Status SectionFileWriter::add(std::string name, std::span<const uint8_t> bytes) {
  return add(std::move(name), std::vector<uint8_t>(bytes.begin(), bytes.end()));
}

SectionFileWriter::Layout SectionFileWriter::layout() const {
  Layout l;
  const uint64_t table_end = kHeaderSize + kEntrySize * sections_.size();
  l.offsets.reserve(sections_.size());
  uint64_t cursor = table_end;
  for (const Section& s : sections_) {
    l.offsets.push_back(align_up(cursor));
    cursor = l.offsets.back() + s.bytes.size();
  }
  l.trailer = cursor;
  l.size = l.trailer + kTrailerSize;

  l.head.assign(static_cast<size_t>(table_end), 0);
  uint8_t* p = l.head.data();
  std::memcpy(p, magic_.data(), kMagicSize);
  put_u32(p + kVersionAt, version_);
  put_u32(p + kCountAt, static_cast<uint32_t>(sections_.size()));
  put_u64(p + kFileSizeAt, l.size);
  std::vector<uint32_t> crcs(sections_.size());
  for (size_t i = 0; i < sections_.size(); ++i) {
    const Section& s = sections_[i];
    uint8_t* e = p + kHeaderSize + kEntrySize * i;
    crcs[i] = crc32(s.bytes);
    std::memcpy(e, s.name.data(), s.name.size());
    put_u32(e + kEntryNameLengthAt, static_cast<uint32_t>(s.name.size()));
    put_u32(e + kEntryCrcAt, crcs[i]);
    put_u64(e + kEntryOffsetAt, l.offsets[i]);
    put_u64(e + kEntrySizeAt, s.bytes.size());
  }
  std::memcpy(l.tail.data(), magic_.data(), kMagicSize);
  // The whole-file CRC from the pieces' CRCs (each section is read once):
  // header and table, then per section its zero padding and its bytes, then
  // the trailer up to its CRC field.
  uint32_t file_crc = crc32(l.head);
  uint64_t at = table_end;
  for (size_t i = 0; i < sections_.size(); ++i) {
    const uint64_t pad = l.offsets[i] - at;
    file_crc = crc32({kZeros.data(), static_cast<size_t>(pad)}, file_crc);
    file_crc = crc32_combine(file_crc, crcs[i], sections_[i].bytes.size());
    at = l.offsets[i] + sections_[i].bytes.size();
  }
  file_crc = crc32({l.tail.data(), static_cast<size_t>(kTrailerCrcAt)}, file_crc);
  put_u32(l.tail.data() + kTrailerCrcAt, file_crc);
  return l;
}

std::vector<uint8_t> SectionFileWriter::finish() const {
  const Layout l = layout();
  std::vector<uint8_t> out(static_cast<size_t>(l.size), 0);
  std::memcpy(out.data(), l.head.data(), l.head.size());
  for (size_t i = 0; i < sections_.size(); ++i)
    if (!sections_[i].bytes.empty())
      std::memcpy(out.data() + l.offsets[i], sections_[i].bytes.data(), sections_[i].bytes.size());
  std::memcpy(out.data() + l.trailer, l.tail.data(), l.tail.size());
  return out;
}

Status SectionFileWriter::write(const std::string& path) const {
  const Layout l = layout();

  // A name no other writer in this process or another one picks.
  static std::atomic<uint64_t> counter{0};
  const std::string tmp = path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
  int fd;
  do {
    fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) return io_error("cannot write '" + path + "': cannot create '" + tmp + "': " + errno_text(errno));

  auto fail = [&](const std::string& doing, int err) {
    if (fd >= 0) ::close(fd);
    ::unlink(tmp.c_str());
    return io_error("cannot write '" + path + "': " + doing + ": " + errno_text(err));
  };
  // The pieces in file order, straight from the sections (no whole-file image).
  auto put = [&](const uint8_t* p, size_t left) -> int {
    while (left > 0) {
      const ssize_t n = ::write(fd, p, left);
      if (n < 0) {
        if (errno == EINTR) continue;
        return errno;
      }
      p += n;
      left -= static_cast<size_t>(n);
    }
    return 0;
  };
  int err = put(l.head.data(), l.head.size());
  uint64_t at = l.head.size();
  for (size_t i = 0; i < sections_.size() && err == 0; ++i) {
    err = put(kZeros.data(), static_cast<size_t>(l.offsets[i] - at));
    if (err == 0) err = put(sections_[i].bytes.data(), sections_[i].bytes.size());
    at = l.offsets[i] + sections_[i].bytes.size();
  }
  if (err == 0) err = put(l.tail.data(), l.tail.size());
  if (err != 0) return fail("write to '" + tmp + "' failed", err);
  const int closed = ::close(fd);
  fd = -1;
  if (closed != 0) return fail("closing '" + tmp + "' failed", errno);
  if (::rename(tmp.c_str(), path.c_str()) != 0) return fail("renaming '" + tmp + "' to it failed", errno);
  return Status::ok();
}

// ---- SectionFile -------------------------------------------------------------

Expected<SectionFile> SectionFile::parse(std::span<const uint8_t> bytes, std::string_view magic, uint32_t max_version,
                                         std::string_view what) {
  if (magic.size() != kMagicSize)
    return invalid_argument(std::string(what) + ": a section file magic is " + std::to_string(kMagicSize) +
                            " bytes, not " + std::to_string(magic.size()) + " ('" + printable(magic) + "')");
  if (max_version == 0) return invalid_argument(std::string(what) + ": the newest readable version must be at least 1");

  uint32_t version = 0;
  std::vector<ParsedSection> parsed;
  KILN_TRY(Parser(bytes, magic, max_version, what).parse(&version, &parsed));

  SectionFile f;
  f.bytes_ = bytes;
  f.what_ = what;
  f.version_ = version;
  f.sections_.reserve(parsed.size());
  for (ParsedSection& s : parsed) f.sections_.push_back({std::move(s.name), s.offset, s.size});
  f.by_name_.resize(f.sections_.size());
  for (size_t i = 0; i < f.by_name_.size(); ++i) f.by_name_[i] = i;
  std::sort(f.by_name_.begin(), f.by_name_.end(),
            [&](size_t a, size_t b) { return f.sections_[a].name < f.sections_[b].name; });
  return f;
}

const SectionFile::Section* SectionFile::find(std::string_view name) const {
  auto it = std::lower_bound(by_name_.begin(), by_name_.end(), name,
                             [&](size_t i, std::string_view n) { return std::string_view(sections_[i].name) < n; });
  if (it == by_name_.end() || sections_[*it].name != name) return nullptr;
  return &sections_[*it];
}

std::vector<std::string> SectionFile::names() const {
  std::vector<std::string> out;
  out.reserve(sections_.size());
  for (const Section& s : sections_) out.push_back(s.name);
  return out;
}

bool SectionFile::has(std::string_view name) const { return find(name) != nullptr; }

Expected<std::span<const uint8_t>> SectionFile::section(std::string_view name) const {
  const Section* s = find(name);
  if (s == nullptr) {
    std::string present;
    for (const Section& t : sections_) present += (present.empty() ? "" : ", ") + t.name;
    return not_found(what_ + ": no section '" + printable(name) + "' (it has " +
                     (present.empty() ? std::string("no sections") : "sections " + present) + ")");
  }
  return bytes_.subspan(static_cast<size_t>(s->offset), static_cast<size_t>(s->size));
}

}  // namespace kiln
