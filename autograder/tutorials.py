"""The tutorials the kit cites, and the one name each is cited by.

The course's tutorials are not numbered for students: every docstring,
notebook, check title, message and page of documentation cites one by the
short title below, in 《》, and the student README, the kit's README and the
documentation's home page print this table (`grader_cli.py release` writes
it; `release --check` fails when it drifts). tests/test_words.py
checks that no other name for a tutorial is used.
"""
from __future__ import annotations

#: cited as -> (the tutorial's full title, what the kit takes from it)
TUTORIALS = {
    "《PyTorch快餐教程(5)》": (
        "PyTorch快餐教程(5)-Multi-Head Attention (2019), quoting the code of Harvard's annotated Transformer",
        "the formula and the code of scaled dot-product attention: `mask == 0` for blocked positions, "
        "dropout on the weights"),
    "《Self-Attention详解》": (
        "深度学习之图像分类（十七）-- Transformer中Self-Attention以及Multi-Head Attention详解",
        "self-attention worked by hand (q1 = (1, 2), b1 = (0.33, 0.67)), the split into heads, the order "
        "experiment"),
    "《多头注意力：堆叠与权重分割》": (
        "untitled; it opens with \"1.引言\" and follows the article 因果注意力, its parts are "
        "\"2.堆叠实现\" and \"3. 权重分割实现\"",
        "multi-head attention stacked and fused (`MultiHeadAttentionStack`, `torch.manual_seed(123)`, the six "
        "tokens of \"Your journey starts with one step\"), `head_dim`, the `triu` mask"),
}


def table() -> str:
    """The Markdown table of the tutorials: how each is cited, its title, what the kit takes from it."""
    rows = [f"| {name} | {title} | {used} |" for name, (title, used) in TUTORIALS.items()]
    return "\n".join(["| cited as | title | what the kit takes from it |", "| --- | --- | --- |", *rows])
