// kiln's whole C++ API: the runtime (kiln/runtime.h: load a .kiln, sessions),
// the compiler (kiln/compiler.h: compile a .pt2 into a program) and decoding
// (kiln/llm.h). A program that only runs compiled programs includes
// kiln/runtime.h and links kiln::runtime.
#pragma once

#include "kiln/compiler.h"
#include "kiln/llm.h"
#include "kiln/runtime.h"
