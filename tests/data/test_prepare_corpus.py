"""prepare_corpus refuses a corpus with a duplicate document id before any GPU job reads it, in one
line that names the id and the two lines; it writes no preparation record, so nothing downstream
starts. (Synthetic corpora written here.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from splade_rescale import cli
from splade_rescale.data.datasets import DatasetError
from splade_rescale.data.prepare import prepare_corpus


def _corpus(path: Path, ids: list[str | None]) -> Path:
    """A JSONL corpus, None for a blank line (so that line numbers and document numbers differ)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join("\n" if i is None else json.dumps({"_id": i, "text": f"text of {i}"}) + "\n"
                            for i in ids))
    return path


def test_duplicate_id_named_with_both_lines(tmp_path: Path) -> None:
    _corpus(tmp_path / "beir" / "corpus.jsonl", ["d1", None, "d2", "d3", None, "d2"])
    out = tmp_path / "prepared.json"
    with pytest.raises(DatasetError, match=r"corpus\.jsonl: duplicate document id 'd2' \(lines 3 and 6\); "
                                           r"deduplicate the corpus"):
        prepare_corpus("beir", {"source": "beir_local", "path": str(tmp_path / "beir")}, out)
    assert not out.exists()


def test_cli_one_line_and_unique_corpus_counted(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    corpus = _corpus(tmp_path / "docs.jsonl", ["a", "b", "a"])
    spec = {"source": "trec_local", "corpus": str(corpus), "queries": "q.tsv", "qrels": "qrels.txt"}
    out = tmp_path / "prepared.json"
    assert cli.main(["prepare-corpus", "--name", "docs", "--corpus", json.dumps(spec), "--out", str(out)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"splade-rescale prepare-corpus: error: {corpus}: duplicate document id 'a' (lines 1 and 3); "
                   "deduplicate the corpus"] and not out.exists()
    _corpus(corpus, ["a", "b", None, "c"])
    assert cli.main(["prepare-corpus", "--name", "docs", "--corpus", json.dumps(spec), "--out", str(out)]) == 0
    assert json.loads(out.read_text())["docs"] == 3
