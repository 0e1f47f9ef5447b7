// kiln's one error model: Status and Expected<T>.
//
// Library code never throws across its boundary and never aborts on bad
// input. A failing function returns a Status (or an Expected<T> holding one)
// whose message says what was wrong and where; callers add context as the
// error travels up with KILN_TRY / KILN_ASSIGN_OR_RETURN.
#pragma once

#include <cassert>
#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace kiln {

enum class ErrorCode {
  kOk = 0,
  kInvalidArgument,  // caller passed something wrong (shape, dtype, option)
  kFormat,           // a file or blob is malformed
  kUnsupported,      // valid input that kiln does not handle (yet)
  kNotFound,         // a named thing (file, entry, tensor) is missing
  kIo,               // the operating system refused (open, read, write)
  kInternal,         // a broken invariant inside kiln
};

const char* error_code_name(ErrorCode code);

// Why a file or blob was refused. Every kFormat error carries one, so that a
// caller (or a test) can tell "this archive is cut short" from "this archive
// names an entry twice" without reading the message. kMalformed is the rest:
// bad syntax, a missing or mistyped field, a value out of its allowed set.
enum class FileFault {
  kNone = 0,           // not a format error
  kMalformed,          // syntax, missing or mistyped field, value not allowed
  kBadMagic,           // not the kind of file it claims to be
  kBadVersion,         // a container version kiln does not read
  kSchemaVersion,      // a schema (export, plan, program) version kiln does not read
  kTruncated,          // the data ends inside a declared record or entry
  kOutOfBounds,        // an offset or size points past the end of what holds it
  kOverlap,            // ranges that must be disjoint overlap, or a range's end overflows
  kSizeOverflow,       // a product of sizes (elements, bytes) overflows
  kSizeMismatch,       // element count times element size differs from the bytes given
  kUnknownDtype,       // a dtype name or code kiln does not know
  kUnknownOp,          // an operator or layer kind kiln does not know
  kDanglingReference,  // a reference (value, tensor, entry, section) to nothing
  kDuplicateName,      // one name declared twice
  kPathEscape,         // a path that would leave the archive or directory root
  kChecksumMismatch,   // stored and computed checksums differ
};

// Short name of a fault, e.g. "truncated" (used in messages and tests).
const char* file_fault_name(FileFault fault);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(ErrorCode code, std::string message)
      : code_(code), fault_(code == ErrorCode::kFormat ? FileFault::kMalformed : FileFault::kNone),
        message_(std::move(message)) {}
  // A format error of a named kind.
  Status(FileFault fault, std::string message)
      : code_(ErrorCode::kFormat), fault_(fault == FileFault::kNone ? FileFault::kMalformed : fault),
        message_(std::move(message)) {}

  static Status ok() { return {}; }

  bool is_ok() const { return code_ == ErrorCode::kOk; }
  explicit operator bool() const { return is_ok(); }
  ErrorCode code() const { return code_; }
  // For a format error, what was wrong with the file; kNone otherwise.
  FileFault fault() const { return fault_; }
  const std::string& message() const { return message_; }

  // Prefixes the message with where the error happened: "context: message".
  Status with_context(const std::string& context) const& {
    if (is_ok()) return *this;
    Status s = *this;
    s.message_ = context + ": " + message_;
    return s;
  }
  Status with_context(const std::string& context) && {
    if (is_ok()) return std::move(*this);
    message_ = context + ": " + message_;
    return std::move(*this);
  }

  std::string to_string() const;

 private:
  ErrorCode code_ = ErrorCode::kOk;
  FileFault fault_ = FileFault::kNone;
  std::string message_;
};

inline Status invalid_argument(std::string m) { return {ErrorCode::kInvalidArgument, std::move(m)}; }
inline Status format_error(std::string m) { return {ErrorCode::kFormat, std::move(m)}; }
inline Status format_error(FileFault fault, std::string m) { return {fault, std::move(m)}; }
inline Status unsupported(std::string m) { return {ErrorCode::kUnsupported, std::move(m)}; }
inline Status not_found(std::string m) { return {ErrorCode::kNotFound, std::move(m)}; }
inline Status io_error(std::string m) { return {ErrorCode::kIo, std::move(m)}; }
inline Status internal_error(std::string m) { return {ErrorCode::kInternal, std::move(m)}; }

// `s` as a format error, for an error found while reading a file: a format
// error keeps its fault, a missing thing (kNotFound) becomes a dangling
// reference, anything else is malformed. A non-empty `context` goes in front.
Status as_format_error(const Status& s, const std::string& context = {});

// Either a value or a non-ok Status.
template <typename T>
class [[nodiscard]] Expected {
 public:
  Expected(T value) : v_(std::move(value)) {}  // NOLINT(google-explicit-constructor)
  Expected(Status status) : v_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    assert(!std::get<Status>(v_).is_ok() && "Expected<T> built from an ok Status");
  }

  bool has_value() const { return v_.index() == 0; }
  explicit operator bool() const { return has_value(); }

  T& value() & { return std::get<0>(v_); }
  const T& value() const& { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

  const Status& status() const& {
    static const Status kOk;
    return has_value() ? kOk : std::get<1>(v_);
  }
  Status status() && { return has_value() ? Status() : std::get<1>(std::move(v_)); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace kiln

#define KILN_CONCAT_INNER(a, b) a##b
#define KILN_CONCAT(a, b) KILN_CONCAT_INNER(a, b)

// Returns the Status from the enclosing function if `expr` failed.
#define KILN_TRY(expr)                                 \
  do {                                                 \
    ::kiln::Status kiln_try_status_ = (expr);          \
    if (!kiln_try_status_.is_ok()) return kiln_try_status_; \
  } while (0)

// Same, adding "context: " in front of the message.
#define KILN_TRY_CTX(expr, context)                                        \
  do {                                                                     \
    ::kiln::Status kiln_try_status_ = (expr);                              \
    if (!kiln_try_status_.is_ok()) return std::move(kiln_try_status_).with_context(context); \
  } while (0)

#define KILN_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                               \
  if (!tmp.has_value()) return std::move(tmp).status(); \
  lhs = std::move(tmp).value()

// `KILN_ASSIGN_OR_RETURN(auto x, make_x());` declares x or returns the error.
#define KILN_ASSIGN_OR_RETURN(lhs, expr) \
  KILN_ASSIGN_OR_RETURN_IMPL(KILN_CONCAT(kiln_expected_, __LINE__), lhs, expr)
