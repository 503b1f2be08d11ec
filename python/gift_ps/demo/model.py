"""A small Llama-style byte-level language model (CPU, torch >= 1.13).

RMSNorm, rotary position embeddings, SwiGLU MLP, causal multi-head attention
and an untied output layer over the 256 byte values. Shared by the training
demo (`python3 -m gift_ps.demo`) and scripts/real_gradients.py.

This module imports only torch, so it can be loaded on its own (without the
rest of gift_ps and its gRPC dependencies).
"""

import dataclasses
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

VOCAB = 256


@dataclasses.dataclass
class ModelConfig:
    d_model: int = 128
    layers: int = 4
    heads: int = 4
    mlp_hidden: int = 344  # SwiGLU hidden width
    context: int = 128  # longest sequence, in bytes

    def validate(self):
        """Returns an error message, or None when the configuration is usable."""
        for name in ("d_model", "layers", "heads", "mlp_hidden", "context"):
            if getattr(self, name) < 1:
                return f"{name.replace('_', '-')} must be at least 1"
        if self.d_model % self.heads or (self.d_model // self.heads) % 2:
            return "d-model must be a multiple of heads with an even head size"
        return None

    @classmethod
    def of(cls, obj):
        """A ModelConfig from any object with the same attribute names (argparse.Namespace)."""
        return cls(**{f.name: getattr(obj, f.name) for f in dataclasses.fields(cls)})


class RMSNorm(nn.Module):
    def __init__(self, d, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope_tables(head_dim, context, base=10000.0):
    inv = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
    ang = torch.outer(torch.arange(context, dtype=torch.float32), inv)
    return ang.cos(), ang.sin()


def apply_rope(x, cos, sin):
    # x: (B, H, T, hd); rotate (even, odd) pairs.
    x1, x2 = x[..., 0::2], x[..., 1::2]
    t = x.shape[-2]
    c, s = cos[:t], sin[:t]
    return torch.stack((x1 * c - x2 * s, x1 * s + x2 * c), dim=-1).flatten(-2)


class Block(nn.Module):
    def __init__(self, d, heads, hidden):
        super().__init__()
        self.heads = heads
        self.attn_norm = RMSNorm(d)
        self.q = nn.Linear(d, d, bias=False)
        self.k = nn.Linear(d, d, bias=False)
        self.v = nn.Linear(d, d, bias=False)
        self.o = nn.Linear(d, d, bias=False)
        self.mlp_norm = RMSNorm(d)
        self.gate = nn.Linear(d, hidden, bias=False)
        self.up = nn.Linear(d, hidden, bias=False)
        self.down = nn.Linear(hidden, d, bias=False)

    def forward(self, x, cos, sin):
        b, t, d = x.shape
        hd = d // self.heads
        h = self.attn_norm(x)
        q, k, v = (m(h).view(b, t, self.heads, hd).transpose(1, 2) for m in (self.q, self.k, self.v))
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        # Causal softmax attention, written out (torch 1.13 has no fused kernel).
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hd)
        mask = torch.ones(t, t, dtype=torch.bool).triu(1)
        a = att.masked_fill(mask, float("-inf")).softmax(-1) @ v
        x = x + self.o(a.transpose(1, 2).reshape(b, t, d))
        h = self.mlp_norm(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class ByteLM(nn.Module):
    """The model; `cfg` is a ModelConfig or any object with its attribute names."""

    def __init__(self, cfg):
        super().__init__()
        cfg = ModelConfig.of(cfg)
        error = cfg.validate()
        if error:
            raise ValueError(error)
        self.config = cfg
        d = cfg.d_model
        self.embed = nn.Embedding(VOCAB, d)
        self.blocks = nn.ModuleList(Block(d, cfg.heads, cfg.mlp_hidden) for _ in range(cfg.layers))
        self.norm = RMSNorm(d)
        self.head = nn.Linear(d, VOCAB, bias=False)
        cos, sin = rope_tables(d // cfg.heads, cfg.context)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=0.02)

    def forward(self, idx):
        x = self.embed(idx)
        for blk in self.blocks:
            x = blk(x, self.cos, self.sin)
        return self.head(self.norm(x))

    def loss(self, x, y):
        """Mean next-byte cross-entropy in nats per byte."""
        return F.cross_entropy(self(x).reshape(-1, VOCAB), y.reshape(-1))


def adamw(model, lr, weight_decay, betas=(0.9, 0.95)):
    """AdamW with weight decay on the matrices only (not on norms' gains)."""
    params = list(model.parameters())
    return torch.optim.AdamW(
        [
            {"params": [p for p in params if p.dim() == 2], "weight_decay": weight_decay},
            {"params": [p for p in params if p.dim() != 2], "weight_decay": 0.0},
        ],
        lr=lr,
        betas=betas,
    )
