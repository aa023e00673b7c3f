"""`splade-rescale plan`: job counts equal the dry run's, figures equal hand-computed ones."""

from __future__ import annotations

import json

import pytest
import yaml

from conftest import REPO
from splade_rescale.costs.inputs import load_plan_config, load_throughputs
from splade_rescale.costs.plan import build_plan, planned_jobs
from support.workflow import job_counts, snakemake


@pytest.mark.parametrize("configfile", ["config/config.yaml", "config/demo.yaml"])
def test_planned_jobs_equal_the_dry_run(configfile):
    proc = snakemake("all", "-n", "--forceall", "--cores", "8", "--quiet", "rules", "--configfile", configfile)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert planned_jobs(load_plan_config(REPO / configfile)) == job_counts(proc.stdout)


TINY = {"layers": 2, "hidden": 32, "heads": 2, "intermediate": 64, "vocab_size": 30522}
# BertForMaskedLM of TINY, counted by hand (the decoder's weight is tied to the word embeddings):
#   embeddings  30522 x 32 + 512 x 32 + 2 x 32 + LayerNorm 2 x 32    =   993,216
#   per layer   Q, K, V, out 4 x (32 x 32 + 32) + LayerNorm 64
#               + intermediate 32 x 64 + 64 + output 64 x 32 + 32 + LayerNorm 64 = 8,544; 2 layers = 17,088
#   MLM head    transform 32 x 32 + 32 + LayerNorm 64 + decoder bias 30522 =    31,642
TINY_PARAMETERS = 993_216 + 17_088 + 31_642  # = 1,041,946


def _tiny_parameters() -> int:
    from transformers import BertConfig, BertForMaskedLM

    config = BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=512)
    return sum(p.numel() for p in BertForMaskedLM(config).parameters())


def _small_setup(tmp_path):
    """4 documents of 8 words and 2 queries of 3 words; one tiny backbone, one variant."""
    data = tmp_path / "ds"
    (data / "qrels").mkdir(parents=True)
    (data / "corpus.jsonl").write_text("".join(
        json.dumps({"_id": f"d{i}", "title": "", "text": " ".join(["word"] * 8)}) + "\n" for i in range(4)))
    (data / "queries.jsonl").write_text("".join(json.dumps({"_id": f"q{i}", "text": "a b c"}) + "\n" for i in range(2)))
    (data / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq0\td0\t1\nq1\td1\t1\n")
    config = yaml.safe_load((REPO / "config/demo.yaml").read_text())
    config.update(
        experiment="small", reference_backbone="tiny",
        backbones={"tiny": {"source": "config", "architecture": "bert", "sizes": TINY}},
        variants={"baseline": {"policy": "constant", "factor": 1}},
        training={"recipe": "demo-cpu", "data": {"source": "beir_local", "path": str(data), "split": "test"}},
        encoding={"query_max_length": 32, "beir_query_max_length": 256, "doc_max_length": 64},
        retrieval={"k": 10, "threads": 2},
        datasets={"ds": {"source": "beir_local", "path": str(data), "split": "test", "metrics": "beir"}},
    )
    (tmp_path / "small.yaml").write_text(yaml.safe_dump(config))
    throughputs = load_throughputs()
    throughputs["gpu"]["architectures"]["bert"] = {
        "parameters": _tiny_parameters(), "encode_docs_per_s": 100, "encode_tokens_per_doc": 10,
        "train_queries_per_s": 10, "train_tokens_per_query": 100}
    throughputs["gpu"]["job_startup_s"] = 3
    throughputs["host"]["encode_host_docs_per_s"] = 150
    throughputs["text"]["tokens_per_word"] = 1.0
    throughputs["lucene"].pop("impact_search_cost", None)  # the measured-QPS fallback: figures by hand
    throughputs["gpu"]["range_factor"] = 1.5
    throughputs["lucene"].update(impact_index_docs_per_s_per_thread=2, impact_search_qps_per_thread=4,
                                 impact_search_index_docs=2, search_scaling_exponent=1.0,
                                 bm25_index_docs_per_s_per_thread=4, bm25_search_qps_per_thread=8,
                                 bm25_search_index_docs=4, jvm_heap_gib=2)
    throughputs["disk"].update(shard_bytes_per_doc=100, impact_index_bytes_per_doc=50, bm25_index_bytes_per_word=1,
                               run_bytes_per_hit=7, query_vector_bytes_per_query=30)
    path = tmp_path / "throughputs.json"
    path.write_text(json.dumps(throughputs))
    return tmp_path / "small.yaml", path


def test_plan_figures_match_hand_computed_values(tmp_path):
    configfile, throughputs = _small_setup(tmp_path)
    plan = build_plan(load_plan_config(configfile), load_throughputs(throughputs))
    (m,) = plan["models"]
    assert _tiny_parameters() == TINY_PARAMETERS == 1_041_946
    assert m["shape"]["parameters"] == TINY_PARAMETERS  # speed factor 1
    # documents: 2 + 8 words = 10 tokens -> 100 docs/s; queries (BEIR, cut at 256): 2 + 3 = 5 tokens -> 200/s,
    # capped at the host's 150/s; 3 s start-up for each of the two GPU jobs (one corpus, one query job)
    assert m["encode_gpu_h"] == pytest.approx((4 / 100 + 2 / 150 + 2 * 3) / 3600)
    assert m["query_gpu_h"] == pytest.approx((2 / 150 + 3) / 3600)
    assert plan["encode_rate"].startswith("forward-only") and "host" in plan["encode_rate"]
    # demo-cpu: 36 steps x 8 queries; per query 5 + (1 + 1) x 10 = 25 tokens -> 10 x 100 / 25 = 40 queries/s
    assert m["train_gpu_h"] == pytest.approx(36 * 8 / 40 / 3600)
    assert m["index_cpu_h"] == pytest.approx(4 / 2 / 3600)
    # search: 2 queries at 4 QPS; upper bound x (4 docs / 2) ** 1
    assert m["retrieve_cpu_h"] == m["retrieve_cpu_h_low"] == pytest.approx(2 / 4 / 3600)
    assert m["retrieve_cpu_h_high"] == pytest.approx(2 / 4 * 2 / 3600)
    assert plan["totals"]["train_gpu_h_high"] == pytest.approx(1.5 * 7.2 / 3600)  # range 1.5 x (288 / 40 = 7.2 s)
    assert (m["shard_bytes"], m["index_bytes"]) == (400, 200)
    assert m["other_bytes"] == 2 * (30 + 10 * 7)
    # init/ and final/ in fp32: 2 x 4 B x 1,041,946 = 8,335,568; demo-cpu keeps 2 checkpoints of weights and
    # both AdamW moments (12 B per parameter): 2 x 12 x 1,041,946 = 25,006,704; 8,335,568 + 25,006,704
    assert m["model_bytes"] == 33_342_272
    bm25 = plan["bm25"]
    assert bm25["index_cpu_h"] == pytest.approx(4 / 4 / 3600) and bm25["retrieve_cpu_h"] == pytest.approx(2 / 8 / 3600)
    assert bm25["index_bytes"] == 32 and bm25["run_bytes"] == 2 * 10 * 7
    t = plan["totals"]
    # impact index 200 + model 33,342,272 + query vectors and run 200 + BM25 index 32 and run 140
    # + the backbone folder in fp32, 4 B x 1,041,946 = 4,167,784; the peak adds the 400 bytes of shards
    assert t["final_bytes"] == 37_510_628
    assert t["peak_bytes"] == t["peak_bytes_worst"] == 37_511_028
    assert t["cpu_h"] == pytest.approx(4 / 2 / 3600 + 1 / 3600 + 2 / 4 / 3600 + 2 / 8 / 3600)
    ram = plan["ram"]
    assert ram["impact_index"]["host"] == 2
    # weights, gradients and two AdamW moments: 16 B x 1,041,946 = 16,671,136; a demo-cpu step of 8 queries
    # holds 8 x (32 + (1 + 1) x 64) = 1,280 tokens, each with 34 B x 32 hidden x 2 layers = 2,176 B of
    # activations and a 4 B x 8,192 vocabulary chunk = 32,768 B: 1,280 x 34,944 = 44,728,320;
    # 16,671,136 + 44,728,320 = 61,399,456 B = 0.0572 GiB
    assert ram["train"]["gpu"] == pytest.approx(61_399_456 / 2 ** 30, rel=1e-12)


def test_plan_uses_a_measured_end_to_end_encode_rate(tmp_path):
    configfile, throughputs = _small_setup(tmp_path)
    figures = load_throughputs(throughputs)
    figures["gpu"]["architectures"]["bert"]["encode_e2e_docs_per_s"] = 50
    plan = build_plan(load_plan_config(configfile), figures)
    # end to end 50 docs/s at 10 tokens: documents 50/s, 5-token queries 100/s; no host cap
    assert plan["models"][0]["encode_gpu_h"] == pytest.approx((4 / 50 + 2 / 100 + 2 * 3) / 3600)
    assert plan["encode_rate"].startswith("end-to-end")


def test_paper_query_encoding_is_under_two_percent_of_every_models_gpu_time():
    """One encode_queries job per model (not one per model and dataset): start-ups stay small."""
    config = load_plan_config(REPO / "config/config.yaml")
    plan = build_plan(config, load_throughputs())
    assert plan["jobs"]["encode_queries"] == len(plan["models"]) == 19
    assert plan["totals"]["query_share_max"] < 0.02
    for m in plan["models"]:
        assert m["query_gpu_h"] < 0.02 * (m["train_gpu_h"] + m["encode_gpu_h"]), m["name"]


def test_plan_command_writes_markdown_and_json(tmp_path):
    from splade_rescale.cli import main

    configfile, throughputs = _small_setup(tmp_path)
    assert main(["plan", "--configfile", str(configfile), "--throughputs", str(throughputs),
                 "--out", str(tmp_path / "plan.md")]) == 0
    text = (tmp_path / "plan.md").read_text()
    assert "| tiny | baseline | bert |" in text and "Assumptions:" in text
    assert json.loads((tmp_path / "plan.json").read_text())["jobs"]["total"] == planned_jobs(
        load_plan_config(configfile))["total"]


def test_paper_plan_counts_corpus_work_once_and_names_unknown_sizes(tmp_path):
    config = load_plan_config(REPO / "config/config.yaml")
    plan = build_plan(config, load_throughputs())
    assert plan["corpora"]["msmarco-passage"]["count"] == 8_841_823 and len(plan["corpora"]) == 14
    assert plan["totals"]["peak_bytes"] > plan["totals"]["final_bytes"]
    config["datasets"]["x"] = {"source": "ir_datasets", "id": "beir/cqadupstack/android", "metrics": "beir"}
    with pytest.raises(ValueError, match="size unknown; fix: add it to splade_rescale.data.collection_sizes"):
        build_plan(config, load_throughputs())


def test_paper_training_pays_for_padding_and_every_cost_has_a_range_within_3x():
    from splade_rescale.costs.sizes import expected_longest, training_histograms

    config = load_plan_config(REPO / "config/config.yaml")
    throughputs = load_throughputs()
    queries, docs = training_histograms(config["training"]["data"], REPO, throughputs["text"])
    # st-msmarco: 16 queries a micro-batch, their 32 positives and negatives padded together
    assert expected_longest(docs, 32, 256) > 1.8 * expected_longest(docs, 1, 256)
    plan = build_plan(config, throughputs)
    t = plan["totals"]
    for key in ("train_gpu_h", "encode_gpu_h", "retrieve_cpu_h"):
        assert t[f"{key}_low"] <= t[key] <= t[f"{key}_high"] <= 3 * t[f"{key}_low"], key
