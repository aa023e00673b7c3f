"""What each rule's output is made from: the one place naming the config keys that reach a rule's params.

Snakemake reruns a job when its params change, so a rule's params hold exactly the values its output
depends on. Prose (a recipe's ``source``, a dataset's ``note``, published figures), logging and
checkpoint cadence, GPU counts, threads, launchers and devices are not among them: editing those
reruns nothing (the runtime ones reach the jobs through ``SPLADE_RESCALE_RUNTIME``, common.smk). A key
that changes only a judgement, the collapse floors, reaches the cheap ``judge_training`` step, never
the training. Local data files are inputs of the rules that read them
(:func:`splade_rescale.data.corpora.dataset_files`).

Kept free of torch: the Snakefile calls it while it builds the DAG.
"""

from __future__ import annotations

import hashlib
import json
from functools import lru_cache
from typing import Any, Mapping

from splade_rescale.config import query_max_length
from splade_rescale.data.corpora import dataset_files, query_spec
from splade_rescale.data.datasets import default_exclude_self

# Recipe keys that change how often a run logs or checkpoints, or that document it: not what it learns.
RECIPE_CADENCE = ("log_every", "checkpoint_every", "keep_checkpoints")
RECIPE_PROSE = ("source",)
# Recipe keys of the sparsity verdict (splade_rescale.training.verdict): they judge a finished run.
VERDICT_KEYS = ("collapse_min_nnz", "collapse_near_empty_q", "collapse_near_empty_d", "collapse_dense_fraction",
                "collapse_window")
# A backbone's keys that do not change its checkpoint: how many GPUs train it, a length limit
# that only the config check reads, and the shape only the plan and the job order read.
BACKBONE_NOT_FETCHED = ("train_gpus", "max_length", "shape")
# A published model's figures, encoding lengths and shape: they do not change the checkpoint fetched.
PUBLISHED_NOT_FETCHED = ("published", "encoding", "shape")
# What tables and figures read of the config (splade_rescale.report); runtime sections stay out.
REPORT_SECTIONS = ("experiment", "backbones", "variants", "reference_backbone", "published_models", "bm25",
                   "datasets")
FIGURE_SECTIONS = ("experiment", "backbones", "variants", "reference_backbone", "datasets")
# The encoding keys corpus vectors and query vectors depend on (lengths come per corpus / query set).
CORPUS_ENCODING = ("head", "precision", "doc_max_length", "quantization", "max_active_dims")
QUERY_ENCODING = ("head", "precision", "quantization")


def backbone_spec(spec: Mapping[str, Any]) -> dict[str, Any]:
    """A backbone's entry as its fetch depends on it."""
    return {k: v for k, v in spec.items() if k not in BACKBONE_NOT_FETCHED}


def published_model_spec(spec: Mapping[str, Any]) -> dict[str, Any]:
    """A published model's entry as its fetch depends on it."""
    return {k: v for k, v in spec.items() if k not in PUBLISHED_NOT_FETCHED}


def training_data(spec: Mapping[str, Any]) -> dict[str, Any]:
    """``training.data`` as the examples depend on it: without its prose."""
    return {k: v for k, v in spec.items() if k != "note"}


def training_recipe(recipe: Mapping[str, Any]) -> dict[str, Any]:
    """The resolved recipe's keys that change a run's trajectory (its weights and log values)."""
    return {k: v for k, v in recipe.items() if k not in RECIPE_CADENCE + RECIPE_PROSE + VERDICT_KEYS}


def training_cadence(recipe: Mapping[str, Any]) -> dict[str, Any]:
    """The resolved recipe's logging and checkpoint cadence (a runtime setting)."""
    return {k: recipe[k] for k in RECIPE_CADENCE if k in recipe}


def verdict_floors(recipe: Mapping[str, Any]) -> dict[str, Any]:
    """The resolved recipe's collapse floors and window: what ``judge_training`` depends on."""
    return {k: recipe[k] for k in VERDICT_KEYS}


def model_encoding(config: Mapping[str, Any], model: str) -> dict[str, Any]:
    """The encoding section, with a published model's own lengths over it."""
    own = (config.get("published_models") or {}).get(model, {}).get("encoding", {})
    return {**config["encoding"], **own}


def corpus_encoding(config: Mapping[str, Any], model: str) -> dict[str, Any]:
    """The encoding settings a corpus's vectors depend on (a query-only change reruns no corpus)."""
    encoding = model_encoding(config, model)
    return {k: encoding[k] for k in CORPUS_ENCODING}


def query_encoding(config: Mapping[str, Any], model: str) -> dict[str, Any]:
    """The encoding settings query vectors depend on besides their length."""
    encoding = model_encoding(config, model)
    return {k: encoding[k] for k in QUERY_ENCODING}


def query_set(config: Mapping[str, Any], model: str, dataset: str) -> dict[str, Any]:
    """What one dataset's query vectors for one model depend on: the entry's query part, the length,
    and for local files a digest of the judged queries themselves (an edit that keeps them reruns nothing)."""
    spec = config["datasets"][dataset]
    return {"spec": query_spec(spec), "max_length": query_max_length(model_encoding(config, model), spec),
            "queries_sha256": judged_queries_digest(dataset, json.dumps(query_spec(spec), sort_keys=True))}


def query_sets(config: Mapping[str, Any], model: str) -> dict[str, dict[str, Any]]:
    """Every dataset's query set, for one model's encode_queries job."""
    return {d: query_set(config, model, d) for d in config["datasets"]}


def search_spec(config: Mapping[str, Any], model: str | None, dataset: str) -> dict[str, Any]:
    """What one dataset's run depends on besides its index and the cut-off ``retrieval.k``: whether
    a query's own id is dropped, and its queries: their vectors' settings for a SPLADE model, the
    dataset's query part and the judged queries' digest for BM25 (which reads them itself)."""
    spec = config["datasets"][dataset]
    exclude_self = default_exclude_self(dataset, spec)
    if model is None:
        return {**query_spec(spec), "exclude_self": exclude_self,
                "queries_sha256": judged_queries_digest(dataset, json.dumps(query_spec(spec), sort_keys=True))}
    return {"exclude_self": exclude_self, "queries": query_set(config, model, dataset),
            "encoding": query_encoding(config, model)}


def model_query_encoding(config: Mapping[str, Any], model: str) -> dict[str, Any]:
    """What a model's query vectors depend on besides each dataset's settings: the query encoding, and a
    published model's own query lengths over the dataset's (:func:`dataset_search`)."""
    own = (config.get("published_models") or {}).get(model, {}).get("encoding", {})
    return {**query_encoding(config, model), "own_lengths": {k: v for k, v in own.items() if "query" in k}}


def dataset_queries(config: Mapping[str, Any], dataset: str) -> dict[str, Any]:
    """What a dataset's query vectors depend on besides the model: its query part, its judged
    queries' digest and its query length (the encoding section's; a published model's own lengths are
    in :func:`model_query_encoding`)."""
    spec = config["datasets"][dataset]
    return {"spec": query_spec(spec), "max_length": query_max_length(config["encoding"], spec),
            "queries_sha256": judged_queries_digest(dataset, json.dumps(query_spec(spec), sort_keys=True))}


def dataset_search(config: Mapping[str, Any], dataset: str) -> dict[str, Any]:
    """What every run of a dataset depends on besides its index and query vectors: the cut-off,
    exclude_self and its queries (BM25 reads them itself)."""
    spec = config["datasets"][dataset]
    return {"k": config["retrieval"]["k"], "exclude_self": default_exclude_self(dataset, spec),
            "spec": query_spec(spec),
            "queries_sha256": judged_queries_digest(dataset, json.dumps(query_spec(spec), sort_keys=True))}


def settings_records(config: Mapping[str, Any], models: list[str]) -> dict[str, tuple[Any, list[str]]]:
    """The settings records of a config: name -> (value, local files it is made from).

    A stage whose input from upstream is ancient (query vectors, the judged manifest) is not looked at
    by Snakemake when that upstream job reruns, so its own params and file times would go unnoticed;
    these records (rule ``settings``, no upstream) carry them as ordinary inputs instead: per model its
    corpus and query encoding, per dataset its queries, its search and its evaluation.
    """
    records: dict[str, tuple[Any, list[str]]] = {}
    for model in models:
        records[f"corpus-encoding.{model}"] = (corpus_encoding(config, model), [])
        records[f"query-encoding.{model}"] = (model_query_encoding(config, model), [])
    for dataset, spec in config["datasets"].items():
        records[f"queries.{dataset}"] = (dataset_queries(config, dataset), [])
        records[f"search.{dataset}"] = (dataset_search(config, dataset), [])
        records[f"evaluation.{dataset}"] = (evaluation_spec(dataset, spec), dataset_files(spec, "queries", "qrels"))
    return records


def evaluation_spec(dataset: str, spec: Mapping[str, Any]) -> dict[str, Any]:
    """A dataset's entry as its evaluation depends on it: its queries and qrels, measures, exclude_self."""
    return {**query_spec(spec), "metrics": spec["metrics"], "exclude_self": default_exclude_self(dataset, spec)}


def report_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """What tables read of the config; backbones without their runtime keys."""
    out = {k: config[k] for k in REPORT_SECTIONS if k in config}
    out["backbones"] = {name: backbone_spec(spec) for name, spec in config["backbones"].items()}
    if "published_models" in out:
        out["published_models"] = {name: {k: v for k, v in spec.items() if k != "shape"}
                                   for name, spec in out["published_models"].items()}
    return out


def figure_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """What figures read of the config: the tables' without what only tables print (notes, published figures)."""
    out = {k: v for k, v in report_config(config).items() if k in FIGURE_SECTIONS}
    out["datasets"] = {name: {k: v for k, v in spec.items() if k != "note"}
                       for name, spec in config["datasets"].items()}
    return out


@lru_cache(maxsize=None)
def judged_queries_digest(dataset: str, spec_json: str) -> str | None:
    """SHA-256 of a local dataset's judged queries (ids and texts), None for ir_datasets (keyed by id)
    and while its queries or qrels file does not exist yet (a dry run before the data are placed; the
    job that reads them fails with the dataset's own message).

    Cached per DAG build; reads the queries and qrels files (small next to a corpus).
    """
    from splade_rescale.data.datasets import load_dataset

    spec = json.loads(spec_json)
    if spec["source"] == "ir_datasets" or len(dataset_files(spec, "queries", "qrels")) < 2:
        return None
    queries = load_dataset(dataset, spec).queries
    return hashlib.sha256(json.dumps(sorted(queries.items())).encode()).hexdigest()
