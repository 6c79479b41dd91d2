"""The multi-head-attention exercise kit: graders and release tooling."""

# The five modules of the student contract, in its order: the one list the library uses.
MODULES = ("attention", "heads", "masks", "mha", "positional")
