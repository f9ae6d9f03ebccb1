"""Public architectures written in torch with random weights, exported to ONNX for the executor benchmark.

Bench-only: needs ``torch==2.13.0`` (CPU), never memplan itself. Install it with
``pip install -e '.[bench]'`` (or ``pip install torch==2.13.0``; another version pulls gigabytes).
torchvision and timm are not installable here, so each network is written out below from its
paper's layer table (ResNet-18 and MobileNetV2 are `bench/peer_models.py`'s, one definition each):

- mobilenetv2: MobileNetV2 1.0, 224x224 (ReLU6, depthwise, inverted residuals).
- mobilenetv3_small: MobileNetV3-Small, 224x224 (depthwise, squeeze-excitation, HardSwish, HardSigmoid).
- efficientnet_b0: EfficientNet-B0, 224x224 (MBConv with squeeze-excitation, SiLU).
- resnet18: ResNet-18, 224x224.
- vit_small: a ViT of patch 16, width 192, depth 6, 3 heads (DeiT-Tiny's width, 6 blocks), 224x224.
- bert_minilm: a BERT encoder of MiniLM's size (6 layers, width 384, 12 heads, FFN 1536), sequence
  128, inputs ``input_ids``, ``token_type_ids`` and ``attention_mask`` (the last 28 tokens padded).
- gpt2_small6: a GPT-2 decoder (pre-norm, tanh GELU, causal mask, tied embedding head over GPT-2's
  50,257 tokens), 6 layers of width 512 and 8 heads, sequence 128.
- crnn_ocr: a CRNN text recognizer (VGG-style conv stem, two bidirectional LSTMs, CTC head over
  97 symbols), input 1x3x48x320.
- gru_audio: a two-layer GRU of width 256 over 100 frames of 80 log-mel features, a per-frame head.

``python bench/real_models.py [FOLDER] [--models a,b]`` writes ``FOLDER/<name>.onnx`` (opset 17,
static shapes, batch 1, the classic TorchScript exporter: the dynamo one needs onnxscript) and
``FOLDER/<name>.npz``, the inputs to run it with, by graph input name, for each model missing there
or older than the definitions (this file, `bench/peer_models.py`); ``--force`` exports all again. FOLDER defaults to
``bench/.models`` (ignored by git). `bench/executor_bench.py` runs it when a model is missing.
"""

from __future__ import annotations

import argparse
import math
import sys
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F  # noqa: N812 (torch's own convention)

sys.path.insert(0, str(Path(__file__).resolve().parent))
from peer_models import MobileNetV2, ResNet18  # noqa: E402 (bench/ is not a package)

OPSET = 17
FOLDER = Path(__file__).resolve().parent / ".models"


def make_divisible(value: float, divisor: int = 8) -> int:
    """Channels rounded to a multiple of `divisor`, never below 90% of `value` (MobileNet's rule)."""
    rounded = max(divisor, int(value + divisor / 2) // divisor * divisor)
    return rounded + divisor if rounded < 0.9 * value else rounded


def conv_bn(cin: int, cout: int, kernel: int, stride: int = 1, groups: int = 1, act: nn.Module | None = None):
    layers = [nn.Conv2d(cin, cout, kernel, stride, kernel // 2, groups=groups, bias=False), nn.BatchNorm2d(cout)]
    return nn.Sequential(*layers, *([act] if act is not None else []))


class SqueezeExcite(nn.Module):
    """Global average pool, two 1x1 convolutions, a gate that scales each channel."""

    def __init__(self, channels: int, squeezed: int, act: type[nn.Module], gate: type[nn.Module]) -> None:
        super().__init__()
        self.fc1, self.act = nn.Conv2d(channels, squeezed, 1), act()
        self.fc2, self.gate = nn.Conv2d(squeezed, channels, 1), gate()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = F.adaptive_avg_pool2d(x, 1)
        return x * self.gate(self.fc2(self.act(self.fc1(s))))


class MobileNetV3Block(nn.Module):
    """MobileNetV3's bottleneck: 1x1 expansion (when wider), kxk depthwise, optional SE, linear 1x1 projection."""

    def __init__(self, cin: int, kernel: int, expanded: int, cout: int, se: bool, hswish: bool, stride: int) -> None:
        super().__init__()
        act = nn.Hardswish if hswish else nn.ReLU
        layers = [conv_bn(cin, expanded, 1, act=act())] if expanded != cin else []
        layers.append(conv_bn(expanded, expanded, kernel, stride, groups=expanded, act=act()))
        if se:
            layers.append(SqueezeExcite(expanded, make_divisible(expanded // 4), nn.ReLU, nn.Hardsigmoid))
        layers.append(conv_bn(expanded, cout, 1))
        self.body = nn.Sequential(*layers)
        self.residual = stride == 1 and cin == cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.body(x)
        return x + y if self.residual else y


class MobileNetV3Small(nn.Module):
    """MobileNetV3-Small (Howard et al. 2019, table 2): (kernel, expansion, out, SE, HardSwish, stride) per block."""

    TABLE = (
        (3, 16, 16, True, False, 2),
        (3, 72, 24, False, False, 2),
        (3, 88, 24, False, False, 1),
        (5, 96, 40, True, True, 2),
        (5, 240, 40, True, True, 1),
        (5, 240, 40, True, True, 1),
        (5, 120, 48, True, True, 1),
        (5, 144, 48, True, True, 1),
        (5, 288, 96, True, True, 2),
        (5, 576, 96, True, True, 1),
        (5, 576, 96, True, True, 1),
    )

    def __init__(self, classes: int = 1000) -> None:
        super().__init__()
        layers, cin = [conv_bn(3, 16, 3, 2, act=nn.Hardswish())], 16
        for kernel, expanded, cout, se, hswish, stride in self.TABLE:
            layers.append(MobileNetV3Block(cin, kernel, expanded, cout, se, hswish, stride))
            cin = cout
        layers.append(conv_bn(cin, 576, 1, act=nn.Hardswish()))
        self.features = nn.Sequential(*layers)
        self.head = nn.Sequential(nn.Linear(576, 1024), nn.Hardswish(), nn.Dropout(0.2), nn.Linear(1024, classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.flatten(F.adaptive_avg_pool2d(self.features(x), 1), 1))


class MBConv(nn.Module):
    """EfficientNet's block: 1x1 expansion (ratio > 1), kxk depthwise, SE squeezed to a quarter of the
    block's input channels, linear 1x1 projection; residual when shapes agree (drop-path is off in eval)."""

    def __init__(self, cin: int, cout: int, kernel: int, stride: int, expand: int) -> None:
        super().__init__()
        hidden = cin * expand
        layers = [conv_bn(cin, hidden, 1, act=nn.SiLU())] if expand != 1 else []
        layers.append(conv_bn(hidden, hidden, kernel, stride, groups=hidden, act=nn.SiLU()))
        layers.append(SqueezeExcite(hidden, max(1, cin // 4), nn.SiLU, nn.Sigmoid))
        layers.append(conv_bn(hidden, cout, 1))
        self.body = nn.Sequential(*layers)
        self.residual = stride == 1 and cin == cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.body(x)
        return x + y if self.residual else y


class EfficientNetB0(nn.Module):
    """EfficientNet-B0 (Tan and Le 2019, table 1): (expansion, kernel, stride, out channels, repeats) per stage."""

    TABLE = ((1, 3, 1, 16, 1), (6, 3, 2, 24, 2), (6, 5, 2, 40, 2), (6, 3, 2, 80, 3), (6, 5, 1, 112, 3))
    TABLE += ((6, 5, 2, 192, 4), (6, 3, 1, 320, 1))

    def __init__(self, classes: int = 1000) -> None:
        super().__init__()
        layers, cin = [conv_bn(3, 32, 3, 2, act=nn.SiLU())], 32
        for expand, kernel, stride, cout, repeats in self.TABLE:
            for i in range(repeats):
                layers.append(MBConv(cin, cout, kernel, stride if i == 0 else 1, expand))
                cin = cout
        layers.append(conv_bn(cin, 1280, 1, act=nn.SiLU()))
        self.features = nn.Sequential(*layers)
        self.head = nn.Sequential(nn.Dropout(0.2), nn.Linear(1280, classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.flatten(F.adaptive_avg_pool2d(self.features(x), 1), 1))


class SelfAttention(nn.Module):
    """Multi-head attention written out as the reference implementations do: one QKV projection,
    scores = q @ k^T / sqrt(d) (+ an additive mask), softmax, @ v, an output projection."""

    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        batch, length, width = x.shape
        head = width // self.heads
        q, k, v = self.qkv(x).reshape(batch, length, 3, self.heads, head).permute(2, 0, 3, 1, 4)
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(head))
        if mask is not None:
            scores = scores + mask
        y = torch.softmax(scores, dim=-1) @ v
        return self.proj(y.transpose(1, 2).reshape(batch, length, width))


class PreNormBlock(nn.Module):
    """ViT's and GPT-2's block: x + attention(LayerNorm(x)), then x + MLP(LayerNorm(x))."""

    def __init__(self, width: int, heads: int, gelu: str = "none") -> None:
        super().__init__()
        self.ln1, self.attn = nn.LayerNorm(width), SelfAttention(width, heads)
        self.ln2 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(approximate=gelu), nn.Linear(4 * width, width))

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        x = x + self.attn(self.ln1(x), mask)
        return x + self.mlp(self.ln2(x))


class ViT(nn.Module):
    """Vision Transformer (Dosovitskiy et al. 2021): 16x16 patches by a strided conv, a class token,
    learnt positions, pre-norm blocks with exact GELU, the class token's LayerNorm into the head."""

    def __init__(self, width: int = 192, depth: int = 6, heads: int = 3, patch: int = 16, image: int = 224) -> None:
        super().__init__()
        self.patches = nn.Conv2d(3, width, patch, patch)
        self.cls = nn.Parameter(torch.randn(1, 1, width) * 0.02)
        self.positions = nn.Parameter(torch.randn(1, (image // patch) ** 2 + 1, width) * 0.02)
        self.blocks = nn.ModuleList(PreNormBlock(width, heads) for _ in range(depth))
        self.ln, self.head = nn.LayerNorm(width), nn.Linear(width, 1000)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.patches(x).flatten(2).transpose(1, 2)
        y = torch.cat([self.cls.expand(y.shape[0], -1, -1), y], dim=1) + self.positions
        for block in self.blocks:
            y = block(y)
        return self.head(self.ln(y)[:, 0])


class BertLayer(nn.Module):
    """BERT's post-norm layer: LayerNorm(x + attention(x)), then LayerNorm(x + FFN(x)) with exact GELU."""

    def __init__(self, width: int, heads: int, ffn: int) -> None:
        super().__init__()
        self.attn, self.ln1 = SelfAttention(width, heads), nn.LayerNorm(width, eps=1e-12)
        self.ffn = nn.Sequential(nn.Linear(width, ffn), nn.GELU(), nn.Linear(ffn, width))
        self.ln2 = nn.LayerNorm(width, eps=1e-12)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        x = self.ln1(x + self.attn(x, mask))
        return self.ln2(x + self.ffn(x))


class BertEncoder(nn.Module):
    """BERT (Devlin et al. 2019) at MiniLM-L6's size: word, position and segment embeddings, their
    LayerNorm, post-norm layers under the padding mask (-10000 where ``attention_mask`` is 0), and
    the pooler (tanh of a projection of the first token). Outputs: hidden states and the pooled vector."""

    def __init__(self, vocab: int = 30522, width: int = 384, layers: int = 6, heads: int = 12, ffn: int = 1536):
        super().__init__()
        self.words, self.positions = nn.Embedding(vocab, width), nn.Embedding(512, width)
        self.segments, self.ln = nn.Embedding(2, width), nn.LayerNorm(width, eps=1e-12)
        self.layers = nn.ModuleList(BertLayer(width, heads, ffn) for _ in range(layers))
        self.pooler = nn.Linear(width, width)

    def forward(self, ids: torch.Tensor, segments: torch.Tensor, attention_mask: torch.Tensor):
        positions = torch.arange(ids.shape[1]).unsqueeze(0)
        x = self.ln(self.words(ids) + self.positions(positions) + self.segments(segments))
        mask = (1.0 - attention_mask[:, None, None, :].to(x.dtype)) * -10000.0
        for layer in self.layers:
            x = layer(x, mask)
        return x, torch.tanh(self.pooler(x[:, 0]))


class GPT2(nn.Module):
    """GPT-2 (Radford et al. 2019): token and learnt position embeddings, pre-norm blocks with the
    tanh GELU under a causal mask (a lower-triangular boolean buffer and Where, as GPT-2's own code),
    a final LayerNorm, logits through the token embedding (tied)."""

    def __init__(self, vocab: int = 50257, width: int = 512, layers: int = 6, heads: int = 8, length: int = 128):
        super().__init__()
        self.tokens, self.positions = nn.Embedding(vocab, width), nn.Embedding(length, width)
        self.blocks = nn.ModuleList(PreNormBlock(width, heads, gelu="tanh") for _ in range(layers))
        self.ln = nn.LayerNorm(width)
        self.register_buffer("causal", torch.tril(torch.ones(length, length, dtype=torch.bool)), persistent=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        length = ids.shape[1]
        x = self.tokens(ids) + self.positions(torch.arange(length).unsqueeze(0))
        keep = self.causal[:length, :length]
        mask = torch.where(keep, torch.tensor(0.0), torch.tensor(torch.finfo(torch.float32).min))
        for block in self.blocks:
            x = block(x, mask)
        return self.ln(x) @ self.tokens.weight.T


class CRNN(nn.Module):
    """CRNN (Shi et al. 2017) for a 48x320 text line: a VGG-style conv stem that pools the height to 1
    and the width to 80 time steps, two bidirectional LSTMs of 256 per direction, a per-step CTC head."""

    def __init__(self, classes: int = 97) -> None:
        super().__init__()
        relu = nn.ReLU
        self.stem = nn.Sequential(
            nn.Conv2d(3, 64, 3, 1, 1), relu(), nn.MaxPool2d(2),  # 24x160
            nn.Conv2d(64, 128, 3, 1, 1), relu(), nn.MaxPool2d(2),  # 12x80
            conv_bn(128, 256, 3, act=relu()), nn.Conv2d(256, 256, 3, 1, 1), relu(), nn.MaxPool2d((2, 1)),  # 6x80
            conv_bn(256, 512, 3, act=relu()), nn.Conv2d(512, 512, 3, 1, 1), relu(), nn.MaxPool2d((2, 1)),  # 3x80
            nn.Conv2d(512, 512, (3, 1)), nn.BatchNorm2d(512), relu(),  # 1x80
        )  # fmt: skip
        self.rnn = nn.LSTM(512, 256, num_layers=2, bidirectional=True)
        self.head = nn.Linear(512, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.stem(x).squeeze(2).permute(2, 0, 1)  # (time, batch, channels)
        y, _ = self.rnn(y)
        return F.log_softmax(self.head(y), dim=-1)


class GRUAudio(nn.Module):
    """A streaming-style acoustic model: two GRU layers of 256 over (batch, frames, 80 mel bins), then a
    per-frame projection to 40 classes (phones or keywords)."""

    def __init__(self, features: int = 80, hidden: int = 256, classes: int = 40) -> None:
        super().__init__()
        self.rnn = nn.GRU(features, hidden, num_layers=2, batch_first=True)
        self.head = nn.Linear(hidden, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y, _ = self.rnn(x)
        return self.head(y)


def _image() -> dict[str, torch.Tensor]:
    return {"input": torch.randn(1, 3, 224, 224)}


def _bert_inputs() -> dict[str, torch.Tensor]:
    mask = torch.ones(1, 128, dtype=torch.int64)
    mask[:, 100:] = 0  # a padded batch: 100 real tokens
    segments = torch.zeros(1, 128, dtype=torch.int64)
    segments[:, 60:] = 1
    return {"input_ids": torch.randint(0, 30522, (1, 128)), "token_type_ids": segments, "attention_mask": mask}


# name -> (model factory, inputs by graph input name, output names)
MODELS: dict[str, tuple[Callable[[], nn.Module], Callable[[], dict[str, torch.Tensor]], list[str]]] = {
    "mobilenetv2": (MobileNetV2, _image, ["logits"]),
    "mobilenetv3_small": (MobileNetV3Small, _image, ["logits"]),
    "efficientnet_b0": (EfficientNetB0, _image, ["logits"]),
    "resnet18": (ResNet18, _image, ["logits"]),
    "vit_small": (ViT, _image, ["logits"]),
    "bert_minilm": (BertEncoder, _bert_inputs, ["last_hidden_state", "pooled"]),
    "gpt2_small6": (GPT2, lambda: {"input_ids": torch.randint(0, 50257, (1, 128))}, ["logits"]),
    "crnn_ocr": (CRNN, lambda: {"image": torch.randn(1, 3, 48, 320)}, ["log_probs"]),
    "gru_audio": (GRUAudio, lambda: {"features": torch.randn(1, 100, 80)}, ["logits"]),
}


def is_current(name: str, folder: Path) -> bool:
    """Whether ``folder`` holds `name`'s model and inputs, written after the definitions last changed."""
    written = [folder / f"{name}.onnx", folder / f"{name}.npz"]
    if not all(p.exists() for p in written):
        return False
    here = Path(__file__).resolve().parent
    changed = max((here / source).stat().st_mtime for source in ("real_models.py", "peer_models.py"))
    return min(p.stat().st_mtime for p in written) > changed


def export(name: str, folder: Path) -> Path:
    """Write ``folder/<name>.onnx`` and its inputs ``folder/<name>.npz``; returns the model's path."""
    factory, inputs, outputs = MODELS[name]
    torch.manual_seed(0)  # weights and inputs seeded per model: any subset exports the same files
    model = factory().eval()
    feeds = inputs()
    path = folder / f"{name}.onnx"
    with torch.no_grad():
        torch.onnx.export(
            model,
            tuple(feeds.values()),
            str(path),
            opset_version=OPSET,
            dynamo=False,
            input_names=list(feeds),
            output_names=outputs,
        )
    np.savez(folder / f"{name}.npz", **{k: v.numpy() for k, v in feeds.items()})
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path, nargs="?", default=FOLDER)
    parser.add_argument("--models", default="", help="comma-separated names (default: all)")
    parser.add_argument("--force", action="store_true", help="export even the models that are current")
    args = parser.parse_args()
    names = [m.strip() for m in args.models.split(",") if m.strip()] or list(MODELS)
    unknown = sorted(set(names) - set(MODELS))
    if unknown:
        parser.error(f"unknown model(s) {unknown}; known: {', '.join(MODELS)}")
    torch.set_num_threads(1)
    # Known and harmless here: the classic exporter is deprecated, and tracing fixes shapes (static on purpose).
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    warnings.filterwarnings("ignore", category=torch.jit.TracerWarning)
    warnings.filterwarnings("ignore", message="Exporting a model to ONNX with a batch_size other than 1")  # batch is 1
    args.folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        if args.force or not is_current(name, args.folder):
            path = export(name, args.folder)
            print(f"exported {name}: {path.stat().st_size / 1e6:.1f} MB", flush=True)


if __name__ == "__main__":
    main()
