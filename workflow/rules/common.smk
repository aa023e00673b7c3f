# Shared by all rules: config validation (before any job runs), wildcard constraints,
# and the functions that turn the config into file lists.
import json
import os
import re
import shlex
from pathlib import Path

import yaml
from snakemake.utils import validate

from splade_rescale.config import ConfigError, check_cores, query_max_length, validate_config
from splade_rescale.data.corpora import corpora
from splade_rescale.training.recipes import resolve_recipe, seed_runs
from splade_rescale.training.seeds import RUN_PATTERN, VARIANT_PATTERN, split_run


def _load_recipes():
    with open(Path(workflow.basedir) / "config" / "recipes.yaml") as f:
        return yaml.safe_load(f)["recipes"]


config["recipes"] = {**_load_recipes(), **config.get("recipes", {})}
try:
    validate_config(config)
except ConfigError as exc:
    raise WorkflowError(f"invalid config ({', '.join(map(str, workflow.configfiles)) or 'command line'}): {exc}")
validate(config, "../schemas/config.schema.yaml")  # fills schema defaults
# A local run that declares GPUs (--resources gpu=N) must leave a GPU job's cores free beside Lucene.
def _resource(name):
    value = workflow.global_resources.get(name)
    return getattr(value, "value", value)


if workflow.local_exec and not workflow.remote_exec and _resource("gpu"):
    try:
        check_cores(config, _resource("_cores"))
    except ConfigError as exc:
        raise WorkflowError(f"invalid config ({', '.join(map(str, workflow.configfiles)) or 'command line'}): {exc}")


class ConfigSection(dict):
    """A config section whose unknown names (a target path's wildcard) fail with a clear message."""

    def __init__(self, section, entries):
        super().__init__(entries)
        self.section = section

    def __missing__(self, name):
        raise WorkflowError(f"unknown {self.section[:-1]} {name!r} in a target path; "
                            f"config {self.section}: {', '.join(self) or '(none)'}")


for _section in ("backbones", "variants", "datasets"):
    config[_section] = ConfigSection(_section, config[_section])

BACKBONES = list(config["backbones"])
REFERENCE_MODELS = list(config["reference_models"])  # published checkpoints: no norms, rescaling, training
VARIANTS = list(config["variants"])
DATASETS = list(config["datasets"])
REFERENCE = config["reference_backbone"]
# Corpus work (encoding, impact and BM25 indexes) is keyed by corpus: MS MARCO dev, DL19 and
# DL20 share one 8.8M-passage corpus, encoded and indexed once per model.
CORPUS_OF, CORPORA = corpora(config["datasets"])
CORPUS_OF = ConfigSection("datasets", CORPUS_OF)
CORPORA = ConfigSection("corpus names", CORPORA)
# Training runs per backbone x variant, one per seed: the variant's name alone for one seed
# (every path as without seeds), else {variant}/seed-{n} (splade_rescale.training.seeds). Norms and the
# rescaled init/ are the variant's and shared by its seeds.
try:
    RUNS = {(b, v): seed_runs(config, b, v) for b in BACKBONES for v in VARIANTS}
except ConfigError as exc:
    raise WorkflowError(f"invalid config ({', '.join(map(str, workflow.configfiles)) or 'command line'}): {exc}")


def backbone_runs(backbone):
    """Every training run of a backbone, variants in config order, seeds in theirs."""
    config["backbones"][backbone]  # an unknown name (a target path's typo) fails with a clear message
    return [run for v in VARIANTS for run in RUNS[(backbone, v)]]


def prepared_corpus(corpus):
    """A corpus's preparation record (data.smk): its document count, once its data is local."""
    return f"results/data/corpora/{corpus}.json"


wildcard_constraints:
    backbone="[A-Za-z0-9_.-]+",
    ref="|".join(map(re.escape, REFERENCE_MODELS)) or "(?!)",
    variant=RUN_PATTERN,  # rescale and norms_variant: VARIANT_PATTERN (no seed folder)
    dataset="[A-Za-z0-9_.-]+",
    corpus="[A-Za-z0-9_.-]+",


def as_json(obj):
    """A config fragment for the command line; Snakemake reruns a job when it changes."""
    return json.dumps(obj, sort_keys=True)


def model_encoding(backbone):
    """The encoding section, with a reference model's own lengths over it."""
    own = config["reference_models"].get(backbone, {}).get("encoding", {})
    return {**config["encoding"], **own}


def corpus_encoding(backbone):
    """The encoding settings a corpus's vectors depend on (a query-only change reruns no corpus)."""
    keys = ("head", "precision", "doc_max_length", "quantization", "max_active_dims")
    return {k: model_encoding(backbone)[k] for k in keys}


def query_encoding(backbone):
    """The encoding settings query vectors depend on besides their length (dataset_query_length)."""
    return {k: model_encoding(backbone)[k] for k in ("head", "precision", "quantization")}


def query_sets(backbone):
    """Every dataset's query set for one model's encode_queries job: its config entry and length."""
    return {d: {"spec": config["datasets"][d], "max_length": dataset_query_length(backbone, d)} for d in DATASETS}


def dataset_query_length(backbone, dataset):
    """A dataset's query length for a model: the dataset's own, BEIR's, or the MS MARCO one."""
    return query_max_length(model_encoding(backbone), config["datasets"][dataset])


def torch_device():
    return config.get("device", "auto")


# Settings that change how fast a model job runs, not what it writes. They reach the jobs as
# environment variables (every job's shell inherits them; a cluster job's Snakemake sets them
# again when it reads this file), so they are neither params nor part of a rule's command text:
# editing them (a smaller batch after an out-of-memory error, another device) reruns nothing.
os.environ["SPLADE_RESCALE_DEVICE"] = torch_device()
os.environ["SPLADE_RESCALE_RUNTIME"] = as_json({
    "batch_size": config["encoding"]["batch_size"],
    "shard_size": config["encoding"]["shard_size"],
    "index_budget_gb": config["encoding"]["index_budget_gb"],
    "model_budget_gb": config["encoding"]["model_budget_gb"],
    # every corpus a model encodes: the per-model budget extrapolates to all their documents
    "model_corpora": {c: {"spec": spec, "prepared": prepared_corpus(c)} for c, spec in CORPORA.items()},
    "index_threads": config["retrieval"]["threads"],
})


envvars:
    "SPLADE_RESCALE_DEVICE",
    "SPLADE_RESCALE_RUNTIME",


RUNTIME_KEYS = {None: ("device", "gpus_per_job"),
                "encoding": ("batch_size", "shard_size", "index_budget_gb", "model_budget_gb", "threads"),
                "retrieval": ("threads",), "training": ("threads",)}


def report_config():
    """The config the tables and figures read, without the runtime settings (editing those reruns no report)."""
    out = {k: v for k, v in config.items() if k not in RUNTIME_KEYS[None]}
    for section, keys in RUNTIME_KEYS.items():
        if section and section in out:
            out[section] = {k: v for k, v in out[section].items() if k not in keys}
    return out


def gpu_count():
    """GPUs a model job (train, encode) asks the scheduler for.

    The scheduler cannot see what `device: auto` will find inside the job, so the request
    follows `gpus_per_job` (0 or 1): by default 1, or 0 when `device: cpu`. A cluster
    without GPUs sets `gpus_per_job: 0` (a GPU request fails there at sbatch); `device: auto`
    then runs on the CPU. A contradiction with `device` stops the workflow here.
    """
    device = str(config.get("device", "auto"))
    gpus = config.get("gpus_per_job")
    if gpus is None:
        return 0 if device == "cpu" else 1
    if device == "cpu" and gpus > 0:
        raise WorkflowError(f"gpus_per_job: {gpus} contradicts device: cpu (set gpus_per_job: 0, or device: auto)")
    if device.startswith("cuda") and gpus == 0:
        raise WorkflowError(f"gpus_per_job: 0 contradicts device: {device} (a CUDA job needs a GPU)")
    return gpus


def train_gpus(backbone):
    """GPUs for one backbone's training: its explicit `train_gpus` (DDP when > 1), else gpu_count()."""
    return config["backbones"][backbone].get("train_gpus", gpu_count())


def training_launcher(gpus):
    """One process per GPU under torchrun (DDP) when a job has several GPUs."""
    if int(gpus) > 1:
        return f"torchrun --standalone --nproc-per-node={gpus} $(command -v splade-rescale)"
    return "splade-rescale"


def variant_needs_norms(variant):
    return config["variants"][variant]["policy"] == "match_reference"


def norm_files():
    return [f"results/norms/{b}.json" for b in BACKBONES] + [
        f"results/norms/{b}/{v}.json" for b in BACKBONES for v in VARIANTS
    ]


def backbone_targets(backbone):
    """Everything one backbone's chain produces (its summary file depends on it all)."""
    return (
        [f"results/norms/{backbone}.json"]
        + [f"results/norms/{backbone}/{v}.json" for v in VARIANTS]
        + [f"results/models/{backbone}/{run}/manifest.json" for run in backbone_runs(backbone)]
        + [f"results/metrics/{backbone}/{run}/{d}.json" for run in backbone_runs(backbone) for d in DATASETS]
    )


def reference_metrics():
    return [f"results/metrics/{r}/reference/{d}.json" for r in REFERENCE_MODELS for d in DATASETS]


def all_targets():
    return (
        ["results/tables/norms.md"]
        + [f"results/summary/{b}.json" for b in BACKBONES]
        + reference_metrics()
        + [f"results/metrics/bm25/{d}.json" for d in DATASETS]
        + TABLE_TARGETS
    )


def rescale_norm_inputs(w):
    """match_reference needs both head norms; a vocab_transfer calibrated to the reference, the
    reference backbone's (its probe passages' active terms) and the probe; a constant factor none."""
    spec = config["variants"][w.variant]
    if spec["policy"] == "vocab_transfer":
        inputs = {"probe": [config["probe"]["queries"], config["probe"]["passages"]]} if "calibrate" in spec else {}
        if (spec.get("calibrate") or {}).get("target_nnz") == "reference":
            inputs["ref"] = f"results/norms/{config['reference_backbone']}.json"
        return inputs
    if not variant_needs_norms(w.variant):
        return {}
    reference = spec["reference"]
    return {"own": f"results/norms/{w.backbone}.json", "ref": f"results/norms/{reference}.json"}


def rescale_options(w, input):
    """The rescale command's norms and probe options for a variant."""
    options = f"--backbone-norms {input.own} " if "own" in input.keys() else ""
    options += f"--reference-norms {input.ref} " if "ref" in input.keys() else ""
    if "probe" in input.keys():
        options += f"--probe {shlex.quote(json.dumps(config['probe']))}"
    return options
