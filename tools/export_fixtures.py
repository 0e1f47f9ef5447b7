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
reproduces the same files byte for byte, except llama_decode.*pt2: its strict
(dynamo) export writes Python object ids into "nn_module_stack" keys. To keep the files small, the nodes'
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

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import math
import os
import sys
import traceback
import zipfile
import zlib
from collections import Counter
from typing import Any, Callable

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils import _pytree as pytree

try:
    from safetensors.torch import save_file as save_safetensors
except ImportError:  # pragma: no cover
    sys.exit("safetensors is required: pip install -r tools/requirements-fixtures.txt")


# --------------------------------------------------------------------------
# Fixture description
# --------------------------------------------------------------------------


@dataclasses.dataclass
class Fixture:
    name: str
    description: str
    source: str
    module: nn.Module
    # Example positional inputs used for torch.export.
    example: tuple
    # None: one call on `example`. Otherwise a list of calls (one input tuple
    # each) made in order on one session whose buffers carry over.
    steps: list[tuple] | None = None
    dynamic_shapes: Any = None
    # Human-readable description of the dynamic dims, e.g.
    # {"input.0": {"0": {"name": "batch", "min": 1, "max": 8}}}.
    dynamic: dict | None = None
    # Reference precision for the tolerance measurement.
    reference_dtype: torch.dtype = torch.float64
    # Builds the reference-precision module from a fresh copy; default: .to(reference_dtype).
    make_reference: Callable[[nn.Module, torch.dtype], nn.Module] | None = None
    margin: float = 10.0
    # strict=True traces with dynamo (needed when a module keeps references to
    # its buffers outside the module tree, like transformers' StaticCache).
    strict: bool = False
    # The debug metadata of nodes ("stack_trace", "from_node") is dropped
    # before saving to keep the files small, except for the fixtures that keep
    # it so that loaders see real ones.
    keep_debug_metadata: bool = False
    notes: list[str] = dataclasses.field(default_factory=list)
    # Extra check run on the eager module (fresh copy) after everything else;
    # returns a dict that goes into the manifest under "sanity".
    sanity: Callable[[nn.Module, "Fixture", list], dict] | None = None
    # Exported in the training dialect only (when run_decompositions() cannot
    # take the program: non-strict export of a static KV cache on torch 2.11).
    # The state it writes may be tensor constants (lifted by non-strict export
    # and written in place); their final values are the eager module's buffers
    # they alias.
    training_only: bool = False


BUILDERS: list[tuple[str, Callable[[], Fixture]]] = []


def fixture(name: str):
    def register(fn):
        BUILDERS.append((name, fn))
        return fn

    return register


def seed_for(name: str) -> int:
    return zlib.crc32(name.encode()) & 0x7FFFFFFF


def randomize_batchnorm(model: nn.Module) -> None:
    """Give every BatchNorm non-trivial affine params (export recalibrates the running statistics)."""
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.modules.batchnorm._BatchNorm):
                m.running_mean.normal_(0.0, 0.1)
                m.running_var.uniform_(0.5, 1.5)
                if m.weight is not None:
                    m.weight.uniform_(0.5, 1.5)
                    m.bias.normal_(0.0, 0.1)


SMALLEST_OUTPUT = 1e-2  # a fixture whose largest output is below this checks nothing; export refuses it
CALIBRATION_BATCHES = 4


def condition_weights(model: nn.Module, example: tuple) -> dict:
    """Random weights that keep a network's outputs from vanishing.

    * A parameter whose entries are all equal (LayerNorm's ones and zeros, a
      head initialized to zero) gets noise of 0.1 times its value (at least
      0.1), seeded by its place among such parameters and its shape: a model
      conditioned alone or inside a wrapper gets the same weights.
    * BatchNorm running statistics are measured on CALIBRATION_BATCHES random
      batches of 8 shaped like the example (defaults or random statistics
      shrink or blow up activations layer by layer).
    Returns what was done, for the manifest.
    """
    noised = []
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.numel() > 1 and p.is_floating_point() and bool((p == p.reshape(-1)[0]).all()):
                g = torch.Generator().manual_seed(seed_for(f"{len(noised)}:{tuple(p.shape)}"))
                scale = 0.1 * max(abs(p.reshape(-1)[0].item()), 1.0)
                p.add_((torch.randn(p.shape, generator=g) * scale).to(p.dtype))
                noised.append(name)
        bns = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
        if bns:
            if not all(isinstance(t, torch.Tensor) and t.is_floating_point() for t in example):
                raise AssertionError("BatchNorm recalibration needs floating tensor inputs")
            g = torch.Generator().manual_seed(0)
            model.eval()
            for m in bns:
                m.reset_running_stats()
                m.momentum = None  # a cumulative average over the batches
                m.train()
            for _ in range(CALIBRATION_BATCHES):
                model(*(torch.randn((8,) + tuple(t.shape[1:]), generator=g, dtype=t.dtype) for t in example))
            for m in bns:
                m.momentum = 0.1
            model.eval()
    return {"noised_constant_parameters": noised, "batchnorm_recalibrated": len(bns),
            "calibration_batches": CALIBRATION_BATCHES if bns else 0}


def param_count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


# --------------------------------------------------------------------------
# torchvision models
# --------------------------------------------------------------------------


def _narrow_resnet(block_name: str, layers, widths):
    from torchvision.models.resnet import BasicBlock, Bottleneck, ResNet

    block = {"basic": BasicBlock, "bottleneck": Bottleneck}[block_name]

    class NarrowResNet(ResNet):
        """torchvision ResNet with configurable stage widths (stock forward)."""

        def __init__(self, block, layers, widths, num_classes=10):
            nn.Module.__init__(self)
            self._norm_layer = nn.BatchNorm2d
            self.inplanes = widths[0]
            self.dilation = 1
            self.groups = 1
            self.base_width = 64
            self.conv1 = nn.Conv2d(3, self.inplanes, kernel_size=7, stride=2, padding=3, bias=False)
            self.bn1 = nn.BatchNorm2d(self.inplanes)
            self.relu = nn.ReLU(inplace=True)
            self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
            self.layer1 = self._make_layer(block, widths[0], layers[0])
            self.layer2 = self._make_layer(block, widths[1], layers[1], stride=2)
            self.layer3 = self._make_layer(block, widths[2], layers[2], stride=2)
            self.layer4 = self._make_layer(block, widths[3], layers[3], stride=2)
            self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
            self.fc = nn.Linear(widths[3] * block.expansion, num_classes)
            for m in self.modules():
                if isinstance(m, nn.Conv2d):
                    nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    model = NarrowResNet(block, layers, widths)
    randomize_batchnorm(model)
    return model


RESNET_BASIC = dict(block_name="basic", layers=[2, 2, 2, 2], widths=[8, 12, 16, 24])


@fixture("resnet_basic")
def build_resnet_basic():
    model = _narrow_resnet(**RESNET_BASIC)
    x = torch.randn(2, 3, 32, 32)
    return Fixture(
        "resnet_basic",
        "ResNet-18 layout (BasicBlock, [2,2,2,2]) with stage widths 8/12/16/24, "
        "randomized BatchNorm stats, 10 classes, input 2x3x32x32",
        "torchvision.models.resnet.ResNet subclass: BasicBlock, layers=[2,2,2,2], widths=[8,12,16,24]",
        model,
        (x,),
    )


RESNET10 = dict(block_name="basic", layers=[1, 1, 1, 1], widths=[8, 12, 16, 24])


@fixture("resnet_basic_dynbatch")
def build_resnet_basic_dynbatch():
    model = _narrow_resnet(**RESNET10)
    batch = torch.export.Dim("batch", min=1, max=8)
    sizes = [1, 3, 8]
    return Fixture(
        "resnet_basic_dynbatch",
        "ResNet-10 layout (BasicBlock, [1,1,1,1], widths 8/12/16/24) exported with a dynamic batch dim "
        "(1..8); steps call it at batch 1, 3 and 8 (no state: independent calls at different sizes)",
        "torchvision.models.resnet.ResNet subclass: BasicBlock, layers=[1,1,1,1], widths=[8,12,16,24]",
        model,
        (torch.randn(2, 3, 32, 32),),
        steps=[(torch.randn(b, 3, 32, 32),) for b in sizes],
        dynamic_shapes=({0: batch},),
        dynamic={"input.0": {"0": {"name": "batch", "min": 1, "max": 8}}, "step_sizes": sizes},
    )


@fixture("resnet_bottleneck")
def build_resnet_bottleneck():
    model = _narrow_resnet("bottleneck", [1, 1, 1, 1], [4, 8, 16, 32])
    x = torch.randn(2, 3, 32, 32)
    return Fixture(
        "resnet_bottleneck",
        "ResNet with Bottleneck blocks ([1,1,1,1], planes 4/8/16/32, expansion 4), "
        "randomized BatchNorm stats, 10 classes, input 2x3x32x32",
        "torchvision.models.resnet.ResNet subclass: Bottleneck, layers=[1,1,1,1], widths=[4,8,16,32]",
        model,
        (x,),
    )


@fixture("deeplabv3")
def build_deeplabv3():
    from torchvision.models._utils import IntermediateLayerGetter
    from torchvision.models.segmentation.deeplabv3 import ASPP, DeepLabV3

    # torchvision's DeepLabV3 (stock forward: the classifier's logits upsampled
    # bilinearly to the input size) on a narrow ResNet-10 backbone, with
    # DeepLabHead's layout (ASPP with image pooling, 3x3 conv, BN, ReLU, 1x1 conv)
    # at 32 channels instead of 256.
    backbone = _narrow_resnet(**RESNET10)
    body = IntermediateLayerGetter(backbone, return_layers={"layer4": "out"})
    head = nn.Sequential(
        ASPP(24, [2, 4, 6], out_channels=32),
        nn.Conv2d(32, 32, 3, padding=1, bias=False),
        nn.BatchNorm2d(32),
        nn.ReLU(),
        nn.Conv2d(32, 5, 1),
    )
    model = DeepLabV3(body, head)
    randomize_batchnorm(model)
    x = torch.randn(1, 3, 48, 64)
    return Fixture(
        "deeplabv3",
        "DeepLabV3 segmentation (atrous spatial pyramid pooling with dilations 2/4/6 and image pooling, "
        "bilinear upsampling to the input size) on a ResNet-10 backbone (widths 8/12/16/24), "
        "ASPP and head at 32 channels, 5 classes, input 1x3x48x64",
        "torchvision.models.segmentation.deeplabv3.DeepLabV3(IntermediateLayerGetter(ResNet-10 subclass, "
        "{'layer4': 'out'}), Sequential(ASPP(24, [2, 4, 6], 32), Conv2d(32, 32, 3), BatchNorm2d, ReLU, Conv2d(32, 5, 1)))",
        model,
        (x,),
    )


@fixture("mobilenet_v2")
def build_mobilenet_v2():
    from torchvision.models import mobilenet_v2
    from torchvision.ops.misc import Conv2dNormActivation

    # Stock stages (t, c, n, s) up to 96 channels with fewer repeats; the 160/320 stages are dropped.
    setting = [[1, 16, 1, 1], [6, 24, 2, 2], [6, 32, 2, 2], [6, 64, 1, 2], [6, 96, 1, 1]]
    model = mobilenet_v2(weights=None, width_mult=0.25, num_classes=10, inverted_residual_setting=setting)
    # The stock head is a 1x1 conv to 1280 channels regardless of width_mult
    # (100k+ params); narrow it to 96 so the fixture stays small.
    in_ch = model.features[-1][0].in_channels
    model.features[-1] = Conv2dNormActivation(in_ch, 96, kernel_size=1, norm_layer=nn.BatchNorm2d, activation_layer=nn.ReLU6)
    model.classifier[1] = nn.Linear(96, 10)
    model.last_channel = 96
    randomize_batchnorm(model)
    x = torch.randn(1, 3, 64, 64)
    return Fixture(
        "mobilenet_v2",
        "MobileNetV2 width_mult=0.25 (inverted residuals, depthwise convs, ReLU6), stages "
        "[[1,16,1,1],[6,24,2,2],[6,32,2,2],[6,64,1,2],[6,96,1,1]], final 1x1 conv narrowed to 96 channels, "
        "input 1x3x64x64",
        "torchvision.models.mobilenet_v2(width_mult=0.25, num_classes=10, inverted_residual_setting="
        "[[1,16,1,1],[6,24,2,2],[6,32,2,2],[6,64,1,2],[6,96,1,1]]); features[-1] -> 96 channels",
        model,
        (x,),
    )


@fixture("mobilenet_v3_small")
def build_mobilenet_v3_small():
    from torchvision.models.mobilenetv3 import MobileNetV3, _mobilenet_v3_conf

    setting, _ = _mobilenet_v3_conf("mobilenet_v3_small", width_mult=0.25)
    # Keep the first five blocks (ReLU and hardswish, with and without SE, 3x3 and 5x5,
    # strided and residual) and narrow the classifier's hidden layer to 64.
    model = MobileNetV3(setting[:5], 64, num_classes=10)
    randomize_batchnorm(model)
    x = torch.randn(1, 3, 64, 64)
    return Fixture(
        "mobilenet_v3_small",
        "MobileNetV3-Small width_mult=0.25, first five inverted-residual blocks, classifier hidden 64 "
        "(ReLU and hardswish stages, 3x3/5x5 depthwise, squeeze-excitation with hardsigmoid), input 1x3x64x64",
        "torchvision.models.mobilenetv3.MobileNetV3(_mobilenet_v3_conf('mobilenet_v3_small', width_mult=0.25)[0][:5], "
        "last_channel=64, num_classes=10)",
        model,
        (x,),
    )


@fixture("shufflenet_v2")
def build_shufflenet_v2():
    from torchvision.models.shufflenetv2 import ShuffleNetV2

    model = ShuffleNetV2([2, 2, 2], [8, 16, 32, 64, 128], num_classes=10)
    randomize_batchnorm(model)
    x = torch.randn(1, 3, 64, 64)
    return Fixture(
        "shufflenet_v2",
        "ShuffleNetV2 (channel split / shuffle, stages_repeats [2,2,2], channels 8/16/32/64/128), input 1x3x64x64",
        "torchvision.models.shufflenetv2.ShuffleNetV2([2,2,2], [8,16,32,64,128], num_classes=10)",
        model,
        (x,),
    )


@fixture("squeezenet")
def build_squeezenet():
    from torchvision.models.squeezenet import Fire, SqueezeNet

    class NarrowSqueezeNet(SqueezeNet):
        """SqueezeNet 1.1 layout built from torchvision's Fire module, narrow channels (stock forward)."""

        def __init__(self, num_classes=10):
            nn.Module.__init__(self)
            self.num_classes = num_classes
            self.features = nn.Sequential(
                nn.Conv2d(3, 16, kernel_size=3, stride=2),
                nn.ReLU(inplace=True),
                nn.MaxPool2d(kernel_size=3, stride=2, ceil_mode=True),
                Fire(16, 4, 8, 8),
                Fire(16, 4, 8, 8),
                nn.MaxPool2d(kernel_size=3, stride=2, ceil_mode=True),
                Fire(16, 8, 16, 16),
                Fire(32, 8, 16, 16),
                nn.MaxPool2d(kernel_size=3, stride=2, ceil_mode=True),
                Fire(32, 12, 24, 24),
                Fire(48, 12, 24, 24),
                Fire(48, 16, 32, 32),
                Fire(64, 16, 32, 32),
            )
            final_conv = nn.Conv2d(64, num_classes, kernel_size=1)
            self.classifier = nn.Sequential(
                nn.Dropout(p=0.5), final_conv, nn.ReLU(inplace=True), nn.AdaptiveAvgPool2d((1, 1))
            )
            for m in self.modules():
                if isinstance(m, nn.Conv2d):
                    if m is final_conv:
                        nn.init.normal_(m.weight, mean=0.0, std=0.01)
                    else:
                        nn.init.kaiming_uniform_(m.weight)
                    nn.init.normal_(m.bias, 0.0, 0.05)

    model = NarrowSqueezeNet()
    x = torch.randn(1, 3, 64, 64)
    return Fixture(
        "squeezenet",
        "SqueezeNet 1.1 layout from torchvision Fire modules with narrow channels "
        "(ceil_mode max-pools, concat of 1x1/3x3 expands), input 1x3x64x64",
        "torchvision.models.squeezenet.SqueezeNet subclass built from torchvision.models.squeezenet.Fire",
        model,
        (x,),
    )


@fixture("efficientnet_b0")
def build_efficientnet_b0():
    from torchvision.models.efficientnet import EfficientNet, _efficientnet_conf

    setting, last_channel = _efficientnet_conf("efficientnet_b0", width_mult=0.25, depth_mult=0.34)
    # Keep the first four MBConv stages (8/8/16/24 channels, kernels 3 and 5).
    model = EfficientNet(setting[:4], dropout=0.2, stochastic_depth_prob=0.2, num_classes=10, last_channel=last_channel)
    randomize_batchnorm(model)
    x = torch.randn(1, 3, 64, 64)
    return Fixture(
        "efficientnet_b0",
        "EfficientNet-B0 layout with width_mult=0.25, depth_mult=0.34, first four MBConv stages "
        "(SiLU, squeeze-excitation with sigmoid, 3x3/5x5 depthwise; stochastic depth is identity in eval), "
        "input 1x3x64x64",
        "torchvision.models.efficientnet.EfficientNet(_efficientnet_conf('efficientnet_b0', width_mult=0.25, "
        "depth_mult=0.34)[0][:4], num_classes=10)",
        model,
        (x,),
    )


@fixture("vit")
def build_vit():
    from torchvision.models.vision_transformer import VisionTransformer

    model = VisionTransformer(
        image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=32, mlp_dim=64, num_classes=10
    )
    with torch.no_grad():
        # The stock init zeroes the head and the positional embedding is tiny; make both non-trivial.
        nn.init.normal_(model.heads.head.weight, std=0.2)
        nn.init.normal_(model.heads.head.bias, std=0.1)
        nn.init.normal_(model.encoder.pos_embedding, std=0.2)
        nn.init.normal_(model.class_token, std=0.2)
    x = torch.randn(2, 3, 32, 32)
    return Fixture(
        "vit",
        "VisionTransformer image 32, patch 8, 2 layers, hidden 32, 2 heads, MLP 64 "
        "(conv patchify, class token, nn.MultiheadAttention, GELU, LayerNorm), input 2x3x32x32",
        "torchvision.models.vision_transformer.VisionTransformer(image_size=32, patch_size=8, num_layers=2, "
        "num_heads=2, hidden_dim=32, mlp_dim=64, num_classes=10)",
        model,
        (x,),
        notes=[
            "eager nn.MultiheadAttention takes its fused fast path (aten._native_multi_head_attention) "
            "under no_grad; the exported graph uses the decomposed path. The expected outputs are the "
            "eager (fast path) values."
        ],
    )


@fixture("swin")
def build_swin():
    from torchvision.models.swin_transformer import SwinTransformer

    # torchvision's Swin-T layout scaled down: two stages (2 blocks each: a plain and a
    # shifted window, relative position bias, patch merging between), 4x4 windows on a
    # 10x10 patch grid so the windows need padding and the shifted block a mask.
    model = SwinTransformer(
        patch_size=[4, 4], embed_dim=16, depths=[2, 2], num_heads=[2, 4], window_size=[4, 4],
        stochastic_depth_prob=0.0, num_classes=10,
    )
    with torch.no_grad():
        # The stock init leaves the relative position bias tables and the head near
        # zero (std 0.02, logits below 0.1); make both matter.
        for name, p in model.named_parameters():
            if name.endswith("relative_position_bias_table"):
                nn.init.normal_(p, std=0.5)
        nn.init.normal_(model.head.weight, std=0.5)
        nn.init.normal_(model.head.bias, std=0.1)
    x = torch.randn(1, 3, 40, 40)
    return Fixture(
        "swin",
        "Swin Transformer (torchvision, Swin-T layout scaled down): patch 4, embed 16, depths [2, 2], "
        "heads [2, 4], window 4x4 with shifted windows (torch.roll, attention mask), relative position bias, "
        "padding of the 10x10 patch grid to whole windows, patch merging; input 1x3x40x40",
        "torchvision.models.swin_transformer.SwinTransformer(patch_size=[4, 4], embed_dim=16, depths=[2, 2], "
        "num_heads=[2, 4], window_size=[4, 4], stochastic_depth_prob=0.0, num_classes=10)",
        model,
        (x,),
    )


# --------------------------------------------------------------------------
# transformers models
# --------------------------------------------------------------------------

TINY = dict(vocab_size=100, hidden_size=32, num_hidden_layers=2, intermediate_size=64, max_position_embeddings=64)


class BertWrapper(nn.Module):
    """Positional inputs, tuple outputs (last_hidden_state, pooler_output)."""

    def __init__(self, bert):
        super().__init__()
        self.bert = bert

    def forward(self, input_ids, attention_mask):
        out = self.bert(input_ids=input_ids, attention_mask=attention_mask, return_dict=True)
        return out.last_hidden_state, out.pooler_output


def _tiny_bert():
    from transformers import BertConfig, BertModel

    config = BertConfig(
        num_attention_heads=2, type_vocab_size=2, initializer_range=0.1, attn_implementation="sdpa", **TINY
    )
    return BertWrapper(BertModel(config).eval())


def _bert_inputs(batch, seq, gen):
    ids = torch.randint(1, 100, (batch, seq), generator=gen)
    mask = torch.ones(batch, seq, dtype=torch.int64)
    if batch > 1:
        # second row is padded: its last third is masked out
        pad = max(1, seq // 3)
        mask[1, seq - pad :] = 0
        ids[1, seq - pad :] = 0
    return ids, mask


@fixture("bert")
def build_bert():
    model = _tiny_bert()
    gen = torch.Generator().manual_seed(1)
    ids, mask = _bert_inputs(2, 12, gen)
    return Fixture(
        "bert",
        "BertModel (2 layers, hidden 32, 2 heads, vocab 100, sdpa attention); input_ids and an "
        "attention_mask whose second row has 4 padded positions; outputs last_hidden_state, pooler_output",
        "transformers.BertModel(BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, "
        "num_attention_heads=2, intermediate_size=64, max_position_embeddings=64), attn_implementation='sdpa')",
        model,
        (ids, mask),
    )


@fixture("bert_dynseq")
def build_bert_dynseq():
    model = _tiny_bert()
    gen = torch.Generator().manual_seed(2)
    seq = torch.export.Dim("seq", min=2, max=32)
    sizes = [2, 7, 32]
    return Fixture(
        "bert_dynseq",
        "bert exported with a dynamic sequence length (2..32, batch 2); steps call it at "
        "seq 2, 7 and 32 (independent calls at different sizes)",
        "transformers.BertModel (same config as 'bert')",
        model,
        _bert_inputs(2, 12, gen),
        steps=[_bert_inputs(2, s, gen) for s in sizes],
        dynamic_shapes=({1: seq}, {1: seq}),
        dynamic={
            "input.0": {"1": {"name": "seq", "min": 2, "max": 32}},
            "input.1": {"1": {"name": "seq", "min": 2, "max": 32}},
            "step_sizes": sizes,
        },
    )


@fixture("roberta")
def build_roberta():
    """RoBERTa numbers positions from the input ids: a cumsum of the non-padding mask."""
    from transformers import RobertaConfig, RobertaModel

    config = RobertaConfig(
        vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
        max_position_embeddings=40, type_vocab_size=1, pad_token_id=1, initializer_range=0.1,
        attn_implementation="sdpa",
    )
    model = BertWrapper(RobertaModel(config).eval())
    gen = torch.Generator().manual_seed(21)
    ids = torch.randint(3, 100, (2, 12), generator=gen)
    mask = torch.ones(2, 12, dtype=torch.int64)
    ids[1, 8:] = 1  # the second row's last 4 positions are padding (pad_token_id 1)
    mask[1, 8:] = 0
    return Fixture(
        "roberta",
        "RobertaModel (2 layers, hidden 32, 2 heads, vocab 100, sdpa attention): position ids from a cumsum "
        "of the input ids' non-padding mask; input_ids and an attention_mask whose second row has 4 padded "
        "positions; outputs last_hidden_state, pooler_output",
        "transformers.RobertaModel(RobertaConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, "
        "num_attention_heads=2, intermediate_size=64, max_position_embeddings=40, type_vocab_size=1, "
        "pad_token_id=1), attn_implementation='sdpa')",
        model,
        (ids, mask),
    )


class PooledWrapper(nn.Module):
    """Positional input_ids, tuple outputs (last_hidden_state, pooler_output)."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids):
        out = self.model(input_ids=input_ids, return_dict=True)
        return out.last_hidden_state, out.pooler_output


@fixture("clip_text")
def build_clip_text():
    """CLIP's text tower pools the hidden state at the end-of-text token, found by an argmax."""
    from transformers import CLIPTextConfig, CLIPTextModel

    config = CLIPTextConfig(
        vocab_size=100, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        max_position_embeddings=16, eos_token_id=99, bos_token_id=98, pad_token_id=0, initializer_range=0.1,
        attn_implementation="sdpa",
    )
    model = PooledWrapper(CLIPTextModel(config).eval())
    gen = torch.Generator().manual_seed(22)
    ids = torch.randint(1, 98, (3, 10), generator=gen)
    ids[:, 0] = 98
    for row, end in enumerate((9, 5, 2)):  # the end-of-text token at a different place in each row
        ids[row, end] = 99
        ids[row, end + 1 :] = 0
    return Fixture(
        "clip_text",
        "CLIPTextModel (2 layers, hidden 32, 4 heads, vocab 100, causal sdpa attention): the pooled output "
        "is the hidden state at each row's end-of-text token (id 99), found by argmax; input_ids 3x10 with "
        "the token at positions 9, 5 and 2; outputs last_hidden_state, pooler_output",
        "transformers.CLIPTextModel(CLIPTextConfig(vocab_size=100, hidden_size=32, intermediate_size=64, "
        "num_hidden_layers=2, num_attention_heads=4, max_position_embeddings=16, eos_token_id=99), "
        "attn_implementation='sdpa')",
        model,
        (ids,),
    )


@fixture("fnet")
def build_fnet():
    """FNet mixes tokens with the real part of a 2-d FFT over the sequence and hidden dims."""
    from transformers import FNetConfig, FNetModel

    config = FNetConfig(
        vocab_size=100, hidden_size=32, num_hidden_layers=2, intermediate_size=64, max_position_embeddings=32,
        type_vocab_size=2, use_tpu_fourier_optimizations=False, initializer_range=0.1,
    )
    model = PooledWrapper(FNetModel(config).eval())
    ids = torch.randint(0, 100, (2, 12), generator=torch.Generator().manual_seed(23))
    return Fixture(
        "fnet",
        "FNetModel (2 layers, hidden 32, vocab 100): each layer's token mixing is the real part of fftn over "
        "the sequence and hidden dims (complex intermediates); input_ids 2x12; outputs last_hidden_state, "
        "pooler_output",
        "transformers.FNetModel(FNetConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, "
        "intermediate_size=64, max_position_embeddings=32, use_tpu_fourier_optimizations=False))",
        model,
        (ids,),
    )


class ComplexOps(nn.Module):
    """Complex values between real inputs and real outputs: the original Llama code's rotary embedding
    (view_as_complex, a product with polar(1, angles), view_as_real), a magnitude and phase spectrum, a
    filtered signal brought back by irfft, hfft and ihfft, fft2 with conj, and an stft magnitude."""

    def __init__(self):
        super().__init__()
        inv = 1.0 / (10000 ** (torch.arange(0, 8, 2).float() / 8))
        self.register_buffer("angles", torch.outer(torch.arange(6).float(), inv))  # [6, 4]
        self.filter = nn.Parameter(torch.linspace(1.0, 0.2, 9))
        self.register_buffer("window", torch.hann_window(6))

    def forward(self, q, signal):
        # q [2, 6, 8]: rotary on pairs of features
        qc = torch.view_as_complex(q.float().reshape(2, 6, 4, 2))
        rotated = torch.view_as_real(qc * torch.polar(torch.ones_like(self.angles), self.angles)).flatten(2)
        spec = torch.fft.rfft(signal, dim=-1)  # signal [3, 16] -> [3, 9]
        magnitude, phase = spec.abs(), spec.angle()
        filtered = torch.fft.irfft(spec * self.filter, n=16, dim=-1, norm="ortho")
        h = torch.fft.hfft(spec[:, :5], n=8)
        ih = torch.view_as_real(torch.fft.ihfft(signal[:, :10], norm="forward").resolve_conj())
        grid = torch.fft.fft2(signal.reshape(3, 4, 4))
        mixed = (grid * grid.conj()).real + torch.fft.ifft2(grid, s=(4, 6)).imag.sum(-1, keepdim=True)
        spectrogram = torch.stft(
            signal, 8, hop_length=3, win_length=6, window=self.window, center=False, return_complex=True,
            normalized=True,
        ).abs()
        return rotated, magnitude, phase, filtered, h, ih, mixed, spectrogram


@fixture("complex_ops")
def build_complex_ops():
    gen = torch.Generator().manual_seed(24)
    return Fixture(
        "complex_ops",
        "complex intermediates between real inputs and real outputs: rotary embedding through "
        "view_as_complex * polar and view_as_real, rfft magnitude and angle, irfft of a filtered spectrum "
        "(n=16, ortho), hfft (n=8), ihfft (forward norm), fft2 times its conjugate and ifft2 with s=(4, 6), "
        "an stft magnitude (n_fft 8, hop 3, a 6-point Hann window, normalized); "
        "inputs q 2x6x8 and signal 3x16 float32",
        "custom nn.Module (tools/export_fixtures.py: ComplexOps)",
        ComplexOps(),
        (torch.randn(2, 6, 8, generator=gen), torch.randn(3, 16, generator=gen)),
    )


class FftForms(nn.Module):
    """torch.fft's forms over chosen dims, sizes (padding and trimming) and norms, on real and complex
    inputs (the complex one built from two real planes); complex results returned through view_as_real."""

    def forward(self, x, planes):
        fft = torch.fft
        z = torch.complex(planes[..., 0], planes[..., 1])
        outs = [
            fft.ihfft2(x), fft.ihfftn(x, s=(3, 6), norm="ortho"), fft.rfftn(x, dim=(0, 2)), fft.ifftn(z, s=(2, 7)),
            fft.fftn(z, norm="forward"), fft.fft2(x, s=(5, 3)), fft.ifft(z, n=3, dim=0), fft.rfft2(x, norm="ortho"),
            fft.irfftn(z, s=(4, 6)), fft.hfftn(z, dim=(0, 1)), fft.ihfft(x, n=9, dim=1),
            fft.fftshift(fft.fft(z), dim=-1), z.conj() * z + z.sum(1, keepdim=True), torch.polar(x, x.flip(-1)),
        ]
        return tuple(torch.view_as_real(o.resolve_conj()) if o.is_complex() else o for o in outs)


@fixture("fft_forms")
def build_fft_forms():
    gen = torch.Generator().manual_seed(26)
    return Fixture(
        "fft_forms",
        "torch.fft's n-d forms (ihfft2, ihfftn, rfftn, ifftn, fftn, fft2, ifft, rfft2, irfftn, hfftn, ihfft, "
        "fftshift) with chosen dims, sizes and norms, conj, products and sums of complex values, polar; inputs "
        "4x5x6 real and 4x5x6x2 (real and imaginary planes); complex results through view_as_real",
        "custom nn.Module (tools/export_fixtures.py: FftForms)",
        FftForms(),
        (torch.randn(4, 5, 6, generator=gen), torch.randn(4, 5, 6, 2, generator=gen)),
    )


class LinalgFactors(nn.Module):
    """QR (reduced and complete), torch.svd's U, S, V, LU factors and their unpacking, and LDL factors."""

    def forward(self, x, y):
        q, r = torch.linalg.qr(x)
        qc, rc = torch.linalg.qr(y, mode="complete")
        u, s, v = torch.svd(x)
        lu, pivots = torch.linalg.lu_factor(y)
        p, lower, upper = torch.lu_unpack(lu, pivots)
        ld, ldl_pivots = torch.linalg.ldl_factor(y @ y.mT)
        return q, r, qc, rc, u, s, v, lu, pivots, p, lower, upper, ld, ldl_pivots


@fixture("linalg_factors")
def build_linalg_factors():
    gen = torch.Generator().manual_seed(25)
    return Fixture(
        "linalg_factors",
        "matrix factorizations: linalg.qr reduced (2x5x3) and complete (4x4), torch.svd (U, S, V), "
        "linalg.lu_factor and lu_unpack, linalg.ldl_factor of a symmetric 4x4; float32 inputs 2x5x3 and 4x4",
        "custom nn.Module (tools/export_fixtures.py: LinalgFactors)",
        LinalgFactors(),
        (torch.randn(2, 5, 3, generator=gen), torch.randn(4, 4, generator=gen)),
    )


class LogitsWrapper(nn.Module):
    def __init__(self, lm):
        super().__init__()
        self.lm = lm

    def forward(self, input_ids):
        return self.lm(input_ids=input_ids, use_cache=False, return_dict=True).logits


@fixture("gpt2")
def build_gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(
        vocab_size=100, n_embd=32, n_layer=2, n_head=2, n_inner=64, n_positions=64,
        initializer_range=0.1, attn_implementation="sdpa",
    )
    model = LogitsWrapper(GPT2LMHeadModel(config).eval())
    ids = torch.randint(0, 100, (1, 10), generator=torch.Generator().manual_seed(3))
    return Fixture(
        "gpt2",
        "GPT2LMHeadModel (2 layers, n_embd 32, 2 heads, vocab 100, tied lm_head, sdpa causal attention), "
        "input_ids 1x10; output logits",
        "transformers.GPT2LMHeadModel(GPT2Config(vocab_size=100, n_embd=32, n_layer=2, n_head=2, n_inner=64, "
        "n_positions=64), attn_implementation='sdpa')",
        model,
        (ids,),
    )


class Seq2SeqLogits(nn.Module):
    """Positional (input_ids, attention_mask, decoder_input_ids) -> logits of one teacher-forced pass."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask, decoder_input_ids):
        out = self.model(
            input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=decoder_input_ids,
            use_cache=False, return_dict=True,
        )
        return out.logits


@fixture("t5")
def build_t5():
    from transformers import T5Config, T5ForConditionalGeneration

    config = T5Config(
        vocab_size=100, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_decoder_layers=2, num_heads=4,
        relative_attention_num_buckets=8, relative_attention_max_distance=16, dropout_rate=0.0,
        feed_forward_proj="gated-gelu", tie_word_embeddings=False, initializer_factor=1.0,
        decoder_start_token_id=0, pad_token_id=0,
    )
    model = Seq2SeqLogits(T5ForConditionalGeneration(config).eval())
    gen = torch.Generator().manual_seed(5)
    ids = torch.randint(1, 100, (2, 12), generator=gen)
    mask = torch.ones(2, 12, dtype=torch.int64)
    mask[1, 8:] = 0  # the second source row is padded
    ids[1, 8:] = 0
    dec = torch.randint(1, 100, (2, 7), generator=gen)
    dec[:, 0] = 0  # the decoder start token
    return Fixture(
        "t5",
        "T5ForConditionalGeneration encoder-decoder (2+2 layers, d_model 32, 4 heads of 8, gated-GELU FFN, "
        "RMS-style T5 LayerNorm, bucketed relative position bias (8 buckets, max distance 16), cross "
        "attention, untied lm_head); input_ids 2x12 with a padded second row, decoder_input_ids 2x7; "
        "output logits of one teacher-forced pass",
        "transformers.T5ForConditionalGeneration(T5Config(vocab_size=100, d_model=32, d_kv=8, d_ff=64, "
        "num_layers=2, num_decoder_layers=2, num_heads=4, relative_attention_num_buckets=8, "
        "relative_attention_max_distance=16, feed_forward_proj='gated-gelu', tie_word_embeddings=False))",
        model,
        (ids, mask, dec),
    )


class HiddenStates(nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_values):
        return self.model(input_values=input_values, return_dict=True).last_hidden_state


@fixture("wav2vec2")
def build_wav2vec2():
    from transformers import Wav2Vec2Config, Wav2Vec2Model

    config = Wav2Vec2Config(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
        conv_dim=(16, 16, 16), conv_stride=(5, 2, 2), conv_kernel=(10, 3, 3), conv_bias=False,
        feat_extract_norm="group", num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4,
        do_stable_layer_norm=False, hidden_dropout=0.0, attention_dropout=0.0, activation_dropout=0.0,
        feat_proj_dropout=0.0, layerdrop=0.0, mask_time_prob=0.0, initializer_range=0.1,
        attn_implementation="sdpa",
    )
    model = HiddenStates(Wav2Vec2Model(config).eval())
    x = torch.randn(1, 800, generator=torch.Generator().manual_seed(6))
    return Fixture(
        "wav2vec2",
        "Wav2Vec2Model speech encoder: a 3-layer conv1d feature extractor (kernels 10/3/3, strides 5/2/2, "
        "GroupNorm after the first, GELU), feature projection, a grouped conv1d positional embedding with "
        "weight normalization (kernel 16, 4 groups), 2 post-norm transformer layers (hidden 32, 2 heads); "
        "input 1x800 raw audio; output last_hidden_state",
        "transformers.Wav2Vec2Model(Wav2Vec2Config(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, "
        "intermediate_size=64, conv_dim=(16, 16, 16), conv_stride=(5, 2, 2), conv_kernel=(10, 3, 3), "
        "feat_extract_norm='group', num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4))",
        model,
        (x,),
    )


def _tiny_llama_config(**extra):
    from transformers import LlamaConfig

    return LlamaConfig(
        num_attention_heads=4, num_key_value_heads=2, head_dim=8, rope_theta=10000.0,
        initializer_range=0.1, attn_implementation="sdpa", **TINY, **extra,
    )


LLAMA_SOURCE = (
    "transformers.LlamaForCausalLM(LlamaConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, "
    "num_attention_heads=4, num_key_value_heads=2, intermediate_size=64, max_position_embeddings=64), "
    "attn_implementation='sdpa')"
)


@fixture("llama")
def build_llama():
    from transformers import LlamaForCausalLM

    model = LogitsWrapper(LlamaForCausalLM(_tiny_llama_config(use_cache=False)).eval())
    ids = torch.randint(0, 100, (1, 10), generator=torch.Generator().manual_seed(4))
    return Fixture(
        "llama",
        "LlamaForCausalLM prefill without cache (2 layers, hidden 32, 4 query / 2 kv heads (GQA), "
        "RoPE, RMSNorm, SiLU MLP), input_ids 1x10; output logits",
        LLAMA_SOURCE,
        model,
        (ids,),
    )


class DecodeStep(nn.Module):
    """Positional (input_ids, cache_position) -> logits around the static-cache module."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, input_ids, cache_position):
        return self.inner(input_ids=input_ids, cache_position=cache_position)


LLAMA_DECODE_TOKENS = [7, 42, 13, 99, 5, 64]


def _llama_decode_sanity(fresh: nn.Module, fx: Fixture, eager_outputs: list) -> dict:
    """Eager cached decode logits vs a non-cached full forward over the same prefix."""
    lm = fresh.inner.model
    ids = torch.tensor([LLAMA_DECODE_TOKENS])
    with torch.no_grad():
        full = lm(input_ids=ids, use_cache=False).logits  # [1, T, vocab]
    worst = 0.0
    for k, outs in enumerate(eager_outputs):
        worst = max(worst, (outs[0][0, -1] - full[0, k]).abs().max().item())
    ok = worst < 1e-4
    if not ok:
        raise AssertionError(f"cached decode disagrees with full forward: max abs diff {worst}")
    return {"cached_decode_vs_full_forward_max_abs_diff": worst, "ok": ok}


def _static_cache_module(lm, max_cache_len):
    from transformers import GenerationConfig
    from transformers.integrations.executorch import TorchExportableModuleWithStaticCache

    lm.generation_config = GenerationConfig(
        use_cache=True,
        cache_implementation="static",
        cache_config={"batch_size": 1, "max_cache_len": max_cache_len},
    )
    return DecodeStep(TorchExportableModuleWithStaticCache(lm, batch_size=1, max_cache_len=max_cache_len))


def _llama_decode_reference(fresh: nn.Module, dtype: torch.dtype) -> nn.Module:
    # Module.to() would replace the cache buffers but not the StaticCache's own
    # references to them; rebuild the wrapper around the converted model instead.
    lm = fresh.inner.model.to(dtype)
    return _static_cache_module(lm, fresh.inner.key_cache_0.shape[2])


@fixture("llama_decode")
def build_llama_decode():
    from transformers import LlamaForCausalLM

    lm = LlamaForCausalLM(_tiny_llama_config(use_cache=True)).eval()
    model = _static_cache_module(lm, max_cache_len=16)
    steps = [(torch.tensor([[t]]), torch.tensor([k])) for k, t in enumerate(LLAMA_DECODE_TOKENS)]
    return Fixture(
        "llama_decode",
        "Llama decode step with a static KV cache (transformers ExecuTorch integration, max_cache_len 16): "
        "inputs input_ids [1,1] int64 and cache_position [1] int64, output logits [1,1,100]; "
        f"{len(steps)} teacher-forced steps with tokens {LLAMA_DECODE_TOKENS} at positions 0..{len(steps) - 1}. "
        "Buffers inner.key_cache_<l>/value_cache_<l> [1,2,16,8] and inner.cumulative_length_<l> (int64 scalar) "
        "are non-persistent (they live in the constants config of the archive).",
        "transformers.integrations.executorch.TorchExportableModuleWithStaticCache(" + LLAMA_SOURCE
        + ", batch_size=1, max_cache_len=16)",
        model,
        steps[0],
        steps=steps,
        sanity=_llama_decode_sanity,
        make_reference=_llama_decode_reference,
        strict=True,
        notes=[
            "exported with strict=True (dynamo), as transformers' own export helpers do: the StaticCache "
            "layers hold references to the cache tensors outside the module tree, and non-strict tracing "
            "lifts them as constants instead of buffers (run_decompositions then fails on torch 2.11)",
            "placeholder names (b_inner_static_cache_layers_0_keys) differ from the buffer fqn "
            "(inner.key_cache_0): bind buffers by the signature's buffer_name, never by placeholder name",
            "rotary_emb.original_inv_freq is not a graph input (strict export drops unused buffers)",
        ],
    )


LLAMA_GENERATE_PROMPT = [7, 42, 13]
LLAMA_GENERATE_NEW_TOKENS = 20


@fixture("llama_generate")
def build_llama_generate():
    """Greedy decoding: the prompt, then each step feeds the argmax of the previous logits."""
    import copy

    from transformers import LlamaForCausalLM

    lm = LlamaForCausalLM(_tiny_llama_config(use_cache=True)).eval()
    condition_weights(lm, ())  # before the greedy tokens are chosen (export's conditioning is then a no-op)
    max_cache_len = 32
    # The greedy tokens come from a separate copy, so the exported module's caches start empty.
    probe = _static_cache_module(copy.deepcopy(lm), max_cache_len)
    tokens = list(LLAMA_GENERATE_PROMPT)
    with torch.no_grad():
        for k in range(len(LLAMA_GENERATE_PROMPT) + LLAMA_GENERATE_NEW_TOKENS - 1):
            logits = probe(torch.tensor([[tokens[k]]]), torch.tensor([k]))
            if k + 1 >= len(tokens):
                tokens.append(int(logits[0, -1].argmax()))
    model = _static_cache_module(lm, max_cache_len)
    steps = [(torch.tensor([[t]]), torch.tensor([k])) for k, t in enumerate(tokens)]
    return Fixture(
        "llama_generate",
        "Llama decode step with a static KV cache of 32 (transformers ExecuTorch integration), called "
        f"greedily: prompt {LLAMA_GENERATE_PROMPT}, then {LLAMA_GENERATE_NEW_TOKENS} tokens, each the argmax "
        "of the previous step's logits (step k feeds token k at position k; the generated tokens are "
        "step<k>.input.0 for k >= 3 and the argmax of the last step's output)",
        "transformers.integrations.executorch.TorchExportableModuleWithStaticCache(" + LLAMA_SOURCE
        + ", batch_size=1, max_cache_len=32)",
        model,
        steps[0],
        steps=steps,
        make_reference=_llama_decode_reference,
        strict=True,
        notes=["greedy tokens computed by the eager module in float32 before export, its weights conditioned "
               "first (so 'conditioning' below lists nothing more); "
               f"prompt {LLAMA_GENERATE_PROMPT}, generated {tokens[len(LLAMA_GENERATE_PROMPT):]}"],
    )


@fixture("llama_nonstrict")
def build_llama_nonstrict():
    """llama_decode's model exported the default way (non-strict): the caches become written tensor constants."""
    from transformers import LlamaForCausalLM

    lm = LlamaForCausalLM(_tiny_llama_config(use_cache=True)).eval()
    model = _static_cache_module(lm, max_cache_len=16)
    steps = [(torch.tensor([[t]]), torch.tensor([k])) for k, t in enumerate(LLAMA_DECODE_TOKENS)]
    return Fixture(
        "llama_nonstrict",
        "Llama decode step with a static KV cache (max_cache_len 16) exported with torch.export.export's default "
        "(non-strict) tracing: the StaticCache's key/value tensors and counters are lifted as tensor constants "
        "(inner...lifted_tensor_<n>) and written in place (index_copy_, copy_); PyTorch's runner keeps the writes "
        f"across calls. {len(steps)} teacher-forced steps with tokens {LLAMA_DECODE_TOKENS}; final.buffer.<name> "
        "holds each written constant's value after the last step, under the constant's name and under the name "
        "of the registered buffer it aliases (inner.key_cache_<l>, inner.value_cache_<l>, "
        "inner.cumulative_length_<l>), read from the eager module as a user reads it",
        "transformers.integrations.executorch.TorchExportableModuleWithStaticCache(" + LLAMA_SOURCE
        + ", batch_size=1, max_cache_len=16)",
        model,
        steps[0],
        steps=steps,
        make_reference=_llama_decode_reference,
        strict=False,
        training_only=True,
        notes=["training dialect only: run_decompositions() fails on this program with torch 2.11 "
               "(AssertionError: expected compiled_fn to be GraphModule)"],
    )


@fixture("llama_prefill")
def build_llama_prefill():
    """The prefill method of llama_generate's model: the whole prompt in one call."""
    from transformers import LlamaForCausalLM

    torch.manual_seed(seed_for("llama_generate"))  # the same weights as llama_generate
    lm = LlamaForCausalLM(_tiny_llama_config(use_cache=True)).eval()
    model = _static_cache_module(lm, max_cache_len=32)
    n = len(LLAMA_GENERATE_PROMPT)
    call = (torch.tensor([LLAMA_GENERATE_PROMPT]), torch.arange(n))
    return Fixture(
        "llama_prefill",
        f"llama_generate's model (same weights) exported for prefill: input_ids [1,{n}] and cache_position [{n}] "
        f"take the prompt {LLAMA_GENERATE_PROMPT} in one call and fill the KV caches (static cache 32); output "
        f"logits [1,{n},100]. With llama_generate as the decode method, one program prefills and decodes",
        "transformers.integrations.executorch.TorchExportableModuleWithStaticCache(" + LLAMA_SOURCE
        + ", batch_size=1, max_cache_len=32)",
        model,
        call,
        steps=[call],
        make_reference=_llama_decode_reference,
        strict=True,
    )


LLAMA_PREFILL_DYN_LENGTHS = [3, 1, 7, 16, 5]  # 32 positions: the whole cache


@fixture("llama_prefill_dyn")
def build_llama_prefill_dyn():
    """llama_prefill with a dynamic prompt length: prompts of any length 1..16 fill the caches chunk by chunk."""
    from transformers import LlamaForCausalLM

    torch.manual_seed(seed_for("llama_generate"))  # the same weights as llama_generate
    lm = LlamaForCausalLM(_tiny_llama_config(use_cache=True)).eval()
    model = _static_cache_module(lm, max_cache_len=32)
    seq = torch.export.Dim("seq", min=1, max=16)
    gen = torch.Generator().manual_seed(5)
    steps, at = [], 0
    for n in LLAMA_PREFILL_DYN_LENGTHS:
        ids = list(LLAMA_GENERATE_PROMPT) if at == 0 else torch.randint(0, 100, (n,), generator=gen).tolist()
        steps.append((torch.tensor([ids[:n]]), torch.arange(at, at + n)))
        at += n
    return Fixture(
        "llama_prefill_dyn",
        "llama_generate's model (same weights, static cache 32) exported for prefill with a dynamic prompt length "
        "(input_ids [1,seq], cache_position [seq], seq 1..16); called in turn with "
        f"{LLAMA_PREFILL_DYN_LENGTHS} tokens at consecutive positions, filling the caches chunk by chunk (the first "
        f"call is the prompt {LLAMA_GENERATE_PROMPT}); outputs logits [1,seq,100]. With llama_generate as the "
        "decode method, one program prefills a prompt of any length and decodes",
        "transformers.integrations.executorch.TorchExportableModuleWithStaticCache(" + LLAMA_SOURCE
        + ", batch_size=1, max_cache_len=32)",
        model,
        steps[0],
        steps=steps,
        dynamic_shapes=({1: seq}, {0: seq}),
        dynamic={
            "input.0": {"1": {"name": "seq", "min": 1, "max": 16}},
            "input.1": {"0": {"name": "seq", "min": 1, "max": 16}},
            "step_sizes": LLAMA_PREFILL_DYN_LENGTHS,
        },
        make_reference=_llama_decode_reference,
        strict=True,
    )


# --------------------------------------------------------------------------
# Custom modules
# --------------------------------------------------------------------------


class CacheWrites(nn.Module):
    """Buffers written every way a cache is written; some in place, some not."""

    def __init__(self, dim=4, heads=2, max_seq=8):
        super().__init__()
        self.proj = nn.Linear(dim, dim)
        self.register_buffer("kv", torch.zeros(1, heads, max_seq, dim))  # index_copy_ along dim 2
        self.register_buffer("kv_put", torch.zeros(1, heads, max_seq, dim))  # kv_put[:, :, pos] = ...
        self.register_buffer("kv3", torch.zeros(heads, max_seq, dim))  # a 3-d cache
        self.register_buffer("kv_dim1", torch.zeros(1, max_seq, heads, dim))  # written along dim 1
        self.register_buffer("kv_slice", torch.zeros(1, heads, max_seq, dim))  # a slice read and written

    def forward(self, x, pos):  # x [1, heads, n, dim], pos int64 [n]
        y = self.proj(x)
        self.kv.index_copy_(2, pos, y)
        self.kv_put[:, :, pos] = y * 2
        self.kv3.index_copy_(1, pos, y[0])
        self.kv_dim1.index_copy_(1, pos, y.transpose(1, 2))
        n = x.shape[2]
        self.kv_slice[:, :, 0:n] = self.kv_slice[:, :, 0:n] + y
        return (self.kv * self.kv_put).sum(2) + self.kv3.sum(1) + self.kv_dim1.sum(1) + self.kv_slice.sum(2)


@fixture("cache_writes")
def build_cache_writes():
    g = torch.Generator().manual_seed(11)
    steps = [(torch.randn(1, 2, 2, 4, generator=g), torch.tensor(p)) for p in ([0, 1], [2, 3], [6, 4])]
    return Fixture(
        "cache_writes",
        "buffers written each way a KV cache is written, three calls at positions [0,1], [2,3], [6,4]: "
        "kv [1,2,8,4] by index_copy_ along dim 2 and kv_put [1,2,8,4] by kv_put[:, :, pos] = y (both eligible "
        "for an in-place write), kv3 [2,8,4] (3-d), kv_dim1 [1,8,2,4] (written along dim 1) and kv_slice "
        "(a slice read and written back), all copied back; the output reads every buffer",
        "custom module (tools/export_fixtures.py CacheWrites)",
        CacheWrites().eval(),
        steps[0],
        steps=steps,
    )


class KVCacheAttention(nn.Module):
    """One attention block with a persistent KV cache written by index_copy_."""

    def __init__(self, dim=32, heads=4, max_seq=16):
        super().__init__()
        self.heads, self.head_dim, self.max_seq = heads, dim // heads, max_seq
        self.q_proj = nn.Linear(dim, dim)
        self.k_proj = nn.Linear(dim, dim)
        self.v_proj = nn.Linear(dim, dim)
        self.o_proj = nn.Linear(dim, dim)
        self.register_buffer("k_cache", torch.zeros(1, heads, max_seq, self.head_dim))
        self.register_buffer("v_cache", torch.zeros(1, heads, max_seq, self.head_dim))

    def forward(self, x, pos):
        # x: [1, T, dim] float32, pos: [T] int64 (cache positions of the T new tokens)
        t = x.shape[1]
        q = self.q_proj(x).view(1, t, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(1, t, self.heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(1, t, self.heads, self.head_dim).transpose(1, 2)
        self.k_cache.index_copy_(2, pos, k)
        self.v_cache.index_copy_(2, pos, v)
        key_pos = torch.arange(self.max_seq, device=x.device)
        mask = key_pos.unsqueeze(0) <= pos.unsqueeze(1)  # [T, max_seq] bool, causal over the cache
        out = F.scaled_dot_product_attention(q, self.k_cache, self.v_cache, attn_mask=mask)
        return self.o_proj(out.transpose(1, 2).reshape(1, t, -1))


@fixture("kv_cache_attention")
def build_kv_cache_attention():
    model = KVCacheAttention()
    gen = torch.Generator().manual_seed(5)
    steps = [(torch.randn(1, 2, 32, generator=gen), torch.tensor([2 * k, 2 * k + 1])) for k in range(4)]
    return Fixture(
        "kv_cache_attention",
        "custom attention block: k/v written into buffers k_cache/v_cache [1,4,16,8] with index_copy_ "
        "along dim 2 at input positions, then SDPA over the whole cache with a boolean causal mask "
        "built from arange; 4 steps of 2 tokens (positions 0..7)",
        "custom nn.Module (tools/export_fixtures.py: KVCacheAttention)",
        model,
        steps[0],
        steps=steps,
        keep_debug_metadata=True,
    )


class ConvStateBlock(nn.Module):
    """Streaming depthwise conv: a rolling input window kept in a buffer, plus a step counter."""

    def __init__(self, channels=8, kernel=4):
        super().__init__()
        self.in_proj = nn.Linear(channels, channels)
        self.conv = nn.Conv1d(channels, channels, kernel, groups=channels)
        self.out_proj = nn.Linear(channels, channels)
        self.register_buffer("conv_state", torch.zeros(1, channels, kernel))
        self.register_buffer("steps", torch.zeros((), dtype=torch.int64))

    def forward(self, x):
        # x: [1, channels] one time step
        h = self.in_proj(x)
        window = torch.cat([self.conv_state[:, :, 1:], h.unsqueeze(-1)], dim=-1)
        self.conv_state.copy_(window)
        self.steps.add_(1)
        y = self.conv(self.conv_state).squeeze(-1)  # [1, channels]
        y = F.silu(y) / self.steps.to(y.dtype).sqrt()
        return self.out_proj(y), self.steps * 10


@fixture("conv_state")
def build_conv_state():
    model = ConvStateBlock()
    gen = torch.Generator().manual_seed(6)
    steps = [(torch.randn(1, 8, generator=gen),) for _ in range(5)]
    return Fixture(
        "conv_state",
        "custom streaming block: conv_state [1,8,4] shifted each step (cat(state[..., 1:], x) then copy_), "
        "a depthwise Conv1d over the state, and an int64 0-d counter steps.add_(1) used in the output; "
        "outputs (y [1,8] float32, steps*10 int64 0-d); 5 steps",
        "custom nn.Module (tools/export_fixtures.py: ConvStateBlock)",
        model,
        steps[0],
        steps=steps,
        keep_debug_metadata=True,
    )


class InplaceOps(nn.Module):
    """In-place elementwise ops and NumPy-named transposes as a training-dialect export keeps them."""

    def forward(self, x, y, mask):
        a = x.clone()
        a.div_(2.0).sub_(y).mul_(1.5).add_(0.25)
        a.clamp_(-1.0, 1.0)
        b = a.swapaxes(0, 1).contiguous()
        b.pow_(2).sqrt_().neg_().exp_()
        c = torch.swapdims(b, 0, 1).clone()
        c.masked_fill_(mask, 0.5)
        c.sigmoid_().tanh_().abs_()
        d = y.clone()
        d.div_(x.abs() + 1.0, rounding_mode="floor").clamp_min_(-2.0).add_(2.5).reciprocal_()
        return c, d, a.swapdims(1, 0)


@fixture("inplace_ops")
def build_inplace_ops():
    g = torch.Generator().manual_seed(11)
    x, y = torch.randn(4, 6, generator=g), torch.randn(4, 6, generator=g)
    mask = torch.rand(4, 6, generator=g) > 0.5
    return Fixture(
        "inplace_ops",
        "in-place ops a training-dialect export keeps (div_, sub_, mul_, add_, clamp_, pow_, sqrt_, neg_, exp_, "
        "masked_fill_, sigmoid_, tanh_, abs_, div_ with rounding, clamp_min_, reciprocal_) and swapaxes / "
        "swapdims; inputs 4x6 float32 twice and a 4x6 mask",
        "custom nn.Module (tools/export_fixtures.py: InplaceOps)",
        InplaceOps(),
        (x, y, mask),
        keep_debug_metadata=True,
    )


class AutocastRegions(nn.Module):
    """Autocast and grad-mode regions, which a training-dialect export keeps as higher-order ops."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(8, 16)
        self.b = nn.Linear(16, 8)

    def forward(self, x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            h = self.a(x)
            w = torch.softmax(h, -1)
            with torch.autocast("cpu", enabled=False):
                z = self.b(w.to(self.b.weight.dtype)) * 2
            y = h.sum(-1, keepdim=True) + z.mean()
        with torch.set_grad_enabled(False):
            y = y + 1
        return y, h, z


@fixture("autocast_regions")
def build_autocast_regions():
    return Fixture(
        "autocast_regions",
        "torch.autocast (CPU, bfloat16) around a linear layer and softmax, a nested region with autocast off, "
        "and a set_grad_enabled region (wrap_with_autocast / wrap_with_set_grad_enabled in the training "
        "dialect); input 3x8 float32",
        "custom nn.Module (tools/export_fixtures.py: AutocastRegions)",
        AutocastRegions(),
        (torch.randn(3, 8, generator=torch.Generator().manual_seed(5)),),
        keep_debug_metadata=True,
    )


class NonzeroModel(nn.Module):
    def forward(self, x):
        mask = x > 0.25
        idx = torch.nonzero(mask)  # [u0, 2] int64, data-dependent
        vals = x[mask] * 2.0 + 1.0  # [u1] float32, boolean-mask indexing
        return idx, vals, mask.sum()


@fixture("nonzero")
def build_nonzero():
    x = torch.randn(4, 6, generator=torch.Generator().manual_seed(7))
    return Fixture(
        "nonzero",
        "data-dependent output shapes: nonzero(x > 0.25) (int64 [n,2]), x[x > 0.25]*2+1 (float32 [n]) "
        "and the count (int64 0-d); input 4x6",
        "custom nn.Module (tools/export_fixtures.py: NonzeroModel)",
        NonzeroModel(),
        (x,),
        keep_debug_metadata=True,
    )


class NonzeroMiddle(nn.Module):
    """Dense layers on both sides of a data-dependent row selection (nonzero + index_select)."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.fc2 = nn.Linear(32, 16)
        self.fc3 = nn.Linear(16, 8)
        self.fc4 = nn.Linear(8, 4)

    def features(self, x):
        # x: [12, 16] -> h [12, 16] and the per-row score that selects rows
        h = torch.relu(self.fc1(x))
        h = self.fc2(h) * torch.sigmoid(h.sum(-1, keepdim=True))
        return h, h.mean(-1)

    def forward(self, x):
        h, score = self.features(x)
        idx = torch.nonzero(score > 0).squeeze(1)  # [u0] int64, data-dependent
        sel = h.index_select(0, idx)  # [u0, 16]
        y = torch.tanh(self.fc3(sel)) * 2.0 + 1.0
        y = self.fc4(torch.relu(y))
        return y, idx


NONZERO_MIDDLE_MIN_SCORE = 1e-3


def _nonzero_middle_sanity(fresh: nn.Module, fx: Fixture, eager_outputs: list) -> dict:
    """The selection must keep some rows and drop some, with no score near the threshold."""
    (x,) = fx.example
    with torch.no_grad():
        _, score = fresh.features(x)
    kept = int((score > 0).sum())
    closest = score.abs().min().item()
    if not 0 < kept < x.shape[0]:
        raise AssertionError(f"nonzero_middle keeps {kept} of {x.shape[0]} rows")
    if closest <= NONZERO_MIDDLE_MIN_SCORE:
        raise AssertionError(f"nonzero_middle: a row score is {closest:.3g}, too close to the threshold 0")
    if eager_outputs[0][1].shape[0] != kept:
        raise AssertionError("nonzero_middle: output rows differ from the rows kept")
    return {"rows": x.shape[0], "rows_kept": kept, "min_abs_row_score": closest, "ok": True}


@fixture("nonzero_middle")
def build_nonzero_middle():
    x = torch.randn(12, 16, generator=torch.Generator().manual_seed(13))
    return Fixture(
        "nonzero_middle",
        "data-dependent op between dense parts: Linear(16,32), ReLU, Linear(32,16) times sigmoid of a row sum, "
        "row score mean(-1); idx = nonzero(score > 0).squeeze(1) (int64 [u0]) selects rows with index_select; "
        "then Linear(16,8), tanh*2+1, ReLU, Linear(8,4); outputs (y float32 [u0,4], idx int64 [u0]); "
        "input 12x16, 7 of 12 rows kept (no row score within 1e-3 of the threshold)",
        "custom nn.Module (tools/export_fixtures.py: NonzeroMiddle)",
        NonzeroMiddle(),
        (x,),
        keep_debug_metadata=True,
        sanity=_nonzero_middle_sanity,
    )


class MaskedSelectTail(nn.Module):
    """A dense part, then masked_select of its output by a mask it computes (the last op: no bound needed)."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.fc2 = nn.Linear(32, 16)

    def hidden(self, x):
        return self.fc2(torch.relu(self.fc1(x)))

    def forward(self, x):
        h = self.hidden(x)
        return torch.masked_select(h, h > 0.1), h.sum(-1)


def _masked_select_tail_sanity(fresh: nn.Module, fx: Fixture, eager_outputs: list) -> dict:
    """Some elements kept and some dropped, none within 1e-4 of the threshold."""
    (x,) = fx.example
    with torch.no_grad():
        h = fresh.hidden(x)
    kept = int((h > 0.1).sum())
    closest = (h - 0.1).abs().min().item()
    if not 0 < kept < h.numel():
        raise AssertionError(f"masked_select_tail keeps {kept} of {h.numel()} elements")
    if closest <= 1e-4:
        raise AssertionError(f"masked_select_tail: an element is {closest:.3g} from the threshold")
    return {"elements": h.numel(), "kept": kept, "min_abs_distance": closest, "ok": True}


@fixture("masked_select_tail")
def build_masked_select_tail():
    x = torch.randn(6, 16, generator=torch.Generator().manual_seed(17))
    return Fixture(
        "masked_select_tail",
        "a data-dependent selection after dense layers: h = Linear(32,16)(ReLU(Linear(16,32)(x))); outputs "
        "masked_select(h, h > 0.1) (float32 [u0]) and h.sum(-1); input 6x16",
        "custom nn.Module (tools/export_fixtures.py: MaskedSelectTail)",
        MaskedSelectTail(),
        (x,),
        keep_debug_metadata=True,
        sanity=_masked_select_tail_sanity,
    )


class UniqueMiddle(nn.Module):
    """Dense parts on both sides of torch.unique (sorted, with inverse and counts) of token ids."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(10, 8)
        self.fc1 = nn.Linear(8, 4)
        self.fc2 = nn.Linear(8, 4)

    def forward(self, ids):
        h = self.fc1(self.emb(ids)).sum(-1)  # [6, 16]
        u, inv, cnt = torch.unique(ids + 1, return_inverse=True, return_counts=True)  # [u0], [6, 16], [u0]
        w = self.fc2(self.emb(u - 1)) * cnt.unsqueeze(-1).to(torch.float32)  # [u0, 4]
        return w, inv, h


def _unique_middle_sanity(fresh: nn.Module, fx: Fixture, eager_outputs: list) -> dict:
    """Some ids repeat and some vocabulary entries are missing, so every output says something."""
    (ids,) = fx.example
    distinct = int(torch.unique(ids).numel())
    if not 1 < distinct < 10:
        raise AssertionError(f"unique_middle: {distinct} distinct ids of 10")
    return {"ids": ids.numel(), "distinct": distinct, "ok": True}


@fixture("unique_middle")
def build_unique_middle():
    ids = torch.randint(0, 9, (6, 16), generator=torch.Generator().manual_seed(19))
    return Fixture(
        "unique_middle",
        "torch.unique between dense parts: h = Linear(8,4)(Embedding(10,8)(ids)).sum(-1); u, inv, cnt = "
        "unique(ids + 1, return_inverse, return_counts) (_unique2: int64 [u0], [6,16], [u0]); "
        "w = Linear(8,4)(Embedding(u - 1)) * cnt; outputs (w float32 [u0,4], inv, h); ids 6x16 in [0, 9)",
        "custom nn.Module (tools/export_fixtures.py: UniqueMiddle)",
        UniqueMiddle(),
        (ids,),
        keep_debug_metadata=True,
        sanity=_unique_middle_sanity,
    )


class Bf16Block(nn.Module):
    def __init__(self, dim=32, hidden=64):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)
        self.head = nn.Linear(dim, 10)

    def forward(self, x):
        h = self.fc2(F.gelu(self.fc1(self.norm(x)), approximate="tanh"))
        y = x + h
        return self.head(y).softmax(dim=-1), y.float().mean(dim=-1)


@fixture("mlp_bf16")
def build_mlp_bf16():
    model = Bf16Block().to(torch.bfloat16)
    x = torch.randn(2, 8, 32, generator=torch.Generator().manual_seed(8)).to(torch.bfloat16)
    return Fixture(
        "mlp_bf16",
        "bfloat16 block: LayerNorm, Linear, GELU(tanh), Linear, residual, Linear head + softmax; "
        "params and input in bfloat16; outputs (softmax bf16 [2,8,10], mean of the residual cast to float32 [2,8])",
        "custom nn.Module (tools/export_fixtures.py: Bf16Block) .to(torch.bfloat16)",
        model,
        (x,),
        keep_debug_metadata=True,
        reference_dtype=torch.float32,
        margin=4.0,
    )


# --------------------------------------------------------------------------
# Export, run, compare
# --------------------------------------------------------------------------


def flat_tensors(tree, what: str) -> list[torch.Tensor]:
    leaves = pytree.tree_leaves(tree)
    for leaf in leaves:
        if not isinstance(leaf, torch.Tensor):
            raise TypeError(f"{what}: non-tensor leaf {type(leaf).__name__}")
    return leaves


def run_sequence(module: nn.Module, calls: list[tuple]) -> list[list[torch.Tensor]]:
    outs = []
    with torch.no_grad():
        for args in calls:
            outs.append([t.detach().clone() for t in flat_tensors(module(*args), "outputs")])
    return outs


def cast_floats(tree, dtype):
    return pytree.tree_map(lambda t: t.to(dtype) if isinstance(t, torch.Tensor) and t.is_floating_point() else t, tree)


def buffer_values(module: nn.Module, names) -> dict[str, torch.Tensor]:
    bufs = dict(module.named_buffers(remove_duplicate=False))
    return {n: bufs[n].detach().clone() for n in names}


def attribute_values(module: nn.Module, names) -> dict[str, torch.Tensor]:
    """Tensors by fqn whether buffers or plain attributes (lifted constants of an unflattened program)."""
    bufs = dict(module.named_buffers(remove_duplicate=False))
    out = {}
    for n in names:
        if n in bufs:
            out[n] = bufs[n].detach().clone()
            continue
        owner, _, leaf = n.rpartition(".")
        out[n] = getattr(module.get_submodule(owner) if owner else module, leaf).detach().clone()
    return out


def written_state(ep) -> list[str]:
    """Buffers and tensor constants the training-dialect graph writes in place (first argument of an op whose
    schema writes it), by signature target, in signature order."""
    kinds = (torch.export.graph_signature.InputKind.BUFFER, torch.export.graph_signature.InputKind.CONSTANT_TENSOR)
    by_placeholder = {s.arg.name: s.target for s in ep.graph_signature.input_specs if s.kind in kinds}
    written = set()
    for node in ep.graph.nodes:
        schema = getattr(node.target, "_schema", None)
        if node.op != "call_function" or schema is None or not schema.arguments or not node.args:
            continue
        info = schema.arguments[0].alias_info
        first = node.args[0]
        if info is not None and info.is_write and isinstance(first, torch.fx.Node) and first.name in by_placeholder:
            written.add(by_placeholder[first.name])
    return [s.target for s in ep.graph_signature.input_specs if s.target in written]


def compare(a: torch.Tensor, b: torch.Tensor) -> float:
    """Max abs difference for floats; 0 or inf (mismatch) for exact dtypes."""
    if a.shape != b.shape:
        raise AssertionError(f"shape mismatch {tuple(a.shape)} vs {tuple(b.shape)}")
    if a.dtype != b.dtype:
        raise AssertionError(f"dtype mismatch {a.dtype} vs {b.dtype}")
    if a.is_floating_point():
        if a.numel() == 0:
            return 0.0
        return (a.double() - b.double()).abs().max().item()
    return 0.0 if torch.equal(a, b) else math.inf


ATOL_LADDER = [1e-6, 1e-5, 2e-5, 5e-5, 1e-4, 2e-4, 5e-4, 1e-3, 2e-3, 5e-3, 1e-2, 2e-2, 5e-2, 1e-1]
RTOL_LADDER = [1e-5, 1e-4, 1e-3, 1e-2, 2e-2, 5e-2, 1e-1]


def pick_tolerance(pairs, margin, min_rtol, min_atol):
    """Tightest (rtol, atol) with margin*|x - ref| <= atol + rtol*|ref| for all pairs.

    Prefers a small atol at the smallest rtol that can do with atol <= 1e-3.
    """
    pairs = [(x.double(), r.double()) for x, r in pairs if x.is_floating_point() and x.numel()]
    if not pairs:
        return None

    def ok(rtol, atol):
        return all(bool((margin * (x - r).abs() <= atol + rtol * r.abs()).all()) for x, r in pairs)

    rtols = [r for r in RTOL_LADDER if r >= min_rtol]
    atols = [a for a in ATOL_LADDER if a >= min_atol]
    for atol_cap in (1e-3, 1e-2, 1e-1):
        for rtol in rtols:
            for atol in atols:
                if atol > atol_cap:
                    break
                if ok(rtol, atol):
                    return rtol, atol
    return None


def error_stats(pairs):
    """Max abs and max relative (where |ref| > 1e-3) error over float pairs."""
    abs_err, rel_err = 0.0, 0.0
    for x, r in pairs:
        if not x.is_floating_point() or x.numel() == 0:
            continue
        d = (x.double() - r.double()).abs()
        abs_err = max(abs_err, d.max().item())
        big = r.double().abs() > 1e-3
        if big.any():
            rel_err = max(rel_err, (d[big] / r.double().abs()[big]).max().item())
    return abs_err, rel_err


# --------------------------------------------------------------------------
# Archive inspection
# --------------------------------------------------------------------------


def read_archive(path: str) -> tuple[str, dict, bool]:
    """Returns (root folder, model JSON, has raw-blob weights config)."""
    with zipfile.ZipFile(path) as z:
        names = z.namelist()
        root = names[0].split("/", 1)[0]
        model_json = [n for n in names if n.endswith("/models/model.json")]
        if len(model_json) != 1:
            raise AssertionError(f"{path}: expected one models/model.json, got {model_json}")
        program = json.loads(z.read(model_json[0]))
        raw_blobs = any(n.endswith("/data/weights/model_weights_config.json") for n in names)
    return root, program, raw_blobs


def walk_nodes(graph: dict):
    for node in graph["nodes"]:
        yield node
        for inp in node["inputs"]:
            arg = inp["arg"]
            if "as_graph" in arg:
                yield from walk_nodes(arg["as_graph"]["graph"])


SYM_ARG_KINDS = ("as_sym_int", "as_sym_ints", "as_sym_bool", "as_sym_bools", "as_sym_float", "as_sym_floats")
SPECIAL_ARG_KINDS = ("as_scalar_type", "as_memory_format", "as_layout", "as_device", "as_optional_tensors",
                     "as_string", "as_graph", "as_operator", "as_custom_obj", "as_int_lists")


def analyze_graph(program: dict) -> dict:
    graph = program["graph_module"]["graph"]
    ops = Counter()
    quirks: dict[str, set] = {
        "sym_outputs": set(),
        "sym_args": set(),
        "multi_output": set(),
        "list_output": set(),
        "unused_outputs": set(),
        "no_outputs": set(),
        "special_args": set(),
        "non_aten": set(),
        "scalar_in_tensor_overload": set(),
    }
    for node in walk_nodes(graph):
        target = node["target"]
        ops[target] += 1
        if not target.startswith("torch.ops.aten."):
            quirks["non_aten"].add(target)
        outs = node["outputs"]
        if not outs:
            quirks["no_outputs"].add(target)
        if len(outs) > 1:
            quirks["multi_output"].add(f"{target} ({len(outs)} outputs)")
        for o in outs:
            if any(k.startswith("as_sym") for k in o):
                quirks["sym_outputs"].add(target)
            if "as_tensors" in o:
                quirks["list_output"].add(target)
            names = []
            if "as_tensor" in o:
                names = [o["as_tensor"]["name"]]
            elif "as_tensors" in o:
                names = [t["name"] for t in o["as_tensors"]]
            if any("_unused_" in n for n in names):
                quirks["unused_outputs"].add(target)
        for inp in node["inputs"]:
            kind = next(iter(inp["arg"]))
            if kind in SYM_ARG_KINDS:
                quirks["sym_args"].add(f"{target}:{inp['name']}:{kind}")
            if kind in SPECIAL_ARG_KINDS:
                quirks["special_args"].add(f"{target}:{inp['name']}:{kind}")
            if target.endswith((".Tensor", ".Tensor_mode")) and kind in ("as_int", "as_float", "as_bool"):
                if inp["name"] in ("other", "exponent"):
                    quirks["scalar_in_tensor_overload"].add(f"{target}:{inp['name']}:{kind}")
    sig = program["graph_module"]["signature"]
    return {
        "ops": dict(sorted(ops.items())),
        "node_count": sum(ops.values()),
        "verifiers": program.get("verifiers"),
        "schema_version": program.get("schema_version"),
        "range_constraints": program.get("range_constraints"),
        "input_kinds": dict(Counter(next(iter(s)) for s in sig["input_specs"])),
        "output_kinds": dict(Counter(next(iter(s)) for s in sig["output_specs"])),
        "sym_int_values": sorted(graph.get("sym_int_values", {}).keys()),
        "quirks": {k: sorted(v) for k, v in quirks.items() if v},
    }


# --------------------------------------------------------------------------
# One fixture
# --------------------------------------------------------------------------


DEBUG_METADATA = ("stack_trace", "from_node")


def strip_debug_metadata(ep) -> None:
    for module in ep.graph_module.modules():
        if isinstance(module, torch.fx.GraphModule):
            for node in module.graph.nodes:
                for key in DEBUG_METADATA:
                    node.meta.pop(key, None)


def export_fixture(fx: Fixture, out_dir: str) -> dict:
    conditioning = condition_weights(fx.module, fx.example)
    pristine = copy.deepcopy(fx.module).eval()
    calls = fx.steps if fx.steps is not None else [fx.example]

    # 1. eager expected values (fresh copy; buffers carry over between steps)
    eager_mod = copy.deepcopy(pristine)
    eager_outs = run_sequence(eager_mod, calls)

    # 2. export (from another fresh copy, so export-time tracing cannot touch the eager state)
    export_mod = copy.deepcopy(pristine)
    with torch.no_grad():
        ep = torch.export.export(export_mod, fx.example, dynamic_shapes=fx.dynamic_shapes, strict=fx.strict)
    if not fx.keep_debug_metadata:
        strip_debug_metadata(ep)
    ep_aten = None if fx.training_only else ep.run_decompositions()
    if ep_aten is not None and not fx.keep_debug_metadata:
        strip_debug_metadata(ep_aten)

    # sanity: export must not have mutated the module it traced
    for (n, a), (_, b) in zip(pristine.state_dict().items(), export_mod.state_dict().items()):
        if not torch.equal(a, b):
            raise AssertionError(f"export mutated {n}")

    if ep_aten is not None:
        mutated = [
            spec.target for spec in ep_aten.graph_signature.output_specs
            if spec.kind == torch.export.graph_signature.OutputKind.BUFFER_MUTATION
        ]
        if any(spec.kind == torch.export.graph_signature.OutputKind.USER_INPUT_MUTATION
               for spec in ep_aten.graph_signature.output_specs):
            raise AssertionError("user input mutation is not expected in fixtures")
        final_buffers = buffer_values(eager_mod, mutated)
        alias = {n: n for n in mutated}
    else:
        # Written state by signature target; a lifted constant's final value is
        # that of the eager buffer it aliased in the traced module.
        mutated = written_state(ep)
        traced = {b.data_ptr(): n for n, b in export_mod.named_buffers(remove_duplicate=False)}
        alias = {}
        for target in mutated:
            t = ep.constants.get(target)
            alias[target] = traced.get(t.data_ptr()) if t is not None else target
            if alias[target] is None:
                raise AssertionError(f"written constant {target} aliases no buffer of the module")
        eager_bufs = buffer_values(eager_mod, sorted(set(alias.values())))
        final_buffers = {target: eager_bufs[alias[target]] for target in mutated}

    n_user_in = sum(1 for s in ep.graph_signature.input_specs if s.kind == torch.export.graph_signature.InputKind.USER_INPUT)
    n_user_out = sum(1 for s in ep.graph_signature.output_specs if s.kind == torch.export.graph_signature.OutputKind.USER_OUTPUT)
    n_user_out_aten = sum(1 for s in (ep_aten or ep).graph_signature.output_specs
                          if s.kind == torch.export.graph_signature.OutputKind.USER_OUTPUT)
    for args, outs in zip(calls, eager_outs):
        if len(flat_tensors(args, "inputs")) != n_user_in:
            raise AssertionError(f"{len(args)} inputs but graph has {n_user_in} user inputs")
        if not (len(outs) == n_user_out == n_user_out_aten):
            raise AssertionError(f"{len(outs)} eager outputs vs {n_user_out}/{n_user_out_aten} graph user outputs")

    # 3. save both dialects
    files = {"training": f"{fx.name}.pt2"}
    if ep_aten is not None:
        files["aten"] = f"{fx.name}.aten.pt2"
    files["io"] = f"{fx.name}.io.safetensors"
    dialects = [d for d in ("training", "aten") if d in files]
    torch.export.save(ep, os.path.join(out_dir, files["training"]))
    if ep_aten is not None:
        torch.export.save(ep_aten, os.path.join(out_dir, files["aten"]))

    # 4. reload both and run them through ep.module(); compare with eager
    export_pairs = []
    export_err = {}
    for dialect in dialects:
        loaded = torch.export.load(os.path.join(out_dir, files[dialect]))
        gm = loaded.module()
        outs = run_sequence(gm, calls)
        worst = 0.0
        for o_exp, o_eager in zip(outs, eager_outs):
            if len(o_exp) != len(o_eager):
                raise AssertionError(f"{dialect}: {len(o_exp)} outputs vs eager {len(o_eager)}")
            for a, b in zip(o_exp, o_eager):
                worst = max(worst, compare(a, b))
                export_pairs.append((a, b))
        got = attribute_values(gm, mutated) if ep_aten is None else buffer_values(gm, mutated)
        for n in mutated:
            worst = max(worst, compare(got[n], final_buffers[n]))
            export_pairs.append((got[n], final_buffers[n]))
        if math.isinf(worst):
            raise AssertionError(f"{dialect}: integer/bool output differs from eager")
        export_err[dialect] = worst

    # 5. reference precision run for the tolerance suggestion
    if fx.make_reference is not None:
        ref_mod = fx.make_reference(copy.deepcopy(pristine), fx.reference_dtype)
    else:
        ref_mod = copy.deepcopy(pristine).to(fx.reference_dtype)
    ref_calls = [cast_floats(c, fx.reference_dtype) for c in calls]
    ref_outs = run_sequence(ref_mod, ref_calls)
    ref_pairs = []
    for o, r in zip(eager_outs, ref_outs):
        ref_pairs += [(a, b) for a, b in zip(o, r)]
    ref_bufs = buffer_values(ref_mod, sorted(set(alias.values())))
    ref_final = {n: ref_bufs[alias[n]] for n in mutated}
    ref_pairs += [(final_buffers[n], ref_final[n]) for n in mutated]
    for a, b in ref_pairs:
        if not a.is_floating_point() and not torch.equal(a, b):
            raise AssertionError("integer output differs between precisions")
    low = fx.reference_dtype != torch.float64
    # floors: float32 1e-4/1e-5; reduced precision about two bfloat16 ulps (2^-6 ~ 1.6e-2)
    min_rtol, min_atol = (2e-2, 1e-2) if low else (1e-4, 1e-5)
    tol = pick_tolerance(ref_pairs + export_pairs, fx.margin, min_rtol, min_atol)
    ref_abs, ref_rel = error_stats(ref_pairs)

    # The largest floating output: a fixture whose outputs all but vanish
    # passes at any absolute tolerance, so it checks nothing.
    floats = [t for outs in eager_outs for t in outs if t.is_floating_point() and t.numel()]
    largest_output = max((t.double().abs().max().item() for t in floats), default=None)
    if largest_output is not None and largest_output < SMALLEST_OUTPUT:
        raise AssertionError(f"largest output {largest_output:.3g} is below {SMALLEST_OUTPUT}: the fixture checks nothing")

    # 6. io file
    tensors = {}

    def put(key, t):
        tensors[key] = t.detach().contiguous().clone()

    if fx.steps is None:
        for i, t in enumerate(flat_tensors(fx.example, "inputs")):
            put(f"input.{i}", t)
        for j, t in enumerate(eager_outs[0]):
            put(f"output.{j}", t)
    else:
        for k, (args, outs) in enumerate(zip(calls, eager_outs)):
            for i, t in enumerate(flat_tensors(args, "inputs")):
                put(f"step{k}.input.{i}", t)
            for j, t in enumerate(outs):
                put(f"step{k}.output.{j}", t)
        for n in mutated:
            put(f"final.buffer.{n}", final_buffers[n])
        # A written constant that non-strict export lifted from a registered
        # buffer: the value is also recorded under the buffer's name, where
        # the user of the eager module reads it.
        for n in mutated:
            if alias[n] != n:
                put(f"final.buffer.{alias[n]}", final_buffers[n])
    save_safetensors(tensors, os.path.join(out_dir, files["io"]), metadata={"fixture": fx.name})

    # 7. archive facts and op histograms from the serialized graphs
    graphs = {}
    roots = {}
    for dialect in dialects:
        root, program, raw = read_archive(os.path.join(out_dir, files[dialect]))
        if not raw:
            raise AssertionError(f"{files[dialect]}: no data/weights/model_weights_config.json (not raw-blob layout)")
        roots[dialect] = root
        graphs[dialect] = analyze_graph(program)

    sanity = fx.sanity(copy.deepcopy(pristine), fx, eager_outs) if fx.sanity else None

    def describe(t):
        return {"shape": list(t.shape), "dtype": str(t.dtype).replace("torch.", "")}

    entry = {
        "name": fx.name,
        "files": files,
        "file_bytes": {k: os.path.getsize(os.path.join(out_dir, v)) for k, v in files.items()},
        "archive_root": roots,
        "description": fx.description,
        "source": fx.source,
        "torch_version": torch.__version__,
        "parameters": param_count(pristine),
        "dynamic": fx.dynamic,
        "stateful": bool(mutated),
        "mutated_buffers": mutated,
        "calls": "steps" if fx.steps is not None else "single",
        "num_steps": len(fx.steps) if fx.steps is not None else None,
        "inputs": [describe(t) for t in flat_tensors(calls[0], "inputs")],
        "outputs": [describe(t) for t in eager_outs[0]],
        "largest_output": largest_output,
        "conditioning": conditioning,
        "tolerance": {
            "rtol": tol[0] if tol else None,
            "atol": tol[1] if tol else None,
            "applies_to": "floating outputs and buffers; integer/bool values must match exactly",
            "margin": fx.margin,
            "reference_dtype": str(fx.reference_dtype).replace("torch.", ""),
            "measured_eager_vs_reference_max_abs": ref_abs,
            "measured_eager_vs_reference_max_rel": ref_rel,
            "measured_exported_vs_eager_max_abs": export_err,
        },
        "export": {"strict": fx.strict, "node_metadata_removed": [] if fx.keep_debug_metadata else list(DEBUG_METADATA)},
        "notes": fx.notes,
        "graphs": graphs,
    }
    if sanity is not None:
        entry["sanity"] = sanity
    return entry


# --------------------------------------------------------------------------
# Reports
# --------------------------------------------------------------------------


def human(n: int) -> str:
    return f"{n / 1024:.0f}K" if n < 1024 * 1024 else f"{n / 1024 / 1024:.1f}M"


def print_summary(entries: list[dict]) -> None:
    print()
    header = f"{'fixture':24} {'params':>7} {'.pt2':>6} {'.aten':>6} {'io':>6} {'ops(tr)':>8} {'ops(aten)':>9} {'rtol':>6} {'atol':>6}"
    print(header)
    print("-" * len(header))
    for e in entries:
        b = e["file_bytes"]
        g = e["graphs"]
        tol = e["tolerance"]
        aten_bytes = human(b["aten"]) if "aten" in b else "-"
        aten_ops = f"{g['aten']['node_count']:>5}/{len(g['aten']['ops']):<3}" if "aten" in g else f"{'-':>9}"
        print(
            f"{e['name']:24} {e['parameters']:>7} {human(b['training']):>6} {aten_bytes:>6} {human(b['io']):>6} "
            f"{g['training']['node_count']:>4}/{len(g['training']['ops']):<3} {aten_ops} "
            f"{tol['rtol'] if tol['rtol'] is not None else '-':>6} {tol['atol'] if tol['atol'] is not None else '-':>6}"
        )
    print("(ops columns: node count / distinct targets)")


def write_ops_md(fixtures_root: str) -> str:
    """Union of op targets over every torch*/manifest.json under fixtures_root."""
    versions = {}
    for d in sorted(os.listdir(fixtures_root)):
        p = os.path.join(fixtures_root, d, "manifest.json")
        if d.startswith("torch") and os.path.isfile(p):
            with open(p) as f:
                versions[d] = json.load(f)
    table: dict[str, dict[str, dict[str, int]]] = {}  # op -> dialect -> version -> fixtures
    for v, man in versions.items():
        for e in man["fixtures"]:
            for dialect, g in e["graphs"].items():
                for op in g["ops"]:
                    table.setdefault(op, {}).setdefault(dialect, Counter())[v] += 1
    lines = [
        "# ATen ops used by the fixtures",
        "",
        "Generated by `tools/export_fixtures.py` from the `manifest.json` files in this folder; do not edit.",
        "Each cell is the number of fixtures whose serialized graph uses the target, per dialect",
        "(`training` = `NAME.pt2`, `aten` = `NAME.aten.pt2`).",
        "",
    ]
    for v, man in versions.items():
        lines.append(f"- `{v}`: torch {man['torch_version']}, {len(man['fixtures'])} fixtures")
    lines.append("")
    cols = [(dialect, v) for dialect in ("training", "aten") for v in versions]
    lines.append("| op target | dialects | " + " | ".join(f"{d} {v}" for d, v in cols) + " |")
    lines.append("|---|---|" + "---|" * len(cols))
    for op in sorted(table):
        dialects = ", ".join(d for d in ("training", "aten") if d in table[op])
        cells = [str(table[op].get(d, {}).get(v, "")) for d, v in cols]
        lines.append(f"| `{op}` | {dialects} | " + " | ".join(cells) + " |")
    path = os.path.join(fixtures_root, "OPS.md")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return path


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", help="output folder, e.g. tests/fixtures/torch2.11")
    ap.add_argument("--only", help="comma-separated fixture names")
    ap.add_argument("--list", action="store_true", help="list fixture names and exit")
    args = ap.parse_args(argv)

    if args.list:
        for name, _ in BUILDERS:
            print(name)
        return 0
    if not args.out:
        ap.error("--out is required")

    torch.set_num_threads(max(1, min(4, os.cpu_count() or 1)))
    os.makedirs(args.out, exist_ok=True)
    only = set(args.only.split(",")) if args.only else None
    unknown = (only or set()) - {n for n, _ in BUILDERS}
    if unknown:
        ap.error(f"unknown fixtures: {sorted(unknown)}")

    manifest_path = os.path.join(args.out, "manifest.json")
    previous = {}
    if only and os.path.isfile(manifest_path):
        with open(manifest_path) as f:
            previous = {e["name"]: e for e in json.load(f).get("fixtures", [])}

    entries, failures = [], {}
    for name, build in BUILDERS:
        if only and name not in only:
            if name in previous:
                entries.append(previous[name])
            continue
        print(f"== {name}", flush=True)
        try:
            torch.manual_seed(seed_for(name))
            fx = build()
            assert fx.name == name
            entries.append(export_fixture(fx, args.out))
        except Exception as exc:  # keep going; report at the end
            traceback.print_exc()
            failures[name] = f"{type(exc).__name__}: {exc}".splitlines()[0][:500]
            print(f"!! {name} FAILED: {failures[name]}", flush=True)

    import transformers
    import torchvision

    import safetensors

    manifest = {
        "torch_version": torch.__version__,
        "torchvision_version": torchvision.__version__,
        "transformers_version": transformers.__version__,
        "safetensors_version": safetensors.__version__,
        "python_version": sys.version.split()[0],
        "generator": "tools/export_fixtures.py",
        "io_convention": {
            "single": "input.<i>, output.<j>: user inputs / user outputs flattened with torch.utils._pytree in graph order",
            "steps": "step<k>.input.<i>, step<k>.output.<j> for calls k = 0.. on one session whose buffers carry over; "
                     "final.buffer.<fqn> = expected value of each mutated buffer after the last step",
            "expected_values": "computed by the eager nn.Module, not the exported program",
        },
        "failures": failures,
        "fixtures": entries,
    }
    with open(manifest_path, "w") as f:
        json.dump(manifest, f, indent=1)
        f.write("\n")

    print_summary(entries)
    ops_md = write_ops_md(os.path.dirname(os.path.abspath(args.out)))
    print(f"\nwrote {manifest_path} and {ops_md}")
    if failures:
        print("\nFAILED fixtures:")
        for n, msg in failures.items():
            print(f"  {n}: {msg}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
