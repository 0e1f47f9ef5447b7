"""kiln.compile, kiln.save and kiln.load: PyTorch programs compiled by kiln and run from PyTorch."""

import operator
import os
import tempfile
import threading

import torch
from torch.utils._pytree import tree_flatten, tree_unflatten

from . import _C


def _cache_dir(cache_dir):
    if cache_dir is None:
        return _C.default_cache_dir()
    return os.fspath(cache_dir) if cache_dir else ""


def _shape_list(shapes):
    # {"x": (min, opt, max)} with each a tuple of sizes, or {"x": [(min, opt, max), ...]}
    # for several profiles -> [(name, min, opt, max)], an input's k-th range in profile k
    out = []
    for name, ranges in (shapes or {}).items():
        ranges = list(ranges)
        several = bool(ranges) and all(isinstance(r, (list, tuple)) and len(r) == 3 and
                                       all(isinstance(d, (list, tuple)) for d in r) for r in ranges)
        for mn, opt, mx in (ranges if several else [ranges]):
            out.append((name, [int(v) for v in mn], [int(v) for v in opt], [int(v) for v in mx]))
    return out


class CompiledModule(torch.nn.Module):
    """A program compiled by kiln, called like the module it came from.

    Engine segments run in kiln, nodes no engine takes run on kiln's reference
    kernels, and (for programs with ops kiln does not know) the rest runs in
    PyTorch. Tensors cross without copies (DLPack). The program's mutable
    buffers (KV caches, running state) are tensors this module owns: kiln
    updates them in place or copies new values into them after each call, so
    `compiled.get_buffer(fqn)` always holds the current value.
    """

    def __init__(self, program, *, out_spec=None, in_spec=None, signature=None, state_device=None):
        super().__init__()
        self._program = program
        self._session = _C.Session(program)
        self._out_spec = out_spec
        # How calls were exported: the keyword order, and per flat user input
        # ("tensor", None) or ("constant", value) for arguments export specialized on.
        self._kwarg_order = None
        if in_spec is not None:
            kw = in_spec.child(1) if hasattr(in_spec, "child") else in_spec.children_specs[1]
            self._kwarg_order = list(kw.context)
        self._signature = signature
        self._lock = threading.Lock()
        self._kiln_buffers = {}
        # Outputs' dtypes and sizes when every size is static (for calls on CUDA memory).
        self._static_outputs = []
        for spec in program.outputs():
            if not all(d.isdigit() for d in spec["dims"]):
                self._static_outputs = None
                break
            self._static_outputs.append((getattr(torch, spec["dtype"]), [int(d) for d in spec["dims"]]))
        # Shape profiles (methods NAME@k) pick their program per call, with
        # outputs of their own sizes: the session tells them per call.
        self._profiles = any("@" in name for name in program.method_names)
        if self._profiles:
            self._static_outputs = None
        # User inputs the program writes in place (positions in call order).
        written = set(program.mutated_inputs())
        self._mutated_inputs = [i for i, spec in enumerate(program.inputs()) if spec["name"] in written]
        # Calls on CUDA tensors run through Session.run on PyTorch's current
        # stream, their outputs in memory PyTorch allocates where the inputs'
        # sizes tell the outputs' (a one-engine program's engine writes them
        # there directly), their state in this module's CUDA buffers.
        self._output_sizes_known = True  # False once the data sets an output's size (no shape profiles)
        # Why calls on CUDA tensors go through host memory (None while none has).
        self.host_staging_reason = None
        # The buffers lie on `state_device` ("cuda" or "cpu"; by default where
        # the session keeps them: CUDA memory for a CUDA program), and kiln
        # updates them where they lie.
        for spec in program.buffers():
            fqn = spec["name"]
            memory = torch.from_dlpack(self._session.buffer(fqn)).clone()
            if state_device == "cpu" and memory.is_cuda:
                memory = memory.cpu()
            self._session.bind_buffer(fqn, memory)
            self._kiln_buffers[fqn] = memory
            self._register_state(fqn, memory)
        # A tensor the archive gives several names (a written constant over
        # the storage of a registered buffer) is one tensor here too: every
        # name holds the same memory.
        for alias, kept in program.aliases().items():
            if kept in self._kiln_buffers:
                self._register_state(alias, self._kiln_buffers[kept])

    def _adopt_buffer(self, fqn, tensor):
        """Makes the caller's `tensor` the memory of buffer `fqn` (any of its
        names) when the program writes that buffer and the tensor fits it
        (dtype, shape, contiguous, on the device the state lies on): kiln then
        updates the caller's tensor in place, and its current contents are the
        buffer's value. Returns whether it did."""
        kept = self._program.aliases().get(fqn, fqn)
        current = self._kiln_buffers.get(kept)
        if current is None or kept not in self._program.mutated_buffers():
            return False
        if (tensor.dtype != current.dtype or tensor.shape != current.shape or not tensor.is_contiguous()
                or tensor.device != current.device):
            return False
        memory = tensor.detach()
        self._session.bind_buffer(kept, memory)
        self._kiln_buffers[kept] = memory
        self._register_state(kept, memory)
        for alias, target in self._program.aliases().items():
            if target == kept:
                self._register_state(alias, memory)
        return True

    def _register_state(self, fqn, memory):
        owner, _, leaf = fqn.rpartition(".")
        parent = self
        for part in owner.split(".") if owner else []:
            if part not in parent._modules:
                parent.add_module(part, torch.nn.Module())
            parent = parent._modules[part]
        parent.register_buffer(leaf, memory)

    @property
    def program(self):
        """The compiled kiln.Program (inputs(), outputs(), segments(), partition_report(), ...)."""
        return self._program

    def partition_report(self):
        """Every segment with its ops, and each node that is not in an engine with the reason."""
        return self._program.partition_report()

    def _apply(self, fn, recurse=True):
        raise RuntimeError(
            "a kiln.CompiledModule is compiled for one device and dtype; compile again instead of "
            "moving it with .to(), .cuda(), .half() and the like")

    def _output_memory(self, inputs):
        """CUDA memory for the outputs of a call on `inputs`, or None where the data sets a size."""
        if self._static_outputs is not None:
            types = self._static_outputs
        elif not self._output_sizes_known:
            return None
        else:  # the shape profile or padded batch bucket that takes these inputs says
            try:
                types = [(getattr(torch, dtype), sizes) for dtype, sizes in self._session.output_types(inputs)]
            except _C.KilnError as e:
                if e.code != "unsupported":
                    raise
                if not self._profiles:
                    self._output_sizes_known = False
                return None
        device = inputs[0].device
        return [torch.empty(sizes, dtype=dtype, device=device) for dtype, sizes in types]

    def _run_cuda(self, inputs):
        """Runs on the caller's CUDA tensors through the session, on PyTorch's
        current stream (no wait): the outputs come back as CUDA tensors (in
        memory PyTorch allocates where their sizes are known before the call),
        the buffers are updated where they lie."""
        device = inputs[0].device
        inputs = [t.contiguous() for t in inputs]
        outputs = self._output_memory(inputs)
        stream = torch.cuda.current_stream(device).cuda_stream
        with self._lock, torch.cuda.device(device):
            arrays = self._session.run(inputs, stream=stream, outputs=outputs)
        return outputs if outputs is not None else [torch.from_dlpack(a) for a in arrays]

    def _tensor_inputs(self, args, kwargs):
        if self._kwarg_order is not None and set(kwargs) == set(self._kwarg_order):
            kwargs = {k: kwargs[k] for k in self._kwarg_order}  # positional binding follows the export
        elif self._kwarg_order is not None:
            raise TypeError(f"this program was exported with keyword arguments {sorted(self._kwarg_order)}, "
                            f"called with {sorted(kwargs)}")
        flat, _ = tree_flatten((args, kwargs))
        if self._signature is None:
            return [a for a in flat if isinstance(a, torch.Tensor)]
        if len(flat) != len(self._signature):
            raise TypeError(f"this program takes {len(self._signature)} inputs (flattened), got {len(flat)}")
        inputs = []
        for i, (value, (kind, exported)) in enumerate(zip(flat, self._signature)):
            if kind == "tensor":
                if not isinstance(value, torch.Tensor):
                    raise TypeError(f"input {i} must be a tensor, got {type(value).__name__}")
                inputs.append(value)
            elif value != exported:
                raise ValueError(f"input {i} was exported as the constant {exported!r}; the compiled program "
                                 f"cannot take {value!r} (export and compile again with it)")
        return inputs

    def forward(self, *args, **kwargs):
        inputs = self._tensor_inputs(args, kwargs)
        outputs = None
        on_cuda = inputs and self._program.device == "cuda" and all(t.is_cuda for t in inputs)
        if on_cuda and len({t.device for t in inputs}) == 1:
            outputs = self._run_cuda(inputs)
        elif self._program.device == "cuda" and any(t.is_cuda for t in inputs):
            self.host_staging_reason = "inputs on more than one device (" + ", ".join(
                sorted({str(t.device) for t in inputs})) + ")"
        if outputs is None:
            # Host tensors; a CUDA program's other calls stage through host memory.
            device = next((t.device for t in inputs if t.is_cuda), None)
            staged = [t.cpu() for t in inputs] if device is not None else inputs
            with self._lock:
                arrays = self._session.run(staged)
            # Inputs the program writes in place: the caller's tensors get the new values.
            for i in self._mutated_inputs:
                if staged[i] is not inputs[i]:
                    inputs[i].copy_(staged[i])
            outputs = [torch.from_dlpack(a) for a in arrays]
            if device is not None:
                outputs = [t.to(device) for t in outputs]
        if self._out_spec is not None:
            return tree_unflatten(outputs, self._out_spec)
        return outputs[0] if len(outputs) == 1 else tuple(outputs)


class PartitionedModule(torch.fx.GraphModule):
    """A program with ops kiln does not know: the graph runs in PyTorch, and
    each piece kiln can take runs as one kiln.CompiledModule inside it. The
    module's parameters and buffers keep their names."""

    def __init__(self, fused, pieces, torch_ops):
        super().__init__(fused, fused.graph)
        self._kiln_pieces = list(pieces)
        self.torch_ops = torch_ops

    def pieces(self):
        """The kiln.CompiledModule of every piece, in graph order."""
        return list(self._kiln_pieces)

    def partition_report(self):
        lines = [f"{len(self._kiln_pieces)} kiln pieces; ops run by PyTorch: {', '.join(self.torch_ops)}"]
        for i, piece in enumerate(self._kiln_pieces):
            lines.append(f"piece {i}:")
            lines.append(piece.partition_report().rstrip())
        return "\n".join(lines) + "\n"


def _unknown_ops(graph):
    unknown = set()
    for node in graph.nodes:
        if node.op != "call_function":
            continue
        target = node.target
        if isinstance(target, (torch._ops.OpOverload, torch._ops.HigherOrderOperator)) and not _C.known_op(str(target)):
            unknown.add(str(target))
    return sorted(unknown)


def _compile_exported(ep, options):
    with tempfile.TemporaryDirectory(prefix="kiln-") as tmp:
        path = os.path.join(tmp, "program.pt2")
        torch.export.save(ep, path)
        program = _C.Program.load(path, **options)
    from torch.export.graph_signature import ConstantArgument, InputKind

    signature = [("constant", spec.arg.value) if isinstance(spec.arg, ConstantArgument) else ("tensor", None)
                 for spec in ep.graph_signature.input_specs if spec.kind == InputKind.USER_INPUT]
    return CompiledModule(program, out_spec=ep.call_spec.out_spec, in_spec=ep.call_spec.in_spec, signature=signature,
                          state_device=_state_device(ep, options.get("device")))


def _state_device(ep, device):
    """Where a compiled module keeps its buffers: on the GPU for a CUDA program
    whose model or example inputs are there, else in host memory (a CUDA
    program called with host tensors)."""
    if device != "cuda":
        return "cpu"
    tensors = list(ep.state_dict.values()) + list(ep.constants.values())
    tensors += tree_flatten(getattr(ep, "example_inputs", None) or ())[0]
    return "cuda" if any(isinstance(t, torch.Tensor) and t.is_cuda for t in tensors) else "cpu"


def _written_args(node):
    """The arguments an op writes in place (its schema marks them Tensor(a!))."""
    schema = getattr(node.target, "_schema", None) if node.op == "call_function" else None
    if schema is None:
        return []
    return [node.args[i] if i < len(node.args) else node.kwargs.get(a.name)
            for i, a in enumerate(schema.arguments) if a.alias_info is not None and a.alias_info.is_write]


def _mutates(node):
    return bool(_written_args(node))


def _compile_partitioned(ep, example_inputs, options, torch_ops):
    """Cuts the program at the ops kiln does not know; kiln compiles each piece
    between them, PyTorch runs the rest (like Torch-TensorRT's fallback)."""
    from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
    from torch.fx.passes.operator_support import OperatorSupport

    if example_inputs is None:
        example_inputs = getattr(ep, "example_inputs", None)
    if example_inputs is None:
        raise ValueError("a program with ops kiln does not know needs example_inputs to compile the pieces around them")
    args, kwargs = example_inputs if _is_args_kwargs(example_inputs) else (tuple(example_inputs), {})

    gm = ep.module()
    on_state = _nodes_on_written_buffers(gm.graph)

    class Support(OperatorSupport):
        def is_node_supported(self, submodules, node):
            if node.op != "call_function" or node in on_state:
                return False
            if node.target is operator.getitem:
                return True
            return isinstance(node.target, torch._ops.OpOverload) and _C.known_op(str(node.target)) and not _mutates(node)

    partitioner = CapabilityBasedPartitioner(gm, Support(), allows_single_node_partition=True)
    min_block = options.get("min_block_size", 5)
    partitions = [
        p for p in partitioner.propose_partitions()
        if sum(1 for n in p.nodes if n.target is not operator.getitem) >= min_block
    ]
    fused = partitioner.fuse_partitions(partitions)
    _move_constants_into_pieces(fused)

    # The inputs each piece sees on the example inputs (shapes to export it with).
    captured = {}
    hooks = []
    names = [n.target for n in fused.graph.nodes if n.op == "call_module" and n.target.startswith("fused_")]
    for name in names:
        sub = fused.get_submodule(name)
        hooks.append(sub.register_forward_pre_hook(lambda m, a, name=name: captured.setdefault(name, a)))
    with torch.no_grad():
        fused(*args, **kwargs)
    for h in hooks:
        h.remove()

    pieces = []
    for name in names:
        sub = fused.get_submodule(name)
        sub_ep = torch.export.export(sub, tuple(captured[name]), strict=False)
        piece = _compile_exported(sub_ep, options)
        setattr(fused, name, piece)
        pieces.append(piece)
    return PartitionedModule(fused, pieces, torch_ops)


def _written_attributes(graph):
    """Targets of get_attr nodes that some op writes in place, directly or
    through a view (index_copy_ into a cache, copy_ into a slice of it)."""
    written = set()
    for node in graph.nodes:
        for base in _written_args(node):
            while isinstance(base, torch.fx.Node) and base.op == "call_function" and base.args:
                base = base.args[0]  # a view's base is its first argument
            if isinstance(base, torch.fx.Node) and base.op == "get_attr":
                written.add(base.target)
    return written


def _nodes_on_written_buffers(graph):
    """Nodes that touch a buffer the program writes in place: the writes, the
    views they write through, and every read of the buffer or its views.
    They stay in PyTorch, in program order, on the module's own buffers; the
    kiln pieces between them compute only on values that alias no state."""
    written = _written_attributes(graph)
    aliases, touching = set(), set()
    for node in graph.nodes:
        if node.op == "get_attr" and node.target in written:
            aliases.add(node)
            continue
        if node.op != "call_function":
            continue
        reads = []
        torch.fx.node.map_arg((node.args, node.kwargs), lambda n: reads.append(n))
        if _mutates(node) or any(r in aliases for r in reads):
            touching.add(node)
            schema = getattr(node.target, "_schema", None)
            returns_alias = schema is not None and any(r.alias_info is not None for r in schema.returns)
            if returns_alias or _mutates(node) or node.target is operator.getitem:
                aliases.add(node)
    return touching


def _move_constants_into_pieces(fused):
    """Weights a piece reads (and nothing writes) become constants of that piece
    instead of inputs, so kiln builds its engines with them. A buffer that the
    program writes stays an input: a piece must read its current value."""
    written = _written_attributes(fused.graph)
    for node in list(fused.graph.nodes):
        if node.op != "call_module" or not node.target.startswith("fused_"):
            continue
        sub = fused.get_submodule(node.target)
        placeholders = [p for p in sub.graph.nodes if p.op == "placeholder"]
        keep_args = []
        for arg, ph in zip(node.args, placeholders):
            const = isinstance(arg, torch.fx.Node) and arg.op == "get_attr" and arg.target not in written
            if not const:
                keep_args.append(arg)
                continue
            attr = "_const_" + arg.target.replace(".", "_")
            value = _get_attr(fused, arg.target)
            if isinstance(value, torch.nn.Parameter):
                sub.register_parameter(attr, value)
            else:
                sub.register_buffer(attr, value)
            with sub.graph.inserting_before(ph):
                got = sub.graph.get_attr(attr)
            ph.replace_all_uses_with(got)
            sub.graph.erase_node(ph)
        node.args = tuple(keep_args)
        sub.recompile()
    fused.graph.eliminate_dead_code()
    fused.recompile()


def _get_attr(module, target):
    owner, _, leaf = target.rpartition(".")
    return getattr(module.get_submodule(owner) if owner else module, leaf)


def _is_args_kwargs(example_inputs):
    return (isinstance(example_inputs, tuple) and len(example_inputs) == 2 and isinstance(example_inputs[0], tuple)
            and isinstance(example_inputs[1], dict))


def compile(model, example_inputs=None, *, dynamic_shapes=None, device="cpu", precision="fp32", min_block_size=5,
            fallback_ops=(), cache_dir=None, shapes=None, require_full_compilation=False, strict=False,
            batch_buckets="auto", allow_fallback=False, disabled_passes=()):
    """Compiles a torch.export.ExportedProgram or an nn.Module with kiln.

    model: an ExportedProgram, or an nn.Module exported here with
        `torch.export.export(model, example_inputs, dynamic_shapes=dynamic_shapes)`.
    example_inputs: a tuple of positional inputs, or (args, kwargs).
    device: the engine backend, "cpu" or "cuda".
    precision: "fp32", "tf32", "fp16", "bf16" or "fp8w" (FP8 weights for matrix-vector products) for engines.
    min_block_size: engine segments need at least this many compute nodes.
    fallback_ops: ops kept out of engines ("aten.relu.default", "aten.relu" or "relu").
    cache_dir: engine cache directory; None for the CLI's default, "" for none.
    shapes: {input name: (min sizes, opt sizes, max sizes)} shape ranges.
    require_full_compilation: fail, naming the node, if anything stays out of engines.
    batch_buckets: "auto", "on" or "off": a range of one batch dimension compiled for a few
        sizes, calls padded to the next one (by default on backends that build static shapes
        only, CUDA; see docs/CLI.md).
    allow_fallback: a segment the device cannot build for the program's range of sizes (a
        dynamic size with no maximum) runs on kiln's CPU reference kernels instead of raising.
        Asking for device="cuda" where CUDA cannot be used raises either way.
    disabled_passes: passes to skip by name, lowering passes a program can do without or the
        backend's network passes (as `--disable-pass`; an unknown name raises, listing them).

    Returns a CompiledModule, or a PartitionedModule when the program has ops
    kiln does not know (they run in PyTorch between kiln pieces).
    """
    if isinstance(model, torch.export.ExportedProgram):
        ep = model
    elif isinstance(model, torch.nn.Module):
        if example_inputs is None:
            raise ValueError("kiln.compile of an nn.Module needs example_inputs to export it")
        args, kwargs = example_inputs if _is_args_kwargs(example_inputs) else (tuple(example_inputs), {})
        # For inference: without grad mode, a module that switches it inside
        # (transformers' static-cache wrapper) exports as one graph, not one
        # around a grad-mode region PyTorch would have to run.
        with torch.no_grad():
            ep = torch.export.export(model, args, kwargs, dynamic_shapes=dynamic_shapes, strict=strict)
    else:
        raise TypeError(f"kiln.compile takes an ExportedProgram or an nn.Module, not {type(model).__name__}")
    options = dict(device=device, precision=precision, cache_dir=_cache_dir(cache_dir), min_block_size=min_block_size,
                   fallback_ops=list(fallback_ops), shapes=_shape_list(shapes),
                   require_full_compilation=require_full_compilation, batch_buckets=batch_buckets,
                   allow_fallback=allow_fallback, disabled_passes=list(disabled_passes))
    unknown = _unknown_ops(ep.graph)
    if not unknown:
        return _compile_exported(ep, options)
    if require_full_compilation:
        raise _C.KilnError("require_full_compilation: kiln does not know these ops: " + ", ".join(unknown))
    return _compile_partitioned(ep, example_inputs, options, unknown)


def save(compiled, path):
    """Writes a kiln-compiled module as a .kiln file, which `kiln.load` and the
    `kiln` CLI (run, check, bench, inspect) read. The buffers' initial values
    are saved, not their current ones."""
    if isinstance(compiled, PartitionedModule):
        raise _C.KilnError("this module runs ops kiln does not know in PyTorch (" + ", ".join(compiled.torch_ops) +
                           "), so it is not one kiln program and cannot be saved as a .kiln file")
    if not isinstance(compiled, CompiledModule):
        raise TypeError(f"kiln.save takes a kiln.CompiledModule, not {type(compiled).__name__}")
    compiled.program.save(os.fspath(path))


def load(path, *, device="cpu", precision="fp32", cache_dir=None, min_block_size=5, fallback_ops=(), shapes=None):
    """Loads a .kiln file (or compiles a .pt2 file) into a CompiledModule. The
    compile options apply to a .pt2 only. Outputs come back as a tensor, or a
    tuple of tensors for a program with several."""
    program = _C.Program.load(os.fspath(path), device=device, precision=precision, cache_dir=_cache_dir(cache_dir),
                              min_block_size=min_block_size, fallback_ops=list(fallback_ops),
                              shapes=_shape_list(shapes))
    return CompiledModule(program)
