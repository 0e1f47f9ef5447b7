// kiln::compile and kiln::compile_methods: .pt2 archives compiled into
// programs (kiln/compiler.h); the runtime assembles and runs them.
#include "compiler/compiler.h"
#include "ir/ops.h"
#include "kiln/compiler.h"
#include "program/kiln_file.h"
#include "runtime/program_impl.h"

namespace kiln {

bool is_known_op(std::string_view target) { return ir::op_from_target(target).has_value(); }

Expected<std::shared_ptr<const Program>> compile(const std::string& path, const LoadOptions& options) {
  std::vector<program::CompiledMethod> methods;
  if (is_program_file(path)) {
    KILN_ASSIGN_OR_RETURN(methods, program::load_program_methods(path));
  } else {
    KILN_TRY(compiler::compile_method_file("forward", path, options, methods));
  }
  return assemble_program(std::move(methods), path, options.load_engines);
}

Expected<std::shared_ptr<const Program>> compile_methods(const std::vector<MethodFile>& files,
                                                         const LoadOptions& options) {
  if (files.empty()) return invalid_argument("give at least one method");
  std::vector<program::CompiledMethod> methods;
  std::string what;
  for (const MethodFile& f : files) {
    if (f.name.empty()) return invalid_argument(f.path + ": the method needs a name");
    if (f.name.find('@') != std::string::npos)
      return invalid_argument("method name '" + f.name + "': '@' is kept for shape profiles (NAME@k)");
    for (const program::CompiledMethod& m : methods)
      if (m.name == f.name) return invalid_argument("method '" + f.name + "' is given twice");
    if (is_program_file(f.path))
      return invalid_argument(f.path + ": methods are compiled from .pt2 files (this is a compiled .kiln program)");
    KILN_TRY(compiler::compile_method_file(f.name, f.path, options, methods));
    what += (what.empty() ? "" : " + ") + f.path;
  }
  return assemble_program(std::move(methods), what, options.load_engines);
}

}  // namespace kiln
