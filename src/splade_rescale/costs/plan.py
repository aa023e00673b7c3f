"""The bill of a run before it starts: jobs, GPU- and CPU-hours, disk and memory.

``splade-rescale plan --configfile config/config.yaml`` multiplies three things:

* the jobs Snakemake plans for the config, counted with the functions the workflow uses
  (:func:`splade_rescale.data.corpora.corpora`, backbones x variants + published models;
  ``tests/costs/test_plan.py`` checks the counts against a dry run);
* the sizes of its datasets (:mod:`splade_rescale.costs.sizes`): the published collections'
  table with its sources, and local collections (``beir_local``, ``trec_local``, ``subset:``)
  counted from their files;
* per-unit costs from a throughputs JSON (``config/throughputs.json`` by default): GPU
  documents/s and training queries/s per architecture, scaled to a model by parameter count
  (:mod:`splade_rescale.costs.model_shapes`) and to a text by tokens; Lucene documents/s and
  queries/s per thread; bytes per document.

Every figure is an estimate from those inputs; the plan prints its assumptions with it
(:mod:`splade_rescale.costs.plan_report`). The schedule of those jobs on N cores is
:mod:`splade_rescale.costs.schedule`.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, Mapping

from splade_rescale.config import query_max_length
from splade_rescale.costs.inputs import (
    REPO,
    THROUGHPUTS_PATH,
    PlanError,
    load_plan_config,
    load_throughputs,
)
from splade_rescale.costs.model_shapes import ModelShape, model_shape, token_cost, train_work_per_query
from splade_rescale.costs.plan_report import render_markdown
from splade_rescale.costs.sizes import LONG_QUERY_TOKENS, corpus_size, query_size, tokens, training_histograms
from splade_rescale.data.collection_sizes import Size
from splade_rescale.data.corpora import corpora
from splade_rescale.runs import PUBLISHED_RUN, split_run
from splade_rescale.training.recipes import resolve_recipe, seed_runs

GIB = 1024 ** 3


def models(config: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(name, run) of every model that is encoded, indexed and evaluated: one per training seed
    of each backbone x variant (the run is the variant's name for one seed), then the published models."""
    return ([(b, run) for b in config["backbones"] for v in config["variants"] for run in seed_runs(config, b, v)]
            + [(m, PUBLISHED_RUN) for m in config.get("published_models") or {}])


def planned_jobs(config: Mapping[str, Any]) -> dict[str, int]:
    """Jobs per rule that ``snakemake all`` plans for a config from scratch (its 'Job stats')."""
    from splade_rescale.data.prepare import training_corpus
    from splade_rescale.training.data import run_stream, stream_name

    _, corpus_specs = corpora(config["datasets"])
    n_back, n_var = len(config["backbones"]), len(config["variants"])
    n_models, n_corpora, n_datasets = len(models(config)), len(corpus_specs), len(config["datasets"])
    n_runs = sum(run != PUBLISHED_RUN for _, run in models(config))
    data = config["training"]["data"]
    jobs = {
        "fetch_backbone": n_back, "norms_backbone": n_back, "backbone_summary": n_back,
        "rescale_head": n_back * n_var, "norms_variant": n_back * n_var, "train": n_runs,
        "judge_training": n_runs,
        # settings records (workflow/rules/settings.smk): per model name its corpus and query encoding,
        # per dataset its queries, search and evaluation
        "settings": 2 * len({name for name, _ in models(config)}) + 3 * n_datasets,
        "fetch_published_model": len(config.get("published_models") or {}),
        "mine_negatives": int(data["source"] == "beir_local" and data.get("negatives") == "bm25"),
        "encode_corpus": n_models * n_corpora, "impact_index": n_models * n_corpora,
        "encode_queries": n_models, "impact_retrieve": n_models * n_datasets,
        "evaluate": n_models * n_datasets,
        "bm25_index": n_corpora, "bm25_retrieve": n_datasets, "evaluate_bm25": n_datasets,
        "norms_table": 1, "tables": 1, "figures": 1, "all": 1,
    }
    # data preparation (workflow/rules/data.smk): every corpus counted or its docs store built, the
    # training source's store too; ir_datasets queries fetched; one examples file per distinct stream
    training_store = training_corpus(data, corpus_specs)
    jobs["prepare_corpus"] = n_corpora + int(bool(training_store) and training_store[0] not in corpus_specs)
    jobs["prepare_queries"] = sum(spec["source"] == "ir_datasets" for spec in config["datasets"].values())
    jobs["prepare_training_source"] = int(data["source"] == "ir_datasets")
    jobs["prepare_training_data"] = len({stream_name(run_stream(resolve_recipe(config, b, run)))
                                         for b, run in models(config) if run != PUBLISHED_RUN}
                                        ) if data["source"] in ("ir_datasets", "tsv_triples") else 0
    jobs = {rule: n for rule, n in jobs.items() if n}
    jobs["total"] = sum(jobs.values())
    return jobs


@dataclasses.dataclass
class ModelCost:
    name: str
    variant: str
    shape: ModelShape
    train_gpu_h: float = 0.0
    encode_gpu_h: float = 0.0      # corpora + queries, job start-ups included
    query_gpu_h: float = 0.0       # the queries' share of encode_gpu_h (one job per model)
    index_cpu_h: float = 0.0
    retrieve_cpu_h: float = 0.0       # the search cost model's central figure (lucene.impact_search_cost)
    retrieve_cpu_h_low: float = 0.0   # ... its stated range
    retrieve_cpu_h_high: float = 0.0
    shard_bytes: float = 0.0       # all of this model's corpora (temporary)
    index_bytes: float = 0.0
    model_bytes: float = 0.0       # init + final (+ checkpoints) folders
    other_bytes: float = 0.0       # query vectors, runs
    encode_corpus_h: dict[str, float] = dataclasses.field(default_factory=dict)   # per corpus, start-up included
    index_core_h: dict[str, float] = dataclasses.field(default_factory=dict)      # per corpus
    retrieve_core_h: dict[str, float] = dataclasses.field(default_factory=dict)   # per dataset


def _arch(throughputs: Mapping[str, Any], shape: ModelShape) -> dict[str, Any]:
    archs = throughputs["gpu"]["architectures"]
    if shape.architecture not in archs:
        raise PlanError(f"throughputs gpu.architectures has no {shape.architecture!r}; fix: add its figures")
    return archs[shape.architecture]


def build_plan(config: Mapping[str, Any], throughputs: Mapping[str, Any], root: str | Path = ".") -> dict[str, Any]:
    """Every figure of the plan, as plain data (``render_markdown`` prints it)."""
    root = Path(root)
    lucene, disk = throughputs["lucene"], throughputs["disk"]
    tpw = float(throughputs["text"]["tokens_per_word"])
    threads = int(config["retrieval"]["threads"])
    k = int(config["retrieval"]["k"])
    exponent = float(lucene["search_scaling_exponent"])
    of_dataset, corpus_specs = corpora(config["datasets"])
    corpus_sizes = {c: corpus_size(c, spec, root) for c, spec in corpus_specs.items()}
    query_sizes = {d: query_size(d, spec, root) for d, spec in config["datasets"].items()}
    train_hists = training_histograms(config["training"]["data"], root, throughputs["text"])

    search_model = lucene.get("impact_search_cost")

    def search_seconds(kind: str, corpus: str, query_tokens: float, doc_nnz: float | None = None,
                       query_words: float = 0.0) -> tuple[float, float, float]:
        """Core-seconds per query on a corpus (central, low, high).

        Impact search: the cost model fitted on impact indexes up to 1M documents (work = postings
        touched; short MS MARCO-like or long BEIR-like queries). BM25 (``query_words`` given): the
        same model with a query's words as its terms and a document's words as its non-zeros (not
        measured on large BM25 indexes). Without a fitted model: the measured QPS (low) to QPS
        falling linearly with the corpus (high).
        """
        n = corpus_sizes[corpus].count
        if search_model:
            from splade_rescale.costs.retrieval_cost import predict

            if kind == "bm25":
                return predict(search_model, n, "short", query_nnz=max(1.0, query_words),
                               doc_nnz=corpus_sizes[corpus].words)
            return predict(search_model, n, "long" if query_tokens > LONG_QUERY_TOKENS else "short", doc_nnz=doc_nnz)
        seconds = 1 / float(lucene[f"{kind}_search_qps_per_thread"])
        growth = max(1.0, n / float(lucene[f"{kind}_search_index_docs"]))
        return seconds, seconds, seconds * growth ** exponent

    startup_h = float(throughputs["gpu"].get("job_startup_s", 0)) / 3600  # imports, model load, device start
    host_dps = (throughputs.get("host") or {}).get("encode_host_docs_per_s")

    rates_used: set[str] = set()

    def encode_rate(measured: Mapping[str, Any], speed: float, tokens_per_text: float) -> float:
        """Texts per second: the measured end-to-end rate, else the forward rate capped by the host's."""
        scale = speed * measured["encode_tokens_per_doc"] / tokens_per_text
        if measured.get("encode_e2e_docs_per_s"):
            rates_used.add("end-to-end (gpu.architectures.*.encode_e2e_docs_per_s)")
            return float(measured["encode_e2e_docs_per_s"]) * scale
        forward = float(measured["encode_docs_per_s"]) * scale
        if not host_dps:
            rates_used.add("forward-only (encode_docs_per_s)")
            return forward
        rates_used.add("forward-only (encode_docs_per_s), capped at the host's rate (host.encode_host_docs_per_s)")
        return min(forward, float(host_dps))

    costs: list[ModelCost] = []
    for name, variant in models(config):
        published = variant == PUBLISHED_RUN
        spec = (config["published_models"] if published else config["backbones"])[name]
        shape = model_shape(name, spec, throughputs, root)
        measured = _arch(throughputs, shape)
        speed = measured["parameters"] / shape.parameters  # throughput scales inversely with parameters
        encoding = {**config["encoding"], **(spec.get("encoding") or {})}
        cost = ModelCost(name, variant, shape)
        if not published:
            recipe = resolve_recipe(config, name, variant)
            shaped = all(k in measured for k in ("train_query_tokens", "train_doc_tokens", "train_docs_per_query",
                                                 "layers", "hidden"))
            work = train_work_per_query(shape, recipe, *train_hists, max(1, int(spec.get("train_gpus", 1))), shaped)
            if shaped:  # the measured step's own lengths, attention included
                a_measured = 2 * measured["layers"] * measured["hidden"] / measured["parameters"]
                measured_work = (token_cost(measured["train_query_tokens"], 1, a_measured)
                                 + token_cost(measured["train_doc_tokens"], measured["train_docs_per_query"],
                                              a_measured))
            else:
                measured_work = float(measured["train_tokens_per_query"])
            qps = measured["train_queries_per_s"] * speed * measured_work / work
            cost.train_gpu_h = recipe["steps"] * recipe["batch_size"] / qps / 3600
            base = split_run(variant)[0]
            shares_init = seed_runs(config, name, base)[0] != variant  # a variant's seeds share one init/
            cost.model_bytes = (4 * shape.parameters * (1 if shares_init else 2)
                                + 12 * shape.parameters * recipe["keep_checkpoints"])
        else:
            cost.model_bytes = 4 * shape.parameters
        for corpus, size in corpus_sizes.items():
            dps = encode_rate(measured, speed, tokens(size.words, tpw, encoding["doc_max_length"]))
            cost.encode_corpus_h[corpus] = size.count / dps / 3600 + startup_h
            cost.encode_gpu_h += cost.encode_corpus_h[corpus]
            cost.index_core_h[corpus] = size.count / float(lucene["impact_index_docs_per_s_per_thread"]) / 3600
            cost.index_cpu_h += cost.index_core_h[corpus]
            cost.shard_bytes += size.count * float(disk["shard_bytes_per_doc"])
            cost.index_bytes += size.count * float(disk["impact_index_bytes_per_doc"])
        for dataset, size in query_sizes.items():
            q_len = query_max_length(encoding, config["datasets"][dataset])
            cost.query_gpu_h += size.count / encode_rate(measured, speed, tokens(size.words, tpw, q_len)) / 3600
            corpus = of_dataset[dataset]
            central, low, high = search_seconds("impact", corpus, tokens(size.words, tpw, q_len),
                                                encoding.get("max_active_dims"))
            cost.retrieve_core_h[dataset] = size.count * central / 3600
            cost.retrieve_cpu_h += size.count * central / 3600
            cost.retrieve_cpu_h_low += size.count * low / 3600
            cost.retrieve_cpu_h_high += size.count * high / 3600
            cost.other_bytes += size.count * (float(disk["query_vector_bytes_per_query"])
                                              + k * float(disk["run_bytes_per_hit"]))
        cost.query_gpu_h += startup_h  # one encode_queries job per model
        cost.encode_gpu_h += cost.query_gpu_h
        costs.append(cost)

    bm25_search = {d: [size.count * x / 3600 for x in search_seconds("bm25", of_dataset[d], 0, None, size.words)]
                   for d, size in query_sizes.items()}
    bm25 = {
        "index_core_h": {c: s.count / float(lucene["bm25_index_docs_per_s_per_thread"]) / 3600
                         for c, s in corpus_sizes.items()},
        "retrieve_core_h": {d: h[0] for d, h in bm25_search.items()},
        "index_cpu_h": sum(s.count for s in corpus_sizes.values())
        / float(lucene["bm25_index_docs_per_s_per_thread"]) / 3600,
        "retrieve_cpu_h": sum(h[0] for h in bm25_search.values()),
        "retrieve_cpu_h_low": sum(h[1] for h in bm25_search.values()),
        "retrieve_cpu_h_high": sum(h[2] for h in bm25_search.values()),
        "index_bytes": sum(s.count * s.words for s in corpus_sizes.values()) * float(disk["bm25_index_bytes_per_word"]),
        "run_bytes": sum(s.count * k * float(disk["run_bytes_per_hit"]) for s in query_sizes.values()),
    }
    backbone_bytes = sum(4 * parameters for parameters in
                         {c.name: c.shape.parameters for c in costs if c.variant != PUBLISHED_RUN}.values())
    final = (sum(c.index_bytes + c.model_bytes + c.other_bytes for c in costs) + bm25["index_bytes"]
             + bm25["run_bytes"] + backbone_bytes)
    largest_corpus = max(corpus_sizes, key=lambda c: corpus_sizes[c].count)
    one_set = corpus_sizes[largest_corpus].count * float(disk["shard_bytes_per_doc"])
    totals = {
        "train_gpu_h": sum(c.train_gpu_h for c in costs),
        "encode_gpu_h": sum(c.encode_gpu_h for c in costs),
        "query_share_max": max(c.query_gpu_h / (c.train_gpu_h + c.encode_gpu_h) for c in costs),
        "index_cpu_h": sum(c.index_cpu_h for c in costs) + bm25["index_cpu_h"],
        "retrieve_cpu_h": sum(c.retrieve_cpu_h for c in costs) + bm25["retrieve_cpu_h"],
        "retrieve_cpu_h_low": sum(c.retrieve_cpu_h_low for c in costs) + bm25["retrieve_cpu_h_low"],
        "retrieve_cpu_h_high": sum(c.retrieve_cpu_h_high for c in costs) + bm25["retrieve_cpu_h_high"],
        "final_bytes": final,
        "peak_bytes": final + one_set,
        "peak_bytes_worst": final + sum(c.shard_bytes for c in costs),
    }
    gpu_range = float(throughputs["gpu"].get("range_factor", 1.0))
    for key in ("train_gpu_h", "encode_gpu_h"):
        totals[f"{key}_low"], totals[f"{key}_high"] = totals[key] / gpu_range, totals[key] * gpu_range
    totals["cpu_h"] = totals["index_cpu_h"] + totals["retrieve_cpu_h"]
    totals["cpu_h_low"] = totals["index_cpu_h"] + totals["retrieve_cpu_h_low"]
    totals["cpu_h_high"] = totals["index_cpu_h"] + totals["retrieve_cpu_h_high"]
    return {
        "encode_rate": " and ".join(sorted(rates_used)),
        "config": config.get("experiment"), "threads": threads, "k": k, "jobs": planned_jobs(config),
        "corpora": {c: dataclasses.asdict(s) for c, s in corpus_sizes.items()},
        "queries": {d: dataclasses.asdict(s) for d, s in query_sizes.items()},
        "models": [dataclasses.asdict(c) for c in costs], "bm25": bm25, "totals": totals,
        "largest_corpus": largest_corpus,
        "train_gpus": {b: int(spec["train_gpus"]) for b, spec in config["backbones"].items() if "train_gpus" in spec},
        "ram": peak_ram(config, costs, corpus_sizes, throughputs),
    }


def peak_ram(config: Mapping[str, Any], costs: list[ModelCost], corpus_sizes: Mapping[str, Size],
             throughputs: Mapping[str, Any]) -> dict[str, dict[str, float]]:
    """Peak memory per job type (GiB), the largest over the models, from explicit formulas.

    GPU, training: 16 B per parameter (fp32 weights and gradients, two AdamW moments) + activations
    of 34 B x hidden per token per layer (Korthikanti et al. 2022, 'Reducing Activation Recomputation
    in Large Transformer Models', bf16 without the attention-score term: SDPA/flash attention) over a
    batch padded to the recipe's maxima + one fp32 vocabulary chunk of the fused head (tokens x chunk).
    GPU, encoding: fp32 weights + one layer's activations and one vocabulary chunk for a batch.
    Host: the throughputs file's floor + the model + document ids (encoding). Lucene: the JVM heap.
    """
    floor = float(throughputs["host"]["gpu_job_floor_gib"]) * GIB
    heap = float(throughputs["lucene"]["jvm_heap_gib"]) * GIB
    encoding = config["encoding"]
    biggest = max(s.count for s in corpus_sizes.values())
    out: dict[str, dict[str, float]] = {"train": {"gpu": 0.0, "host": 0.0}, "encode_corpus": {"gpu": 0.0, "host": 0.0}}
    for c in costs:
        s = c.shape
        batch_tokens = encoding["batch_size"] * encoding["doc_max_length"]
        enc_gpu = 4 * s.parameters + batch_tokens * (34 * s.hidden + 4 * 8192)
        out["encode_corpus"]["gpu"] = max(out["encode_corpus"]["gpu"], enc_gpu / GIB)
        host = (floor + 4 * s.parameters + 90 * biggest) / GIB
        out["encode_corpus"]["host"] = max(out["encode_corpus"]["host"], host)
        if c.variant == PUBLISHED_RUN:
            continue
        r = resolve_recipe(config, c.name, c.variant)
        step_tokens = r["batch_size"] * (r["query_max_length"] + (1 + r["negatives_per_query"]) * r["doc_max_length"])
        train_gpu = 16 * s.parameters + step_tokens * (34 * s.hidden * s.layers + 4 * r["chunk_size"])
        out["train"]["gpu"] = max(out["train"]["gpu"], train_gpu / GIB)
        out["train"]["host"] = max(out["train"]["host"], (floor + 4 * s.parameters) / GIB)
    largest_index = biggest * float(throughputs["disk"]["impact_index_bytes_per_doc"])
    out["impact_index"] = {"gpu": 0.0, "host": heap / GIB}
    out["impact_retrieve"] = {"gpu": 0.0, "host": heap / GIB, "mapped_index": largest_index / GIB}
    out["bm25_index"] = {"gpu": 0.0, "host": heap / GIB}
    return out


def write_plan(configfile: str | Path, throughputs_file: str | Path | None, out: str | Path,
               root: str | Path = ".") -> str:
    """Build the plan of a config, write it to ``out`` (Markdown, plus the data as JSON beside it)."""
    throughputs_path = Path(throughputs_file or THROUGHPUTS_PATH)
    plan = build_plan(load_plan_config(configfile), load_throughputs(throughputs_path), root)
    shown = throughputs_path.resolve()
    shown = shown.relative_to(REPO) if shown.is_relative_to(REPO) else shown
    text = render_markdown(plan, str(configfile), str(shown))
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    out.with_suffix(".json").write_text(json.dumps(plan, indent=1) + "\n")
    return text
