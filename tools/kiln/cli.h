// Shared pieces of the kiln command line: argument parsing and exit codes.
#pragma once

#include <cstdio>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "kiln/status.h"

namespace kiln::cli {

// Exit codes: 0 success, 1 a check found a mismatch, 2 any error.
constexpr int kExitOk = 0;
constexpr int kExitMismatch = 1;
constexpr int kExitError = 2;

// Positional arguments and --options (`--name value` or `--name=value`;
// flags listed in `flags` take no value).
struct Args {
  std::vector<std::string> positional;
  std::map<std::string, std::vector<std::string>> options;

  std::optional<std::string> get(const std::string& name) const {
    auto it = options.find(name);
    if (it == options.end() || it->second.empty()) return std::nullopt;
    return it->second.back();
  }
  bool flag(const std::string& name) const { return options.count(name) > 0; }
};

Expected<Args> parse_args(int argc, char** argv, int first, const std::vector<std::string>& valued,
                          const std::vector<std::string>& flags);
Expected<double> parse_double(const std::string& option, const std::string& text);

// The options every command that compiles takes (--device, --min-block-size,
// --fallback-ops valued; --require-full-compilation a flag).
extern const std::vector<std::string> kCompileValued;
extern const std::vector<std::string> kCompileFlags;
// Load options from those; `progress` prints build progress to stderr.
Expected<LoadOptions> load_options(const Args& a, bool progress);
// Loads MODEL (.pt2 compiled with the options, or .kiln); a .kiln built for
// another device than an explicit --device is refused; --method NAME picks
// one method of a program that has several.
Expected<std::shared_ptr<const Program>> load_model(const std::string& path, const Args& a, LoadOptions options);
// Loads MODEL with every method (load_model narrows to --method NAME when given).
Expected<std::shared_ptr<const Program>> load_program(const std::string& path, const Args& a, LoadOptions options);
// Concatenates lists for parse_args.
std::vector<std::string> with(std::vector<std::string> a, const std::vector<std::string>& b);

// Prints "kiln: error: <message>" to stderr and returns kExitError.
int fail(const Status& s);

int run_compile(int argc, char** argv);
int run_check(int argc, char** argv);
int run_run(int argc, char** argv);
int run_inspect(int argc, char** argv);
int run_bench(int argc, char** argv);
int run_generate(int argc, char** argv);

}  // namespace kiln::cli
