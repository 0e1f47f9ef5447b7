// Loads a .pt2 archive written by torch.export.save (PyTorch 2.9+ raw-blob
// layout) into an ir::Module, without Python and without unpickling.
#pragma once

#include <memory>
#include <string>

#include "frontend/zip_reader.h"
#include "ir/graph.h"
#include "kiln/status.h"

namespace kiln::frontend {

// Reads the archive at `path`: container checks, the model JSON, weights and
// constants (sharing storage where the archive shares blobs), the signature
// and symbol ranges. Errors name the file, the entry and what is wrong.
Expected<ir::Module> load_pt2(const std::string& path);
// The same for an archive in memory (`display_name` names it in messages).
Expected<ir::Module> parse_pt2(std::shared_ptr<Storage> bytes, const std::string& display_name);
Expected<ir::Module> load_pt2_archive(ZipArchive zip, const std::string& path);

// Builds a module from the model JSON text alone (no weights), for tests and
// tools; weights named by the signature are left out of Module::weights.
Expected<ir::Module> parse_exported_program_json(std::string_view json_text, const std::string& display_name);

}  // namespace kiln::frontend
