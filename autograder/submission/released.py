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
        'ipynb': '0931c8686b6c02270964afe9a55446663f675932a0d557af0595bca5c584ec1c',
    },
    'heads': {
        'py': '21a2fa09f3f609c30d3aa606db22034099e1452b894037e30687d4324515176a',
        'ipynb': 'd8e4eb2346dfba76ed4c4e9782bf8ae5d7643208a18b0e1cd78b879bedd55f3f',
    },
    'masks': {
        'py': 'cb92eb04e8b003e20b9cab27eb38428d94949e5fd824fbe6c10a91a7d536ba33',
        'ipynb': '93e014635e6ba20eedb582f2a4ecbf87fce9dc6d78f5864cae1dddc612afeed7',
    },
    'mha': {
        'py': '94de43e106876b40b6cdf316234860bd4ce22abad581a9ec72848a2ca6121953',
        'ipynb': 'be1d37c3e5c87f160ac6be6db8d5e38a43e96e61bc3d7a08c762f93fad464b5f',
    },
    'positional': {
        'py': 'f9b3c47f65999533d31c9da179e57f0dc8d91f4dea7e333aa75c6e1b6e4cfd07',
        'ipynb': '0dc5975e196338f81b55551b7522f078a670c2baa04bb970097b511705afb6fe',
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
