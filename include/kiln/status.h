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

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(ErrorCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok() { return {}; }

  bool is_ok() const { return code_ == ErrorCode::kOk; }
  explicit operator bool() const { return is_ok(); }
  ErrorCode code() const { return code_; }
  const std::string& message() const { return message_; }

  // Prefixes the message with where the error happened: "context: message".
  Status with_context(const std::string& context) const& {
    if (is_ok()) return *this;
    return {code_, context + ": " + message_};
  }
  Status with_context(const std::string& context) && {
    if (is_ok()) return std::move(*this);
    message_ = context + ": " + message_;
    return std::move(*this);
  }

  std::string to_string() const;

 private:
  ErrorCode code_ = ErrorCode::kOk;
  std::string message_;
};

inline Status invalid_argument(std::string m) { return {ErrorCode::kInvalidArgument, std::move(m)}; }
inline Status format_error(std::string m) { return {ErrorCode::kFormat, std::move(m)}; }
inline Status unsupported(std::string m) { return {ErrorCode::kUnsupported, std::move(m)}; }
inline Status not_found(std::string m) { return {ErrorCode::kNotFound, std::move(m)}; }
inline Status io_error(std::string m) { return {ErrorCode::kIo, std::move(m)}; }
inline Status internal_error(std::string m) { return {ErrorCode::kInternal, std::move(m)}; }

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
