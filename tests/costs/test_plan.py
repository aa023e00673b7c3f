"""The bill and schedule of real configs, offline: the paper's; the paper's with RoBERTa-large (its real
config.json in a local folder) and BEIR CQADupStack Android (ir_datasets' shipped metadata) added."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from conftest import REPO
from splade_rescale.config import ConfigError, load_config, local_threads
from splade_rescale.costs.model_shapes import gpu_job_priorities, model_shape, train_job_priorities
from splade_rescale.costs.plan import build_plan, host_at_once, load_throughputs
from splade_rescale.costs.schedule import Job, Slot, dry_run_jobs, plan_run
from splade_rescale.retrieval.lucene import MEM_MB

PAPER = REPO / "config" / "config.yaml"
# FacebookAI/roberta-large's config.json (its published values)
ROBERTA_LARGE = {"architectures": ["RobertaForMaskedLM"], "model_type": "roberta", "num_hidden_layers": 24,
                 "hidden_size": 1024, "num_attention_heads": 16, "intermediate_size": 4096, "vocab_size": 50265,
                 "max_position_embeddings": 514, "type_vocab_size": 1, "pad_token_id": 1, "bos_token_id": 0,
                 "eos_token_id": 2, "hidden_act": "gelu", "layer_norm_eps": 1e-05}


def test_the_paper_bill_scales_each_model_from_our_measured_shape() -> None:
    config, throughputs = load_config(PAPER), load_throughputs()
    plan = build_plan(config, throughputs, REPO)
    rows = {(m["name"], m["variant"]): m for m in plan["models"]}
    assert len(rows) == 9 * 2 + 1 and plan["corpora"]["msmarco-passage"]["count"] == 8_841_823
    assert plan["queries"]["msmarco-dev"]["count"] == 6_980 and plan["queries"]["arguana"]["count"] == 1_406
    # ModernBERT-base is the measured shape: its MS MARCO encode is the measured rate at MS MARCO's tokens
    measured = throughputs["gpu"]["architectures"]["modernbert"]
    tokens = 2 + 55.98 * throughputs["text"]["tokens_per_word"]
    hours = 8_841_823 / (measured["encode_docs_per_s"] * 128 / tokens) / 3600 + 30 / 3600
    assert rows["modernbert-base", "baseline"]["encode_corpus_h"]["msmarco-passage"] == pytest.approx(hours)
    # the same shape costs the same; a larger one in proportion to its parameters (job start-ups aside)
    assert rows["ettin-150m", "rescaled"]["encode_gpu_h"] == rows["modernbert-base", "baseline"]["encode_gpu_h"]
    big, base = rows["ettin-1b", "baseline"], rows["modernbert-base", "baseline"]
    ratio = ((big["encode_corpus_h"]["msmarco-passage"] - 30 / 3600)
             / (base["encode_corpus_h"]["msmarco-passage"] - 30 / 3600))
    assert ratio == pytest.approx(1_031_314_112 / 149_655_232, rel=0.01)
    assert rows["splade-pp-ed", "published"]["train_gpu_h"] == 0 < rows["ettin-17m", "baseline"]["train_gpu_h"]
    t = plan["totals"]
    assert t["encode_gpu_h"] == pytest.approx(sum(m["encode_gpu_h"] for m in plan["models"]))
    assert 400e9 < t["final_bytes"] < t["peak_bytes"] < 500e9 and 20 < plan["memory"]["train"]["gpu"] < 60


def test_the_schedule_keeps_the_gpu_hours_and_the_workflow_threads_on_1_and_8_gpus(tmp_path: Path) -> None:
    config = load_config(PAPER)
    shipped = tmp_path / "none.json"  # the shipped figures, whatever a preflight measured in this checkout
    one, _ = plan_run(PAPER, None, 8, 1, root=REPO, measured=shipped)
    eight, text = plan_run(PAPER, None, 64, 8, tmp_path / "plan.md", root=REPO, measured=shipped)
    gpu_h = one["totals"]["train_gpu_h"] + one["totals"]["encode_gpu_h"]
    # a corpus of more than 3,000,000 documents is encoded in parts, each one more job start, the same
    # jobs on 1 GPU and on 8 (a run moved to more GPUs reruns no encode)
    assert one["jobs"] == eight["jobs"]
    assert eight["jobs"]["encode_corpus"] + eight["jobs"]["join_corpus_parts"] == 19 * 14
    startups = (eight["jobs"]["encode_corpus_part"] - eight["jobs"]["join_corpus_parts"]) * 30 / 3600
    assert one["schedule"]["gpu_busy_h"] == pytest.approx(gpu_h + startups)
    assert eight["schedule"]["gpu_busy_h"] == pytest.approx(gpu_h + startups)
    # no GPU job is longer than a quarter of an eighth of the GPU-hours: the last hours are shared by every GPU
    assert eight["schedule"]["longest_job_h"] == one["schedule"]["longest_job_h"] < gpu_h / 8 / 4
    assert eight["schedule"]["wall_h"] < one["schedule"]["wall_h"] / 3 and one["schedule"]["wall_h"] > gpu_h
    assert one["schedule"]["threads"] == local_threads(config, 8, 1)
    assert "## Schedule on 64 cores and 8 GPU(s)" in text and (tmp_path / "plan.md").read_text() == text
    peak = eight["schedule"]["peak_host_gib"]
    assert f"(peak host memory {peak:,.1f} GiB, {eight['schedule']['jobs_at_once']} jobs at once)" in text
    assert one["schedule"]["peak_host_gib"] < peak and eight["schedule"]["jobs_at_once"] > 8
    assert json.loads((tmp_path / "plan.json").read_text())["schedule"]["gpus"] == 8
    # every job of the dry run the schedule reads has the threads local_threads gives it, and one GPU
    threads = local_threads(config, 64, 8)
    jobs = dry_run_jobs(PAPER, 64, 8, REPO)
    parts = {w["corpus"]: w["parts"] for j in jobs if j["rule"] == "encode_corpus_part" for w in [j["wildcards"]]}
    assert parts == {"msmarco-passage": "3", "beir-fever": "2", "beir-climate-fever": "2", "beir-hotpotqa": "2",
                     "beir-dbpedia-entity": "2"}, parts  # NQ's 2.7M documents: one job
    for rule, kind in (("train", "train"), ("encode_corpus", "encode"), ("encode_corpus_part", "encode"),
                       ("impact_retrieve", "lucene")):
        assert {(j["threads"], j["gpus"]) for j in jobs if j["rule"] == rule} == {
            (threads[kind], int(kind != "lucene"))}, rule
    # the direct impact indexer keeps one core busy: one thread a job, so that they run side by side
    assert {(j["threads"], j["gpus"]) for j in jobs if j["rule"] == "impact_index"} == {(1, 0)}
    # MS MARCO's training front is timed from its measured rates, for each stream the dry run prepares
    measured = load_throughputs()["jobs"]
    rates = measured["training_sources"]["msmarco-passage/train/triples-small"]
    front = eight["training_front"]
    assert set(front["data_s"]) == {j["wildcards"]["stream"] for j in jobs if j["rule"] == "prepare_training_data"}
    assert front["source_s"] == pytest.approx(rates["download_bytes"] / (measured["download_mb_per_s"] * 1e6))
    hashed = 8_841_823 / rates["hash_docs_per_s"] + 808_731 / rates["hash_queries_per_s"]
    assert front["data_s"]["seed42-buffer10000-90000"] == pytest.approx(
        hashed + 100_000 / rates["map_pairs_per_s"] + 90_000 / rates["examples_per_s"])


def test_peak_host_memory_adds_up_the_jobs_running_at_once() -> None:
    """A job ending frees its memory before one starting at that time takes it; a Lucene job holds what
    it declares to Snakemake, a job of no listed kind the floor."""
    plan = build_plan(load_config(REPO / "config" / "demo.yaml"), load_throughputs(), REPO)
    lucene = plan["memory"]["impact_index"]["host"]
    assert lucene == pytest.approx(MEM_MB["impact_index"] * 1e6 / 2 ** 30) and plan["memory"]["train"]["host"] > 0
    jobs = [Job(1, "train", 1, 10.0), Job(2, "impact_index", 1, 10.0), Job(3, "impact_index", 1, 10.0),
            Job(4, "tables", 1, 1.0)]
    slots = {1: Slot(0, 10), 2: Slot(5, 15), 3: Slot(10, 20), 4: Slot(12, 13)}
    assert host_at_once(jobs, slots, plan["memory"], 1.0) == {
        "peak_host_gib": pytest.approx(2 * lucene + 1.0), "jobs_at_once": 3}


def test_a_backbone_and_a_dataset_the_package_does_not_list_are_planned_offline(tmp_path: Path) -> None:
    folder = tmp_path / "roberta-large"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(ROBERTA_LARGE))
    config = yaml.safe_load(PAPER.read_text())
    config["backbones"]["roberta-large"] = {"source": "local", "path": str(folder), "train_gpus": 2}
    config["datasets"]["cqadupstack-android"] = {"source": "ir_datasets", "id": "beir/cqadupstack/android",
                                                 "metrics": "beir"}
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    plan, text = plan_run(path, None, 16, 2, root=REPO, measured=tmp_path / "none.json")
    roberta = next(m for m in plan["models"] if m["name"] == "roberta-large")
    assert roberta["shape"]["model_type"] == "roberta" and 354e6 < roberta["shape"]["parameters"] < 357e6
    assert plan["corpora"]["beir-cqadupstack-android"]["count"] == 22_998
    assert plan["queries"]["cqadupstack-android"]["count"] == 699
    assert "| roberta-large | rescaled | roberta | 355 |" in text
    assert "| beir-cqadupstack-android | 22,998 | 56.0 | ir_datasets metadata; words ASSUMED" in text
    # train_gpus: 2 holds two GPUs for half the time
    # (and each part of a big corpus one more job start)
    starts = (plan["jobs"]["encode_corpus_part"] - plan["jobs"]["join_corpus_parts"]) * 30 / 3600
    assert plan["schedule"]["gpu_busy_h"] == pytest.approx(
        plan["totals"]["train_gpu_h"] + plan["totals"]["encode_gpu_h"] + starts)


def test_a_model_whose_config_is_not_here_says_what_to_write() -> None:
    spec = {"source": "hf", "repo_id": "no-such-org/no-such-model", "revision": "main"}
    with pytest.raises(ConfigError, match=r"backbones.x: no config.json .* add shape: \{model_type, parameters"):
        model_shape("x", spec, offline=True)
    shape = {"model_type": "bert", "parameters": 5, "layers": 1, "hidden": 2}
    assert model_shape("x", {**spec, "shape": shape}).parameters == 5


def test_smaller_models_encode_first_larger_ones_train_first_an_unknown_size_as_largest(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(ROBERTA_LARGE))
    models = {"small": {"source": "config", "sizes": {"layers": 2, "hidden": 64, "vocab_size": 100}},
              "roberta": {"source": "local", "path": str(tmp_path)},
              "given": {"source": "hf", "repo_id": "x/y", "shape": {"parameters": 50e6}},
              "unknown": {"source": "hf", "repo_id": "no-such-org/no-such-model"}}
    assert gpu_job_priorities(models) == {"small": 4, "given": 3, "roberta": 2, "unknown": 1}
    # trainings the other way round, every one above every encode: the longest chain starts first
    assert train_job_priorities(models) == {"small": 5, "given": 6, "roberta": 7, "unknown": 8}
