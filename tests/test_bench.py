"""grader_cli.py bench: the side-by-side table and the plot."""
import pytest
from click.testing import CliRunner

from grader_cli import cli
from tests.conftest import SOLUTIONS

pytestmark = pytest.mark.grading  # every test here grades or starts student processes


def test_bench_prints_table_and_writes_plot(tmp_path):
    plot = tmp_path / "bench.png"
    result = CliRunner().invoke(cli, ["bench", str(SOLUTIONS), "--tokens", "8", "--heads", "1,2", "--d-model", "8",
                                      "--batch", "2", "--plot", str(plot)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    header = next(line for line in lines if line.lstrip().startswith("tokens"))
    for name in ("reference stacked", "reference fused", "SDPA fused", "nn.MultiheadAttention", "your stacked",
                 "your fused", "ref stacked/fused"):
        assert name in header
    rows = [line.split() for line in lines if line.split()[:1] == ["8"]]
    assert [r[1] for r in rows] == ["1", "2"]
    assert all(float(cell) > 0 for r in rows for cell in r[2:8])
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bench_rejects_heads_that_do_not_divide_d_model(tmp_path):
    result = CliRunner().invoke(cli, ["bench", "--heads", "3", "--d-model", "8", "--plot", str(tmp_path / "p.png")])
    assert result.exit_code == 2
    assert "must divide" in result.output
