"""The torch.compile backend: torch.compile(model, backend="kiln", options={...}).

Each graph dynamo captures is exported (parameters and buffers become the
program's constants, dimensions dynamo made symbolic become dynamic ones) and
compiled with kiln.compile; `options` are its keyword arguments. A call with
other sizes inside a dynamic range runs the same engines without compiling
again. Inference only: kiln computes no gradients.
"""

import warnings

import torch

from . import _torch

# How many graphs this backend has compiled in this process.
compilations = 0


def _is_constant(node, example):
    if isinstance(example, torch.nn.Parameter):
        return True
    grapharg = node.meta.get("grapharg")
    source = getattr(grapharg, "source", None)
    if source is None:
        return False
    from torch._dynamo.source import is_from_unspecialized_param_buffer_source

    return bool(is_from_unspecialized_param_buffer_source(source))


def _symbol(value):
    if isinstance(value, torch.SymInt):
        expr = value.node.expr
        if getattr(expr, "is_Symbol", False):
            return expr
    return None


class _Exportable(torch.nn.Module):
    """dynamo's graph with tensor inputs only: parameters and buffers become
    constants, symbolic sizes are read off the tensors that carry them."""

    def __init__(self, gm, plan, constants):
        super().__init__()
        self.gm = gm
        self.plan = plan
        for name, value in constants.items():
            self.register_buffer(name, value.detach())

    def forward(self, *tensors):
        args = []
        for kind, a, b in self.plan:
            if kind == "input":
                args.append(tensors[a])
            elif kind == "constant":
                args.append(getattr(self, a))
            else:
                args.append(tensors[a].shape[b])
        return self.gm(*args)


def kiln_backend(gm, example_inputs, **kwargs):
    global compilations
    options = dict(kwargs.get("options") or {})
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    plan, constants, user = [], {}, []
    dims = {}  # symbol -> (user input index, dimension)
    for node, example in zip(placeholders, example_inputs):
        value = node.meta.get("example_value", example)
        if isinstance(example, torch.Tensor) and _is_constant(node, example):
            name = f"c{len(constants)}"
            constants[name] = example
            plan.append(("constant", name, None))
        elif isinstance(example, torch.Tensor):
            if isinstance(value, torch.Tensor):
                for d, size in enumerate(value.shape):
                    sym = _symbol(size)
                    if sym is not None:
                        dims.setdefault(sym, (len(user), d))
            plan.append(("input", len(user), None))
            user.append(example)
        else:
            plan.append(("symbol", _symbol(value), None))
    for i, (kind, sym, _) in enumerate(plan):
        if kind != "symbol":
            continue
        if sym not in dims:
            warnings.warn("kiln: a graph input is a size that no tensor input carries; running this graph eagerly")
            return gm.forward
        plan[i] = ("size",) + dims[sym]

    dynamic = []
    for i, t in enumerate(user):
        marked = {d: torch.export.Dim.DYNAMIC for sym, (j, d) in dims.items() if j == i}
        dynamic.append(marked or None)
    module = _Exportable(gm, plan, constants)
    with torch.no_grad():
        ep = torch.export.export(module, tuple(user), dynamic_shapes=tuple(dynamic) if dims else None, strict=False)
    if "device" not in options:
        options["device"] = "cuda" if any(t.is_cuda for t in user) else "cpu"
    compiled = _torch.compile(ep, tuple(user), **options)
    compilations += 1
    inputs_at = [i for i, (kind, _, _) in enumerate(plan) if kind == "input"]

    def run(*args):
        return compiled(*[args[i] for i in inputs_at])

    run.kiln_module = compiled
    return run
