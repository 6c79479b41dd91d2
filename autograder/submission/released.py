"""What grading knows of the released student template.

Written by the kit's release step (`grader_cli.py release`, autograder/release.py) from the
template it releases; `release --check` fails when this file is stale. Do not edit.

TEMPLATE_DIGESTS: the code digest (autograder.submission.forms.code_digest) of each module's stub and of the
    code its student notebook is graded on: a form of a module with that digest holds no student
    work (autograder.submission.forms.one_form).
MODULE_CELLS: the place of each student notebook's code cell, counting every cell from 1.
NAMES: what each module defines, in the order of the contract.
"""

TEMPLATE_DIGESTS = {
    'attention': {
        'py': 'c94e15c16776b5bdf3dcadd188f796cca73d210e9ac311d2ba702c0ca6692824',
        'ipynb': 'b39af87e27c03bcba45cdaceba4b98082e67f6470cc94145a41dfa3c59369397',
    },
    'heads': {
        'py': '21a2fa09f3f609c30d3aa606db22034099e1452b894037e30687d4324515176a',
        'ipynb': 'ac05aa2af61abb303eeb10960952c375adf287e562ad5892a633983677d6445b',
    },
    'masks': {
        'py': 'cb92eb04e8b003e20b9cab27eb38428d94949e5fd824fbe6c10a91a7d536ba33',
        'ipynb': '11c7e32807b35355d1ece7b0a10b5c48c4398e35d98cab70ba0baf3fb2b52658',
    },
    'mha': {
        'py': '94de43e106876b40b6cdf316234860bd4ce22abad581a9ec72848a2ca6121953',
        'ipynb': 'd20ccc8e60edfdfd1fe2afd43de41a0fb29b1724efbbf01739ec9843bd24fede',
    },
    'positional': {
        'py': 'f9b3c47f65999533d31c9da179e57f0dc8d91f4dea7e333aa75c6e1b6e4cfd07',
        'ipynb': '8957427ce88530f45dbc67ffc05d90a8c3dec78ca8bd798b657b5c1a16d9434a',
    },
}

MODULE_CELLS = {'attention': 7, 'heads': 5, 'masks': 5, 'mha': 5, 'positional': 8}

NAMES = {
    'attention': ['scaled_dot_product_attention'],
    'heads': ['split_heads', 'merge_heads'],
    'masks': ['causal_mask'],
    'mha': ['CausalAttention', 'StackedMultiHeadAttention', 'MultiHeadAttention'],
    'positional': ['sinusoidal_encoding', 'PositionalEncoding'],
}
