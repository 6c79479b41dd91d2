"""Seeding torch for what a process draws random numbers on: the student process's and the grader's one way.

torch.manual_seed(seed) seeds the CPU and queues the seed for each of CUDA, XPU and MTIA not started yet,
with a stack trace of its caller: ~0.35 ms a call at the depth of a grader's check (~21 a grading), ~0.07 ms
for each seeded request of the student process. Neither side needs those queued seeds: the graders build
the reference modules on the CPU (then move them) and draw no random numbers on a GPU, and the student
process starts CUDA before its handshake where the machine has a GPU (`_cuda_problem` in
student_process.py). So `manual_seed` seeds the CPU generator, and CUDA's once it has started: the draws
of torch.manual_seed, on every device that runs.

Stdlib only at import (torch is imported at the first call): the student process loads this file by path,
before it confines itself and imports torch, as it does wire.py and lazy_dynamo.py.
"""
from __future__ import annotations


def manual_seed(seed: int) -> None:
    """torch.manual_seed(seed), less the seeds it would queue for devices not started."""
    import torch  # imported already by every caller: a lookup

    torch.random.default_generator.manual_seed(seed)
    if torch.cuda.is_initialized():
        torch.cuda.manual_seed_all(seed)
