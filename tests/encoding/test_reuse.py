"""Declared reuse: a corpus copies the vectors of the documents its declared source holds and encodes the rest;
its collection is the one a plain encode writes.

Real: a tiny BERT saved to disk (the real SpladeEncoder on the CPU, fp32), the real texts of the demo's SciFact
subset. Synthetic: the two corpora cut from 60 of its documents (``a``: 0-39; ``b``: 20-59 and a changed text
under a's id 5, which is not reused), as local BEIR folders.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from conftest import REPO
from splade_rescale.costs.plan import build_plan, load_throughputs
from splade_rescale.data.corpora import corpora as corpora_of
from splade_rescale.data.datasets import load_dataset
from splade_rescale.data.prepare import write_corpus_digests
from splade_rescale.digests import doc_digest
from splade_rescale.encoding import corpus as encode
from splade_rescale.encoding import reuse, shard_folder
from splade_rescale.encoding.corpus import CorpusSource
from splade_rescale.encoding.parts import join_parts
from splade_rescale.encoding.reuse import Reuse, declared_sources, write_overlap
from splade_rescale.encoding.settings import EncodeSettings
from splade_rescale.errors import ConfigError
from support.training import save_tiny_bert
from support.workflow import snakemake

SUBSET = {"source": "beir_local", "path": str(REPO / "resources" / "demo" / "scifact"), "split": "test",
          "subset": {"max_queries": 12, "max_judged_per_query": 3, "extra_docs": 50, "seed": 1}}
MAXLEN = 48
SAME = ("n_docs", "mean_nnz_per_doc", "n_docs_empty_vector", "term_df")  # the statistics a plain encode gives


@pytest.fixture(scope="module")
def encoder(tmp_path_factory: pytest.TempPathFactory):
    model = save_tiny_bert(tmp_path_factory.mktemp("tiny") / "model")
    return model, encode.load_encoder(model, device="cpu", precision="fp32")


@pytest.fixture(scope="module")
def corpora(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    """Corpus a: documents 0-39; b: documents 20-59 and a changed text under a's id 5 (a: 40, b: 41, 20 in both)."""
    docs = list(load_dataset("scifact", SUBSET).iter_docs())[:60]
    assert len(docs) == 60
    root = tmp_path_factory.mktemp("corpora")
    specs = {}
    for name, part in {"a": docs[:40], "b": docs[20:] + [(docs[5][0], docs[5][1] + " (revised)")]}.items():
        (root / name).mkdir()
        (root / name / "corpus.jsonl").write_text("".join(json.dumps({"_id": d, "text": t}) + "\n" for d, t in part))
        specs[name] = {"spec": {"source": "beir_local", "path": str(root / name)}, "digests": root / f"{name}.digests",
                       "docs": part}
        write_corpus_digests(name, specs[name]["spec"], specs[name]["digests"])
    return specs


@pytest.fixture(scope="module")
def source(encoder, corpora: dict, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Corpus a's collection, encoded plainly: the declared source of b."""
    out = tmp_path_factory.mktemp("encoded") / "corpora" / "a"
    _encode(encoder, corpora, "a", out)
    return out


def _encode(encoder, corpora: dict, name: str, out: Path, source: Path | None = None, **kw) -> dict:
    model, enc = encoder
    declared = Reuse(corpora[name]["digests"], source, corpora["a"]["digests"]) if source else None
    return encode.encode_corpus(
        enc,
        model,
        CorpusSource(name, corpora[name]["spec"], ".", len(corpora[name]["docs"])),
        out,
        EncodeSettings(MAXLEN, batch_size=4, shard_size=16),
        reuse=declared,
        **kw,
    )


def _shards(collection: Path) -> list[bytes]:
    """Each shard's lines, as Anserini reads them (gzip's bytes depend on how its input was fed)."""
    return [gzip.decompress(p.read_bytes()) for p in sorted(collection.glob("docs-*.jsonl.gz"))]


def _counted(monkeypatch: pytest.MonkeyPatch, enc) -> list[int]:
    """Texts the encoder is given, per batch."""
    real, counts = enc.encode_sparse, []

    def counting(batches, *args, **kw):
        def each():
            for batch in batches:
                counts.append(len(batch))
                yield batch

        return real(each(), *args, **kw)

    monkeypatch.setattr(enc, "encode_sparse", counting)
    return counts


def test_a_declared_corpus_copies_what_its_source_holds_and_writes_a_plain_encodes_collection(
    encoder, corpora: dict, source: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plain = _encode(encoder, corpora, "b", tmp_path / "plain" / "b")
    monkeypatch.setattr(reuse, "SPILL_DOCS", 7)  # several spill windows, cut across shards
    counts = _counted(monkeypatch, encoder[1])
    stats = _encode(encoder, corpora, "b", tmp_path / "declared" / "b", source)
    assert (stats["reused_docs"], stats["encoded_docs"]) == (20, 21)  # a's id 5: its own text
    assert 21 <= sum(counts) < 41  # the encoder saw the 21 (a batch may be filled up with empty rows)
    assert len(_shards(tmp_path / "plain" / "b")) == stats["shards"] == 3
    assert _shards(tmp_path / "declared" / "b") == _shards(tmp_path / "plain" / "b")
    assert {k: stats[k] for k in SAME} == {k: plain[k] for k in SAME}
    written = json.loads(shard_folder.stats_path_for(tmp_path / "declared" / "b").read_text())
    assert {k: written[k] for k in SAME} == {k: plain[k] for k in SAME}
    assert sorted(p.name for p in (tmp_path / "declared").iterdir()) == ["b", "b.stats.json"]  # no work folder left


def test_parts_of_a_declared_corpus_join_into_a_plain_encodes_collection(
    encoder, corpora: dict, source: Path, tmp_path: Path
) -> None:
    plain = _encode(encoder, corpora, "b", tmp_path / "plain" / "b")
    folders = [tmp_path / f"b.parts/{p}-of-2" for p in range(2)]
    stats = [_encode(encoder, corpora, "b", out, source, part=p, parts=2) for p, out in enumerate(folders)]
    assert [s.get("reused_docs", 0) for s in stats] == [20, 0]  # part 1 holds none of a's: a plain encode
    joined = join_parts(folders, tmp_path / "b")
    assert joined["reused_docs"] == 20 and {k: joined[k] for k in SAME} == {k: plain[k] for k in SAME}
    assert b"".join(_shards(tmp_path / "b")) == b"".join(_shards(tmp_path / "plain" / "b"))


def test_a_killed_job_keeps_its_finished_work_and_leaves_no_litter(
    encoder, corpora: dict, source: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Killed in the merge: the rerun copies nothing from the source again and encodes no document again."""
    out = tmp_path / "corpora" / "b"
    merge = reuse._merge

    def killed(*args, **kw):
        raise KeyboardInterrupt

    monkeypatch.setattr(reuse, "_merge", killed)
    with pytest.raises(KeyboardInterrupt):
        _encode(encoder, corpora, "b", out, source)
    assert (out.parent / ".b.reuse" / "spill" / "done").is_file()
    monkeypatch.setattr(reuse, "_merge", merge)
    monkeypatch.setattr(
        reuse,
        "_lines",
        lambda folder, real=reuse._lines: (
            real(folder) if folder != source else pytest.fail("the source was read again")
        ),
    )
    counts = _counted(monkeypatch, encoder[1])
    stats = _encode(encoder, corpora, "b", out, source)
    assert sum(counts) == 0 and (stats["reused_docs"], stats["n_docs"]) == (20, 41)
    assert sorted(p.name for p in out.parent.iterdir()) == ["b", "b.stats.json"]


def test_a_stale_digest_stops_the_encode_with_the_fix(encoder, corpora: dict, source: Path, tmp_path: Path) -> None:
    digests = bytearray(corpora["b"]["digests"].read_bytes())
    digests[-16:] = doc_digest("x", "not this text")
    stale = {**corpora, "b": {**corpora["b"], "digests": tmp_path / "b.digests"}}
    stale["b"]["digests"].write_bytes(bytes(digests))
    with pytest.raises(ValueError, match="rerun rule corpus_digests"):
        _encode(encoder, stale, "b", tmp_path / "corpora" / "b", source)


def test_the_overlap_record_says_what_a_declaration_saves_and_warns_when_little(
    corpora: dict, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    record = write_overlap("b", corpora["b"]["digests"], "a", corpora["a"]["digests"], tmp_path / "b.json")
    assert (record["docs"], record["reused_docs"], "warning" in record) == (41, 20, False)
    few = tmp_path / "few.digests"
    few.write_bytes(corpora["a"]["digests"].read_bytes()[: 16 * 21])  # a's documents 0-20: one in b
    record = write_overlap("b", corpora["b"]["digests"], "a", few, tmp_path / "few.json")
    assert record["reused_docs"] == 1 and "saves little" in caplog.text and "remove its vectors_from" in caplog.text
    assert json.loads((tmp_path / "few.json").read_text()) == record


@pytest.mark.parametrize(
    "datasets, message",
    [
        ({"b": {"vectors_from": "c"}}, "datasets.b.vectors_from = 'c' is not a dataset; fix: name one of: a"),
        (
            {"b": {"vectors_from": "b"}},
            "datasets.b.vectors_from = 'b' is this dataset, or one over its own corpus (b); fix: remove the key",
        ),
        (
            {"a": {"vectors_from": "b"}, "b": {"vectors_from": "a"}},  # a cycle, and so a chain
            "datasets.a.vectors_from = 'b' takes its own vectors from 'a'; "
            "fix: name the dataset that holds the vectors",
        ),
    ],
)
def test_a_bad_declaration_is_one_line_naming_the_key_and_the_fix(datasets: dict, message: str) -> None:
    base = {
        name: {"source": "beir_local", "path": f"data/{name}", "split": "test", "metrics": "beir"}
        for name in ("a", "b")
    }
    with pytest.raises(ConfigError) as exc:
        declared_sources({name: {**spec, **datasets.get(name, {})} for name, spec in base.items()})
    assert message in str(exc.value) and "\n" not in str(exc.value)


def test_the_dag_makes_a_declaring_corpus_wait_for_its_source_and_a_bad_declaration_stops_it(tmp_path: Path) -> None:
    """The paper config: FEVER takes its vectors from Climate-FEVER."""
    target = "results/paper/indexes/splade-pp-ed/published/beir-fever"
    proc = snakemake(target, "-n", "--forceall", "--cores", "8", "-p")
    assert proc.returncode == 0, proc.stderr[-3000:]
    fever = [
        job
        for job in proc.stdout.split("\n\n")
        if "output: results/paper/encoded/splade-pp-ed/published/corpora/beir-fever" in job
        and "rule encode_corpus" in job
    ]
    assert fever and all(
        "input: results/paper/encoded/splade-pp-ed/published/corpora/beir-climate-fever," in job
        and "--vectors-from results/paper/encoded/splade-pp-ed/published/corpora/beir-climate-fever" in job
        for job in fever
    )
    assert (
        "output: results/paper/data/corpora/beir-fever.overlap.json" in snakemake("data", "-n", "--cores", "8").stdout
    )
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        (REPO / "config/config.yaml").read_text().replace("vectors_from: climate-fever", "vectors_from: climate")
    )
    proc = snakemake("all", "-n", "--cores", "1", "--configfile", str(bad))
    assert proc.returncode != 0
    assert "datasets.fever.vectors_from = 'climate' is not a dataset" in proc.stdout + proc.stderr


def test_the_plan_bills_a_declaring_corpus_for_the_documents_its_source_lacks(tmp_path: Path) -> None:
    """The demo's two corpora, the second declared to take its vectors from the first: assumed (the smaller
    corpus's documents) before the digests exist, then counted from synthetic digests (100 in both)."""
    from splade_rescale.config import load_config

    (tmp_path / "resources").symlink_to(REPO / "resources")
    config = load_config(REPO / "config" / "demo.yaml")
    plain = build_plan(config, load_throughputs(), tmp_path)
    first, second = plain["corpora"]
    of_dataset = corpora_of(config["datasets"])[0]
    source = next(d for d, c in of_dataset.items() if c == first)
    declared = {
        **config,
        "datasets": {
            d: {**s, "vectors_from": source} if of_dataset[d] == second else s for d, s in config["datasets"].items()
        },
    }
    assumed = build_plan(declared, load_throughputs(), tmp_path)
    n = {c: plain["corpora"][c]["count"] for c in (first, second)}
    assert assumed["reused"][second]["docs"] == min(n.values()) and "ASSUMED" in assumed["reused"][second]["how"]
    folder = tmp_path / "results" / config["experiment"] / "data" / "corpora"
    folder.mkdir(parents=True)
    own = [doc_digest(str(i), "text") for i in range(n[first])]
    (folder / f"{first}.digests").write_bytes(b"".join(own))
    (folder / f"{second}.digests").write_bytes(
        b"".join(own[:100] + [doc_digest(str(i), "other") for i in range(n[second] - 100)])
    )
    measured = build_plan(declared, load_throughputs(), tmp_path)
    assert measured["reused"][second] == {"source": first, "docs": 100, "how": "measured from the digests"}
    assert measured["totals"]["reused_docs_per_model"] == 100
    throughputs = load_throughputs()
    held = (n[first] + n[second]) * throughputs["disk"]["shard_bytes_per_doc"] + 100 * throughputs["reuse"][
        "spill_bytes_per_doc"]  # while the declaring corpus encodes: both corpora's shards and its spill
    assert measured["totals"]["peak_bytes"] >= measured["totals"]["final_bytes"] + held
    startup_h = load_throughputs()["gpu"]["job_startup_s"] / 3600
    copy_h = n[second] * load_throughputs()["reuse"]["copy_s_per_doc"] / 3600  # the copy holds the GPU
    for p, m in zip(plain["models"], measured["models"]):
        assert m["encode_corpus_h"][first] == p["encode_corpus_h"][first]
        saved = p["encode_corpus_h"][second] - m["encode_corpus_h"][second]
        assert saved == pytest.approx(100 * (p["encode_corpus_h"][second] - startup_h) / n[second] - copy_h)


def test_a_declaration_changes_no_query_or_search_params() -> None:
    """Only the corpus's encode reads `vectors_from`: its queries, searches and evaluations rerun for nothing."""
    from splade_rescale.data.corpora import corpus_spec, query_spec

    spec = {"source": "beir_local", "path": "data/b", "split": "test", "metrics": "beir", "subset": {"seed": 1}}
    declared = {**spec, "vectors_from": "a"}
    assert query_spec(declared) == query_spec(spec) and corpus_spec(declared) == corpus_spec(spec)


def test_a_source_encoded_again_is_copied_again_and_nothing_is_encoded_again(
        encoder, corpora: dict, source: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Killed in the merge, then the source's encode run again (a new record): the rerun copies the source's
    lines again, and still encodes no document again (those are keyed by themselves, not by the source)."""
    out, merge, record = tmp_path / "corpora" / "b", reuse._merge, reuse._stats_path(source)

    def killed(*args, **kw):
        raise KeyboardInterrupt

    monkeypatch.setattr(reuse, "_merge", killed)
    with pytest.raises(KeyboardInterrupt):
        _encode(encoder, corpora, "b", out, source)
    monkeypatch.setattr(reuse, "_merge", merge)
    kept = record.read_text()
    try:
        record.write_text(json.dumps({**json.loads(kept), "seconds": -1.0}))
        counts = _counted(monkeypatch, encoder[1])
        stats = _encode(encoder, corpora, "b", out, source)
    finally:
        record.write_text(kept)
    assert sum(counts) == 0 and (stats["reused_docs"], stats["n_docs"]) == (20, 41)
