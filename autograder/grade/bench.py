"""`grader_cli.py bench`: multi-head attention implementations timed side by side in one run.

Compares, at each (tokens, heads) of a grid with d_model fixed:
  - the reference stacked module (one CausalAttention per head),
  - the reference fused module (one projection, view + transpose, batched products),
  - a fused module built on torch.nn.functional.scaled_dot_product_attention,
  - torch.nn.MultiheadAttention (causal),
  - and, given a submission, the student's stacked and fused modules (run in the
    sandboxed student process and timed by this process's clock).
Rounds are interleaved across implementations and the best round is kept.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import torch
from torch import nn
from torch.nn import functional as F

from autograder.graders import timing
from solutions import mha as ref


class SDPAMultiHeadAttention(nn.Module):
    """Fused causal multi-head attention on F.scaled_dot_product_attention (same layers as the reference)."""

    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__()
        self.num_heads, self.head_dim, self.d_out = num_heads, d_out // num_heads, d_out
        self.Wq = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.Wk = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.Wv = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.Wo = nn.Linear(d_out, d_out)
        self.dropout = dropout

    def forward(self, x):
        B, T, _ = x.shape
        q, k, v = (w(x).view(B, T, self.num_heads, self.head_dim).transpose(1, 2) for w in (self.Wq, self.Wk, self.Wv))
        context = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                                 dropout_p=self.dropout if self.training else 0.0)  # (B, H, T, hd)
        return self.Wo(context.transpose(1, 2).reshape(B, T, self.d_out))


class TorchMultiheadAttention(nn.Module):
    """torch.nn.MultiheadAttention, causal (its bool mask's True means *blocked*)."""

    def __init__(self, d_model, context_length, num_heads):
        super().__init__()
        self.attn = nn.MultiheadAttention(d_model, num_heads, batch_first=True)
        self.register_buffer("blocked", ~torch.ones(context_length, context_length, dtype=torch.bool).tril())

    def forward(self, x):
        T = x.size(1)
        return self.attn(x, x, x, attn_mask=self.blocked[:T, :T], need_weights=False)[0]


@dataclass
class Row:
    tokens: int
    heads: int
    seconds: dict = field(default_factory=dict)  # implementation -> best seconds per forward pass


def _reps_for(seconds_per_pass, target=0.02):
    return max(2, min(200, math.ceil(target / max(seconds_per_pass, 1e-6))))


def run(*, tokens=(32, 128), heads=(1, 4, 16, 64), d_model=128, batch=4, rounds=3, device="cpu",
        student=None, threads=1, progress=None) -> list[Row]:
    """Time every implementation at every (tokens, heads); `student` is an optional Sandbox."""
    old_threads = torch.get_num_threads()
    torch.set_num_threads(threads)
    rows = []
    if student is not None:  # let the student process finish starting up before anything is timed
        timing.time_remote_block(student.new("mha", "MultiHeadAttention", d_model, d_model, 8, 0.0, 1),
                                 torch.zeros(1, 1, 8, d_model), discard=True)
    try:
        for T in tokens:
            for H in heads:
                torch.manual_seed(0)
                local = {
                    "reference stacked": ref.StackedMultiHeadAttention(d_model, d_model // H, T, 0.0, H),
                    "reference fused": ref.MultiHeadAttention(d_model, d_model, T, 0.0, H),
                    "SDPA fused": SDPAMultiHeadAttention(d_model, d_model, T, 0.0, H),
                    "nn.MultiheadAttention": TorchMultiheadAttention(d_model, T, H),
                }
                local = {k: m.eval().to(device) for k, m in local.items()}
                x = torch.randn(batch, T, d_model, generator=torch.Generator().manual_seed(1)).to(device)
                remote = {}
                if student is not None:
                    remote["your stacked"] = student.new("mha", "StackedMultiHeadAttention", d_model, d_model // H, T, 0.0, H)
                    remote["your fused"] = student.new("mha", "MultiHeadAttention", d_model, d_model, T, 0.0, H)
                    if device != "cpu":
                        remote = {k: r.to(device=device) for k, r in remote.items()}
                block = lambda n: x.expand(n, *x.shape)  # noqa: E731  (n passes on x; sent as one x)
                reps = {k: _reps_for(timing.time_block(m, block(2), clock=time.perf_counter)) for k, m in local.items()}
                for k, r in remote.items():  # longer blocks, so that the round trip's cost is shared
                    reps[k] = _reps_for(timing.time_remote_block(r, block(5), discard=True)[0], target=0.05)
                row = Row(T, H, {k: float("inf") for k in [*local, *remote]})
                for _ in range(rounds):
                    for k, m in local.items():
                        row.seconds[k] = min(row.seconds[k], timing.time_block(m, block(reps[k]), clock=time.perf_counter))
                    for k, r in remote.items():
                        row.seconds[k] = min(row.seconds[k],
                                             timing.time_remote_block(r, block(reps[k]), discard=True)[0])
                rows.append(row)
                if progress:
                    progress(row)
    finally:
        torch.set_num_threads(old_threads)
    return rows


def table(rows: list[Row]) -> str:
    """A fixed-width table: milliseconds per forward pass, and stacked/fused ratios."""
    names = list(rows[0].seconds)
    ratios = [("ref stacked/fused", "reference stacked", "reference fused")]
    if "your fused" in names:
        ratios += [("ref stacked/your fused", "reference stacked", "your fused"),
                   ("your fused/ref fused", "your fused", "reference fused")]
    head = ["tokens", "heads"] + [f"{n} (ms)" for n in names] + [r[0] for r in ratios]
    lines = [head]
    for row in rows:
        cells = [str(row.tokens), str(row.heads)] + [f"{row.seconds[n] * 1e3:.3f}" for n in names]
        cells += [f"{row.seconds[a] / row.seconds[b]:.2f}x" for _, a, b in ratios]
        lines.append(cells)
    widths = [max(len(line[i]) for line in lines) for i in range(len(head))]
    out = ["  ".join(c.rjust(w) for c, w in zip(line, widths)) for line in lines]
    out.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(out)


def plot(rows: list[Row], path, title="multi-head attention, forward pass"):
    """Time per forward pass against the number of heads, one panel per sequence length."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tokens = sorted({r.tokens for r in rows})
    names = list(rows[0].seconds)
    fig, axes = plt.subplots(1, len(tokens), figsize=(5.5 * len(tokens), 4.2), squeeze=False)
    for ax, T in zip(axes[0], tokens):
        sub = [r for r in rows if r.tokens == T]
        for name in names:
            ax.plot([r.heads for r in sub], [r.seconds[name] * 1e3 for r in sub], marker="o", label=name)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("heads (d_model fixed)")
        ax.set_ylabel("ms per forward pass")
        ax.set_title(f"{T} tokens")
        ax.grid(True, which="both", alpha=0.3)
    axes[0][0].legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
