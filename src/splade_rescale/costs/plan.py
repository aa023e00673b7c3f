"""The bill of a run before it starts: jobs, GPU- and CPU-hours, disk and memory.

Its size (~800 lines) is one reason: job counts, per-model costs, disk, memory and the schedule all
read the same per-model sizes and corpus statistics and render into one report; apart, they would
pass that state between modules.

``splade-rescale plan --configfile config/config.yaml`` multiplies three things:

* the jobs Snakemake plans for the config, counted with the functions the workflow uses
  (:func:`splade_rescale.data.corpora.corpora`, backbones x variants + reference models;
  ``tests/costs/test_plan.py`` checks the counts against a dry run);
* the sizes of its datasets: a table of the published collections below (with sources), and
  local collections (``beir_local``, ``trec_local``, ``subset:``) counted from their files;
* per-unit costs from a throughputs JSON (``config/throughputs.json`` by default): GPU
  documents/s and training queries/s per architecture, scaled to a model by parameter count
  and to a text by tokens; Lucene documents/s and queries/s per thread; bytes per document.

Every figure is an estimate from those inputs; the plan prints its assumptions with it.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, Iterable, Mapping

import yaml

from splade_rescale.config import ConfigError, query_max_length, validate_config
from splade_rescale.costs.schedule import Job, gpu_usage, list_schedule
from splade_rescale.data.corpora import corpora
from splade_rescale.training.recipes import resolve_recipe, seed_runs
from splade_rescale.training.seeds import split_run

REPO = Path(__file__).resolve().parents[3]
THROUGHPUTS_PATH = REPO / "config" / "throughputs.json"
THROUGHPUTS_CPU_PATH = REPO / "config" / "throughputs-cpu.json"  # + a `cpu` section (calibrate)
GIB = 1024 ** 3


class PlanError(ValueError):
    """A config or throughputs problem the plan cannot estimate around; one line with the fix."""


@dataclasses.dataclass(frozen=True)
class Size:
    """Document or query count and mean length in words."""

    count: int
    words: float


# Published collection sizes. MS MARCO passage: 8,841,823 passages, dev/small 6,980 queries, TREC DL
# 2019 / 2020 43 / 54 judged queries (ir-datasets.com); mean lengths from BEIR's MS MARCO row.
# BEIR: Thakur et al. 2021, "BEIR: A Heterogeneous Benchmark for Zero-shot Evaluation of Information
# Retrieval Models", Table 1 (#corpus, #test queries, average words per query / document); the counts
# agree with the bm25s benchmark table (xhluca/bm25s README). DL19/DL20 queries: the MS MARCO mean.
CORPUS_SIZES: dict[str, Size] = {  # ir_datasets docs store -> documents
    "msmarco-passage": Size(8_841_823, 55.98),
    "beir/trec-covid": Size(171_332, 160.77),
    "beir/nfcorpus": Size(3_633, 232.26),
    "beir/nq": Size(2_681_468, 78.88),
    "beir/hotpotqa": Size(5_233_329, 46.30),
    "beir/fiqa": Size(57_638, 132.32),
    "beir/arguana": Size(8_674, 166.80),
    "beir/webis-touche2020/v2": Size(382_545, 292.37),
    "beir/webis-touche2020": Size(382_545, 292.37),
    "beir/quora": Size(522_931, 11.44),
    "beir/dbpedia-entity": Size(4_635_922, 49.68),
    "beir/scidocs": Size(25_657, 176.19),
    "beir/fever": Size(5_416_568, 84.76),
    "beir/climate-fever": Size(5_416_593, 84.76),
    "beir/scifact": Size(5_183, 213.63),
}
QUERY_SIZES: dict[str, Size] = {  # ir_datasets id -> judged queries
    "msmarco-passage/dev/small": Size(6_980, 5.96),
    "msmarco-passage/trec-dl-2019/judged": Size(43, 5.96),
    "msmarco-passage/trec-dl-2020/judged": Size(54, 5.96),
    "beir/trec-covid": Size(50, 10.60),
    "beir/nfcorpus/test": Size(323, 3.30),
    "beir/nq": Size(3_452, 9.16),
    "beir/hotpotqa/test": Size(7_405, 17.61),
    "beir/fiqa/test": Size(648, 10.77),
    "beir/arguana": Size(1_406, 192.98),
    "beir/webis-touche2020/v2": Size(49, 6.55),
    "beir/webis-touche2020": Size(49, 6.55),
    "beir/quora/test": Size(10_000, 9.53),
    "beir/dbpedia-entity/test": Size(400, 5.39),
    "beir/scidocs": Size(1_000, 9.38),
    "beir/fever/test": Size(6_666, 8.13),
    "beir/climate-fever": Size(1_535, 20.13),
    "beir/scifact/test": Size(300, 12.37),
}
# A query longer than this (in tokens) searches as a BEIR-like long query (ArguAna's arguments).
LONG_QUERY_TOKENS = 64
# Training data: MS MARCO passage triples (query and passage lengths as above).
MSMARCO_TRAIN = (Size(0, 5.96), Size(0, 55.98))


@dataclasses.dataclass(frozen=True)
class ModelShape:
    architecture: str  # bert | modernbert: which GPU reference figures apply
    parameters: int
    layers: int
    hidden: int
    vocab: int


# Hub models of the paper config (parameter counts from the model cards; ModernBERT and BERT counted
# here with transformers on the meta device; Ettin shapes from its model cards: approximate).
KNOWN_MODELS: dict[str, ModelShape] = {
    "google-bert/bert-base-uncased": ModelShape("bert", 109_514_298, 12, 768, 30_522),
    "bert-base-uncased": ModelShape("bert", 109_514_298, 12, 768, 30_522),
    "naver/splade-cocondenser-ensembledistil": ModelShape("bert", 109_514_298, 12, 768, 30_522),
    "answerdotai/ModernBERT-base": ModelShape("modernbert", 149_655_232, 22, 768, 50_368),
    "answerdotai/ModernBERT-large": ModelShape("modernbert", 395_881_664, 28, 1024, 50_368),
    "jhu-clsp/ettin-encoder-17m": ModelShape("modernbert", 17_000_000, 7, 256, 50_368),
    "jhu-clsp/ettin-encoder-32m": ModelShape("modernbert", 32_000_000, 10, 384, 50_368),
    "jhu-clsp/ettin-encoder-68m": ModelShape("modernbert", 68_000_000, 19, 512, 50_368),
    "jhu-clsp/ettin-encoder-150m": ModelShape("modernbert", 150_000_000, 22, 768, 50_368),
    "jhu-clsp/ettin-encoder-400m": ModelShape("modernbert", 400_000_000, 28, 1024, 50_368),
    "jhu-clsp/ettin-encoder-1b": ModelShape("modernbert", 1_000_000_000, 28, 1792, 50_368),
}


def load_throughputs(path: str | Path | None = None) -> dict[str, Any]:
    path = Path(path or THROUGHPUTS_PATH)
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise PlanError(f"throughputs file {path}: {exc}; fix: pass a JSON shaped like config/throughputs.json")


def load_plan_config(path: str | Path) -> dict[str, Any]:
    """A workflow config as the Snakefile sees it: recipes merged, validated, schema defaults filled."""
    from snakemake.utils import validate

    from splade_rescale.config import SCHEMA_PATH
    from splade_rescale.training.recipes import RECIPES_PATH

    with open(path) as f:
        config = yaml.safe_load(f) or {}
    with open(RECIPES_PATH) as f:
        config["recipes"] = {**yaml.safe_load(f)["recipes"], **config.get("recipes", {})}
    try:
        validate_config(config)
    except ConfigError as exc:
        raise PlanError(f"{path}: {exc}") from None
    validate(config, str(SCHEMA_PATH))
    config.setdefault("reference_models", {})
    return config


# --- jobs ---------------------------------------------------------------------------------------

def models(config: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(name, run) of every model that is encoded, indexed and evaluated: one per training seed
    of each backbone x variant (the run is the variant's name for one seed), then the reference models."""
    return ([(b, run) for b in config["backbones"] for v in config["variants"] for run in seed_runs(config, b, v)]
            + [(r, "reference") for r in config.get("reference_models") or {}])


def planned_jobs(config: Mapping[str, Any]) -> dict[str, int]:
    """Jobs per rule that ``snakemake all`` plans for a config from scratch (its 'Job stats')."""
    from splade_rescale.data.prepare import training_corpus
    from splade_rescale.training.data import run_stream, stream_name

    _, corpus_specs = corpora(config["datasets"])
    n_back, n_var = len(config["backbones"]), len(config["variants"])
    n_models, n_corpora, n_datasets = len(models(config)), len(corpus_specs), len(config["datasets"])
    n_runs = sum(run != "reference" for _, run in models(config))
    data = config["training"]["data"]
    jobs = {
        "fetch_backbone": n_back, "norms_backbone": n_back, "backbone_summary": n_back,
        "rescale_head": n_back * n_var, "norms_variant": n_back * n_var, "train": n_runs,
        "fetch_reference_model": len(config.get("reference_models") or {}),
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
                                         for b, run in models(config) if run != "reference"}
                                        ) if data["source"] in ("ir_datasets", "tsv_triples") else 0
    jobs = {rule: n for rule, n in jobs.items() if n}
    jobs["total"] = sum(jobs.values())
    return jobs


# --- sizes --------------------------------------------------------------------------------------

def _mean_words(texts) -> tuple[int, float]:
    n = words = 0
    for text in texts:
        n += 1
        words += len(text.split())
    return n, (words / n if n else 0.0)


def corpus_size(name: str, spec: Mapping[str, Any], root: Path) -> Size:
    """A corpus spec's documents: the published table, or counted from its local files."""
    if spec["source"] == "ir_datasets" and not spec.get("subset"):
        if spec["id"] not in CORPUS_SIZES:
            raise PlanError(f"corpus {name} (ir_datasets {spec['id']!r}): size unknown; fix: add it to "
                            "splade_rescale.costs.plan.CORPUS_SIZES with its source")
        return CORPUS_SIZES[spec["id"]]
    from splade_rescale.data.datasets import load_corpus

    docs, _ = load_corpus(name, spec, root, count=False)
    return Size(*_mean_words(text for _, text in docs))


def query_size(name: str, spec: Mapping[str, Any], root: Path) -> Size:
    """A dataset's judged queries (the ones the workflow encodes and runs)."""
    if spec["source"] == "ir_datasets" and not spec.get("subset"):
        if spec["id"] not in QUERY_SIZES:
            raise PlanError(f"datasets.{name} (ir_datasets {spec['id']!r}): query count unknown; fix: add it "
                            "to splade_rescale.costs.plan.QUERY_SIZES with its source")
        return QUERY_SIZES[spec["id"]]
    from splade_rescale.data.datasets import load_dataset

    return Size(*_mean_words(load_dataset(name, spec, root).queries.values()))


def training_lengths(data: Mapping[str, Any], root: Path) -> tuple[Size, Size]:
    """Mean query and document words of the training data."""
    if data["source"] == "ir_datasets" and str(data.get("id", "")).startswith("msmarco-passage"):
        return MSMARCO_TRAIN
    if data["source"] == "beir_local":
        spec = {**data, "metrics": "beir"}
        return query_size("training", spec, root), corpus_size("training", spec, root)
    if data["source"] == "tsv_triples":
        from splade_rescale.data.datasets import iter_triples_tsv

        triples = list(iter_triples_tsv(root / data["path"]))
        queries, documents = (q for q, _, _ in triples), (t for _, p, n in triples for t in (p, n))
        return Size(*_mean_words(queries)), Size(*_mean_words(documents))
    raise PlanError(f"training.data.source = {data['source']!r}: lengths unknown to the plan; fix: use MS MARCO "
                    "triples, beir_local or tsv_triples, or extend splade_rescale.costs.plan.training_lengths")


# --- models -------------------------------------------------------------------------------------

def _shape_of_config(config: Any) -> ModelShape:
    import torch
    from transformers import AutoModelForMaskedLM

    with torch.device("meta"):
        model = AutoModelForMaskedLM.from_config(config)
    arch = "modernbert" if config.model_type == "modernbert" else "bert"
    return ModelShape(arch, sum(p.numel() for p in model.parameters()), config.num_hidden_layers,
                      config.hidden_size, config.vocab_size)


def model_shape(name: str, spec: Mapping[str, Any], throughputs: Mapping[str, Any], root: Path) -> ModelShape:
    """Architecture and size of a backbone or reference model, without downloading weights."""
    own = (throughputs.get("models") or {}).get(name) or (throughputs.get("models") or {}).get(spec.get("repo_id"))
    if own:
        return ModelShape(**own)
    source = spec["source"]
    if source == "hf":
        if spec["repo_id"] not in KNOWN_MODELS:
            raise PlanError(f"{name}: {spec['repo_id']} is not in splade_rescale.costs.plan.KNOWN_MODELS; fix: add "
                            f'"models": {{"{name}": {{"architecture", "parameters", "layers", "hidden", "vocab"}}}} '
                            "to the throughputs file")
        return KNOWN_MODELS[spec["repo_id"]]
    if source == "config":
        from splade_rescale.backbones.from_config import model_config

        return _shape_of_config(model_config(name, spec))
    from transformers import AutoConfig

    if source == "package":
        import importlib

        folder = Path(importlib.import_module(spec["package"]).get_model_path())
    else:
        folder = root / spec["path"]
    return _shape_of_config(AutoConfig.from_pretrained(str(folder)))


def tokens(words: float, tokens_per_word: float, max_length: int) -> float:
    """Mean tokens of a text of ``words`` words, special tokens included, cut at ``max_length``."""
    return min(float(max_length), 2 + words * tokens_per_word)


Histogram = list[tuple[int, int]]  # (tokens, texts of that length), ascending


def _histogram(words_per_text: Iterable[int], tokens_per_word: float) -> Histogram:
    counts: dict[int, int] = {}
    for words in words_per_text:
        n = round(2 + words * tokens_per_word)
        counts[n] = counts.get(n, 0) + 1
    return sorted(counts.items())


def expected_longest(histogram: Histogram, n: int, max_length: int) -> float:
    """Expected tokens of the longest of ``n`` texts drawn from ``histogram``, cut at ``max_length``:
    the length a batch of ``n`` texts is padded to."""
    total = sum(c for _, c in histogram)
    out, below = 0.0, 0
    for length, count in histogram:
        out += min(length, max_length) * (((below + count) / total) ** n - (below / total) ** n)
        below += count
    return out


def training_histograms(data: Mapping[str, Any], root: Path, text: Mapping[str, Any]) -> tuple[Histogram, Histogram]:
    """Token-length histograms of the training queries and documents (padding needs the spread, not the mean)."""
    tpw = float(text["tokens_per_word"])
    if data["source"] == "ir_datasets" and str(data.get("id", "")).startswith("msmarco-passage"):
        if "msmarco_query_tokens" in text:
            return ([tuple(x) for x in text["msmarco_query_tokens"]],
                    [tuple(x) for x in text["msmarco_passage_tokens"]])
        q, d = MSMARCO_TRAIN
        return _histogram([round(q.words)], tpw), _histogram([round(d.words)], tpw)
    if data["source"] == "beir_local":
        from splade_rescale.data.datasets import load_corpus, load_dataset

        spec = {**data, "metrics": "beir"}
        docs, _ = load_corpus("training", spec, root, count=False)
        return (_histogram((len(t.split()) for t in load_dataset("training", spec, root).queries.values()), tpw),
                _histogram((len(t.split()) for _, t in docs), tpw))
    if data["source"] == "tsv_triples":
        from splade_rescale.data.datasets import iter_triples_tsv

        triples = list(iter_triples_tsv(root / data["path"]))
        return (_histogram((len(q.split()) for q, _, _ in triples), tpw),
                _histogram((len(t.split()) for _, p, n in triples for t in (p, n)), tpw))
    raise PlanError(f"training.data.source = {data['source']!r}: lengths unknown to the plan; fix: use MS MARCO "
                    "triples, beir_local or tsv_triples, or extend splade_rescale.costs.plan.training_histograms")


def _token_cost(tokens_per_text: float, texts: float, attention: float) -> float:
    """Forward work of ``texts`` texts padded to ``tokens_per_text``: linear in tokens, plus the
    attention scores' quadratic term (``attention`` = 2 x layers x hidden / parameters per token)."""
    return texts * tokens_per_text * (1 + attention * tokens_per_text)


def train_work_per_query(shape: ModelShape, recipe: Mapping[str, Any], queries: Histogram, docs: Histogram,
                         processes: int = 1, attention: bool = True) -> float:
    """Token work of one training query: each micro-batch's queries padded to their longest, its
    positives and negatives padded together to theirs (``SpladeEncoder.tokenize`` pads to the longest)."""
    per_rank = max(1, -(-recipe["batch_size"] // (recipe["grad_accumulation"] * processes)))
    n_docs = 1 + recipe["negatives_per_query"]
    a = 2 * shape.layers * shape.hidden / shape.parameters if attention else 0.0
    q = expected_longest(queries, per_rank, recipe["query_max_length"])
    d = expected_longest(docs, per_rank * n_docs, recipe["doc_max_length"])
    return _token_cost(q, 1, a) + _token_cost(d, n_docs, a)


# --- the plan -----------------------------------------------------------------------------------

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

    def encode_rate(ref: Mapping[str, Any], speed: float, tokens_per_text: float) -> float:
        """Texts per second: the measured end-to-end rate, else the forward rate capped by the host's."""
        scale = speed * ref["encode_tokens_per_doc"] / tokens_per_text
        if ref.get("encode_e2e_docs_per_s"):
            rates_used.add("end-to-end (gpu.architectures.*.encode_e2e_docs_per_s)")
            return float(ref["encode_e2e_docs_per_s"]) * scale
        forward = float(ref["encode_docs_per_s"]) * scale
        if not host_dps:
            rates_used.add("forward-only (encode_docs_per_s)")
            return forward
        rates_used.add("forward-only (encode_docs_per_s), capped at the host's rate (host.encode_host_docs_per_s)")
        return min(forward, float(host_dps))

    costs: list[ModelCost] = []
    for name, variant in models(config):
        is_ref = variant == "reference"
        spec = (config["reference_models"] if is_ref else config["backbones"])[name]
        shape = model_shape(name, spec, throughputs, root)
        ref = _arch(throughputs, shape)
        speed = ref["parameters"] / shape.parameters  # throughput scales inversely with parameters
        encoding = {**config["encoding"], **(spec.get("encoding") or {})}
        cost = ModelCost(name, variant, shape)
        if not is_ref:
            recipe = resolve_recipe(config, name, variant)
            shaped = all(k in ref for k in ("train_query_tokens", "train_doc_tokens", "train_docs_per_query",
                                            "layers", "hidden"))
            work = train_work_per_query(shape, recipe, *train_hists, max(1, int(spec.get("train_gpus", 1))), shaped)
            if shaped:  # the reference step's own lengths, attention included
                a_ref = 2 * ref["layers"] * ref["hidden"] / ref["parameters"]
                ref_work = (_token_cost(ref["train_query_tokens"], 1, a_ref)
                            + _token_cost(ref["train_doc_tokens"], ref["train_docs_per_query"], a_ref))
            else:
                ref_work = float(ref["train_tokens_per_query"])
            qps = ref["train_queries_per_s"] * speed * ref_work / work
            cost.train_gpu_h = recipe["steps"] * recipe["batch_size"] / qps / 3600
            base = split_run(variant)[0]
            shares_init = seed_runs(config, name, base)[0] != variant  # a variant's seeds share one init/
            cost.model_bytes = (4 * shape.parameters * (1 if shares_init else 2)
                                + 12 * shape.parameters * recipe["keep_checkpoints"])
        else:
            cost.model_bytes = 4 * shape.parameters
        for corpus, size in corpus_sizes.items():
            dps = encode_rate(ref, speed, tokens(size.words, tpw, encoding["doc_max_length"]))
            cost.encode_corpus_h[corpus] = size.count / dps / 3600 + startup_h
            cost.encode_gpu_h += cost.encode_corpus_h[corpus]
            cost.index_core_h[corpus] = size.count / float(lucene["impact_index_docs_per_s_per_thread"]) / 3600
            cost.index_cpu_h += cost.index_core_h[corpus]
            cost.shard_bytes += size.count * float(disk["shard_bytes_per_doc"])
            cost.index_bytes += size.count * float(disk["impact_index_bytes_per_doc"])
        for dataset, size in query_sizes.items():
            q_len = query_max_length(encoding, config["datasets"][dataset])
            cost.query_gpu_h += size.count / encode_rate(ref, speed, tokens(size.words, tpw, q_len)) / 3600
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
                         {c.name: c.shape.parameters for c in costs if c.variant != "reference"}.values())
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
        if c.variant == "reference":
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


# --- the schedule -------------------------------------------------------------------------------

def scheduled_jobs(plan: Mapping[str, Any], jobs: list[dict], cores: int, throughputs: Mapping[str, Any],
                   gpus_per_job: int = 1) -> list[Job]:
    """The dry run's jobs with the plan's durations: GPU jobs from its GPU-hours, Lucene jobs from
    its core-hours over their threads (capped at ``cores``), other jobs the throughputs' fixed times."""
    fixed = throughputs.get("jobs") or {}
    default_s = float(fixed.get("default_s", 30))
    by_model = {(m["name"], m["variant"]): m for m in plan["models"]}
    bm25 = plan["bm25"]
    out = []
    for j in jobs:
        rule, w, threads = j["rule"], j["wildcards"], j["threads"]
        model = by_model.get((w.get("backbone"), w.get("variant")))
        lucene = 3600 / min(threads, cores)  # core-hours -> seconds of a job on its threads
        gpus = 0
        if rule == "all":
            seconds = 0.0
        elif rule == "train":
            gpus = int(plan["train_gpus"].get(w["backbone"], gpus_per_job))
            seconds = model["train_gpu_h"] * 3600 / max(1, gpus)
        elif rule == "encode_corpus":
            gpus, seconds = gpus_per_job, model["encode_corpus_h"][w["corpus"]] * 3600
        elif rule == "encode_queries":
            gpus, seconds = gpus_per_job, model["query_gpu_h"] * 3600
        elif rule == "impact_index":
            seconds = model["index_core_h"][w["corpus"]] * lucene
        elif rule == "impact_retrieve":
            seconds = model["retrieve_core_h"][w["dataset"]] * lucene
        elif rule == "bm25_index":
            seconds = bm25["index_core_h"][w["corpus"]] * lucene
        elif rule == "bm25_retrieve":
            seconds = bm25["retrieve_core_h"][w["dataset"]] * lucene
        elif rule == "prepare_corpus" and w.get("corpus") in plan["corpora"]:
            seconds = plan["corpora"][w["corpus"]]["count"] / float(fixed.get("prepare_docs_per_s", 5000))
        else:
            seconds = float((fixed.get("fixed_s") or {}).get(rule, default_s))
        out.append(Job(j["id"], rule, threads, seconds, tuple(j["deps"]), gpus))
    return out


def schedule(plan: Mapping[str, Any], jobs: list[dict], cores: int, gpus: int, throughputs: Mapping[str, Any],
             gpus_per_job: int = 1) -> dict[str, Any]:
    """The run on ``cores`` cores and ``gpus`` GPUs: wall hours and the GPU's busy and idle hours."""
    timed = scheduled_jobs(plan, jobs, cores, throughputs, gpus_per_job)
    usage = gpu_usage(timed, list_schedule(timed, cores, gpus), gpus)
    return {"cores": cores, "gpus": gpus, "jobs": len(timed), **usage}


def uses_gpus(config: Mapping[str, Any]) -> bool:
    """Whether the workflow's model jobs ask for a GPU (common.smk's gpu_count)."""
    gpus = config.get("gpus_per_job")
    return bool(gpus) if gpus is not None else str(config.get("device", "auto")) != "cpu"


def schedule_config(configfile: str | Path, throughputs_file: str | Path | None, cores: int, gpus: int = 1,
                    root: str | Path = ".") -> tuple[dict[str, Any], str]:
    """``plan --cores N`` for a GPU config: the schedule and its Markdown (with the cores check's warning)."""
    from splade_rescale.config import check_cores
    from splade_rescale.costs.calibrate import dry_run_jobs

    config = load_plan_config(configfile)
    throughputs = load_throughputs(throughputs_file)
    plan = build_plan(config, throughputs, root)
    result = schedule(plan, dry_run_jobs(configfile, workdir=root), cores, gpus, throughputs,
                      int(config.get("gpus_per_job") or 1))
    try:
        check_cores(config, cores)
        warning = None
    except ConfigError as exc:
        warning = f"the workflow refuses this run (`--resources gpu={gpus}`): {exc}"
    return result, render_schedule(result, warning)


def render_schedule(s: Mapping[str, Any], warning: str | None = None) -> str:
    lines = [f"## Schedule on {s['cores']} cores and {s['gpus']} GPU(s)", "",
             "Jobs list-scheduled as Snakemake runs them: a job starts when its threads (capped at the cores) "
             "and its `gpu` resource are free; longest remaining path first.", "",
             "| figure | hours |", "|---|---|",
             f"| wall | {_h(s['wall_h'])} |", f"| GPU busy | {_h(s['gpu_busy_h'])} |",
             f"| GPU idle | {_h(s['gpu_idle_h'])} |",
             "| of which before the first GPU job (downloads, data preparation) | "
             f"{_h(s['gpu_idle_before_first_h'])} |",
             "| of which after the last GPU job (the last indexes and searches) | "
             f"{_h(s['gpu_idle_after_last_h'])} |", ""]
    if warning:
        lines += [f"Warning: {warning}", ""]
    return "\n".join(lines)


# --- output -------------------------------------------------------------------------------------

def _gb(n: float) -> str:
    return f"{n / 1e9:,.1f}"


def _h(n: float) -> str:
    return f"{n:,.1f}" if n >= 0.1 else f"{n:.2g}"


def _range(figures: Mapping[str, Any], key: str) -> str:
    """A cost as 'central (low … high)'."""
    return f"{_h(figures[key])} ({_h(figures[key + '_low'])} … {_h(figures[key + '_high'])})"


def _seeds_line(plan: Mapping[str, Any]) -> list[str]:
    """With several training seeds: how many runs, since training, encoding and retrieval are per seed."""
    runs, pairs = plan["jobs"].get("train", 0), plan["jobs"].get("rescale_head", 0)
    if runs <= pairs:
        return []
    return [f"| training seeds: every figure above counts each seed's full chain (train, encode, index, "
            f"retrieve) | {runs} training runs of {pairs} backbone x variant pairs |"]


def render_markdown(plan: Mapping[str, Any], configfile: str, throughputs_file: str) -> str:
    """The plan as Markdown: totals, one row per model, corpora, memory, jobs, assumptions."""
    t, threads = plan["totals"], plan["threads"]
    lines = [f"# What the run costs: {configfile}", "",
             f"Estimated by `splade-rescale plan` from {throughputs_file}; every figure is an estimate "
             "(assumptions below).", "",
             "| total | |", "|---|---|",
             f"| GPU-hours, training (padded micro-batches) | {_range(t, 'train_gpu_h')} |",
             f"| GPU-hours, encoding (corpora + queries) at the {plan['encode_rate']} rate | "
             f"{_range(t, 'encode_gpu_h')} |",
             f"| query encoding, largest share of one model's GPU time | {100 * t['query_share_max']:.2f}% |",
             f"| CPU core-hours, indexing (impact + BM25) | {_h(t['index_cpu_h'])} |",
             f"| CPU core-hours, retrieval (search cost model) | {_range(t, 'retrieve_cpu_h')} |",
             f"| wall hours of Lucene work at {threads} threads | {_h(t['cpu_h'] / threads)} "
             f"({_h(t['cpu_h_low'] / threads)} … {_h(t['cpu_h_high'] / threads)}) |",
             f"| disk at the end (GB) | {_gb(t['final_bytes'])} |",
             f"| peak disk (GB): final + one set of shards of the largest corpus ({plan['largest_corpus']}); "
             f"worst case, every shard kept at once | {_gb(t['peak_bytes'])}; {_gb(t['peak_bytes_worst'])} |",
             f"| Snakemake jobs | {plan['jobs']['total']} |", *_seeds_line(plan), "",
             "| model | variant | arch | parameters (M) | train GPU-h | encode GPU-h | index CPU-h | "
             "retrieve CPU-h | shards GB (temp) | index GB | models GB |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for m in plan["models"]:
        s = m["shape"]
        lines.append(f"| {m['name']} | {m['variant']} | {s['architecture']} | {s['parameters'] / 1e6:,.0f} | "
                     f"{_h(m['train_gpu_h'])} | {_h(m['encode_gpu_h'])} | {_h(m['index_cpu_h'])} | "
                     f"{_range(m, 'retrieve_cpu_h')} | {_gb(m['shard_bytes'])} | "
                     f"{_gb(m['index_bytes'])} | {_gb(m['model_bytes'])} |")
    b = plan["bm25"]
    lines += [f"| BM25 | – | – | – | – | – | {_h(b['index_cpu_h'])} | {_range(b, 'retrieve_cpu_h')} | – | "
              f"{_gb(b['index_bytes'])} | – |", "",
              "| corpus | documents | mean words |", "|---|---|---|"]
    lines += [f"| {c} | {s['count']:,} | {s['words']:.1f} |" for c, s in plan["corpora"].items()]
    lines += ["", "| dataset | judged queries | mean words |", "|---|---|---|"]
    lines += [f"| {d} | {s['count']:,} | {s['words']:.1f} |" for d, s in plan["queries"].items()]
    lines += ["", "Peak memory per job type (GiB, the largest model):", "",
              "| job | GPU | host |", "|---|---|---|"]
    for job, r in plan["ram"].items():
        host = f"{r['host']:.1f}" + (f" + {r['mapped_index']:.1f} mapped index (page cache)"
                                     if "mapped_index" in r else "")
        lines.append(f"| {job} | {r['gpu']:.1f} | {host} |")
    lines += ["", "Jobs per rule (equal to `snakemake all -n --forceall`'s job stats):", "",
              "| rule | jobs |", "|---|---|"]
    lines += [f"| {rule} | {n} |" for rule, n in plan["jobs"].items()]
    lines += ["", "Assumptions:", "", *[f"* {a}" for a in ASSUMPTIONS], ""]
    return "\n".join(lines)


ASSUMPTIONS = (
    "GPU throughputs are the throughputs file's reference figures (default: sentence-transformers "
    "SparseEncoder's forward on an H200, bf16; ours not measured yet). Encoding uses a measured end-to-end "
    "rate (texts in, shards on disk) where the file gives one, else the forward rate capped at the host "
    "side's rate (benchmarks/bench_encode.py --stub); each GPU job adds gpu.job_startup_s. Figures are "
    "scaled to a model by reference parameters / "
    "parameters (with a tied decoder, forward FLOPs per token are about 2 x parameters) and to a text by "
    "reference tokens / tokens; training adds attention's quadratic term (2 x layers x hidden x tokens per "
    "token, against 2 x parameters). GPU costs are given as central / gpu.range_factor … central x "
    "gpu.range_factor (gpu.range_note).",
    "Text tokens = 2 + words x tokens_per_word (measured 1.37 for BERT WordPiece on MS MARCO passages), cut at "
    "the configured maximum; encoding sorts by length, so little padding. Training pads each micro-batch "
    "to its longest text: its queries to the expected longest of the micro-batch's queries, its positives "
    "and negatives together to theirs, from real length histograms (text.msmarco_*_tokens for MS MARCO, "
    "else counted from the local training files), cut at the recipe's maxima.",
    "Training = recipe steps x batch size queries, each with 1 + negatives_per_query documents.",
    "Lucene throughputs are per thread, scaled linearly up to retrieval.threads (CPU core-hours do not "
    "depend on threads; wall hours = core-hours / threads). Impact indexing assumes ~180 non-zeros per "
    "document as measured; denser models index more slowly and write more.",
    "Retrieval: core-seconds per query from the search cost model (lucene.impact_search_cost, fitted on "
    "impact indexes of several sizes up to 1M documents by benchmarks/bench_retrieval_cost.py): fixed + per "
    "query term + per posting touched ** gamma, the postings from the corpus size and the model's densities; "
    f"queries over {LONG_QUERY_TOKENS} tokens count as long (BEIR ArguAna-like). BM25 searches: the same "
    "model with query words as terms and document words as non-zeros (BM25 not measured at scale). "
    "The range is the model's "
    "range_factor (its largest error on the calibration, including extrapolation to the largest index).",
    "Disk: gzipped JsonVectorCollection shards are temp() (deleted once the corpus's impact index exists): "
    "peak = final + the shards awaiting indexing; final = impact and BM25 indexes, models (init + final + "
    "kept checkpoints with AdamW state at 12 B/parameter), backbones, query vectors and runs. The Hugging "
    "Face and ir_datasets caches are not counted.",
    "Memory: training 16 B/parameter + activations 34 B x hidden x layers per token (Korthikanti et al. "
    "2022) at the recipe's maximum lengths + one fp32 vocabulary chunk; encoding fp32 weights + one "
    "layer's activations and one chunk for a batch; Lucene jobs the JVM heap (throughputs lucene.jvm_heap_gib).",
)


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
