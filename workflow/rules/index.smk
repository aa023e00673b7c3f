from splade_rescale.retrieval.lucene import MEM_MB
from splade_rescale.rule_params import corpus_encoding, query_encoding, query_sets

ENCODE_CORPUS_INPUT = dict(
    manifest=judged_manifest,
    model=res("models/{backbone}/{run}/final"),
    prepared=prepared_corpus("{corpus}"),  # data.smk: the corpus local, its document count
    settings=lambda w: settings(f"corpus-encoding.{w.backbone}"),
)
ENCODE_CORPUS_CMD = (
    "splade-rescale encode-corpus --model {input.model} --training-manifest {input.manifest} "
    "--name {wildcards.corpus} --corpus {params.corpus:q} --prepared {input.prepared} --encoding {params.encoding:q} "
    "--runtime \"$SPLADE_RESCALE_RUNTIME\" --device \"$SPLADE_RESCALE_DEVICE\" --gpus {resources.gpu} --threads {threads} "
    "--out {output.corpus} {params.part} {params.reuse} > {log} 2>&1")


rule encode_corpus:
    """A corpus is encoded once per model, whatever the number of query sets over it.

    The gzipped shards are temporary: Snakemake deletes them once the impact index exists.
    A killed job keeps its finished shards in a work folder beside the output
    (.{corpus}.partial), keyed by what made them; the rerun verifies them and encodes only the rest.
    Batch size, device, shard size, size budgets and threads are runtime settings
    (environment variables set in common.smk): editing them reruns no job. The documents are
    read from local files only (ir_datasets' docs store in $IR_DATASETS_HOME, built by
    prepare_corpus). The per-model budget counts the documents of every corpus from their
    preparation records, read at run time, not as inputs: adding a corpus reruns no encode. A corpus
    that declares a source of vectors (datasets.*.vectors_from) waits for the source's collection of
    the same model, copies the lines of the documents both hold (by the digests of rule corpus_digests)
    and encodes the rest: the collection of a plain encode (encoding.reuse).
    """
    input:
        unpack(reused_vectors),
        **ENCODE_CORPUS_INPUT,
    output:
        corpus=temp(directory(res("encoded/{backbone}/{run}/corpora/{corpus}"))),
        stats=res("encoded/{backbone}/{run}/corpora/{corpus}.stats.json"),
    wildcard_constraints:
        corpus=WHOLE,
    params:
        corpus=lambda w: as_json(CORPORA[w.corpus]),
        encoding=lambda w: as_json(corpus_encoding(config, w.backbone)),
        part="",
        reuse=reuse_args,
    threads: THREADS["encode"]
    priority: lambda w: GPU_JOB_PRIORITY[w.backbone]
    resources:
        gpu=gpu_count(),
        mem_mb=encode_mem_mb,
    log:
        res("logs/encode_corpus/{backbone}.{run}.{corpus}.log"),
    benchmark:
        res("benchmarks/encode_corpus/{backbone}.{run}.{corpus}.tsv")
    conda:
        "../../envs/pipeline.yaml"
    shell:
        ENCODE_CORPUS_CMD


use rule encode_corpus as encode_corpus_part with:
    output:
        corpus=temp(directory(res("encoded/{backbone}/{run}/corpora/{corpus}.parts/{part}-of-{parts}"))),
        stats=temp(res("encoded/{backbone}/{run}/corpora/{corpus}.parts/{part}-of-{parts}.stats.json")),
    wildcard_constraints:
        corpus=PARTED,
        part=r"\d+",
        parts=r"\d+",
    params:
        corpus=lambda w: as_json(CORPORA[w.corpus]),
        encoding=lambda w: as_json(corpus_encoding(config, w.backbone)),
        part=lambda w: f"--part {w.part} --parts {w.parts}",
        reuse=reuse_args,
    log:
        res("logs/encode_corpus/{backbone}.{run}.{corpus}.{part}-of-{parts}.log"),
    benchmark:
        res("benchmarks/encode_corpus/{backbone}.{run}.{corpus}.{part}-of-{parts}.tsv")


rule join_corpus_parts:
    """A big corpus's collection from its parts: hard links in corpus order, the stats summed. No GPU, no copy."""
    input:
        parts=lambda w: corpus_part_paths(w),
        stats=lambda w: [f"{p}.stats.json" for p in corpus_part_paths(w)],  # read beside each part
    output:
        corpus=temp(directory(res("encoded/{backbone}/{run}/corpora/{corpus}"))),
        stats=res("encoded/{backbone}/{run}/corpora/{corpus}.stats.json"),
    wildcard_constraints:
        corpus=PARTED,
    localrule: True
    log:
        res("logs/encode_corpus/{backbone}.{run}.{corpus}.join.log"),
    conda:
        "../../envs/pipeline.yaml"
    shell:
        "splade-rescale join-parts --parts {input.parts} --out {output.corpus} > {log} 2>&1"


rule encode_queries:
    """Every dataset's judged queries, each at its own length (BEIR: encoding.beir_query_max_length),
    in one job per model: loading the model and starting the device cost more than encoding most
    query sets. The files stay per dataset, so retrieval and evaluation stay per dataset. Adding a
    dataset reruns this job once per model; the searches of the other datasets read their query
    files as ancient inputs, keyed instead by their query set's params (rule_params.search_spec),
    so they do not rerun."""
    input:
        manifest=judged_manifest,
        model=res("models/{backbone}/{run}/final"),
        prepared=PREPARED_QUERIES,  # data.smk: ir_datasets queries and qrels cached
        local=local_query_files(),
        settings=lambda w: settings(f"query-encoding.{w.backbone}", *(f"queries.{d}" for d in DATASETS)),
    output:
        queries=[res(f"encoded/{{backbone}}/{{run}}/queries/{d}.jsonl") for d in DATASETS],
        stats=[res(f"encoded/{{backbone}}/{{run}}/queries/{d}.jsonl.stats.json") for d in DATASETS],
    params:
        query_sets=lambda w: as_json(query_sets(config, w.backbone)),
        encoding=lambda w: as_json(query_encoding(config, w.backbone)),
        out_dir=lambda w, output: Path(output.queries[0]).parent,
    threads: 1  # query sets are small: one thread, so that two run side by side on a CPU
    priority: lambda w: GPU_JOB_PRIORITY[w.backbone]
    resources:
        gpu=gpu_count(),
        mem_mb=lambda w: gpu_job_mem_mb(w.backbone),
    log:
        res("logs/encode_queries/{backbone}.{run}.log"),
    benchmark:
        res("benchmarks/encode_queries/{backbone}.{run}.tsv")
    conda:
        "../../envs/pipeline.yaml"
    shell:
        "splade-rescale encode-queries --model {input.model} --training-manifest {input.manifest} "
        "--query-sets {params.query_sets:q} --encoding {params.encoding:q} --runtime \"$SPLADE_RESCALE_RUNTIME\" "
        "--device \"$SPLADE_RESCALE_DEVICE\" --gpus {resources.gpu} --threads {threads} --out-dir {params.out_dir} "
        "> {log} 2>&1"


rule impact_index:
    """The impact index of one encoded corpus. Which builder writes it (retrieval.impact_indexer:
    direct, or Anserini's IndexCollection) is a runtime setting: both write the same postings,
    so editing it reruns no job. Anserini's index of a finished one: rule anserini_reference_index
    (not --forcerun impact_index: the shards are gone, and that would encode the corpus again).
    mem_mb (retrieval.lucene.MEM_MB) sets the JVM heap; a runtime setting, as the threads."""
    input:
        res("encoded/{backbone}/{run}/corpora/{corpus}"),
    output:
        directory(res("indexes/{backbone}/{run}/{corpus}")),
    # The direct builder keeps about one core busy whatever its threads (its Python side holds the
    # GIL; benchmarks/results/bench_impact_index.json): one thread, so that index jobs run side by side.
    threads: 1 if config["retrieval"]["impact_indexer"] == "direct" else THREADS["lucene"]
    resources:
        mem_mb=MEM_MB["impact_index"],
    log:
        res("logs/index/{backbone}.{run}.{corpus}.log"),
    benchmark:
        res("benchmarks/index/{backbone}.{run}.{corpus}.tsv")
    conda:
        "../../envs/pipeline.yaml"
    shell:
        "splade-rescale index --collection {input} --threads {threads} --mem-mb {resources.mem_mb} "
        "--runtime \"$SPLADE_RESCALE_RUNTIME\" --out {output} > {log} 2>&1"


rule anserini_reference_index:
    """Anserini's IndexCollection index of a finished impact index, to check the direct builder against:
    built from that index's postings (its shards are gone), so nothing is encoded again. The job fails
    unless both hold the same postings statistics. Asked for by path, one corpus of one model:
    snakemake --cores 8 results/{experiment}/reference_indexes/{backbone}/{run}/{corpus}.json"""
    input:
        res("indexes/{backbone}/{run}/{corpus}"),
    output:
        index=directory(res("reference_indexes/{backbone}/{run}/{corpus}")),
        summary=res("reference_indexes/{backbone}/{run}/{corpus}.json"),
    threads: THREADS["lucene"]
    resources:
        mem_mb=MEM_MB["anserini_reference_index"],
    log:
        res("logs/reference_index/{backbone}.{run}.{corpus}.log"),
    benchmark:
        res("benchmarks/reference_index/{backbone}.{run}.{corpus}.tsv")
    conda:
        "../../envs/pipeline.yaml"
    shell:
        "splade-rescale reference-index --index {input} --threads {threads} --mem-mb {resources.mem_mb} "
        "--out {output.index} --summary {output.summary} > {log} 2>&1"


rule bm25_index:
    input:
        prepared_corpus("{corpus}"),
    output:
        directory(res("indexes/bm25/{corpus}")),
    params:
        corpus=lambda w: as_json(CORPORA[w.corpus]),
    threads: THREADS["lucene"]
    resources:
        mem_mb=MEM_MB["bm25_index"],
    log:
        res("logs/index/bm25.{corpus}.log"),
    benchmark:
        res("benchmarks/index/bm25.{corpus}.tsv")
    conda:
        "../../envs/pipeline.yaml"
    shell:
        "splade-rescale bm25-index --name {wildcards.corpus} --corpus {params.corpus:q} --prepared {input} "
        "--threads {threads} --mem-mb {resources.mem_mb} --out {output} > {log} 2>&1"
