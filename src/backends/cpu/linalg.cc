#include "backends/cpu/kernel.h"

namespace kiln::cpu {

void register_linalg_kernels(KernelRegistry& r) { (void)r; }

}  // namespace kiln::cpu
