"""The known mistakes of the positional encoding (positional.py): the table, the frequencies, the sum with the
input, computed from the reference. The machinery (match) is the kit's, autograder/grade/diagnose.py.
"""
from __future__ import annotations

import torch

from autograder.grade.diagnose import match  # noqa: F401  (the graders' diagnose.match)
from solutions import positional as ref_positional

# The frequency mistakes: name -> the angle of column c (0..d_model-1, its pair i = c // 2) at position p, float64.
# A sine goes in the even columns and a cosine in the odd ones, as they should.
FREQUENCY_MISTAKES = {
    "your frequencies are taken per column, not per pair: column c turns at 1/10000^(c/d_model) (a div_term built "
    "from torch.arange(0, d_model), or 10000 ** (i / d_model) for every column i), so each cosine's exponent, "
    "(2i+1)/d_model, is one more than its sine's; both columns of pair i, 2i and 2i+1, use 10000^(2i/d_model): "
    "build div_term from torch.arange(0, d_model, 2), one value per pair":
        lambda p, c, d: p / 10000 ** (c / d),
    "your frequencies use the column index c where the pair's 2i belongs: column c turns at 1/10000^(2c/d_model) "
    "(10000 ** (2 * i / d_model) and, for the cosine, 10000 ** (2 * (i + 1) / d_model), with i the column of the "
    "sine, as in a loop for i in range(0, d_model, 2)); both columns of pair i, 2i and 2i+1, use "
    "10000^(2i/d_model): with i the sine's column, 10000 ** (i / d_model) for both":
        lambda p, c, d: p / 10000 ** (2 * c / d),
    "the sign of your exponent is swapped: your angles are p * 10000^(2i/d_model) (torch.exp(2i * math.log(10000.0) "
    "/ d_model), without its minus sign) instead of p / 10000^(2i/d_model): the frequencies fall from 1 to 1/10000, "
    "torch.exp(2i * -math.log(10000.0) / d_model)":
        lambda p, c, d: p * 10000 ** (2 * (c // 2) / d),
    "your exponent has no parentheses: 10000 ** two_i / d_model is 10000^(2i), then divided by d_model; write "
    "10000 ** (two_i / d_model)":
        lambda p, c, d: p / 10000 ** (2 * (c // 2)) / d,
    **{f"your frequencies use the base {base} instead of 10000: PE[p, 2i] = sin(p / 10000^(2i/d_model)) (in log "
       f"space, torch.exp(2i * -math.log(10000.0) / d_model))": (lambda p, c, d, b=base: p / b ** (2 * (c // 2) / d))
       for base in (10, 1000, 100000, 1000000)},  # (base 100 is 10000^(i/d_model), named as such in encoding_variants)
}


def _from_angles(angle):
    """The table (T, d_model) with sin(angle) in the even columns and cos(angle) in the odd ones."""
    pe = torch.empty_like(angle)
    pe[:, 0::2], pe[:, 1::2] = torch.sin(angle[:, 0::2]), torch.cos(angle[:, 1::2])
    return pe


def encoding_variants(seq_len, d_model):
    pe = ref_positional.sinusoidal_encoding(seq_len, d_model)
    sin, cos = pe[:, 0::2], pe[:, 1::2]
    swapped = torch.empty_like(pe)
    swapped[:, 0::2], swapped[:, 1::2] = cos, sin
    position = torch.arange(seq_len, dtype=torch.float64).unsqueeze(1)
    i = torch.arange(d_model // 2, dtype=torch.float64)
    angle = position / 10000 ** (i / d_model)
    exponent_i = torch.empty(seq_len, d_model, dtype=torch.float64)
    exponent_i[:, 0::2], exponent_i[:, 1::2] = torch.sin(angle), torch.cos(angle)
    column = torch.arange(d_model, dtype=torch.float64)  # c
    return {
        "your sines and cosines are concatenated (all sines, then all cosines) instead of interleaved":
            torch.cat([sin, cos], dim=-1),
        "your sines and cosines are swapped: sin belongs in the even columns, cos in the odd ones": swapped,
        "your frequencies use 10000^(i/d_model) instead of 10000^(2i/d_model)": exponent_i.to(pe.dtype),
        **{name: _from_angles(angle_of(position, column, d_model)).to(pe.dtype)
           for name, angle_of in FREQUENCY_MISTAKES.items()},
    }


def table_variants(max_len, d_model):
    """name -> the buffer `pe` that the usual mistakes keep, for PositionalEncoding(d_model, max_len)."""
    pe = ref_positional.sinusoidal_encoding(max_len, d_model)
    return {"your pe has a leading batch dim, (1, max_len, d_model) (pe.unsqueeze(0), as in the Annotated "
            "Transformer); here it is (max_len, d_model) and forward adds pe[:T]": pe.unsqueeze(0),
            SEQ_FIRST_TABLE: pe.unsqueeze(1),
            **encoding_variants(max_len, d_model)}


SEQ_FIRST_TABLE = ("your pe is seq-first, (max_len, 1, d_model) (pytorch/examples' convention, for x (T, B, "
                   "d_model)); here x is batch-first, (B, T, d_model): keep pe as (max_len, d_model) and add "
                   "pe[:T] with T = x.size(1)")
SEQ_FIRST_SUM = ("your forward adds pe[:x.size(0)], one row per batch item added to all its tokens, as for a "
                 "seq-first x (T, B, d_model) (pytorch/examples' convention); here x is batch-first, (B, T, "
                 "d_model): add pe[:T] with T = x.size(1)")


def sum_variants(x, pe):
    """name -> what the usual mistakes of PositionalEncoding.forward give for `x` (B, T, d_model) with the
    table `pe` (max_len, d_model): a wrong table added, or the right one added seq-first."""
    T = x.size(1)
    one_row = {ONE_ROW: x + pe[T].to(x.dtype)} if T < pe.size(0) else {}
    return {SEQ_FIRST_SUM: x + pe[:x.size(0)].unsqueeze(1).to(x.dtype), **one_row,
            **{name: x + table[:T].to(x.dtype) for name, table in encoding_variants(T, x.size(-1)).items()}}


ONE_ROW = ("your forward adds pe[T], the one row of position T, to every token: add pe[:T], the first T rows (one "
           "per position)")
