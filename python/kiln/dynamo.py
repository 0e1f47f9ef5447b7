"""The torch.compile backend: torch.compile(model, backend="kiln", options={...}).

Each graph dynamo captures is exported (parameters and buffers become the
program's constants, dimensions dynamo made symbolic become dynamic ones) and
compiled with kiln.compile; `options` are its keyword arguments. A call with
other sizes inside a dynamic range runs the same engines without compiling
again. Inference only: kiln computes no gradients.
"""

import copy
import warnings

import torch

from . import _torch

# How many graphs this backend has compiled in this process.
compilations = 0


def _is_constant(node, example):
    """Parameters, buffers and attributes of the module (its state, not inputs)."""
    if isinstance(example, torch.nn.Parameter):
        return True
    source = getattr(node.meta.get("grapharg"), "source", None)
    if source is None:
        return False
    name = source.name() if callable(source.name) else source.name
    return name.startswith("L['self']") or name.startswith("G[")


def _symbol(value):
    if isinstance(value, torch.SymInt):
        expr = value.node.expr
        if getattr(expr, "is_Symbol", False):
            return expr
    return None


def _specialize_scalars(gm, example_inputs):
    """Module attributes that are Python numbers reach the graph as 0-d tensors
    read with .item() (dynamo does that under dynamic=True); kiln compiles for
    the module's values, so each .item() becomes the number itself."""
    changed = False
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for node, example in zip(placeholders, example_inputs):
        if not (isinstance(example, torch.Tensor) and example.dim() == 0 and _is_constant(node, example)):
            continue
        if not node.users or any(u.op != "call_method" or u.target != "item" for u in node.users):
            continue
        value = example.item()
        for item in list(node.users):
            for user in list(item.users):
                user.args = torch.fx.node.map_arg(user.args, lambda a: value if a is item else a)
                user.kwargs = torch.fx.node.map_arg(user.kwargs, lambda a: value if a is item else a)
            gm.graph.erase_node(item)
            changed = True
    if changed:
        gm.recompile()


def kiln_backend(gm, example_inputs, **kwargs):
    global compilations
    options = dict(kwargs.get("options") or {})
    # dynamo keeps its graph: work on a copy (sharing the module's tensors).
    gm = torch.fx.GraphModule(gm, copy.deepcopy(gm.graph))
    _specialize_scalars(gm, example_inputs)
    # The graph is rewritten to take the tensor inputs only: parameters, buffers
    # and attributes become constants, symbolic sizes are read off the tensors
    # that carry them.
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    kinds, user = [], []
    dims = {}  # symbol -> (placeholder, user input index, dimension)
    for node, example in zip(placeholders, example_inputs):
        value = node.meta.get("example_value", example)
        if not isinstance(example, torch.Tensor):
            kinds.append("size")
        elif _is_constant(node, example):
            kinds.append("constant")
        else:
            if isinstance(value, torch.Tensor):
                for d, size in enumerate(value.shape):
                    sym = _symbol(size)
                    if sym is not None:
                        dims.setdefault(sym, (node, len(user), d))
            kinds.append("input")
            # Export gets its own tensors: it must not mark the ones dynamo guards.
            user.append(example.detach().clone())
    for node, example, kind in zip(placeholders, example_inputs, kinds):
        if kind == "size" and _symbol(node.meta.get("example_value", example)) not in dims:
            warnings.warn("kiln: a graph input is a number no tensor input's size gives; running this graph eagerly")
            return gm.forward
    inputs_at = [i for i, kind in enumerate(kinds) if kind == "input"]
    last_input = placeholders[inputs_at[-1]] if inputs_at else None
    for i, (node, example, kind) in enumerate(zip(placeholders, example_inputs, kinds)):
        if kind == "constant":
            name = f"_kiln_constant_{i}"
            gm.register_buffer(name, example.detach())
            with gm.graph.inserting_before(node):
                got = gm.graph.get_attr(name)
        elif kind == "size":
            carrier, _, d = dims[_symbol(node.meta.get("example_value", example))]
            with gm.graph.inserting_after(last_input):
                got = gm.graph.call_function(torch.ops.aten.sym_size.int, (carrier, d))
        else:
            continue
        node.replace_all_uses_with(got)
        gm.graph.erase_node(node)
    gm.graph.lint()
    gm.recompile()

    # Dynamic dimensions by tensor, whatever the structure of the graph's inputs.
    marked = {}
    for _, j, d in dims.values():
        marked.setdefault(j, {})[d] = torch.export.Dim.DYNAMIC
    dynamic = torch.export.ShapesCollection()
    for j, spec in marked.items():
        dynamic[user[j]] = spec
    # Exported outside dynamo's tracing context, so that export's own shape
    # guards do not land among the guards of the frame dynamo is compiling.
    with torch.no_grad(), torch._guards.tracing(None):
        ep = torch.export.export(gm, tuple(user), dynamic_shapes=dynamic if dims else None, strict=False)
    if "device" not in options:
        options["device"] = "cuda" if any(t.is_cuda for t in user) else "cpu"
    # Engines that serve a range need its maximum (CUDA plans their memory for
    # it), and dynamo's dynamic sizes have none: the range runs from the
    # exported minimum to room for growth above the size seen, and a call past
    # it compiles again with a larger one (never a silent CPU fallback).
    ranged = options["device"] == "cuda" and bool(dims) and "shapes" not in options
    limits = _size_limits(ep, user) if ranged else None

    def build():
        global compilations
        o = dict(options)
        if limits is not None:
            o["shapes"] = _profiles(ep, user, limits)
        module = _torch.compile(ep, tuple(user), **o)
        compilations += 1
        # State the program writes is the module's own: its buffers (KV caches,
        # counters) become the memory kiln updates in place, so the module holds
        # the new values as it does after eager calls. (A program cut into
        # pieces runs its state writes in PyTorch on those same tensors.)
        if isinstance(module, _torch.CompiledModule):
            for i, (example, kind) in enumerate(zip(example_inputs, kinds)):
                if kind == "constant" and isinstance(example, torch.Tensor):
                    module._adopt_buffer(f"_kiln_constant_{i}", example)
        return module

    compiled = build()

    def run(*args):
        nonlocal compiled
        inputs = [args[i] for i in inputs_at]
        if limits is not None and _grow(limits, inputs):
            compiled = build()
            run.kiln_module = compiled
        return compiled(*inputs)

    run.kiln_module = compiled
    return run


def _room(size):
    """A range's maximum for a size seen: the next power of two at least twice it, and at least 64."""
    return max(64, 1 << (2 * int(size) - 1).bit_length())


def _size_limits(ep, user):
    """Per user input, per dimension: None for a static one, else [min, max]
    (the exported minimum, and room above the size seen)."""
    from torch.export.graph_signature import InputKind

    names = [s.arg.name for s in ep.graph_signature.input_specs if s.kind == InputKind.USER_INPUT]
    nodes = {n.name: n for n in ep.graph.nodes if n.op == "placeholder"}
    limits = []
    for name, example in zip(names, user):
        val = nodes[name].meta.get("val")
        dims = []
        for d, size in enumerate(val.shape if val is not None else example.shape):
            if isinstance(size, torch.SymInt):
                r = ep.range_constraints.get(size.node.expr)
                lo = int(r.lower) if r is not None and r.lower is not None and r.lower >= 0 else 1
                dims.append([max(lo, 1), _room(example.shape[d])])
            else:
                dims.append(None)
        limits.append((name, dims))
    return limits


def _profiles(ep, user, limits):
    """kiln.compile's shapes: {input: (min sizes, opt sizes, max sizes)}, opt the size seen."""
    shapes = {}
    for (name, dims), example in zip(limits, user):
        if all(d is None for d in dims):
            continue
        seen = list(example.shape)
        shapes[name] = ([d[0] if d else s for d, s in zip(dims, seen)], seen,
                        [d[1] if d else s for d, s in zip(dims, seen)])
    return shapes


def _grow(limits, inputs):
    """Widens the maxima that `inputs` go past; whether any did."""
    grew = False
    for (name, dims), t in zip(limits, inputs):
        for d, lim in enumerate(dims):
            if lim is not None and t.shape[d] > lim[1]:
                lim[1] = _room(t.shape[d])
                grew = True
    return grew
