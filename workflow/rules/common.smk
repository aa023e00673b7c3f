# Shared by all rules: config validation (before any job runs), wildcard constraints,
# and the functions that turn the config into file lists.
import json
import math
import os
import re
from pathlib import Path

import yaml
from snakemake.logging import logger
from snakemake.utils import validate

from splade_rescale.config import (check_results_layout, gpus_fed, gpus_per_job, host_memory_mb, local_threads,
                                   validate_config, visible_device_ids, wsl_gpu)
from splade_rescale.costs.plan import build_plan, gpu_job_host_gib, load_throughputs
from splade_rescale.retrieval.lucene import MEM_MB
from splade_rescale.gpus import (CPU_TORCH_VAR, POOL_VAR, check_claims_folder, claims_folder, hide_gpus,
                                 no_gpu_shown, torch_build, torch_label)
from splade_rescale.costs.model_shapes import (check_architectures, estimated_parameters, gpu_job_priorities,
                                               train_job_priorities)
from splade_rescale.data.corpora import corpora, corpus_parts, dataset_files, known_docs
from splade_rescale.encoding.reuse import declared_sources
from splade_rescale.errors import ConfigError
from splade_rescale.rule_params import settings_records, training_cadence, training_data, verdict_floors
from splade_rescale.runs import RUN_PATTERN, VARIANT_PATTERN, split_run
from splade_rescale.training.data import streamed_files
from splade_rescale.training.recipes import resolve_recipe, seed_runs
from splade_rescale.training.verdict import judge_files


def _load_recipes():
    with open(Path(workflow.basedir) / "config" / "recipes.yaml") as f:
        return yaml.safe_load(f)["recipes"]


config["recipes"] = {**_load_recipes(), **config.get("recipes", {})}
try:
    validate_config(config)
except ConfigError as exc:
    raise WorkflowError(f"invalid config ({', '.join(map(str, workflow.configfiles)) or 'command line'}): {exc}")
validate(config, "../schemas/config.schema.yaml")  # fills schema defaults
try:
    check_architectures(config)  # from each model's config.json, so never after a download
except ConfigError as exc:
    raise WorkflowError(f"invalid config ({', '.join(map(str, workflow.configfiles)) or 'command line'}): {exc}")
# Every output of a config lands under results/{experiment}/: demo, miniature and paper
# runs share one checkout without touching each other's files.
RESULTS = f"results/{config['experiment']}"
try:
    check_results_layout(Path("results"))
except ConfigError as exc:
    raise WorkflowError(str(exc))


def res(path):
    """``path`` inside this experiment's results folder."""
    return f"{RESULTS}/{path}"


def _resource(name):
    value = workflow.global_resources.get(name)
    return getattr(value, "value", value)


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

# A local published checkpoint that is not there, said first and in one line: the DAG's own errors follow
# (the input function's, then Snakemake's for the rules it tried instead), and a target that does not
# need the model still runs.
for _name, _spec in (config.get("published_models") or {}).items():
    if _spec.get("source") == "local" and not (Path(_spec["path"]).expanduser() / "config.json").is_file():
        logger.error(f"published_models.{_name}.path: no checkpoint at {_spec['path']} (no config.json); point it "
                     "at a saved SPLADE model folder (the demo's: `make demo-model`); errors after this follow from it")

BACKBONES = list(config["backbones"])
PUBLISHED_MODELS = list(config["published_models"])  # published checkpoints: no norms, rescaling, training
VARIANTS = list(config["variants"])
DATASETS = list(config["datasets"])
REFERENCE = config["reference_backbone"]
TRAIN_DATA = training_data(config["training"]["data"])  # without its prose: a note reruns nothing
MINED = TRAIN_DATA["source"] == "beir_local" and TRAIN_DATA.get("negatives") == "bm25"  # rule mine_negatives
# Corpus work (encoding, impact and BM25 indexes) is keyed by corpus: MS MARCO dev, DL19 and
# DL20 share one 8.8M-passage corpus, encoded and indexed once per model.
CORPUS_OF, CORPORA = corpora(config["datasets"])
CORPUS_OF = ConfigSection("datasets", CORPUS_OF)
CORPORA = ConfigSection("corpus names", CORPORA)
try:  # corpus -> the corpus whose vectors it copies where the two hold the same document (encoding.reuse)
    VECTORS_FROM = declared_sources(config["datasets"])
except ConfigError as exc:
    raise WorkflowError(f"invalid config ({', '.join(map(str, workflow.configfiles)) or 'command line'}): {exc}")
# Training runs per backbone x variant, one per seed: the variant's name alone for one seed
# (every path as without seeds), else {variant}/seed-{n} (splade_rescale.runs). Norms and the
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
    return res(f"data/corpora/{corpus}.json")


def corpus_digests(corpus):
    """A corpus's document digests (data.smk), beside its preparation record: what tells a declared corpus's
    encode which documents its source holds (encoding.reuse)."""
    return res(f"data/corpora/{corpus}.digests")


def vectors_overlap(corpus):
    """The record of how many of a declaring corpus's documents its source holds (data.smk)."""
    return res(f"data/corpora/{corpus}.overlap.json")


def reused_vectors(w):
    """A declaring corpus's encode inputs (datasets.*.vectors_from): the source's collection of the same model
    and both corpora's digests; none for any other corpus."""
    source = VECTORS_FROM.get(w.corpus)
    if source is None:
        return {}
    return {"vectors_from": res(f"encoded/{w.backbone}/{w.run}/corpora/{source}"),
            "digests": corpus_digests(w.corpus), "source_digests": corpus_digests(source)}


def reuse_args(w, input):
    """encode-corpus's arguments for a corpus that declares a source of vectors (reused_vectors)."""
    if w.corpus not in VECTORS_FROM:
        return ""
    return f"--vectors-from {input.vectors_from} --digests {input.digests} --source-digests {input.source_digests}"


wildcard_constraints:
    backbone="[A-Za-z0-9_.-]+",
    published="|".join(map(re.escape, PUBLISHED_MODELS)) or "(?!)",
    run=RUN_PATTERN,  # a training run: {variant} or {variant}/seed-{n}
    variant=VARIANT_PATTERN,  # a variant's norms and init, shared by its seeds' runs
    dataset="[A-Za-z0-9_.-]+",
    corpus="[A-Za-z0-9_.-]+",


def as_json(obj):
    """A config fragment for the command line (a param: Snakemake reruns a job when it changes).
    What each rule's fragment holds: splade_rescale.rule_params."""
    return json.dumps(obj, sort_keys=True)


def torch_device():
    return config.get("device", "auto")


# Settings that change how fast a job runs or how often it logs, not what it writes. They reach the
# jobs as environment variables (every job's shell inherits them; a cluster job's Snakemake sets them
# again when it reads this file), so they are neither params nor part of a rule's command text:
# editing them (a smaller batch after an out-of-memory error, another device, another checkpoint
# cadence) reruns nothing.
os.environ["SPLADE_RESCALE_DEVICE"] = torch_device()
os.environ["SPLADE_RESCALE_RUNTIME"] = as_json({
    "batch_size": config["encoding"]["batch_size"],
    "shard_size": config["encoding"]["shard_size"],
    "index_budget_gb": config["encoding"]["index_budget_gb"],
    "model_budget_gb": config["encoding"]["model_budget_gb"],
    # every corpus a model encodes: the per-model budget extrapolates to all their documents
    "model_corpora": {c: {"spec": spec, "prepared": prepared_corpus(c)} for c, spec in CORPORA.items()},
    "index_threads": config["retrieval"]["threads"],
    "impact_indexer": config["retrieval"]["impact_indexer"],
    # each training run's logging and checkpoint cadence (recipe keys log_every, checkpoint_every, ...)
    "training_cadence": {f"{b}/{run}": training_cadence(resolve_recipe(config, b, run))
                         for (b, _), runs in RUNS.items() for run in runs},
})


envvars:
    "SPLADE_RESCALE_DEVICE",
    "SPLADE_RESCALE_RUNTIME",


def gpu_count():
    """GPUs a model job (train, encode) asks the scheduler for (config.gpus_per_job)."""
    try:
        return gpus_per_job(config)
    except ConfigError as exc:
        raise WorkflowError(str(exc))


# A run on one machine: by default every GPU it shows runs a GPU job (train, encode) at once, each on
# device ids of its own: a job claims free ids of the pool below and sets CUDA_VISIBLE_DEVICES to
# them before torch starts (splade_rescale.gpus); `--resources gpu=N` runs N at once on the first N.
# Threads follow --cores so that the GPUs never wait behind Lucene (local_threads). A cluster job
# keeps the config's threads and the devices its scheduler gave it. --report and --lint run no job
# and give no --cores, and a cluster's executor gives --jobs (nodes): nothing here applies. The first
# line says where the GPU jobs run.
try:
    CORES = workflow.cores
except WorkflowError:
    CORES = None
LOCAL_GPUS = 0
os.environ.pop(POOL_VAR, None)  # only a run on this machine hands its jobs a pool
HOST_FLOOR_GIB = load_throughputs()["host"]["gpu_job_floor_gib"]


def stop_before_any_job(message):
    """Stop the run in one line; a dry run prints it and still plans (the DAG of a GPU config, on a laptop)."""
    # a dry run is known while this file is read, unlike workflow.dryrun; --lint reads it without envvar checks
    if not workflow.output_settings.dryrun and workflow.check_envvars:
        raise WorkflowError(message)
    logger.error(message)


if CORES and workflow.local_exec and not workflow.remote_exec and workflow.nodes is None:
    TORCH = torch_build()
    DEVICE_IDS = visible_device_ids()
    _torch = torch_label(TORCH)
    if not gpu_count():  # device: cpu or gpus_per_job: 0
        _why = "device: cpu" if torch_device() == "cpu" else "gpus_per_job: 0"
        logger.info(f"{_torch}; GPUs: none used ({_why}): GPU jobs (train, encode) run on the CPU")
        hide_gpus()
        DEVICE_IDS = []
    elif not DEVICE_IDS:
        if not torch_device().startswith("cuda"):
            logger.info(f"{_torch}; GPUs: none: GPU jobs (train, encode) run on the CPU (device: {torch_device()})")
        else:
            logger.info(f"{_torch}; GPUs: none")
            stop_before_any_job(": ".join(no_gpu_shown(torch_device())))
    elif not TORCH.get("cuda") and os.environ.get(CPU_TORCH_VAR) != "1":
        if torch_device() == "auto":  # a CPU install (make demo) on a GPU machine runs as on a laptop
            logger.warning(f"{_torch}; GPUs: {','.join(DEVICE_IDS)}, unused: GPU jobs (train, encode) run on the CPU "
                           "(device: auto with a CPU torch; `make install TORCH=cuda` runs them on the GPUs)")
            hide_gpus()
            DEVICE_IDS = []
        else:
            logger.info(f"{_torch}; GPUs: {','.join(DEVICE_IDS)}")
            raise WorkflowError(f"this machine shows {len(DEVICE_IDS)} GPU(s) but torch {TORCH.get('version')} "
                                f"has no CUDA, and the config says device: {torch_device()}: `make install "
                                "TORCH=cuda` installs the CUDA build; `device: cpu` in the config runs on the CPU")
    else:
        logger.info(f"{_torch}; GPUs: {','.join(DEVICE_IDS)}: GPU jobs (train, encode) run on them")
    if DEVICE_IDS and "CUDA_VISIBLE_DEVICES" not in os.environ and wsl_gpu():
        logger.warning("WSL2 shows no /dev/nvidiaN to count GPUs by: GPU jobs run one at a time on CUDA's GPU 0; "
                       "CUDA_VISIBLE_DEVICES=0,1 (the ids of `nvidia-smi -L`) runs one on each GPU named")
    if DEVICE_IDS:
        if not TORCH.get("cuda"):
            logger.warning(f"{CPU_TORCH_VAR}=1: GPU jobs claim GPUs of their own but run on the CPU")
        if torch_device().startswith("cuda:"):
            raise WorkflowError(f"device: {torch_device()} puts every GPU job on one GPU: use device: cuda (each job "
                                "gets GPUs of its own), and CUDA_VISIBLE_DEVICES to choose which GPUs the run uses")
        # nvidia-smi's and the container runtime's numbers are in PCI order; CUDA's own puts the fastest first
        os.environ.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
        _asked = _resource("gpu")
        if _asked is not None and _asked > len(DEVICE_IDS):
            logger.warning(f"--resources gpu={_asked}, but this machine shows {len(DEVICE_IDS)} GPU(s): "
                           f"GPU jobs run {len(DEVICE_IDS)} at once")
        workflow.register_resource("gpu", len(DEVICE_IDS) if _asked is None else min(_asked, len(DEVICE_IDS)))
        POOL = DEVICE_IDS[:_resource("gpu")]
        for _backbone, _spec in config["backbones"].items():
            if _spec.get("train_gpus", 0) > len(POOL):
                raise WorkflowError(f"backbones.{_backbone}.train_gpus: {_spec['train_gpus']}, but this run has "
                                    f"{len(POOL)} GPU(s) ({','.join(POOL)}): lower it or give the run more GPUs")
        try:
            check_claims_folder(claims_folder())
        except RuntimeError as exc:
            raise WorkflowError(str(exc))
        os.environ[POOL_VAR] = json.dumps({"ids": POOL, "claims": str(claims_folder())})
    if gpu_count():
        LOCAL_GPUS = int(_resource("gpu") or 0)
    if _resource("mem_mb") is None:  # else Snakemake starts jobs whatever memory they declare
        workflow.register_resource("mem_mb", host_memory_mb())
        logger.info(f"memory: mem_mb={_resource('mem_mb')} (this machine's, or its cgroup's limit; "
                    "--resources mem_mb=N gives another)")
THREADS = local_threads(config, CORES or 0, LOCAL_GPUS)
# Larger models' trainings first, then smaller models' encodes first, all above the CPU jobs
# (train_job_priorities, gpu_job_priorities).
GPU_JOB_PRIORITY = gpu_job_priorities({**config["backbones"], **config["published_models"]})
TRAIN_JOB_PRIORITY = train_job_priorities({**config["backbones"], **config["published_models"]})
if LOCAL_GPUS:
    logger.info(f"GPU jobs: at most {LOCAL_GPUS} at once (gpu={LOCAL_GPUS})"
                + (f", each on GPUs of its own of {','.join(POOL)} (claims in {claims_folder()})"
                   if POOL_VAR in os.environ else "")
                + f"; threads on {CORES} cores: train {THREADS['train']}, encode {THREADS['encode']}, "
                f"index and search {THREADS['lucene']}")
    try:  # the bill's index and search core-hours per GPU-hour (make plan)
        _totals = build_plan(config, load_throughputs())["totals"]
        _ratio = (_totals["index_core_h"] + _totals["retrieve_core_h"]) / (_totals["train_gpu_h"] + _totals["encode_gpu_h"])
    except Exception as exc:  # advice only: a config the bill cannot price gets no line, and still runs
        logger.debug(f"no estimate of the cores the GPUs need: {exc}")
        _ratio = None
    _fed = gpus_fed(config, CORES, LOCAL_GPUS, _ratio or 0.0)
    if _fed["at_once"] < LOCAL_GPUS:
        logger.warning(f"--cores {CORES} holds threads for at most {_fed['at_once']} GPU job(s) at once (each holds "
                       f"{min(THREADS['train'], THREADS['encode'])}), so {LOCAL_GPUS - _fed['at_once']} of the "
                       f"{LOCAL_GPUS} GPUs idle; --cores {_fed['cores_for_all']} or more keeps all busy")
    elif _ratio is not None:
        logger.info(f"{CORES} cores keep " + (f"all {LOCAL_GPUS} GPU(s)" if _fed["busy"] == LOCAL_GPUS else
                    f"about {_fed['busy']} of the {LOCAL_GPUS} GPUs") + f" busy (each GPU-hour leaves {_ratio:.2f} "
                    f"core-hours of indexing and search)" + ("" if _fed["busy"] == LOCAL_GPUS else
                    f"; --cores {_fed['cores_for_all']} keeps all busy (make plan times both)"))


# A corpus of more than PART_DOCS documents (by ir_datasets' metadata, known before any download) is encoded
# as several GPU jobs over contiguous parts (data.corpora.corpus_parts). A document's vector depends on the
# document alone, so the parts' vectors are those of one job; the jobs are the same on any number of GPUs
# (one GPU runs the parts one after another), so moving a run to more GPUs, or to SLURM, reruns no encode.
CORPUS_PARTS = {c: corpus_parts(spec) for c, spec in CORPORA.items()}
PARTED = "|".join(re.escape(c) for c, n in CORPUS_PARTS.items() if n > 1) or "(?!)"
WHOLE = "|".join(re.escape(c) for c, n in CORPUS_PARTS.items() if n == 1) or "(?!)"


def corpus_part_paths(w):
    n = CORPUS_PARTS[w.corpus]
    return [res(f"encoded/{w.backbone}/{w.run}/corpora/{w.corpus}.parts/{p}-of-{n}") for p in range(n)]


def train_gpus(backbone):
    """GPUs for one backbone's training: its explicit `train_gpus` (DDP when > 1), else gpu_count()."""
    return config["backbones"][backbone].get("train_gpus", gpu_count())


def gpu_job_mem_mb(model, documents=0):
    """Host memory (MB) of one GPU job of a model (a backbone or a published model): the plan's estimate
    (a model of unknown size counts as the paper's largest, 1B parameters)."""
    parameters = estimated_parameters({**config["published_models"], **config["backbones"]}[model])
    gib = gpu_job_host_gib(1e9 if parameters == float("inf") else parameters, HOST_FLOOR_GIB, documents)
    return math.ceil(gib * 2**30 / 1e6)


def train_mem_mb(backbone):
    """Host memory (MB) a training declares: the plan's estimate for its model, once per DDP rank."""
    return gpu_job_mem_mb(backbone) * max(1, train_gpus(backbone))


def encode_mem_mb(w):
    """Host memory (MB) an encode declares: the plan's estimate for its model and corpus (its documents by
    ir_datasets' metadata; a local corpus, unknown before preparation, counts none)."""
    return gpu_job_mem_mb(w.backbone, known_docs(CORPORA[w.corpus]) or 0)


# Snakemake runs a job that declares more memory than --resources mem_mb with that much instead, without a
# word: a Lucene job's JVM heap shrinks with it (jvm_heap_mb). Said here, once, before any job.
if _resource("mem_mb") is not None and CORES and workflow.nodes is None:
    _declared = {**{f"train ({b})": train_mem_mb(b) for b in BACKBONES},
                 **{r: mb for r, mb in MEM_MB.items() if r != "anserini_reference_index" and (MINED or r != "mine_negatives")}}
    _short = {job: mb for job, mb in _declared.items() if mb > _resource("mem_mb")}
    if _short:
        logger.warning(f"mem_mb={_resource('mem_mb')} is below what {', '.join(f'{j} ({mb})' for j, mb in _short.items())} "
                       f"declare: they run with {_resource('mem_mb')} MB, a Lucene job's JVM heap three quarters of it, "
                       f"and may run out of memory; --resources mem_mb={max(_short.values())} or more keeps their figures")


def variant_needs_norms(variant):
    return config["variants"][variant]["policy"] == "match_reference"


def norm_files():
    return [res(f"norms/{b}.json") for b in BACKBONES] + [res(f"norms/{b}/{v}.json") for b in BACKBONES for v in VARIANTS]


def backbone_targets(backbone):
    """Everything one backbone's chain produces (its summary file depends on it all)."""
    return (
        [res(f"norms/{backbone}.json")]
        + [res(f"norms/{backbone}/{v}.json") for v in VARIANTS]
        + [res(f"models/{backbone}/{run}/manifest.json") for run in backbone_runs(backbone)]
        + [res(f"metrics/{backbone}/{run}/{d}.json") for run in backbone_runs(backbone) for d in DATASETS]
    )


def published_metrics():
    return [res(f"metrics/{m}/published/{d}.json") for m in PUBLISHED_MODELS for d in DATASETS]


def all_targets():
    return (
        [res("tables/norms.md")]
        + [res(f"summary/{b}.json") for b in BACKBONES]
        + published_metrics()
        + [res(f"metrics/bm25/{d}.json") for d in DATASETS]
        + [corpus_digests(c) for c in CORPORA]
        + [vectors_overlap(c) for c in VECTORS_FROM]
        + TABLE_TARGETS
    )


def judged_manifest(w):
    """A run's manifest as the input of a stage that skips collapsed runs (encoding, evaluation).

    The verdict is judged apart from training (rule judge_training), so new collapse floors rerun
    the judgement. They change these stages' work only where they change a run's status: the
    manifest is then an ordinary input, elsewhere an ancient one, and a floor that only rewords a
    verdict reruns nothing but the judgement and the tables. Decided here, from the run's training
    record, by the same judgement the rule makes.
    """
    path = res(f"models/{w.backbone}/{w.run}/manifest.json")
    if w.backbone in PUBLISHED_MODELS:
        return path
    folder = Path(path).parent
    record, series = folder / "training.json", folder / "sparsity.csv"
    if not (Path(path).is_file() and record.is_file() and series.is_file()):
        return path
    try:
        status = json.loads(Path(path).read_text())["status"]
        floors = verdict_floors(resolve_recipe(config, w.backbone, w.run))
        same = judge_files(record, series, floors)["status"] == status
    except (OSError, ValueError, KeyError):
        same = False  # an unreadable record: the stages rerun after the judgement
    return ancient(path) if same else path


def shift_from_reference(spec):
    """A variant whose init is fitted to the reference backbone's active terms on the probe passages:
    a vocab_transfer with target_nnz: reference, a logit_shift with shift: reference."""
    return ((spec["policy"] == "vocab_transfer" and spec.get("target_nnz") == "reference")
            or (spec["policy"] == "logit_shift" and spec["shift"] == "reference"))


def rescale_norm_inputs(w):
    """match_reference needs both head norms; a variant fitted to the reference's active terms, the
    reference backbone's norms and the probe; a vocab_transfer with a target_nnz, the probe; a constant none."""
    spec = config["variants"][w.variant]
    if spec["policy"] == "logit_shift":
        return ({"probe": [config["probe"]["queries"], config["probe"]["passages"]],
                 "ref": res(f"norms/{config['reference_backbone']}.json")} if shift_from_reference(spec) else {})
    if spec["policy"] == "vocab_transfer":
        inputs = {"probe": [config["probe"]["queries"], config["probe"]["passages"]]} if "target_nnz" in spec else {}
        if shift_from_reference(spec):
            inputs["ref"] = res(f"norms/{config['reference_backbone']}.json")
        return inputs
    if not variant_needs_norms(w.variant):
        return {}
    reference = spec["reference"]
    return {"own": res(f"norms/{w.backbone}.json"), "ref": res(f"norms/{reference}.json")}


def rescale_options(w, input):
    """The rescale command's norms options for a variant."""
    options = f"--backbone-norms {input.own} " if "own" in input.keys() else ""
    options += f"--reference-norms {input.ref} " if "ref" in input.keys() else ""
    return options


def rescale_probe(w):
    """The probe section where a variant's init is fitted on it (a vocab_transfer's bias shift, a shift
    from the reference), else none."""
    spec = config["variants"][w.variant]
    fitted = (spec["policy"] == "vocab_transfer" and "target_nnz" in spec) or shift_from_reference(spec)
    return as_json(config["probe"]) if fitted else ""


# ---- local files and settings records that rules read (data files are inputs; settings.smk)

def local_backbone_files(w):
    """A local backbone's checkpoint files: an edit in place refetches it (other sources are keyed by their entry)."""
    spec = config["backbones"][w.backbone]
    folder = Path(spec["path"]).expanduser() if spec["source"] == "local" else None
    return sorted(str(p) for p in folder.rglob("*") if p.is_file()) if folder and folder.is_dir() else []


def published_checkpoint_files(w):
    """A local published checkpoint's config and weights, so that replacing them refetches (a Hub
    checkpoint's revision is in the params)."""
    spec = config["published_models"][w.published]
    if spec["source"] != "local":
        return []
    folder = Path(spec["path"]).expanduser()
    if not (folder / "config.json").is_file():
        raise WorkflowError(f"published_models.{w.published}.path: no checkpoint at {folder} (no config.json); "
                            "point it at a saved SPLADE model folder (the demo's: `make demo-model`)")
    weights = sorted(folder.glob("*.safetensors")) or sorted(folder.glob("pytorch_model*.bin"))
    return [folder / "config.json", *weights]


def local_query_files():
    """Every local dataset's query and qrels files (a subset's corpus too: its queries depend on it).

    Ancient inputs of encode_queries: their content reaches its params as each query set's digest
    (rule_params.query_set), so a qrels edit that keeps the judged queries re-encodes nothing."""
    files = []
    for d in DATASETS:
        spec = config["datasets"][d]
        files += dataset_files(spec, "queries", "qrels", *(("corpus",) if spec.get("subset") else ()))
    return [ancient(f) for f in dict.fromkeys(files)]


def evaluation_files(w):
    """The local files a dataset's evaluation reads (qrels, and queries: only judged ones count)."""
    return dataset_files(config["datasets"][w.dataset], "queries", "qrels")


SETTINGS = ConfigSection("settings records", settings_records(config, BACKBONES + PUBLISHED_MODELS))


def settings(*names):
    """The paths of settings records (settings.smk), as a stage's inputs."""
    return [res(f"settings/{name}.json") for name in names]


def streamed_inputs(w):
    """The local files a training run reads itself (an examples file, teacher scores): none where its
    examples are prepared (PREPARED_EXAMPLES, data.smk); mined examples are its examples input already."""
    if (w.backbone, w.run) in PREPARED_EXAMPLES:
        return []
    data = {k: v for k, v in TRAIN_DATA.items() if not (MINED and k == "examples")}
    return streamed_files(data, resolve_recipe(config, w.backbone, w.run))
