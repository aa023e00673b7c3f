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


def test_end_to_end_mode_compares_with_sentence_transformers(tmp_path) -> None:
    report, _ = _bench(tmp_path, "--docs", "24", "--batch", "8", "--doc-len", "32", "--repeats", "1", "--cores", "1",
                       "--corpus", "scifact")
    assert report["mode"] == "end_to_end" and len(report["rounds"]) == 1
    assert report["ours_docs_per_s"] > 0 and report["st_docs_per_s"] > 0 and "host_overhead" in report
    assert 0 <= report["padding_share"]["bucketed"] <= report["padding_share"]["char_sorted"]
