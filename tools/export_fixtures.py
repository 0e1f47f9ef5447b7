#!/usr/bin/env python3
"""Export the model fixtures that kiln's tests compare against.

Every fixture is a real model (torchvision / transformers classes, or a small
hand-written stateful module) with small, seeded random weights, exported with
``torch.export`` in eval mode. For each fixture NAME the script writes, into
the folder given by ``--out``:

  NAME.pt2            ``torch.export.export(...)`` saved with ``torch.export.save``
                      (the default TRAINING dialect: in-place ops stay in the graph)
  NAME.aten.pt2       the same program after ``ep.run_decompositions()`` (core-ATen
                      dialect: functional, buffer_mutation outputs first)
  NAME.io.safetensors inputs and the outputs that the *eager* module computed:
                        input.<i> / output.<j>                  one call
                        step<k>.input.<i> / step<k>.output.<j>  a sequence of calls
                                                                on one session whose
                                                                buffers carry over
                        final.buffer.<fqn>                      a mutated buffer's
                                                                value after the last step
                      <i> / <j> index the user inputs / user outputs flattened with
                      torch.utils._pytree, in the exported graph's order.
  manifest.json       per fixture: files, description, source, torch version,
                      dynamic dims and ranges, statefulness, the largest output
                      and how the weights were conditioned, suggested float
                      tolerances (with the measured errors behind them), and the
                      op histogram of each dialect's serialized graph.

The fixtures and the export live in the package beside this script
(``tools/fixtures/``): ``base`` (what a fixture is, the registry, weight
conditioning), one module per family of builders (``vision``, ``text``,
``llama``, ``numerics``, ``stateful``, ``data_dependent``), ``export`` (one
fixture exported, run and measured), ``report`` and ``cli``.

It also regenerates ``OPS.md`` next to the ``--out`` folder: the union of op
targets over every ``torch*/manifest.json`` found there.

Usage (one virtualenv per torch version; see tools/requirements-fixtures.txt):

  /opt/venv-t211/bin/python tools/export_fixtures.py --out tests/fixtures/torch2.11
  /opt/venv-t215/bin/python tools/export_fixtures.py --out tests/fixtures/torch2.15

  --only NAME[,NAME...]   export only these fixtures (the manifest keeps the
                          entries of the others that are already there)
  --list                  list the fixture names and exit

Everything runs on the CPU in float32 unless a fixture says otherwise. Weights
are seeded from the fixture name, then conditioned so that outputs do not
vanish (condition_weights: noise for parameters whose entries are all equal,
BatchNorm statistics measured on random batches); a fixture whose largest
output is below 1e-2 is refused. A re-run with the same package versions
reproduces the same files byte for byte, except each archive's
.data/serialization_id (torch.export.save draws it at random) and
llama_decode.*pt2: its strict (dynamo) export writes Python object ids into
"nn_module_stack" keys. The graphs name the modules' classes by where they
are defined (fixtures.vision.NarrowResNet, ...). To keep the files small, the nodes'
debug metadata ("stack_trace", "from_node") is removed before saving, except
in the small custom fixtures, which keep everything torch.export wrote
(the manifest says which).

How the suggested tolerances are chosen: each fixture is also run in float64
(float32 for the reduced-precision fixture) as a reference. The suggestion is
the tightest (rtol, atol) from a fixed ladder such that
``margin * |eager - reference| <= atol + rtol * |reference|`` element-wise,
and likewise for the exported program's (``ep.module()``) difference from
eager, with ``margin`` = 10 (4 for bfloat16) and floors of rtol 1e-4 / atol
1e-5 (2e-2 / 1e-2 for bfloat16, about two ulps). Integer and bool outputs must
match exactly.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from fixtures.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(description=__doc__))
