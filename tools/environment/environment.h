// kiln's settings from the environment variables kiln's CLI, Python package
// and test programs read (docs/CLI.md): the one place they are read.
#pragma once

#include "kiln/settings.h"

namespace kiln {

Settings settings_from_environment();

}  // namespace kiln
