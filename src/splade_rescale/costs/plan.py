"""The bill of a run before it starts: GPU-hours, core-hours, disk and peak memory per model.

Sizes: each model's from its config.json (:mod:`.model_shapes`); each corpus's and query set's
count from ir_datasets' shipped metadata or the local files, their mean words from the
throughputs file's table (BEIR's published means) or the local files. Per-unit figures:
``config/throughputs.json``, each measured and dated there. Every figure is an estimate from
those inputs; :data:`ASSUMPTIONS` says how.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, Iterable, Mapping

from splade_rescale.config import query_max_length
from splade_rescale.costs.model_shapes import ModelShape, model_shape
from splade_rescale.data.corpora import corpora
from splade_rescale.errors import ConfigError
from splade_rescale.retrieval.lucene import MEM_MB
from splade_rescale.runs import PUBLISHED_RUN, split_run
from splade_rescale.training.recipes import resolve_recipe, seed_runs

THROUGHPUTS_PATH = Path(__file__).resolve().parents[3] / "config" / "throughputs.json"
GIB = 1024 ** 3
LONG_QUERY_TOKENS = 64  # a longer query searches as a long (ArguAna-like) one
MEASURED_NAME = "throughputs.measured.json"  # results/{experiment}/: this machine's, by `splade-rescale preflight`


@dataclasses.dataclass(frozen=True)
class Size:
    count: int
    words: float  # mean words a text
    source: str   # where both come from


def load_throughputs(path: str | Path | None = None) -> dict[str, Any]:
    path = Path(path or THROUGHPUTS_PATH)
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ConfigError(f"throughputs file {path}: {exc}; fix: pass a JSON shaped like config/throughputs.json")


def take_measured(throughputs: dict[str, Any], measured: str | Path) -> dict[str, str]:
    """Put the architectures measured on this machine (``measured``, written by ``splade-rescale preflight``,
    where present) in place of the shipped ones; {architecture: where its figures come from}."""
    architectures = throughputs["gpu"]["architectures"]
    sources = {a: f"shipped ({f['measured']})" for a, f in architectures.items()}
    if Path(measured).is_file():
        found = load_throughputs(measured)["architectures"]
        architectures.update(found)
        sources.update({a: f"measured here ({f['measured']})" for a, f in found.items()})
    return sources


def architecture_figures(throughputs: Mapping[str, Any], model_type: str) -> Mapping[str, Any]:
    """The GPU figures of ``model_type``: its own where measured, else ModernBERT's or BERT's (the shipped pair)."""
    architectures = throughputs["gpu"]["architectures"]
    return architectures.get(model_type) or architectures["modernbert" if model_type == "modernbert" else "bert"]


def models(config: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(name, run) of every model encoded and evaluated: each backbone x variant's runs, then the published ones."""
    return ([(b, run) for b in config["backbones"] for v in config["variants"] for run in seed_runs(config, b, v)]
            + [(m, PUBLISHED_RUN) for m in config["published_models"]])


def _counted(texts: Iterable[str], source: str) -> Size:
    n = words = 0
    for text in texts:
        n, words = n + 1, words + len(text.split())
    return Size(n, words / max(n, 1), source)


def corpus_size(name: str, spec: Mapping[str, Any], root: Path, text: Mapping[str, Any]) -> Size:
    """Documents of a corpus: ir_datasets' metadata (no download) and the table's mean words, or its local files."""
    if spec["source"] == "ir_datasets" and not spec.get("subset"):
        import ir_datasets

        words = text["document_words"].get(spec["id"])
        return Size(ir_datasets.load(spec["id"]).docs_count(), words or text["default_words"]["document"],
                    "ir_datasets metadata" + ("" if words else "; words ASSUMED (text.default_words)"))
    from splade_rescale.data.datasets import load_corpus

    return _counted((t for _, t in load_corpus(name, spec, root, count=False)[0]), "counted")


def query_size(name: str, spec: Mapping[str, Any], root: Path, text: Mapping[str, Any]) -> Size:
    """Queries of a dataset (all judged in the sets the paper uses)."""
    if spec["source"] == "ir_datasets" and not spec.get("subset"):
        import ir_datasets

        words = text["query_words"].get(spec["id"])
        return Size(ir_datasets.load(spec["id"]).queries_count(), words or text["default_words"]["query"],
                    "ir_datasets metadata" + ("" if words else "; words ASSUMED (text.default_words)"))
    from splade_rescale.data.datasets import load_dataset

    return _counted(load_dataset(name, spec, root).queries.values(), "counted")


def reused_documents(config: Mapping[str, Any], sizes: Mapping[str, Size], root: Path) -> dict[str, Any]:
    """Per corpus that declares a source of vectors (datasets.*.vectors_from): the documents its encode copies
    instead of encoding, counted from both corpora's digests where they exist (rule corpus_digests), else ASSUMED:
    every document of the smaller corpus, an upper bound."""
    from splade_rescale.digests import read_digests
    from splade_rescale.encoding.reuse import declared_sources, source_lines

    folder = root / "results" / config["experiment"] / "data" / "corpora"
    out = {}
    for corpus, source in declared_sources(config["datasets"]).items():
        paths = [folder / f"{c}.digests" for c in (corpus, source)]
        if all(p.is_file() for p in paths):
            docs, how = int((source_lines(*map(read_digests, paths)) >= 0).sum()), "measured from the digests"
        else:
            docs = min(sizes[corpus].count, sizes[source].count)
            how = "ASSUMED, an upper bound: every document of the smaller corpus, until `snakemake data` writes digests"
        out[corpus] = {"source": source, "docs": docs, "how": how}
    return out


def tokens(words: float, tokens_per_word: float, max_length: int) -> float:
    """Mean tokens of a text of ``words`` words, special tokens included, cut at ``max_length``."""
    return min(float(max_length), 2 + words * tokens_per_word)


def expected_longest(histogram: list[list[int]], n: int, max_length: int) -> float:
    """Expected tokens of the longest of ``n`` texts drawn from a [tokens, count] histogram, cut at
    ``max_length``: what a micro-batch of ``n`` texts is padded to."""
    total, out, below = sum(c for _, c in histogram), 0.0, 0
    for length, count in histogram:
        out += min(length, max_length) * (((below + count) / total) ** n - (below / total) ** n)
        below += count
    return out


def train_tokens_per_query(recipe: Mapping[str, Any], data: Mapping[str, Any], text: Mapping[str, Any],
                           processes: int) -> float:
    """Tokens one training query costs: its micro-batch's queries padded to their longest, its positives
    and negatives together to theirs (MS MARCO's measured lengths; other data: the recipe's maxima)."""
    per_rank = max(1, -(-recipe["batch_size"] // (recipe["grad_accumulation"] * processes)))
    n_docs = 1 + recipe["negatives_per_query"]
    q_max, d_max = recipe["query_max_length"], recipe["doc_max_length"]
    if data["source"] == "ir_datasets" and str(data.get("id", "")).startswith("msmarco-passage"):
        q_max = expected_longest(text["msmarco_query_tokens"], per_rank, q_max)
        d_max = expected_longest(text["msmarco_passage_tokens"], per_rank * n_docs, d_max)
    return q_max + n_docs * d_max


def build_plan(config: Mapping[str, Any], throughputs: Mapping[str, Any], root: str | Path = ".") -> dict[str, Any]:
    """Every figure of the bill, per model and in total, as plain data."""
    root = Path(root)
    lucene, disk, text = (throughputs[k] for k in ("lucene", "disk", "text"))
    tpw, k = float(text["tokens_per_word"]), int(config["retrieval"]["k"])
    of_dataset, corpus_specs = corpora(config["datasets"])
    corpus_sizes = {c: corpus_size(c, s, root, text) for c, s in corpus_specs.items()}
    reused = reused_documents(config, corpus_sizes, root)
    copy_s = float(throughputs["reuse"]["copy_s_per_doc"])
    query_sizes = {d: query_size(d, s, root, text) for d, s in config["datasets"].items()}
    startup_h = float(throughputs["gpu"]["job_startup_s"]) / 3600

    def search_core_h(queries: Size, corpus: str, query_tokens: float) -> float:
        a, b = lucene["search_s_per_query"]["long" if query_tokens > LONG_QUERY_TOKENS else "short"]
        return queries.count * (a + b * corpus_sizes[corpus].count / 1e6) / 3600

    rows, shapes = [], {}
    for name, run in models(config):
        published = run == PUBLISHED_RUN
        where = "published_models" if published else "backbones"
        spec = config[where][name]
        shape = shapes[name] = shapes.get(name) or model_shape(name, spec, root, where=where)
        measured = architecture_figures(throughputs, shape.model_type)
        speed = measured["parameters"] / shape.parameters  # throughput scales inversely with parameters
        encoding = {**config["encoding"], **(spec.get("encoding") or {})}

        def encode_h(size: Size, max_length: int) -> float:
            per_s = measured["encode_docs_per_s"] * speed * measured["encode_tokens_per_doc"] / tokens(
                size.words, tpw, max_length)
            return size.count / per_s / 3600 + startup_h

        row: dict[str, Any] = {"name": name, "variant": run, "shape": dataclasses.asdict(shape), "train_gpu_h": 0.0}
        if not published:
            recipe = resolve_recipe(config, name, run)
            work = train_tokens_per_query(recipe, config["training"]["data"], text, int(spec.get("train_gpus", 1)))
            qps = measured["train_queries_per_s"] * speed * measured["train_tokens_per_query"] / work
            row["train_gpu_h"] = recipe["steps"] * recipe["batch_size"] / qps / 3600 + startup_h
            shares_init = seed_runs(config, name, split_run(run)[0])[0] != run  # a variant's seeds share one init
            row["model_bytes"] = 4 * shape.parameters * (1 if shares_init else 2) + 12 * shape.parameters * recipe[
                "keep_checkpoints"]
        else:
            row["model_bytes"] = 4 * shape.parameters
        row["encode_corpus_h"] = {c: encode_h(dataclasses.replace(s, count=s.count - reused[c]["docs"]),
                                              encoding["doc_max_length"]) + s.count * copy_s / 3600 if c in reused
                                  else encode_h(s, encoding["doc_max_length"]) for c, s in corpus_sizes.items()}
        row["query_gpu_h"] = startup_h + sum(encode_h(s, query_max_length(encoding, config["datasets"][d]))
                                             - startup_h for d, s in query_sizes.items())
        row["index_core_h"] = {c: s.count / lucene["impact_index_docs_per_s_per_thread"] / 3600
                               for c, s in corpus_sizes.items()}
        row["retrieve_core_h"] = {d: search_core_h(s, of_dataset[d], tokens(s.words, tpw, query_max_length(
            encoding, config["datasets"][d]))) for d, s in query_sizes.items()}
        row["encode_gpu_h"] = sum(row["encode_corpus_h"].values()) + row["query_gpu_h"]
        row["index_bytes"] = sum(s.count for s in corpus_sizes.values()) * disk["impact_index_bytes_per_doc"]
        row["shard_bytes"] = sum(s.count for s in corpus_sizes.values()) * disk["shard_bytes_per_doc"]
        row["other_bytes"] = sum(s.count for s in query_sizes.values()) * (
            disk["query_vector_bytes_per_query"] + k * disk["run_bytes_per_hit"])
        rows.append(row)

    bm25 = {"index_core_h": {c: s.count / lucene["bm25_index_docs_per_s_per_thread"] / 3600
                             for c, s in corpus_sizes.items()},
            "retrieve_core_h": {d: search_core_h(s, of_dataset[d], 0) for d, s in query_sizes.items()},
            "bytes": sum(s.count * s.words for s in corpus_sizes.values()) * disk["bm25_index_bytes_per_word"]
            + sum(s.count for s in query_sizes.values()) * k * disk["run_bytes_per_hit"]}
    backbones = sum(4 * shapes[b].parameters for b in config["backbones"])
    final = (sum(r["index_bytes"] + r["model_bytes"] + r["other_bytes"] for r in rows)
             + bm25["bytes"] + backbones)
    largest = max(corpus_sizes, key=lambda c: corpus_sizes[c].count)
    shards = {largest: corpus_sizes[largest].count * disk["shard_bytes_per_doc"]}  # temporary bytes at once
    shards.update({c: (corpus_sizes[c].count + corpus_sizes[r["source"]].count) * disk["shard_bytes_per_doc"]
                   + r["docs"] * throughputs["reuse"]["spill_bytes_per_doc"] for c, r in reused.items()})
    largest = max(shards, key=shards.get)
    totals = {"train_gpu_h": sum(r["train_gpu_h"] for r in rows), "encode_gpu_h": sum(r["encode_gpu_h"] for r in rows),
              "index_core_h": sum(sum(r["index_core_h"].values()) for r in rows) + sum(bm25["index_core_h"].values()),
              "retrieve_core_h": sum(sum(r["retrieve_core_h"].values()) for r in rows)
              + sum(bm25["retrieve_core_h"].values()),
              "reused_docs_per_model": sum(r["docs"] for r in reused.values()),
              "final_bytes": final, "peak_bytes": final + shards[largest]}
    return {"config": config["experiment"], "models": rows, "bm25": bm25, "totals": totals, "largest_corpus": largest,
            "reused": reused,
            "corpora": {c: dataclasses.asdict(s) for c, s in corpus_sizes.items()},
            "queries": {d: dataclasses.asdict(s) for d, s in query_sizes.items()},
            "memory": peak_memory(config, shapes, corpus_sizes[largest].count, throughputs)}


def gpu_job_host_gib(parameters: float, floor_gib: float, documents: int = 0) -> float:
    """Host memory of a train or encode job (GiB): the floor (Python, torch, transformers), the model's fp32
    weights loaded on the host, and ~90 B a document id of the corpus it encodes."""
    return (floor_gib * GIB + 4 * parameters + 90 * documents) / GIB


def peak_memory(config: Mapping[str, Any], shapes: Mapping[str, ModelShape], largest_corpus: int,
                throughputs: Mapping[str, Any]) -> dict[str, dict[str, float]]:
    """Peak GiB per GPU job (the largest model) and on the host.

    Training: 16 B a parameter (fp32 weights and gradients, two AdamW moments) + activations of
    34 B x hidden a token a layer (Korthikanti et al. 2022, bf16, flash attention) over a step padded
    to the recipe's maxima + one fp32 vocabulary chunk of the fused head; 21.9 GiB at the measured
    ModernBERT-base step, measured 23.5. Encoding: fp32 weights + one layer's activations and one
    chunk for a batch. Host: the throughputs' floor + the model + ~90 B a document id."""
    floor = throughputs["host"]["gpu_job_floor_gib"]
    enc = config["encoding"]
    out = {"train": {"gpu": 0.0, "host": 0.0}, "encode_corpus": {"gpu": 0.0, "host": 0.0}}
    for name, s in shapes.items():
        batch = enc["batch_size"] * enc["doc_max_length"]
        out["encode_corpus"]["gpu"] = max(out["encode_corpus"]["gpu"], (4 * s.parameters + batch * (
            34 * s.hidden + 4 * 8192)) / GIB)
        out["encode_corpus"]["host"] = max(out["encode_corpus"]["host"],
                                           gpu_job_host_gib(s.parameters, floor, largest_corpus))
        for run in (r for b, r in models(config) if b == name and r != PUBLISHED_RUN):
            r = resolve_recipe(config, name, run)
            step = r["batch_size"] * (r["query_max_length"] + (1 + r["negatives_per_query"]) * r["doc_max_length"])
            gpu = 16 * s.parameters + step * (34 * s.hidden * s.layers + 4 * r["chunk_size"])
            out["train"]["gpu"] = max(out["train"]["gpu"], gpu / GIB)
            out["train"]["host"] = max(out["train"]["host"], gpu_job_host_gib(s.parameters, floor))
    out["encode_queries"] = out["encode_corpus"]
    for rule, mb in MEM_MB.items():  # what each Lucene job declares to Snakemake (mem_mb); its JVM heap follows it
        out[rule] = {"gpu": 0.0, "host": mb * 1e6 / GIB}
    return out


def host_at_once(jobs: Iterable[Any], slots: Mapping[int, Any], memory: Mapping[str, Mapping[str, float]],
                 floor_gib: float) -> dict[str, float]:
    """The schedule's peak host memory (GiB; a job holds its kind's ``memory``, any other job ``floor_gib``)
    and the most jobs running at once: what ``--resources mem_mb`` must give for the schedule to hold."""
    events = sorted((t, sign, memory.get(j.rule, {}).get("host", floor_gib))  # at one time, ends (-1) first
                    for j in jobs for t, sign in ((slots[j.id].start, 1), (slots[j.id].end, -1)))
    held = peak = 0.0
    running = most = 0
    for _, sign, gib in events:
        held, running = held + sign * gib, running + sign
        peak, most = max(peak, held), max(most, running)
    return {"peak_host_gib": peak, "jobs_at_once": most}


def _h(n: float) -> str:
    return f"{n:,.1f}" if n >= 0.1 else f"{n:.2g}"


def render_bill(plan: Mapping[str, Any], jobs: Mapping[str, int], configfile: str, throughputs_file: str) -> str:
    """The bill as Markdown: totals, one row per model, data sizes, memory, jobs, assumptions."""
    t = plan["totals"]
    lines = [f"# What the run costs: {configfile}", "",
             f"Estimated by `splade-rescale plan` from {throughputs_file} (assumptions below).", "",
             "Trainings and encodes are priced at GPU figures (the shipped ones were measured on one H200 in bf16; "
             "`make preflight` measures this machine's). Where a config's model jobs run on the CPU (device: cpu, "
             "or device: auto on a machine without a GPU, as the demo on a laptop) they take far longer than this "
             "plan's hours and wall time, which do not model a CPU run; its disk, memory per job and job counts "
             "still hold.", "",
             "| total | |", "|---|---|",
             f"| GPU-hours, training | {_h(t['train_gpu_h'])} |",
             f"| GPU-hours, encoding (corpora + queries) | {_h(t['encode_gpu_h'])} |",
             *[f"| documents of {c} a model copies from {r['source']} instead of encoding (vectors_from), {r['how']} "
               f"| {r['docs']:,} |" for c, r in plan["reused"].items()],
             f"| CPU core-hours, indexing (impact + BM25) | {_h(t['index_core_h'])} |",
             f"| CPU core-hours, retrieval | {_h(t['retrieve_core_h'])} |",
             f"| disk at the end (GB) | {t['final_bytes'] / 1e9:,.1f} |",
             f"| peak disk (GB): the end + the shards of {plan['largest_corpus']}"
             + (" (and its source's, and its spill)" if plan["largest_corpus"] in plan["reused"] else "") + " | "
             f"{t['peak_bytes'] / 1e9:,.1f} |",
             f"| Snakemake jobs | {sum(jobs.values())} |", "",
             "| model | run | type | parameters (M) | train GPU-h | encode GPU-h | index core-h | retrieve core-h |",
             "|---|---|---|---|---|---|---|---|"]
    for m in plan["models"]:
        lines.append(f"| {m['name']} | {m['variant']} | {m['shape']['model_type']} | "
                     f"{m['shape']['parameters'] / 1e6:,.0f} | {_h(m['train_gpu_h'])} | {_h(m['encode_gpu_h'])} | "
                     f"{_h(sum(m['index_core_h'].values()))} | {_h(sum(m['retrieve_core_h'].values()))} |")
    b = plan["bm25"]
    lines += [f"| BM25 | – | – | – | – | – | {_h(sum(b['index_core_h'].values()))} | "
              f"{_h(sum(b['retrieve_core_h'].values()))} |", "",
              "| corpus or query set | texts | mean words | from |", "|---|---|---|---|"]
    lines += [f"| {n} | {s['count']:,} | {s['words']:.1f} | {s['source']} |"
              for n, s in {**plan["corpora"], **plan["queries"]}.items()]
    lines += ["", "| peak memory per job (GiB, the largest model) | GPU | host |", "|---|---|---|"]
    lines += [f"| {job} | {r['gpu']:.1f} | {r['host']:.1f} |" for job, r in plan["memory"].items()]
    lines += ["", "| rule | jobs (`snakemake all -n --forceall`) |", "|---|---|"]
    lines += [f"| {rule} | {n} |" for rule, n in jobs.items()]
    return "\n".join(lines + ["", "Assumptions:", "", *[f"* {a}" for a in ASSUMPTIONS], ""])


ASSUMPTIONS = (
    "GPU: our encoder's and trainer's figures measured on one H200 (bf16) at the ModernBERT-base shape (used for "
    "model_type modernbert) and the BERT-base shape (every other type), scaled to a model by the measured "
    "shape's parameters / its parameters and to a text by tokens; each GPU job adds gpu.job_startup_s. A "
    "backbone's train_gpus: k trains on k GPUs for the same GPU-hours. Model parameters are counted from its "
    "config.json on the meta device, or given by its entry's shape.",
    "Text tokens = 2 + words x tokens_per_word, cut at the configured maximum (encoding pads each text to "
    "its 8-token length bucket: under 5% padding). Training pads each micro-batch to its longest text: for "
    "MS MARCO the expected longest from measured length histograms, for other data the recipe's maxima. "
    "Training = steps x batch size queries, each with 1 + negatives_per_query documents.",
    "Counts: ir_datasets' shipped metadata (no download), local data counted from its files; mean words "
    "from BEIR's published table (text.document_words, text.query_words) or counted.",
    "Lucene: per-thread (core-second) figures; indexing documents per core-second; a search's core-seconds "
    "linear in the index's documents (lucene.search_s_per_query; queries over 64 tokens count as long).",
    "Declared reuse (datasets.*.vectors_from): a corpus's encode is billed for the documents its source lacks "
    "(same id and text, counted from both corpora's digests, else assumed as the plan says), and for the copy, "
    "which holds its GPU: reuse.copy_s_per_doc a document of the corpus (one read of the source's shards, one "
    "merge that reads every line's statistics).",
    "Disk: shards are temporary (deleted once their corpus's impact index exists): peak = the end + the "
    "largest corpus's shards, or a declaring corpus's with its source's (kept until it is encoded) and its spill "
    "(reuse.spill_bytes_per_doc a copied document), whichever is more; the end = impact and BM25 indexes, "
    "models (init + final + kept checkpoints with AdamW state at 12 B a parameter), backbones, query vectors "
    "and runs. The Hugging Face and "
    "ir_datasets caches are not counted.",
    "Memory: a training's GPU holds 16 B a parameter (fp32 weights and gradients, two AdamW moments) and "
    "its activations at the recipe's maximum lengths and one vocabulary chunk; an encode's GPU the fp32 "
    "weights and one batch's activations; a GPU job's host host.gpu_job_floor_gib, the model's fp32 weights "
    "and ~90 B a document of the corpus. A Lucene job what it declares to Snakemake (mem_mb), its JVM heap "
    "three quarters of it. The schedule's peak adds up the jobs it runs at once.",
)
