"""The graders' checks (autograder/graders/checks.py): the usual mistakes' values are computed only for a check
that fails, and then name the mistake as before."""
import pytest
import torch

from autograder.graders import checks


def counted(variants):
    calls = []

    def compute():
        calls.append(1)
        return variants

    return checks.lazy(compute), calls


def test_a_passing_check_computes_no_mistake():
    variants, calls = counted({"times two": torch.full((3,), 2.0)})
    checks.close(torch.ones(3), torch.ones(3), "out", variants=variants)  # (3,)
    checks.shape(torch.ones(3), (3,), "out", variants=variants)
    assert calls == []


def test_a_failing_check_names_the_mistake_it_matches_computed_once():
    variants, calls = counted({"times two": torch.full((3,), 2.0)})
    for _ in range(2):
        with pytest.raises(AssertionError, match="Likely bug: times two"):
            checks.close(torch.full((3,), 2.0), torch.ones(3), "out", variants=variants)
    assert calls == [1]
    with pytest.raises(AssertionError, match="Likely bug: times two"):  # a dict, as before
        checks.close(torch.full((3,), 2.0), torch.ones(3), "out", variants={"times two": torch.full((3,), 2.0)})
