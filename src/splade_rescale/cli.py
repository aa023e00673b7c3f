"""One command-line entry point, ``splade-rescale <command>``: a stage for each Snakemake rule, and
the user tools that no rule calls (``expected``: check a finished run against its expected scores;
``plan``: a config's bill and schedule before it runs; ``preflight``: this machine checked against
that plan, its speed measured).

Rules pass configuration fragments as JSON strings (so Snakemake reruns a job when its
fragment changes) and paths as arguments. Errors print one line and exit non-zero.
"""
# Over 400 lines because it is one short function per command with its arguments (the logic lives in
# the subpackages): the one place where a rule's command line is defined. (A comment, not the
# docstring: the docstring is `splade-rescale --help`.)

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path
from typing import Any, Callable

from splade_rescale.encoding.skips import SKIPPED, collapsed, skipped

log = logging.getLogger("splade_rescale")

COMMANDS: dict[str, tuple[Callable[[argparse.Namespace], None], Callable[[argparse.ArgumentParser], None]]] = {}


def command(name: str, arguments: Callable[[argparse.ArgumentParser], None]):
    def register(func: Callable[[argparse.Namespace], None]):
        COMMANDS[name] = (func, arguments)
        return func
    return register


def json_arg(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"not valid JSON ({exc.msg}): {text[:80]}") from None


# --- backbones, norms, rescaling -------------------------------------------------------------

@command("fetch-backbone", lambda p: (
    p.add_argument("--name", required=True),
    p.add_argument("--spec", type=json_arg, required=True, help="the backbone's config entry, as JSON"),
    p.add_argument("--out", required=True, type=Path, help="results/backbones/{name}"),
))
def fetch_backbone_cmd(args: argparse.Namespace) -> None:
    from splade_rescale.backbones.sources import fetch_backbone
    fetch_backbone(args.name, args.spec, args.out)


@command("fetch-published", lambda p: (
    p.add_argument("--name", required=True),
    p.add_argument("--spec", type=json_arg, required=True, help="the published model's config entry, as JSON"),
    p.add_argument("--out", required=True, type=Path, help="results/models/{name}/published"),
))
def fetch_published_cmd(args: argparse.Namespace) -> None:
    """A published SPLADE checkpoint in place of a trained model (calibration rows)."""
    from splade_rescale.backbones.published import fetch_published_model
    fetch_published_model(args.name, args.spec, args.out)


@command("measure-norms", lambda p: (
    p.add_argument("--model", required=True, type=Path),
    p.add_argument("--probe", type=json_arg, required=True, help="the config's probe section, as JSON"),
    p.add_argument("--out", required=True, type=Path),
    p.add_argument("--label", action="append", default=[], help="key=value stored in the output"),
))
def measure_norms_cmd(args: argparse.Namespace) -> None:
    from splade_rescale.model.norms import measure_model_dir
    labels = dict(item.split("=", 1) for item in args.label)
    rescale = args.model / "rescale.json"
    if rescale.is_file():
        record = json.loads(rescale.read_text())
        labels["factor"] = record["factor"]
        if "vocab_transfer" in record:  # vocabulary sizes and the probe before the bias shift
            labels["vocab_transfer"] = record["vocab_transfer"]
    measure_model_dir(args.model, args.probe, args.out, labels)


@command("norms-table", lambda p: (
    p.add_argument("--inputs", nargs="+", required=True, type=Path),
    p.add_argument("--md", required=True, type=Path),
    p.add_argument("--csv", required=True, type=Path),
))
def norms_table_cmd(args: argparse.Namespace) -> None:
    from splade_rescale.model.norms import write_norms_table
    write_norms_table(args.inputs, args.md, args.csv,
                      caption="MLM-head norms of each backbone and of each variant's initial model; "
                              "probe statistics are measured at initialisation on the fixed probe set.")


@command("rescale", lambda p: (
    p.add_argument("--backbone-dir", required=True, type=Path),
    p.add_argument("--variant", required=True),
    p.add_argument("--spec", type=json_arg, required=True, help="the variant's config entry, as JSON"),
    p.add_argument("--backbone-norms", type=Path),
    p.add_argument("--reference-norms", type=Path),
    p.add_argument("--probe", type=lambda text: json_arg(text) if text else None,
                   help="the config's probe section, as JSON (a fitted bias or logit shift; empty: none)"),
    p.add_argument("--out", required=True, type=Path),
))
def rescale_cmd(args: argparse.Namespace) -> None:
    from splade_rescale.model.rescale import rescale_backbone
    rescale_backbone(args.backbone_dir, args.out, args.variant, args.spec, args.backbone_norms,
                     args.reference_norms, args.probe)


# --- training -----------------------------------------------------------------------------

GPUS_HELP = ("GPUs of the job: in a run on one machine, ids of its own claimed from the workflow's pool "
             "(splade_rescale.gpus) and set as CUDA_VISIBLE_DEVICES")


def set_threads(threads: int | None) -> None:
    """Torch and the fast tokenizer's pool use the threads Snakemake gave the job, not every core of the machine."""
    if threads:
        import torch
        torch.set_num_threads(threads)
        os.environ.setdefault("RAYON_NUM_THREADS", str(threads))


@command("mine-negatives", lambda p: (
    jvm_args(p),
    p.add_argument("--data", type=json_arg, required=True, help="training.data, as JSON"),
    p.add_argument("--threads", type=int, default=1),
    p.add_argument("--out", required=True, type=Path),
))
def mine_negatives_cmd(args: argparse.Namespace) -> None:
    """BM25 hard negatives for a BEIR-format train split (writes the examples JSONL)."""
    import tempfile

    from splade_rescale.training.data import mine_bm25_examples
    start_jvm(args)
    with tempfile.TemporaryDirectory(prefix=".bm25-train.", dir=args.out.parent) as index_dir:
        mining = args.data.get("mining", {})
        stats = mine_bm25_examples(args.data, args.out, Path(index_dir) / "index",
                                   negatives=int(mining.get("negatives", 8)), depth=int(mining.get("depth", 100)),
                                   threads=args.threads)
    log.info("mined: %s", stats)


@command("train", lambda p: (
    p.add_argument("--init", required=True, type=Path),
    p.add_argument("--recipe", type=json_arg, required=True, help="the run's trajectory keys of its recipe, as JSON"),
    p.add_argument("--data", type=json_arg, required=True, help="training.data, as JSON"),
    p.add_argument("--examples", type=Path, help="mined examples JSONL (beir_local data)"),
    p.add_argument("--prepared", type=Path, help="the examples this recipe reads, from prepare-training-data"),
    p.add_argument("--runtime", type=lambda text: json_arg(text) if text else {}, default={},
                   help='settings that do not change the run: {"training_cadence": {RUN: {log_every, ...}}}, as JSON'),
    # not --run: DDP's launcher, which gets this command line, takes that for an abbreviation of its --run-path
    p.add_argument("--run-key", help="BACKBONE/RUN: the key of this run's cadence in --runtime"),
    p.add_argument("--gpus", type=int, default=0, help=f"{GPUS_HELP}; more than 1 starts it under DDP's launcher"),
    p.add_argument("--device", default="auto"),
    p.add_argument("--threads", type=int),
    p.add_argument("--checkpoints", required=True, type=Path),
    p.add_argument("--final", required=True, type=Path),
    p.add_argument("--log-csv", required=True, type=Path),
    p.add_argument("--record", required=True, type=Path, help="the training record (training.json)"),
    p.add_argument("--series", type=Path, help="per-step non-zeros (default: sparsity.csv beside the record)"),
))
def train_cmd(args: argparse.Namespace) -> None:
    """Train SPLADE; resumes from this run's last checkpoint; a non-finite stop is recorded, not raised."""
    import os

    from splade_rescale.gpus import claim_for_job, die_with_parent, exec_ranks
    if "LOCAL_RANK" in os.environ:
        die_with_parent()
    claim_for_job(args.gpus, f"train {args.run_key}")
    if args.gpus > 1 and "LOCAL_RANK" not in os.environ:  # one process per GPU, this same command in each
        exec_ranks(args.gpus, ["-m", "splade_rescale.cli", *sys.argv[1:]])
    from splade_rescale.rule_params import RECIPE_CADENCE
    from splade_rescale.training.train import run_training
    set_threads(args.threads)
    recipe = {**args.recipe, **(args.runtime.get("training_cadence") or {}).get(args.run_key, {})}
    if missing := [k for k in RECIPE_CADENCE if k not in recipe]:
        raise SystemExit(f"train: no {', '.join(missing)} for run {args.run_key!r}: give them in --recipe or in "
                         "--runtime's training_cadence (the workflow sets it from the recipe)")
    data = {**args.data, "examples": str(args.examples)} if args.examples else args.data
    data = {**data, "prepared": str(args.prepared)} if args.prepared else data
    record = run_training(args.init, args.final, args.log_csv, args.record, args.checkpoints, recipe, data,
                          device=args.device, series_path=args.series)
    log.info("training: %s after %d steps", record["status"], record["steps_done"])


@command("judge-training", lambda p: (
    p.add_argument("--record", required=True, type=Path, help="the run's training.json"),
    p.add_argument("--series", required=True, type=Path, help="the run's sparsity.csv"),
    p.add_argument("--floors", type=json_arg, required=True, help="the recipe's collapse_* keys, as JSON"),
    p.add_argument("--out", required=True, type=Path, help="the run's manifest: record, status and verdict"),
))
def judge_training_cmd(args: argparse.Namespace) -> None:
    """The sparsity verdict on a finished run under the collapse floors (seconds; no model is loaded)."""
    from splade_rescale.training.verdict import check_floors, judge_files
    check_floors(args.floors)
    manifest = judge_files(args.record, args.series, args.floors, args.out)
    log.info("verdict: %s%s", manifest["status"], f" ({manifest['verdict']})" if manifest.get("verdict") else "")


# --- data preparation (CPU jobs before any GPU job; ir_datasets caches in $IR_DATASETS_HOME) -----

CORPUS_HELP = "the corpus spec (splade_rescale.data.corpora), as JSON"


@command("prepare-corpus", lambda p: (
    p.add_argument("--name", required=True, help="corpus name"),
    p.add_argument("--corpus", type=json_arg, required=True, help=CORPUS_HELP),
    p.add_argument("--out", required=True, type=Path, help="JSON record with the document count"),
))
def prepare_corpus_cmd(args: argparse.Namespace) -> None:
    """Download an ir_datasets corpus and build its docs store (a local one is counted); write its count."""
    from splade_rescale.data.prepare import prepare_corpus
    prepare_corpus(args.name, args.corpus, args.out)


@command("corpus-digests", lambda p: (
    p.add_argument("--name", required=True, help="corpus name"),
    p.add_argument("--corpus", type=json_arg, required=True, help=CORPUS_HELP),
    p.add_argument("--out", required=True, type=Path, help="16 bytes per document, in corpus order"),
))
def corpus_digests_cmd(args: argparse.Namespace) -> None:
    """A digest of each document's id and text: what tells a declared corpus which vectors its source holds."""
    from splade_rescale.data.prepare import write_corpus_digests
    write_corpus_digests(args.name, args.corpus, args.out)


@command("vectors-overlap", lambda p: (
    p.add_argument("--name", required=True, help="the corpus that declares a source of vectors"),
    p.add_argument("--digests", required=True, type=Path, help="its digests (corpus-digests)"),
    p.add_argument("--source", required=True, help="the source corpus's name"),
    p.add_argument("--source-digests", required=True, type=Path, help="the source's digests"),
    p.add_argument("--out", required=True, type=Path, help="JSON record of the overlap"),
))
def vectors_overlap_cmd(args: argparse.Namespace) -> None:
    """How many of a corpus's documents its declared source holds; a warning when that saves little."""
    from splade_rescale.encoding.reuse import write_overlap
    write_overlap(args.name, args.digests, args.source, args.source_digests, args.out)


@command("prepare-queries", lambda p: (
    p.add_argument("--name", required=True, help="dataset name in the config"),
    p.add_argument("--dataset", type=json_arg, required=True, help="the dataset's config entry, as JSON"),
    p.add_argument("--out", required=True, type=Path, help="JSON record with the query and qrels counts"),
))
def prepare_queries_cmd(args: argparse.Namespace) -> None:
    """Fetch a dataset's queries and qrels into ir_datasets' cache before the query encoding."""
    from splade_rescale.data.prepare import prepare_queries
    prepare_queries(args.name, args.dataset, args.out)


@command("prepare-training-source", lambda p: (
    p.add_argument("--data", type=json_arg, required=True, help="training.data (source ir_datasets), as JSON"),
    p.add_argument("--out", required=True, type=Path, help="JSON record of what was cached"),
))
def prepare_training_source_cmd(args: argparse.Namespace) -> None:
    """Cache an ir_datasets training source's doc pairs and queries once, for every recipe's examples."""
    from splade_rescale.training.data import prepare_training_source
    prepare_training_source(args.data, args.out)


@command("prepare-training-data", lambda p: (
    p.add_argument("--data", type=json_arg, required=True, help="training.data, as JSON"),
    p.add_argument("--stream", type=json_arg, required=True,
                   help='{"seed", "shuffle_buffer", "teacher_scores", "examples"} of the runs that read it '
                        "(splade_rescale.training.data.run_stream), as JSON"),
    p.add_argument("--out", required=True, type=Path, help="examples JSONL; its record (.json) beside it"),
))
def prepare_training_data_cmd(args: argparse.Namespace) -> None:
    """Write the exact examples a recipe's training run reads (texts included) to a local JSONL file."""
    from splade_rescale.training.data import prepare_examples
    prepare_examples(args.data, args.stream, args.out)


# --- encoding, indexing, retrieval, evaluation -----------------------------------------------

def model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", required=True, type=Path)
    p.add_argument("--training-manifest", type=Path)
    p.add_argument("--encoding", type=json_arg, required=True,
                   help="the settings the vectors depend on (head, precision, quantization, lengths), as JSON")
    p.add_argument("--runtime", type=lambda text: json_arg(text) if text else {}, default={},
                   help="settings that do not change the vectors (batch_size, shard_size, index_budget_gb, "
                        "model_budget_gb, model_corpora, index_threads), as JSON; kept out of Snakemake's params "
                        "so editing them reruns nothing")
    p.add_argument("--device", default="auto")
    p.add_argument("--gpus", type=int, default=0, help=GPUS_HELP)
    p.add_argument("--threads", type=int)


RUNTIME_DEFAULTS = {"batch_size": 32, "shard_size": 100_000, "index_budget_gb": None, "model_budget_gb": None,
                    "model_corpora": {}, "index_threads": 1}  # model_corpora: name -> {"spec", "prepared"}


def _runtime(args: argparse.Namespace) -> dict[str, Any]:
    """Runtime settings: the defaults, then any given in --encoding, then --runtime."""
    return {k: args.runtime.get(k, args.encoding.get(k, v)) for k, v in RUNTIME_DEFAULTS.items()}


def _encoder(args: argparse.Namespace, texts: int | None = None):
    """The job's encoder; compiled where :func:`~splade_rescale.model.splade.worth_compiling` for ``texts``
    texts (a corpus's whole document count, so that its parts decide as one job would)."""
    from splade_rescale.encoding.corpus import load_encoder
    set_threads(args.threads)
    return load_encoder(args.model, head=args.encoding["head"], precision=args.encoding["precision"],
                        device=None if args.device == "auto" else args.device, texts=texts)


def _settings(args: argparse.Namespace, max_length: int, **budgets: Any):
    """The encoding config and the job's runtime settings as one :class:`EncodeSettings`."""
    from splade_rescale.encoding.settings import EncodeSettings
    enc, run = args.encoding, _runtime(args)
    return EncodeSettings(max_length, enc["quantization"], enc.get("max_active_dims"), run["batch_size"],
                          shard_size=run["shard_size"], index_threads=run["index_threads"], **budgets)


@command("encode-corpus", lambda p: (
    model_args(p),
    p.add_argument("--name", required=True, help="corpus name"),
    p.add_argument("--corpus", type=json_arg, required=True, help=CORPUS_HELP),
    p.add_argument("--prepared", type=Path, help="the corpus's prepare-corpus record: its document count"),
    p.add_argument("--out", required=True, type=Path, help="JsonVectorCollection folder; stats JSON beside it"),
    p.add_argument("--part", type=int, default=0, help="encode only this part (0-based) of --parts"),
    p.add_argument("--parts", type=int, default=1, help="contiguous parts the corpus is encoded in (join-parts)"),
    p.add_argument("--vectors-from", type=Path, help="the declared source corpus's collection of the same model"),
    p.add_argument("--digests", type=Path, help="with --vectors-from: this corpus's digests (corpus-digests)"),
    p.add_argument("--source-digests", type=Path, help="with --vectors-from: the source corpus's digests"),
))
def encode_corpus_cmd(args: argparse.Namespace) -> None:
    """Encode a corpus once for all its query sets (gzipped JsonVectorCollection shards).

    A collapsed model, or a corpus estimated above ``index_budget_gb`` (or, over all the
    model's corpora, above ``model_budget_gb``), leaves a SKIPPED record instead of shards:
    the later stages pass it on and the tables show it. A run killed part-way resumes after
    its last finished shard.
    """
    from splade_rescale.atomic import atomic_dir, write_json
    from splade_rescale.data.prepare import model_documents, prepared_docs, prepared_files_digest
    from splade_rescale.encoding.corpus import CorpusSource, encode_corpus
    from splade_rescale.encoding.reuse import Reuse
    from splade_rescale.encoding.shard_folder import stats_path_for
    from splade_rescale.encoding.size_guard import TooDenseError
    from splade_rescale.gpus import claim_for_job

    claim_for_job(args.gpus, f"encode-corpus {args.name} {args.model}")

    def skip(record: dict[str, Any]) -> None:
        with atomic_dir(args.out) as tmp:
            write_json(tmp / SKIPPED, record)
        write_json(stats_path_for(args.out), record)

    if record := collapsed(args.training_manifest):
        return skip(record)
    run = _runtime(args)
    model_docs = model_documents(run["model_corpora"]) if run["model_budget_gb"] else None
    total = prepared_docs(args.prepared) if args.prepared else None
    source = CorpusSource(args.name, args.corpus, ".", total,
                          prepared_files_digest(args.prepared) if args.prepared else None)
    settings = _settings(args, args.encoding["doc_max_length"], budget_gb=run["index_budget_gb"],
                         model_budget_gb=run["model_budget_gb"], model_docs=model_docs)
    try:
        encode_corpus(_encoder(args, total), args.model, source, args.out, settings, args.part, args.parts,
                      Reuse(args.digests, args.vectors_from, args.source_digests) if args.vectors_from else None)
    except TooDenseError as exc:
        log.warning("%s: %s", args.name, exc)
        skip({"status": "too dense", "reason": str(exc)})


@command("join-parts", lambda p: (
    p.add_argument("--parts", nargs="+", required=True, type=Path, help="a corpus's encoded parts, in order"),
    p.add_argument("--out", required=True, type=Path, help="the corpus's JsonVectorCollection; stats JSON beside"),
))
def join_parts_cmd(args: argparse.Namespace) -> None:
    """One collection of a corpus encoded in parts (hard links; the stats summed)."""
    from splade_rescale.encoding.parts import join_parts

    join_parts(args.parts, args.out)


@command("encode-queries", lambda p: (
    model_args(p),
    p.add_argument("--query-sets", type=json_arg, required=True,
                   help='dataset name -> {"spec": its config entry, "max_length": query tokens}, as JSON'),
    p.add_argument("--out-dir", required=True, type=Path,
                   help="folder of {dataset}.jsonl query vectors, each with its stats JSON beside"),
))
def encode_queries_cmd(args: argparse.Namespace) -> None:
    """Encode every dataset's judged queries with one model load (corpora: encode-corpus)."""
    from splade_rescale.atomic import write_json, write_text
    from splade_rescale.encoding.queries import encode_query_sets
    from splade_rescale.encoding.shard_folder import stats_path_for
    from splade_rescale.gpus import claim_for_job
    claim_for_job(args.gpus, f"encode-queries {args.model}")
    if record := collapsed(args.training_manifest):
        for name in args.query_sets:
            write_text(args.out_dir / f"{name}.jsonl", "")
            write_json(stats_path_for(args.out_dir / f"{name}.jsonl"), record)
        return
    encode_query_sets(_encoder(args), args.model, args.query_sets, args.out_dir,
                      _settings(args, max(qs["max_length"] for qs in args.query_sets.values())))


def jvm_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--mem-mb", type=int, help="memory the job may use (the rule's resources.mem_mb): the JVM "
                   "heap follows it; a runtime setting, as the threads, which also size the JVM's own threads")


def start_jvm(args: argparse.Namespace) -> None:
    """Start the JVM at the job's memory and threads, before anything else starts it at the JDK's defaults."""
    from splade_rescale.retrieval.lucene import ensure_pyserini, jvm_heap_mb
    ensure_pyserini(f"{jvm_heap_mb(args.mem_mb)}m" if args.mem_mb else None, args.threads)
    from jnius import autoclass  # only once ensure_pyserini has set the JVM's options

    runtime = autoclass("java.lang.Runtime").getRuntime()
    log.info("JVM: heap %d MB at most, %d processors", runtime.maxMemory() >> 20, runtime.availableProcessors())


@command("index", lambda p: (
    jvm_args(p),
    p.add_argument("--collection", required=True, type=Path),
    p.add_argument("--threads", type=int, default=1),
    p.add_argument("--out", required=True, type=Path),
    p.add_argument("--runtime", type=lambda text: json_arg(text) if text else {}, default={},
                   help='settings that do not change the postings: {"impact_indexer": "direct" (default) or '
                        '"anserini"}, as JSON; kept out of Snakemake\'s params so editing them reruns nothing'),
))
def index_cmd(args: argparse.Namespace) -> None:
    """Lucene impact index of a JsonVectorCollection (restarts clean)."""
    from splade_rescale.atomic import atomic_dir, write_json
    from splade_rescale.retrieval.lucene import run_build_impact_index
    if record := skipped(args.collection):
        with atomic_dir(args.out) as tmp:
            write_json(tmp / SKIPPED, record)
        return
    start_jvm(args)
    log.info("index: %s", run_build_impact_index(args.collection, args.out, args.threads,
                                                 indexer=args.runtime.get("impact_indexer", "direct")))


@command("reference-index", lambda p: (
    jvm_args(p),
    p.add_argument("--index", required=True, type=Path, help="an impact index the workflow built"),
    p.add_argument("--threads", type=int, default=1),
    p.add_argument("--out", required=True, type=Path, help="Anserini's index of the same postings"),
    p.add_argument("--summary", required=True, type=Path, help="JSON record of the check"),
))
def reference_index_cmd(args: argparse.Namespace) -> None:
    """Anserini's IndexCollection index rebuilt from an impact index's postings (no encoding), checked against it."""
    from splade_rescale.atomic import atomic_dir, write_json
    from splade_rescale.retrieval.lucene import run_reference_index
    if record := skipped(args.index):
        with atomic_dir(args.out) as tmp:
            write_json(tmp / SKIPPED, record)
        write_json(args.summary, record)
        return
    start_jvm(args)
    log.info("reference index: %s", run_reference_index(args.index, args.out, args.summary, args.threads))


def search_args(p: argparse.ArgumentParser) -> None:
    jvm_args(p)
    p.add_argument("--index", required=True, type=Path)
    p.add_argument("--name", required=True, help="dataset name in the config")
    p.add_argument("--dataset", type=json_arg, required=True, help="the dataset's config entry, as JSON")
    p.add_argument("--k", type=int, default=1000)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--tag", default="splade")
    p.add_argument("--run", required=True, type=Path)
    p.add_argument("--stats", required=True, type=Path)


@command("retrieve", lambda p: (search_args(p), p.add_argument("--queries", required=True, type=Path)))
def retrieve_cmd(args: argparse.Namespace) -> None:
    """Impact search with pretokenised query vectors; writes a TREC run and search stats."""
    from splade_rescale.atomic import write_json, write_text
    from splade_rescale.data.datasets import default_exclude_self
    from splade_rescale.retrieval.lucene import run_impact_search
    if record := skipped(args.index):
        write_text(args.run, "")
        write_json(args.stats, record)
        return
    start_jvm(args)
    run_impact_search(args.index, args.queries, args.run, k=args.k, threads=args.threads,
                      exclude_self=default_exclude_self(args.name, args.dataset), tag=args.tag,
                      stats_path=args.stats)


@command("bm25-index", lambda p: (
    jvm_args(p),
    p.add_argument("--name", required=True, help="corpus name"),
    p.add_argument("--corpus", type=json_arg, required=True, help=CORPUS_HELP),
    p.add_argument("--prepared", type=Path, help="the corpus's prepare-corpus record: its document count"),
    p.add_argument("--threads", type=int, default=1),
    p.add_argument("--out", required=True, type=Path),
))
def bm25_index_cmd(args: argparse.Namespace) -> None:
    """BM25 index (Anserini's English analyser) of a corpus (or a dataset's subset), title + text."""
    from splade_rescale.data.prepare import prepared_docs
    from splade_rescale.retrieval.lucene import run_build_bm25_index
    total = prepared_docs(args.prepared) if args.prepared else None
    start_jvm(args)
    log.info("bm25 index: %s", run_build_bm25_index(args.name, args.corpus, args.out, args.threads, total=total))


@command("bm25-retrieve", search_args)
def bm25_retrieve_cmd(args: argparse.Namespace) -> None:
    """BM25 run (k1=0.9, b=0.4) over a dataset's judged queries."""
    from splade_rescale.retrieval.lucene import run_bm25_search
    start_jvm(args)
    run_bm25_search(args.name, args.dataset, args.index, args.run, k=args.k, threads=args.threads,
                    stats_path=args.stats)


@command("evaluate", lambda p: (
    p.add_argument("--run", required=True, type=Path),
    p.add_argument("--run-stats", required=True, type=Path),
    p.add_argument("--name", required=True, help="dataset name in the config"),
    p.add_argument("--dataset", type=json_arg, required=True),
    p.add_argument("--corpus-stats", type=Path),
    p.add_argument("--query-stats", type=Path),
    p.add_argument("--index", type=Path),
    p.add_argument("--training-manifest", type=Path),
    p.add_argument("--label", action="append", default=[], help="key=value stored in the output"),
    p.add_argument("--out", required=True, type=Path),
    p.add_argument("--qrels-out", required=True, type=Path, help="the qrels as evaluated (TREC format)"),
))
def evaluate_cmd(args: argparse.Namespace) -> None:
    """ranx metrics (per query too), query-count diagnostics and efficiency statistics."""
    from splade_rescale.atomic import write_json
    from splade_rescale.data.datasets import load_dataset, write_qrels
    from splade_rescale.evaluation.evaluate import efficiency_stats, run_evaluate
    extra = {**dict(item.split("=", 1) for item in args.label), "dataset": args.name}
    ds = load_dataset(args.name, args.dataset)
    qrels = ds.qrels
    if skip := collapsed(args.training_manifest) or skipped(args.index):
        write_qrels(qrels, args.qrels_out)
        write_json(args.out, {**extra, **skip, "metric_set": args.dataset["metrics"], "metrics": None,
                              "per_query": None})
        return

    def read(path: Path | None) -> dict[str, Any] | None:
        return json.loads(path.read_text()) if path else None

    size = sum(p.stat().st_size for p in args.index.rglob("*") if p.is_file()) if args.index else None
    efficiency = efficiency_stats(read(args.query_stats), read(args.corpus_stats), size, read(args.run_stats))
    run_evaluate(args.run, qrels, args.dataset["metrics"], args.out, efficiency, {**extra, "status": "ok"},
                 qrels_path=args.qrels_out, exclude_self=ds.exclude_self)


# --- summaries, tables, figures ---------------------------------------------------------------

@command("summary", lambda p: (
    p.add_argument("--backbone", required=True),
    p.add_argument("--inputs", nargs="+", required=True, type=Path),
    p.add_argument("--out", required=True, type=Path),
))
def summary_cmd(args: argparse.Namespace) -> None:
    """Gather one backbone's norms, training records and metrics (its per-backbone target)."""
    from splade_rescale.report.summary import run_summary
    run_summary(args.backbone, args.inputs, args.out)


def report_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", type=json_arg, required=True, help="the whole config, as JSON")
    p.add_argument("--summaries", nargs="+", required=True, type=Path)
    p.add_argument("--out-dir", required=True, type=Path)


@command("tables", lambda p: (
    report_args(p),
    p.add_argument("--bm25", nargs="*", default=[], type=Path),
    p.add_argument("--published", nargs="*", default=[], type=Path, help="published models' metrics JSON"),
    p.add_argument("--norms-csv", required=True, type=Path),
))
def tables_cmd(args: argparse.Namespace) -> None:
    """The paper's tables (Markdown, CSV, LaTeX, HTML) with significance marks and provenance."""
    from splade_rescale.report.tables import run_tables
    run_tables(args.config, args.summaries, args.bm25, args.norms_csv, args.out_dir, args.published)


@command("figures", report_args)
def figures_cmd(args: argparse.Namespace) -> None:
    """The paper's figures (PNG and PDF)."""
    from splade_rescale.report.figures import run_figures
    run_figures(args.config, args.summaries, args.out_dir)


# --- user tools (no rule calls them) -----------------------------------------------------------

@command("expected", lambda p: (
    p.add_argument("--file", required=True, type=Path, help="expected scores, e.g. config/expected/demo.yaml"),
    p.add_argument("--check", type=Path, help="a finished results folder (results/demo) to compare with them"),
    p.add_argument("--render", type=Path, nargs="*", default=[], help="Markdown files whose expected-scores block "
                   "(between <!-- expected-scores:begin NAME --> and its end marker) to rewrite from --file"),
))
def expected_cmd(args: argparse.Namespace) -> None:
    """Expected scores as data: check a results folder against them, or render them into the docs."""
    from splade_rescale.report.expected import check, load_expected, render, rewrite_block
    expected = load_expected(args.file)
    for doc in args.render:
        doc.write_text(rewrite_block(doc.read_text(), args.file.stem, render(expected)))
    if args.check:
        problems = check(expected, args.check)
        print("\n".join(problems) or f"{args.check}: every run as in {args.file}")
        if problems:
            raise SystemExit(1)


@command("plan", lambda p: (
    p.add_argument("--configfile", required=True, type=Path, help="a whole workflow config, e.g. config/config.yaml"),
    p.add_argument("--throughputs", type=Path, default=None, help="per-unit figures (default config/throughputs.json)"),
    p.add_argument("--out", type=Path, help="default results/{experiment}/plan.md (and plan.json)"),
    p.add_argument("--cores", type=int, default=len(os.sched_getaffinity(0)),
                   help="snakemake --cores (default: the cores this process may use, as a container's cpuset shows)"),
    p.add_argument("--gpus", type=int, default=None,
                   help="GPUs the run uses (--resources gpu=N; default: those the workflow would see here, else 1)"),
    p.add_argument("--remaining", action="store_true",
                   help="jobs and schedule of what is still to run beside the results here (the increment of an "
                        "extended run), not of the whole config"),
))
def plan_cmd(args: argparse.Namespace) -> None:
    """The run's bill before it starts (jobs, GPU- and core-hours, disk, memory) and its schedule."""
    from splade_rescale.config import load_config
    from splade_rescale.costs.schedule import plan_run
    out = args.out or Path("results") / load_config(args.configfile)["experiment"] / "plan.md"
    print(plan_run(args.configfile, args.throughputs, args.cores, _planned_gpus(args), out,
                   remaining=args.remaining)[1])


def _planned_gpus(args: argparse.Namespace) -> int:
    """--gpus, else the GPUs this machine shows, else 1 (said in the log)."""
    from splade_rescale.config import visible_device_ids
    if args.gpus is not None:
        return args.gpus
    shown = len(visible_device_ids())
    log.info("planned for %d GPU(s) and %d cores: %s (GPUS= and PLAN_CORES= plan for another machine)",
             shown or 1, args.cores, f"this machine shows {shown}" if shown else "this machine shows none")
    return shown or 1


@command("preflight", lambda p: (
    p.add_argument("--configfile", required=True, type=Path, help="a whole workflow config, e.g. config/config.yaml"),
    p.add_argument("--cores", type=int, default=len(os.sched_getaffinity(0)),
                   help="snakemake --cores of the run (default: the cores this process may use)"),
    p.add_argument("--gpus", type=int, default=None,
                   help="GPUs the run uses (default: those this machine shows, else 1)"),
    p.add_argument("--seconds", type=float, default=30,
                   help="timed encoding per architecture, compiled and not (default 30: about ten minutes in all for "
                        "the paper's config on one GPU; less is quicker and noisier)"),
    p.add_argument("--train-steps", type=int, default=8, help="timed training steps per architecture (default 8)"),
    p.add_argument("--parity-docs", type=int, default=None,
                   help="pool passages the parity check encodes (default: all 28,606 on a GPU, 2,000 on a CPU; "
                        "judged ones first)"),
    p.add_argument("--versus", choices=["sentence-transformers"],
                   help="also time sentence-transformers' SparseEncoder side by side on the same model and texts"),
))
def preflight_cmd(args: argparse.Namespace) -> None:
    """Check this machine against the config's plan, measure its speed, print the bill here: go or no-go."""
    from splade_rescale.preflight.page import Budget, run_preflight
    budget = Budget(args.seconds, args.train_steps, args.parity_docs, bool(args.versus))
    page, data = run_preflight(args.configfile, args.cores, _planned_gpus(args), budget)
    print(page)
    if any(f["ok"] is False for f in data["findings"]):
        raise SystemExit(1)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="splade-rescale", description=__doc__)
    parser.add_argument("-v", "--verbose", action="store_true")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (func, arguments) in COMMANDS.items():
        summary = (func.__doc__ or "").strip().split("\n")[0].replace("%", "%%")  # argparse %-formats help
        p = sub.add_parser(name, help=summary or None)
        arguments(p)
        p.set_defaults(func=func)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    try:
        args.func(args)
    except Exception as exc:  # one line for the user; the traceback only with --verbose
        if args.verbose:
            log.exception("failed")
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        print(f"splade-rescale {args.command}: error: {first}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
