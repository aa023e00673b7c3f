"""benchmarks/bench_encode.py runs in both modes, so it cannot rot between measurements (figures are
reported, never judged here: timing belongs to benchmarks, not tests)."""

from __future__ import annotations

import json
import subprocess
import sys

from conftest import REPO


def _bench(tmp_path, *args: str) -> tuple[dict, str]:
    out = tmp_path / "report.json"
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks/bench_encode.py"), *args, "--out", str(out)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(out.read_text()), proc.stdout


def test_stub_mode_reports_the_host_rate_last(tmp_path) -> None:
    report, stdout = _bench(tmp_path, "--stub", "--docs", "3000")
    assert stdout.strip().splitlines()[-1] == f"host_docs_per_s={report['host_docs_per_s']}"
    assert report["host_docs_per_s"] > 0 and report["previous_host_docs_per_s"] > 0
    assert report["cores"] == 1 and len(report["matmul_gflops_1thread"]) == 2


def test_padding_mode_counts_the_buckets_padding(tmp_path) -> None:
    report, _ = _bench(tmp_path, "--padding", "--docs", "50000")
    assert report["mode"] == "padding" and report["passages"] == 28_606 and report["stream_docs"] == 50_000
    assert report["real_tokens"] <= report["token_sorted_tokens"] and report["real_tokens"] <= report["bucketed_tokens"]
    assert report["stream_filled_over_bucketed"] >= 0
