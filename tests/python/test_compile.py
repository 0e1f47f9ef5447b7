"""kiln.compile and torch.compile(backend="kiln") against eager PyTorch."""

import os
import subprocess

import pytest

torch = pytest.importorskip("torch")

import kiln  # noqa: E402
import kiln.dynamo  # noqa: E402

from conftest import DEVICES, cli  # noqa: E402


def tol(device):
    # CUDA engines use TF32-free fp32 GEMMs but other reduction orders.
    return dict(rtol=1e-3, atol=1e-4) if device == "cpu" else dict(rtol=2e-3, atol=2e-3)


def on(device, *tensors):
    return tuple(t.to(device) for t in tensors)


def resnet18():
    torchvision = pytest.importorskip("torchvision")
    torch.manual_seed(0)
    return torchvision.models.resnet18(weights=None, num_classes=10).eval()


def tiny_bert():
    transformers = pytest.importorskip("transformers")
    config = transformers.BertConfig(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                     intermediate_size=37, max_position_embeddings=64)
    torch.manual_seed(0)
    return transformers.BertModel(config).eval()


class ConvReluConv(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.a = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.b = torch.nn.Conv2d(8, 4, 3, padding=1)

    def forward(self, x):
        return self.b(torch.relu(self.a(x)) * 2.0 + 1.0).sigmoid() - 0.5


def test_torchvision_resnet18_kiln_compile(device, tmp_path):
    model = resnet18()
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        want = model(x)
    compiled = kiln.compile(model, (x,), device=device, cache_dir=tmp_path)
    assert any(s["engine"] for s in compiled.program.segments())
    got = compiled(*on(device, x))
    torch.testing.assert_close(got.cpu(), want, **tol(device))


def test_torchvision_resnet18_torch_compile(device, tmp_path):
    model = resnet18().to(device)
    x = torch.randn(2, 3, 64, 64, device=device)
    with torch.no_grad():
        want = model(x)
        torch._dynamo.reset()
        before = kiln.dynamo.compilations
        fn = torch.compile(model, backend="kiln", options={"cache_dir": str(tmp_path)})
        got = fn(x)
    assert kiln.dynamo.compilations == before + 1
    torch.testing.assert_close(got, want, **tol(device))


def test_transformers_bert_kiln_compile(device, tmp_path):
    model = tiny_bert()
    ids = torch.randint(0, 99, (2, 16))
    mask = torch.ones(2, 16, dtype=torch.int64)
    mask[1, 12:] = 0
    with torch.no_grad():
        want = model(input_ids=ids, attention_mask=mask)
    compiled = kiln.compile(model, ((), {"input_ids": ids, "attention_mask": mask}), device=device,
                            cache_dir=tmp_path)
    got = compiled(input_ids=ids, attention_mask=mask)
    # The output keeps its structure (a transformers ModelOutput).
    torch.testing.assert_close(got.last_hidden_state.cpu(), want.last_hidden_state, **tol(device))
    torch.testing.assert_close(got.pooler_output.cpu(), want.pooler_output, **tol(device))


def test_transformers_bert_torch_compile_dynamic_sequence(device, tmp_path):
    model = tiny_bert().to(device)
    torch._dynamo.reset()
    before = kiln.dynamo.compilations
    fn = torch.compile(model, backend="kiln", dynamic=True, options={"cache_dir": str(tmp_path)})
    with torch.no_grad():
        for seq in (8, 13, 21):
            ids = torch.randint(0, 99, (2, seq), device=device)
            want = model(input_ids=ids).last_hidden_state
            got = fn(input_ids=ids).last_hidden_state
            torch.testing.assert_close(got, want, **tol(device))
    # One graph, compiled once, serves every sequence length.
    assert kiln.dynamo.compilations == before + 1


def test_dynamic_batch_no_recompilation(device, tmp_path):
    model = ConvReluConv().eval().to(device)
    torch._dynamo.reset()
    before = kiln.dynamo.compilations
    fn = torch.compile(model, backend="kiln", options={"cache_dir": str(tmp_path)})
    with torch.no_grad():
        for batch in (2, 3, 7, 4):
            x = torch.randn(batch, 3, 16, 16, device=device)
            torch._dynamo.mark_dynamic(x, 0)
            torch.testing.assert_close(fn(x), model(x), **tol(device))
    assert kiln.dynamo.compilations == before + 1


def test_torch_compile_on_cuda_gives_dynamic_sizes_a_range_and_widens_it(tmp_path):
    # CUDA engines need a range's maximum and dynamo's dynamic sizes have none:
    # the backend compiles for room above the size seen (never a CPU
    # fallback) and once more, wider, when a call goes past it.
    if "cuda" not in DEVICES:
        pytest.skip("needs KILN_TEST_DEVICES with cuda")
    model = ConvReluConv().eval().to("cuda")
    torch._dynamo.reset()
    before = kiln.dynamo.compilations
    fn = torch.compile(model, backend="kiln", options={"cache_dir": str(tmp_path)})
    with torch.no_grad():
        for batch in (5, 9, 200, 130):
            x = torch.randn(batch, 3, 16, 16, device="cuda")
            torch._dynamo.mark_dynamic(x, 0)
            torch.testing.assert_close(fn(x), model(x), **tol("cuda"))
    assert kiln.dynamo.compilations == before + 2  # up to 64, then up to 512


def test_declared_range_and_refusal_outside_it(device, tmp_path):
    model = ConvReluConv().eval()
    batch = torch.export.Dim("batch", min=1, max=6)
    compiled = kiln.compile(model, (torch.randn(2, 3, 16, 16),), dynamic_shapes={"x": {0: batch}}, device=device,
                            cache_dir=tmp_path)
    with torch.no_grad():
        for n in (1, 5, 6):
            x = torch.randn(n, 3, 16, 16)
            torch.testing.assert_close(compiled(*on(device, x)).cpu(), model(x), **tol(device))
    with pytest.raises(kiln.KilnError) as e:
        compiled(*on(device, torch.randn(7, 3, 16, 16)))
    assert e.value.code == "invalid_argument"
    assert "input 'x'" in str(e.value) and "is 7" in str(e.value) and "[1, 6]" in str(e.value)


def test_shape_profiles_fixed_and_dynamic(device, tmp_path):
    model = ConvReluConv().eval()
    batch = torch.export.Dim("batch", min=1, max=16)
    # Profile 0 fixes the batch at 2 (static sizes: engines on any backend), profile 1 takes 3 to 8.
    shapes = {"x": [((2, 3, 16, 16),) * 3, ((3, 3, 16, 16), (4, 3, 16, 16), (8, 3, 16, 16))]}
    compiled = kiln.compile(model, (torch.randn(2, 3, 16, 16),), dynamic_shapes={"x": {0: batch}}, device=device,
                            shapes=shapes, cache_dir=tmp_path)
    assert compiled.program.symbols() == []  # the fixed profile has static sizes
    if device == "cuda":
        # CUDA builds static shapes: the range is padded batch buckets 3, 4 and 8.
        assert compiled.program.method_names == ["forward", "forward@1", "forward@2", "forward@3"]
        assert all(compiled.program.symbols(m) == [] for m in compiled.program.method_names)
    else:
        assert compiled.program.method_names == ["forward", "forward@1"]
        assert [(mn, mx) for _, mn, mx in compiled.program.symbols("forward@1")] == [(3, 8)]
    with torch.no_grad():
        for n in (2, 3, 5, 8):
            x = torch.randn(n, 3, 16, 16)
            torch.testing.assert_close(compiled(*on(device, x)).cpu(), model(x), **tol(device))
    # CUDA tensors stayed on the device: each call ran its profile's engine there.
    assert compiled.host_staging_reason is None, compiled.host_staging_reason
    for n in (1, 9):
        with pytest.raises(kiln.KilnError) as e:
            compiled(*on(device, torch.randn(n, 3, 16, 16)))
        assert "no shape profile" in str(e.value) and f"is {n}" in str(e.value) and "[3, 8]" in str(e.value)


class ShiftedEmbedding(torch.nn.Module):
    """Token ids from 1 up, looked up one lower: a zero row would be an index out of range."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.emb = torch.nn.Embedding(10, 6)
        self.lin = torch.nn.Linear(6, 3)

    def forward(self, ids):
        return torch.relu(self.lin(self.emb(ids - 1))).sum(-1)


def test_padded_batch_buckets_serve_every_size_in_the_range(device, tmp_path):
    model = ShiftedEmbedding().eval()
    batch = torch.export.Dim("batch", min=1, max=8)
    ids = torch.randint(1, 10, (2, 4))
    compiled = kiln.compile(model, (ids,), dynamic_shapes={"ids": {0: batch}}, device=device, cache_dir=tmp_path,
                            shapes={"ids": ((1, 4), (3, 4), (8, 4))}, batch_buckets="on")
    # min, opt, the powers of two and max: 1, 2, 3, 4, 8; every size in between runs one of them, padded.
    assert compiled.program.method_names == ["forward"] + [f"forward@{k}" for k in range(1, 5)]
    with torch.no_grad():
        for n in range(1, 9):
            x = torch.randint(1, 10, (n, 4))
            torch.testing.assert_close(compiled(*on(device, x)).cpu(), model(x), **tol(device))
    # On CUDA the padding and the cut happen on the device: no call staged through host memory.
    assert compiled.host_staging_reason is None, compiled.host_staging_reason
    with pytest.raises(kiln.KilnError) as e:
        compiled(*on(device, torch.randint(1, 10, (9, 4))))
    assert "dimension 0 is 9" in str(e.value) and "[1, 8]" in str(e.value)


class AddsOneToItsInput(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x, y):
        x.add_(1)
        return self.lin(x) * 2 + y


def test_inputs_the_program_writes_in_place_are_written_for_the_caller(device, tmp_path):
    model = AddsOneToItsInput().eval()
    x, y = torch.randn(2, 4), torch.randn(2, 4)
    compiled = kiln.compile(model, (x.clone(), y), device=device, min_block_size=1, cache_dir=tmp_path)
    assert compiled.program.mutated_inputs() == [compiled.program.inputs()[0]["name"]]
    eager_x, kiln_x = x.clone(), x.clone().to(device)
    with torch.no_grad():
        want = model(eager_x, y)
        got = compiled(kiln_x, y.to(device))
    torch.testing.assert_close(got.cpu(), want, **tol(device))
    # The caller's tensor holds the new value, on the host or on the GPU.
    torch.testing.assert_close(kiln_x.cpu(), eager_x)
    # kiln inspect says so.
    pt2 = tmp_path / "adds_one.pt2"
    torch.export.save(torch.export.export(model, (x.clone(), y)), pt2)
    r = subprocess.run([cli(), "inspect", str(pt2)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert [line for line in r.stdout.splitlines() if "written in place" in line][0].split()[0] == "x", r.stdout
    if device == "cuda":
        assert compiled.host_staging_reason is None, compiled.host_staging_reason  # written on the device
        # Into output memory the caller gives: the result there, the input written too.
        out = torch.full((2, 4), float("nan"), device="cuda")
        again = kiln_x.clone()
        assert compiled._session.run([again, y.cuda()], stream=0, outputs=[out]) is None
        torch.cuda.synchronize()
        with torch.no_grad():
            want_again = model(eager_x, y)
        torch.testing.assert_close(out.cpu(), want_again, **tol(device))
        torch.testing.assert_close(again.cpu(), eager_x)
        # Memory of the wrong size is refused before anything runs: the input keeps its value.
        with pytest.raises(kiln.KilnError) as e:
            compiled._session.run([again, y.cuda()], stream=0, outputs=[torch.empty(3, 4, device="cuda")])
        assert e.value.code == "invalid_argument" and "memory for output 0" in str(e.value), str(e.value)
        torch.testing.assert_close(again.cpu(), eager_x)


def test_forced_fallback_op_in_the_middle(device, tmp_path):
    model = ConvReluConv().eval()
    x = torch.randn(2, 3, 16, 16)
    compiled = kiln.compile(model, (x,), device=device, min_block_size=1, fallback_ops=["aten.relu.default"],
                            cache_dir=tmp_path)
    kinds = ["engine" if s["engine"] else "fallback" for s in compiled.program.segments()]
    assert kinds == ["engine", "fallback", "engine"], compiled.partition_report()
    fallback = compiled.program.segments()[1]["fallback"]
    assert [op for _, op, _ in fallback] == ["aten.relu.default"]
    with torch.no_grad():
        torch.testing.assert_close(compiled(*on(device, x)).cpu(), model(x), **tol(device))


def test_disabled_passes_are_skipped_and_unknown_ones_raise(device, tmp_path):
    model = ConvReluConv().eval()
    x = torch.randn(2, 3, 16, 16)
    def ops(c):
        return {op for s in c.program.segments() for op in s["ops"]}

    assert "kiln.conv_act" in ops(kiln.compile(model, (x,), device=device, min_block_size=1, cache_dir=tmp_path))
    compiled = kiln.compile(model, (x,), device=device, min_block_size=1, cache_dir=tmp_path,
                            disabled_passes=["fuse-conv-activation", "fuse-elementwise"])
    assert "kiln.conv_act" not in ops(compiled) and "aten.relu.default" in ops(compiled), ops(compiled)
    with torch.no_grad():
        torch.testing.assert_close(compiled(*on(device, x)).cpu(), model(x), **tol(device))
    with pytest.raises(kiln.KilnError, match="no pass 'fuse-everything' to disable"):
        kiln.compile(model, (x,), device=device, cache_dir=tmp_path, disabled_passes=["fuse-everything"])


class WithUnknownOp(torch.nn.Module):
    """An op kiln does not know (aten.special_erfinv) between two pieces it compiles."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.a = torch.nn.Linear(16, 16)
        self.b = torch.nn.Linear(16, 8)

    def forward(self, x):
        h = torch.tanh(self.a(x) * 0.5) * 0.9
        return self.b(torch.special.erfinv(h)).relu()


def test_ops_kiln_does_not_know_run_in_pytorch(device, tmp_path):
    assert not kiln.known_op("aten.special_erfinv.default")
    model = WithUnknownOp().eval()
    x = torch.randn(4, 16)
    compiled = kiln.compile(model, (x,), device=device, min_block_size=1, cache_dir=tmp_path)
    assert isinstance(compiled, kiln._torch.PartitionedModule)
    assert compiled.torch_ops == ["aten.special_erfinv.default"]
    assert len(compiled.pieces()) == 2
    # The weights stay constants of the pieces, not inputs.
    assert all(len(p.program.inputs()) == 1 for p in compiled.pieces())
    with torch.no_grad():
        torch.testing.assert_close(compiled(*on(device, x)).cpu(), model(x), **tol(device))
    with pytest.raises(kiln.KilnError, match="erfinv"):
        kiln.save(compiled, tmp_path / "x.kiln")
    with pytest.raises(kiln.KilnError, match="erfinv"):
        kiln.compile(model, (x,), device=device, require_full_compilation=True, cache_dir=tmp_path)


class Accumulator(torch.nn.Module):
    """A mutable buffer written every call (state that must never be dropped)."""

    def __init__(self):
        super().__init__()
        self.register_buffer("total", torch.zeros(4))
        self.register_buffer("steps", torch.zeros((), dtype=torch.int64))

    def forward(self, x):
        self.total.add_(x.sum(0))
        self.steps.add_(1)
        return self.total * 2.0


def test_mutated_buffers_are_the_modules_own_tensors(device, tmp_path):
    eager = Accumulator()
    compiled = kiln.compile(Accumulator(), (torch.zeros(3, 4),), device=device, cache_dir=tmp_path)
    memory = compiled.get_buffer("total")
    address = memory.data_ptr()
    for i in range(3):
        x = torch.randn(3, 4)
        want = eager(x)
        torch.testing.assert_close(compiled(*on(device, x)).cpu(), want)
    torch.testing.assert_close(compiled.get_buffer("total"), eager.total)
    assert int(compiled.get_buffer("steps")) == 3
    # The same tensor all along: kiln wrote into the caller's memory.
    assert compiled.get_buffer("total").data_ptr() == address


def test_save_load_and_the_cli_read_the_same_program(device, tmp_path):
    safetensors = pytest.importorskip("safetensors.torch")
    model = resnet18()
    x = torch.randn(1, 3, 64, 64)
    with torch.no_grad():
        want = model(x)
    compiled = kiln.compile(model, (x,), device=device, cache_dir=tmp_path)
    path = tmp_path / "resnet18.kiln"
    kiln.save(compiled, path)
    again = kiln.load(path)
    torch.testing.assert_close(again(*on(device, x)).cpu(), want, **tol(device))

    # Saved from Python, run by the CLI.
    safetensors.save_file({"input.0": x}, str(tmp_path / "in.safetensors"))
    r = subprocess.run([cli(), "run", str(path), "--inputs", str(tmp_path / "in.safetensors"), "--outputs",
                        str(tmp_path / "out.safetensors")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    out = safetensors.load_file(str(tmp_path / "out.safetensors"))
    torch.testing.assert_close(out["output.0"], want, **tol(device))

    # Compiled by the CLI, run from Python.
    pt2 = tmp_path / "resnet18.pt2"
    torch.export.save(torch.export.export(model, (x,)), str(pt2))
    from_cli = tmp_path / "from_cli.kiln"
    r = subprocess.run([cli(), "compile", str(pt2), "-o", str(from_cli), "--device", device, "--cache-dir",
                        str(tmp_path)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    torch.testing.assert_close(kiln.load(from_cli)(*on(device, x)).cpu(), want, **tol(device))


def test_errors_carry_the_cli_message(tmp_path):
    model = ConvReluConv().eval()
    compiled = kiln.compile(model, (torch.randn(1, 3, 8, 8),), cache_dir=tmp_path)
    path = tmp_path / "m.kiln"
    kiln.save(compiled, path)
    data = path.read_bytes()
    broken = tmp_path / "broken.kiln"
    broken.write_bytes(data[: len(data) // 2])
    with pytest.raises(kiln.KilnError) as e:
        kiln.load(broken)
    assert e.value.code == "format" and e.value.fault == "truncated"
    r = subprocess.run([cli(), "inspect", str(broken)], capture_output=True, text=True)
    assert r.returncode == 2
    assert r.stderr.strip() == "kiln: error: " + str(e.value)

    with pytest.raises(kiln.KilnError, match="expected dtype float32"):
        compiled(torch.zeros(1, 3, 8, 8, dtype=torch.float64))
    with pytest.raises(TypeError):
        kiln.compile("model.pt2")


def cuda_only():
    from conftest import DEVICES

    if "cuda" not in DEVICES or not torch.cuda.is_available():
        pytest.skip("needs KILN_TEST_DEVICES with cuda and a GPU")


def test_cuda_tensors_stay_on_the_device_on_the_current_stream(tmp_path):
    cuda_only()
    model = resnet18().cuda()
    x = torch.randn(4, 3, 64, 64, device="cuda")
    compiled = kiln.compile(model, (x,), device="cuda", cache_dir=tmp_path)
    with torch.no_grad():
        want = model(x)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side), torch.profiler.profile(
            activities=[torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]) as prof:
        got = compiled(x)
        got2 = compiled(x * 2)
    side.synchronize()
    assert compiled.host_staging_reason is None, compiled.host_staging_reason
    assert got.is_cuda and got2.is_cuda
    torch.testing.assert_close(got, want, **tol("cuda"))
    with torch.no_grad():
        torch.testing.assert_close(got2, model(x * 2), **tol("cuda"))
    # No copy through host memory: only device-to-device copies (into and out of the engine's bindings).
    copies = [e.name for e in prof.events() if "Memcpy" in e.name or "memcpy" in e.name.lower()]
    assert not [c for c in copies if "HtoD" in c or "DtoH" in c], copies


def test_cuda_programs_with_fallback_nodes_take_and_give_cuda_tensors(tmp_path):
    cuda_only()
    model = ConvReluConv().eval().cuda()
    x = torch.randn(2, 3, 16, 16, device="cuda")
    compiled = kiln.compile(model, (x,), device="cuda", min_block_size=1, fallback_ops=["relu"], cache_dir=tmp_path)
    with torch.no_grad():
        got = compiled(x)
        torch.testing.assert_close(got, model(x), **tol("cuda"))
    # The fallback node's operands cross to the host and back; the call's own tensors stay CUDA tensors.
    assert got.is_cuda and compiled.host_staging_reason is None, compiled.host_staging_reason
    assert "cross" in compiled.partition_report(), compiled.partition_report()


def test_llm_decoding_on_cuda_tensors_updates_the_modules_cuda_buffers(tmp_path):
    cuda_only()
    eager = static_cache_llama(32, "cuda")
    with torch.no_grad():  # exported without grad-mode switches: one kiln program
        compiled = kiln.compile(static_cache_llama(32, "cuda"), (torch.tensor([[7]], device="cuda"),
                                                                torch.tensor([0], device="cuda")),
                                strict=True, device="cuda", min_block_size=1, cache_dir=tmp_path)
    assert isinstance(compiled, kiln.CompiledModule), compiled.partition_report()
    buffers = dict(compiled.named_buffers())
    caches = [name for name in buffers if "cache" in name]
    assert caches and all(buffers[name].is_cuda for name in caches), list(buffers)
    addresses = {name: t.data_ptr() for name, t in buffers.items()}
    prompt, tokens = [7, 42, 13], {}
    for name, step in (("eager", eager), ("kiln", compiled)):
        out, token = [], torch.tensor([[prompt[0]]], device="cuda")
        with torch.no_grad():
            for pos in range(12):
                if pos < len(prompt):
                    token = torch.tensor([[prompt[pos]]], device="cuda")
                logits = step(token, torch.tensor([pos], device="cuda"))
                assert logits.is_cuda
                token = logits[:, -1].argmax(-1, keepdim=True)  # stays on the device
                out.append(token)
        tokens[name] = [int(t) for t in out]
    assert tokens["kiln"] == tokens["eager"]
    assert compiled.host_staging_reason is None
    # The module's own CUDA tensors hold the caches kiln wrote, at the same addresses.
    eager_buffers = dict(eager.named_buffers())
    for name, t in compiled.named_buffers():
        assert t.data_ptr() == addresses[name], name
        torch.testing.assert_close(t, eager_buffers[name], rtol=1e-4, atol=1e-5)


def test_keyword_order_and_constant_arguments(device, tmp_path):
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(vocab_size=101, n_embd=32, n_layer=2, n_head=4, n_positions=64)
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(config).eval()
    ids = torch.randint(0, 101, (2, 12))
    mask = torch.ones(2, 12, dtype=torch.int64)
    mask[0, :3] = 0
    with torch.no_grad():
        want = model(input_ids=ids, attention_mask=mask, use_cache=False).logits
    # use_cache=False is a constant argument: export specializes on it.
    compiled = kiln.compile(model, ((), {"input_ids": ids, "attention_mask": mask, "use_cache": False}),
                            device=device, cache_dir=tmp_path)
    got = compiled(input_ids=ids, attention_mask=mask, use_cache=False).logits
    torch.testing.assert_close(got.cpu(), want, **tol(device))
    # Keywords in another order bind by name, not by position (both are int64[2, 12]).
    got = compiled(use_cache=False, attention_mask=mask, input_ids=ids).logits
    torch.testing.assert_close(got.cpu(), want, **tol(device))
    with pytest.raises(ValueError, match="exported as the constant False"):
        compiled(input_ids=ids, attention_mask=mask, use_cache=True)


class DecodeStep(torch.nn.Module):
    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, input_ids, cache_position):
        return self.inner(input_ids=input_ids, cache_position=cache_position)


def static_cache_llama(max_cache_len, device="cpu"):
    transformers = pytest.importorskip("transformers")
    from transformers.integrations.executorch import TorchExportableModuleWithStaticCache

    config = transformers.LlamaConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                      num_key_value_heads=2, head_dim=8, intermediate_size=64,
                                      max_position_embeddings=64, initializer_range=0.1, attn_implementation="sdpa",
                                      use_cache=True)
    torch.manual_seed(0)
    lm = transformers.LlamaForCausalLM(config).eval().to(device)  # the static caches are made where the model is
    lm.generation_config = transformers.GenerationConfig(
        use_cache=True, cache_implementation="static",
        cache_config={"batch_size": 1, "max_cache_len": max_cache_len})
    return DecodeStep(TorchExportableModuleWithStaticCache(lm, batch_size=1, max_cache_len=max_cache_len))


def test_llm_decoding_keeps_its_kv_caches_in_the_modules_buffers(device, tmp_path):
    eager = static_cache_llama(32)
    compiled = kiln.compile(static_cache_llama(32), (torch.tensor([[7]]), torch.tensor([0])), strict=True,
                            device=device, min_block_size=1, cache_dir=tmp_path)
    caches = [name for name, _ in compiled.named_buffers() if "cache" in name]
    assert caches, list(dict(compiled.named_buffers()))
    prompt, tokens = [7, 42, 13], {}
    for name, step in (("eager", eager), ("kiln", compiled)):
        out, token = [], None
        with torch.no_grad():
            for pos in range(12):
                token = prompt[pos] if pos < len(prompt) else token
                logits = step(torch.tensor([[token]]), torch.tensor([pos]))
                token = int(logits[0, -1].argmax())
                out.append(token)
        tokens[name] = out
    assert tokens["kiln"] == tokens["eager"]
    # The caches the compiled module owns hold what eager decoding wrote.
    eager_buffers = dict(eager.named_buffers())
    for name in caches:
        torch.testing.assert_close(compiled.get_buffer(name), eager_buffers[name], rtol=1e-4, atol=1e-5)
    assert any(compiled.get_buffer(name).abs().sum() > 0 for name in caches)


def test_non_strict_export_writes_the_caches_users_read_by_their_buffer_names(device, tmp_path):
    # torch.export's default tracing lifts the static caches as tensor constants
    # over the registered buffers' storage and writes those: one tensor, several
    # names, and the registered buffers hold what eager decoding wrote.
    eager = static_cache_llama(16)
    compiled = kiln.compile(static_cache_llama(16), (torch.tensor([[7]]), torch.tensor([0])),
                            device=device, min_block_size=1, cache_dir=tmp_path)
    aliases = compiled.program.aliases()
    assert aliases.get("inner.model.model.layers.0.self_attn.lifted_tensor_2") == "inner.key_cache_0", aliases
    with torch.no_grad():
        for pos, token in enumerate([7, 42, 13, 99]):
            torch.testing.assert_close(compiled(torch.tensor([[token]]), torch.tensor([pos])).cpu(),
                                       eager(torch.tensor([[token]]), torch.tensor([pos])), rtol=1e-4, atol=1e-4)
    eager_buffers = dict(eager.named_buffers())
    for layer in range(2):
        for kind in ("key", "value"):
            name = f"inner.{kind}_cache_{layer}"
            torch.testing.assert_close(compiled.get_buffer(name).cpu(), eager_buffers[name], rtol=1e-4, atol=1e-5)
            assert compiled.get_buffer(name).abs().sum() > 0
    for alias, kept in aliases.items():
        assert compiled.get_buffer(alias).data_ptr() == compiled.get_buffer(kept).data_ptr(), alias


def test_torch_compile_writes_the_caches_of_the_users_module(device, tmp_path):
    # The module's own buffers (the static caches and counters, and the tensor
    # constants dynamo sees over their storage) are the memory kiln updates:
    # after the steps they hold what eager decoding left in its module.
    eager = static_cache_llama(16)
    model = static_cache_llama(16)
    fast = torch.compile(model, backend="kiln",
                         options={"device": device, "min_block_size": 1, "cache_dir": str(tmp_path)})
    with torch.no_grad():
        for pos, token in enumerate([7, 42, 13, 99]):
            torch.testing.assert_close(fast(torch.tensor([[token]]), torch.tensor([pos])).cpu(),
                                       eager(torch.tensor([[token]]), torch.tensor([pos])), rtol=1e-4, atol=1e-4)
    got, want = dict(model.named_buffers()), dict(eager.named_buffers())
    names = [n for n in want if "cache" in n or "cumulative_length" in n]
    assert len(names) >= 6, list(want)
    for name in names:
        torch.testing.assert_close(got[name], want[name], rtol=1e-4, atol=1e-5)
    assert any(got[n].abs().sum() > 0 for n in names if "key_cache" in n)


class StatefulWithUnknownOp(torch.nn.Module):
    """A buffer written in place, read after the write, and an op kiln does not know."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.a = torch.nn.Linear(8, 8)
        self.b = torch.nn.Linear(8, 4)
        self.register_buffer("history", torch.zeros(4, 8))

    def forward(self, x, pos):
        self.history.index_copy_(0, pos, self.a(x).relu())
        h = torch.tanh(self.history.sum(0, keepdim=True) * 0.3) * 0.9
        return self.b(torch.special.erfinv(h) * 2.0 + 1.0)


def test_state_written_in_place_around_ops_run_in_pytorch(device, tmp_path):
    eager = StatefulWithUnknownOp().eval()
    example = (torch.randn(1, 8), torch.tensor([0]))
    compiled = kiln.compile(StatefulWithUnknownOp().eval(), example, device=device, min_block_size=1,
                            cache_dir=tmp_path)
    assert isinstance(compiled, kiln._torch.PartitionedModule)
    with torch.no_grad():
        for step in range(4):
            x, pos = torch.randn(1, 8), torch.tensor([step])
            torch.testing.assert_close(compiled(x, pos), eager(x, pos), **tol(device))
    torch.testing.assert_close(compiled.get_buffer("history"), eager.history)


def test_asking_for_cuda_where_it_cannot_be_used_raises(tmp_path):
    # Never a program that quietly runs on the CPU reference kernels instead.
    if torch.cuda.is_available():
        pytest.skip("CUDA can be used here")
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 4)).eval()
    x = torch.randn(2, 8)
    with pytest.raises(kiln.KilnError, match="device 'cuda'"):
        kiln.compile(model, (x,), device="cuda", cache_dir=tmp_path)
    fast = torch.compile(model, backend="kiln", options={"device": "cuda", "cache_dir": str(tmp_path)})
    with pytest.raises(Exception, match="device 'cuda'"):
        fast(x)
