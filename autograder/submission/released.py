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
        'ipynb': 'd59a28bfacd14a0554ce9eecf293782bfd58b3145a6e4b0049f53cdf9a22ed26',
    },
    'heads': {
        'py': '21a2fa09f3f609c30d3aa606db22034099e1452b894037e30687d4324515176a',
        'ipynb': '32ba3440cc08bc39014ba021f038d8bcf58dfc68bddf6b9ca04bb250471c7ebb',
    },
    'masks': {
        'py': 'cb92eb04e8b003e20b9cab27eb38428d94949e5fd824fbe6c10a91a7d536ba33',
        'ipynb': 'ec9fb138dfb5a11ec0fbf811d5c3321da849075df98a2aceb3b8c3a6620765f7',
    },
    'mha': {
        'py': '94de43e106876b40b6cdf316234860bd4ce22abad581a9ec72848a2ca6121953',
        'ipynb': 'dcdec70eeecac38a932e3b3de3f79fd44a8ad749da7876dd593f491c20b5808c',
    },
    'positional': {
        'py': 'f9b3c47f65999533d31c9da179e57f0dc8d91f4dea7e333aa75c6e1b6e4cfd07',
        'ipynb': '66cdc61977e30450c4c41934e6e2be4533ee7f004dede31ad259f59ac0ae6687',
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
