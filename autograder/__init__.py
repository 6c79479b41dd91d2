"""The multi-head-attention exercise kit: graders and release tooling."""
