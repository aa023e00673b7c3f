# Data preparation: CPU jobs that make every input local before a GPU job reads it.
#
# ir_datasets downloads into its cache, $IR_DATASETS_HOME (default ~/.ir_datasets; how much room the
# paper config needs there: config/README.md) and builds its docs stores on first use.
# Done inside train or encode jobs, that would hold a GPU for hours of downloading, and jobs
# that become ready together would build the same cache at once (ir_datasets takes no lock).
# Here each cache is built by one job, before the jobs that read it; train and encode jobs
# then read only local files.
from splade_rescale.data.corpora import corpus_files, query_spec
from splade_rescale.data.prepare import training_corpus
from splade_rescale.training.data import run_stream, stream_name

try:
    # the docs store the training examples' texts come from: MS MARCO's is also an evaluation corpus
    TRAINING_CORPUS = training_corpus(TRAIN_DATA, CORPORA)
    # the examples each training run reads, prepared from a source that is not local examples already
    # (a mined beir_local split is: rule mine_negatives); one file per distinct stream
    RUN_STREAMS = {(b, run): run_stream(resolve_recipe(config, b, run)) for b in BACKBONES
                   for run in backbone_runs(b)} if TRAIN_DATA["source"] in ("ir_datasets", "tsv_triples") else {}
except (ConfigError, ValueError) as exc:
    raise WorkflowError(f"invalid config ({', '.join(map(str, workflow.configfiles)) or 'command line'}): {exc}")
STREAMS = ConfigSection("training streams", {stream_name(s): s for s in RUN_STREAMS.values()})
PREPARED_CORPORA = ConfigSection("corpus names", {**CORPORA, **dict([TRAINING_CORPUS] if TRAINING_CORPUS else [])})
# (backbone, run) -> the examples its training reads; none where they are local already
PREPARED_EXAMPLES = {run: res(f"training/examples/{stream_name(s)}.jsonl") for run, s in RUN_STREAMS.items()}
# the query preparations encode_queries waits for (local datasets need none)
PREPARED_QUERIES = [res(f"data/queries/{d}.json") for d in DATASETS if config["datasets"][d]["source"] == "ir_datasets"]


wildcard_constraints:
    stream="[A-Za-z0-9_.-]+",


rule prepare_corpus:
    """A corpus made local and counted, before any encode_corpus or bm25_index job reads it.

    ir_datasets: downloads the corpus and builds its docs store in $IR_DATASETS_HOME, one job
    per store (the encode jobs of every model then read that store). Local files and subsets
    are only counted: nothing to download. The count is what encode_corpus's size guard
    extrapolates to, so the guard runs whether or not ir_datasets knows it. Local files are inputs:
    an edit in place reruns the corpus's preparation and everything made from it.
    """
    input:
        lambda w: corpus_files(PREPARED_CORPORA[w.corpus]),
    output:
        prepared_corpus("{corpus}"),
    params:
        corpus=lambda w: as_json(PREPARED_CORPORA[w.corpus]),
    log:
        res("logs/prepare_corpus/{corpus}.log"),
    benchmark:
        res("benchmarks/prepare_corpus/{corpus}.tsv")
    conda:
        "../../envs/pipeline.yaml"
    shell:
        "splade-rescale prepare-corpus --name {wildcards.corpus} --corpus {params.corpus:q} --out {output} > {log} 2>&1"


rule corpus_digests:
    """A digest of each document's id and text, beside the corpus's preparation record: by them a corpus that
    declares a source of vectors (datasets.*.vectors_from) finds the documents its source holds (encoding.reuse)."""
    input:
        prepared_corpus("{corpus}"),
    output:
        corpus_digests("{corpus}"),
    params:
        corpus=lambda w: as_json(PREPARED_CORPORA[w.corpus]),
    log:
        res("logs/corpus_digests/{corpus}.log"),
    benchmark:
        res("benchmarks/corpus_digests/{corpus}.tsv")
    conda:
        "../../envs/pipeline.yaml"
    shell:
        "splade-rescale corpus-digests --name {wildcards.corpus} --corpus {params.corpus:q} --out {output} > {log} 2>&1"


rule vectors_overlap:
    """How many of a declaring corpus's documents its source holds (their vectors are copied, not encoded), in
    its log and record; a warning when that is under a tenth: the declaration then saves little."""
    input:
        digests=corpus_digests("{corpus}"),
        source_digests=lambda w: corpus_digests(VECTORS_FROM[w.corpus]),
    output:
        vectors_overlap("{corpus}"),
    params:
        source=lambda w: VECTORS_FROM[w.corpus],
    localrule: True
    log:
        res("logs/vectors_overlap/{corpus}.log"),
    conda:
        "../../envs/pipeline.yaml"
    shell:
        "splade-rescale vectors-overlap --name {wildcards.corpus} --digests {input.digests} --source {params.source} "
        "--source-digests {input.source_digests} --out {output} > {log} 2>&1"


rule prepare_queries:
    """An ir_datasets dataset's queries and qrels fetched into $IR_DATASETS_HOME, after its corpus
    (their archive may be the corpus's), so that encode_queries reads only local files."""
    input:
        lambda w: prepared_corpus(CORPUS_OF[w.dataset]),
    output:
        res("data/queries/{dataset}.json"),
    params:
        dataset=lambda w: as_json(query_spec(config["datasets"][w.dataset])),
    log:
        res("logs/prepare_queries/{dataset}.log"),
    benchmark:
        res("benchmarks/prepare_queries/{dataset}.tsv")
    conda:
        "../../envs/pipeline.yaml"
    shell:
        "splade-rescale prepare-queries --name {wildcards.dataset} --dataset {params.dataset:q} --out {output} "
        "> {log} 2>&1"


rule prepare_training_source:
    """An ir_datasets training source's doc pairs and queries cached once in $IR_DATASETS_HOME
    (MS MARCO triples-small: its 7.9 GB archive kept as ir_datasets' local copy; each
    prepare_training_data job maps only the triples it reads), after the docs store their texts
    come from; the prepare_training_data jobs then only read these files."""
    input:
        [prepared_corpus(TRAINING_CORPUS[0])] if TRAINING_CORPUS else [],
    output:
        res("data/training_source.json"),
    params:
        data=as_json(TRAIN_DATA),
    log:
        res("logs/prepare_training_source.log"),
    benchmark:
        res("benchmarks/prepare_training_source.tsv")
    conda:
        "../../envs/pipeline.yaml"
    shell:
        "splade-rescale prepare-training-source --data {params.data:q} --out {output} > {log} 2>&1"


rule prepare_training_data:
    """The exact examples the runs of one stream read (seed, shuffle buffer, teacher scores and
    steps x batch_size: training_data.run_stream), texts included, in a local JSONL file.

    One file per distinct stream: a recipe override that changes one backbone's steps prepares
    one more file and retrains that backbone only. ir_datasets sources read the caches that
    prepare_training_source built in $IR_DATASETS_HOME.
    """
    input:
        source=res("data/training_source.json") if TRAIN_DATA["source"] == "ir_datasets" else [],
        triples=TRAIN_DATA["path"] if TRAIN_DATA["source"] == "tsv_triples" else [],
        teacher=lambda w: STREAMS[w.stream]["teacher_scores"] or [],
    output:
        examples=res("training/examples/{stream}.jsonl"),
        record=res("training/examples/{stream}.json"),
    params:
        data=as_json(TRAIN_DATA),
        stream=lambda w: as_json(STREAMS[w.stream]),
    log:
        res("logs/prepare_training_data/{stream}.log"),
    benchmark:
        res("benchmarks/prepare_training_data/{stream}.tsv")
    conda:
        "../../envs/pipeline.yaml"
    shell:
        "splade-rescale prepare-training-data --data {params.data:q} --stream {params.stream:q} "
        "--out {output.examples} > {log} 2>&1"


localrules:
    data,


rule data:
    """Every preparation above, and nothing after it: `snakemake data` makes every input local before
    any GPU job (`--until` with these rules cannot: each waits on another's output)."""
    input:
        [prepared_corpus(c) for c in PREPARED_CORPORA],
        [corpus_digests(c) for c in CORPORA],
        [vectors_overlap(c) for c in VECTORS_FROM],
        PREPARED_QUERIES,
        sorted(set(PREPARED_EXAMPLES.values())),
        [res("training/examples.jsonl")] if MINED else [],
