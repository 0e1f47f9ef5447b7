"""kiln: an ahead-of-time compiler and runtime for programs exported with torch.export.

    import kiln
    compiled = kiln.compile(model, example_inputs=(x,))   # or an ExportedProgram
    y = compiled(x)
    kiln.save(compiled, "model.kiln")                    # runs with the `kiln` CLI too
    again = kiln.load("model.kiln")

    torch.compile(model, backend="kiln", options={"min_block_size": 3})

`kiln.Program` and `kiln.Session` (the C++ API) work without PyTorch: they take
and return DLPack arrays (numpy, PyTorch, ...). Everything else needs PyTorch.
"""

from ._C import KilnError, Program, Session, __version__, known_op

__all__ = ["KilnError", "Program", "Session", "CompiledModule", "compile", "save", "load", "cli_path", "__version__"]


def cli_path():
    """Path of the `kiln` command-line tool installed with this package (None when absent)."""
    import os

    path = os.path.join(os.path.dirname(__file__), "bin", "kiln")
    return path if os.access(path, os.X_OK) else None


def __getattr__(name):
    # The PyTorch-facing parts load PyTorch only when first used.
    if name in ("compile", "save", "load", "CompiledModule"):
        from . import _torch

        return getattr(_torch, name)
    raise AttributeError(f"module 'kiln' has no attribute {name!r}")
