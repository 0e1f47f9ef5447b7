#include "kiln/status.h"

namespace kiln {

const char* error_code_name(ErrorCode code) {
  switch (code) {
    case ErrorCode::kOk: return "ok";
    case ErrorCode::kInvalidArgument: return "invalid argument";
    case ErrorCode::kFormat: return "format error";
    case ErrorCode::kUnsupported: return "unsupported";
    case ErrorCode::kNotFound: return "not found";
    case ErrorCode::kIo: return "I/O error";
    case ErrorCode::kInternal: return "internal error";
  }
  return "unknown error";
}

const char* file_fault_name(FileFault fault) {
  switch (fault) {
    case FileFault::kNone: return "none";
    case FileFault::kMalformed: return "malformed";
    case FileFault::kBadMagic: return "bad magic";
    case FileFault::kBadVersion: return "bad version";
    case FileFault::kSchemaVersion: return "unsupported schema version";
    case FileFault::kTruncated: return "truncated";
    case FileFault::kOutOfBounds: return "out of bounds";
    case FileFault::kOverlap: return "overlapping ranges";
    case FileFault::kSizeOverflow: return "size overflow";
    case FileFault::kSizeMismatch: return "size mismatch";
    case FileFault::kUnknownDtype: return "unknown dtype";
    case FileFault::kUnknownOp: return "unknown op";
    case FileFault::kDanglingReference: return "dangling reference";
    case FileFault::kDuplicateName: return "duplicate name";
    case FileFault::kPathEscape: return "path escape";
    case FileFault::kChecksumMismatch: return "checksum mismatch";
  }
  return "unknown fault";
}

Status as_format_error(const Status& s, const std::string& context) {
  if (s.is_ok()) return s;
  FileFault fault = s.fault();
  if (s.code() == ErrorCode::kNotFound) fault = FileFault::kDanglingReference;
  Status out = s.code() == ErrorCode::kFormat || s.code() == ErrorCode::kNotFound ? Status(fault, s.message())
                                                                                  : format_error(s.message());
  return context.empty() ? out : std::move(out).with_context(context);
}

std::string Status::to_string() const {
  if (is_ok()) return "ok";
  if (code_ == ErrorCode::kFormat && fault_ != FileFault::kMalformed)
    return std::string(error_code_name(code_)) + " (" + file_fault_name(fault_) + "): " + message_;
  return std::string(error_code_name(code_)) + ": " + message_;
}

}  // namespace kiln
