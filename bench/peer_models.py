"""Torch models for the peer benchmark, exported to ONNX (bench-only: needs torch, not memplan).

Written here as small `torch.nn` modules because torchvision is not a dependency: ResNet-18
and MobileNetV2 with their published layer tables, a GPT-2-style decoder stack and a
two-layer LSTM. Weights are random (seeded): arena sizes depend on shapes, never on values.

`export_all(folder)` writes one ``<name>.onnx`` per model at opset 17 with the classic
TorchScript exporter (fixed shapes, batch 1) and returns their paths by name.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch
from torch import nn

OPSET = 17


class BasicBlock(nn.Module):
    """ResNet's two 3x3 convolutions with a shortcut (a 1x1 projection when the shape changes)."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = nn.Identity()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(y)) + self.shortcut(x))


class ResNet18(nn.Module):
    """ResNet-18 (He et al. 2016): stem, four stages of two basic blocks, average pool, 1000 classes."""

    def __init__(self, classes: int = 1000) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(3, 2, 1)
        )
        blocks, cin = [], 64
        for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
            blocks += [BasicBlock(cin, cout, stride), BasicBlock(cout, cout, 1)]
            cin = cout
        self.blocks = nn.Sequential(*blocks)
        self.head = nn.Linear(512, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.blocks(self.stem(x))
        return self.head(torch.flatten(nn.functional.adaptive_avg_pool2d(y, 1), 1))


def conv_bn_relu6(cin: int, cout: int, kernel: int, stride: int, groups: int = 1) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(cin, cout, kernel, stride, kernel // 2, groups=groups, bias=False), nn.BatchNorm2d(cout), nn.ReLU6()
    )


class InvertedResidual(nn.Module):
    """MobileNetV2's block: 1x1 expansion, 3x3 depthwise, linear 1x1 projection; residual when shapes agree."""

    def __init__(self, cin: int, cout: int, stride: int, expand: int) -> None:
        super().__init__()
        hidden = cin * expand
        layers = [conv_bn_relu6(cin, hidden, 1, 1)] if expand != 1 else []
        layers += [conv_bn_relu6(hidden, hidden, 3, stride, groups=hidden)]
        layers += [nn.Conv2d(hidden, cout, 1, bias=False), nn.BatchNorm2d(cout)]
        self.body = nn.Sequential(*layers)
        self.residual = stride == 1 and cin == cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.body(x)
        return x + y if self.residual else y


class MobileNetV2(nn.Module):
    """MobileNetV2 (Sandler et al. 2018), width 1.0: the paper's table of (expansion, channels, repeats, stride)."""

    TABLE = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1))

    def __init__(self, classes: int = 1000) -> None:
        super().__init__()
        layers, cin = [conv_bn_relu6(3, 32, 3, 2)], 32
        for expand, cout, repeats, stride in self.TABLE:
            for i in range(repeats):
                layers.append(InvertedResidual(cin, cout, stride if i == 0 else 1, expand))
                cin = cout
        layers.append(conv_bn_relu6(cin, 1280, 1, 1))
        self.features = nn.Sequential(*layers)
        self.head = nn.Linear(1280, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = nn.functional.adaptive_avg_pool2d(self.features(x), 1)
        return self.head(torch.flatten(y, 1))


class CausalSelfAttention(nn.Module):
    """Multi-head attention with a causal mask, written out as MatMul, Softmax and MatMul."""

    def __init__(self, width: int, heads: int, length: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        # Additive mask: 0 on and below the diagonal, a large negative number above it.
        mask = torch.full((length, length), -1e9).triu(1)
        self.register_buffer("mask", mask, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, width = x.shape
        head = width // self.heads
        q, k, v = self.qkv(x).split(width, dim=2)
        q, k, v = (t.reshape(batch, length, self.heads, head).transpose(1, 2) for t in (q, k, v))
        scores = q @ k.transpose(2, 3) / math.sqrt(head) + self.mask
        y = torch.softmax(scores, dim=-1) @ v
        return self.proj(y.transpose(1, 2).reshape(batch, length, width))


class DecoderBlock(nn.Module):
    """GPT-2's pre-norm block: x + attention(LayerNorm(x)), then x + MLP(LayerNorm(x)) with GELU."""

    def __init__(self, width: int, heads: int, length: int) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(width)
        self.attn = CausalSelfAttention(width, heads, length)
        self.ln2 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT2Stack(nn.Module):
    """Token and position embeddings, `blocks` decoder blocks, a final LayerNorm and the vocabulary head."""

    def __init__(self, vocab: int = 2048, width: int = 256, heads: int = 4, blocks: int = 4, length: int = 128) -> None:
        super().__init__()
        self.tokens = nn.Embedding(vocab, width)
        self.positions = nn.Parameter(torch.randn(1, length, width) * 0.02)
        self.blocks = nn.Sequential(*(DecoderBlock(width, heads, length) for _ in range(blocks)))
        self.ln = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab, bias=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.ln(self.blocks(self.tokens(ids) + self.positions)))


class LSTMModel(nn.Module):
    """A two-layer LSTM over a sequence, then a linear head on every time step."""

    def __init__(self, features: int = 128, hidden: int = 256, layers: int = 2, classes: int = 64) -> None:
        super().__init__()
        self.lstm = nn.LSTM(features, hidden, layers)
        self.head = nn.Linear(hidden, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y, _ = self.lstm(x)
        return self.head(y)


def examples() -> dict[str, tuple[nn.Module, torch.Tensor]]:
    """Each model (in eval mode, seeded weights) with an example input of the shape it is exported at."""
    torch.manual_seed(0)
    image = torch.randn(1, 3, 224, 224)
    return {
        "resnet18": (ResNet18(), image),
        "mobilenetv2": (MobileNetV2(), image),
        "gpt2_stack": (GPT2Stack(), torch.randint(0, 2048, (1, 128))),
        "lstm": (LSTMModel(), torch.randn(64, 1, 128)),  # (time, batch, features)
    }


def export_all(folder: Path) -> dict[str, Path]:
    """Export every model of `examples()` to ``folder/<name>.onnx``; returns the paths by name."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = {}
    for name, (model, example) in examples().items():
        path = folder / f"{name}.onnx"
        model.eval()
        with torch.no_grad():
            torch.onnx.export(
                model,
                (example,),
                str(path),
                opset_version=OPSET,
                dynamo=False,
                input_names=["input"],
                output_names=["output"],
            )
        paths[name] = path
    return paths
