rule encode_corpus:
    """A corpus is encoded once per model, whatever the number of query sets over it.

    The gzipped shards are temporary: Snakemake deletes them once the impact index exists.
    A killed job keeps its finished shards in a work folder beside the output
    (.{corpus}.partial); the rerun verifies them and encodes only the rest.
    Batch size, device, shard size, size budgets and threads are runtime settings
    (environment variables set in common.smk): editing them reruns no job. The documents are
    read from local files only (ir_datasets' docs store in $IR_DATASETS_HOME, built by
    prepare_corpus). The per-model budget counts the documents of every corpus from their
    preparation records, read at run time, not as inputs: adding a corpus reruns no encode.
    """
    input:
        manifest="results/models/{backbone}/{variant}/manifest.json",
        model="results/models/{backbone}/{variant}/final",
        prepared=prepared_corpus("{corpus}"),  # data.smk: the corpus local, its document count
    output:
        corpus=temp(directory("results/encoded/{backbone}/{variant}/corpora/{corpus}")),
        stats="results/encoded/{backbone}/{variant}/corpora/{corpus}.stats.json",
    params:
        corpus=lambda w: as_json(CORPORA[w.corpus]),
        encoding=lambda w: as_json(corpus_encoding(w.backbone)),
    threads: config["encoding"]["threads"]
    resources:
        gpu=gpu_count(),
    log:
        "results/logs/encode_corpus/{backbone}.{variant}.{corpus}.log",
    benchmark:
        "results/benchmarks/encode_corpus/{backbone}.{variant}.{corpus}.tsv"
    conda:
        "../../envs/pipeline.yaml"
    shell:
        "splade-rescale encode-corpus --model {input.model} --training-manifest {input.manifest} "
        "--name {wildcards.corpus} --corpus {params.corpus:q} --prepared {input.prepared} --encoding {params.encoding:q} "
        "--runtime \"$SPLADE_RESCALE_RUNTIME\" --device \"$SPLADE_RESCALE_DEVICE\" --threads {threads} --out {output.corpus} > {log} 2>&1"


rule encode_queries:
    """Every dataset's judged queries, each at its own length (BEIR: encoding.beir_query_max_length),
    in one job per model: loading the model and starting the device cost more than encoding most
    query sets. The files stay per dataset, so retrieval and evaluation stay per dataset; adding a
    dataset reruns this model's query job (and so its retrievals) once."""
    input:
        manifest="results/models/{backbone}/{variant}/manifest.json",
        model="results/models/{backbone}/{variant}/final",
        prepared=PREPARED_QUERIES,  # data.smk: ir_datasets queries and qrels cached
    output:
        queries=[f"results/encoded/{{backbone}}/{{variant}}/queries/{d}.jsonl" for d in DATASETS],
        stats=[f"results/encoded/{{backbone}}/{{variant}}/queries/{d}.jsonl.stats.json" for d in DATASETS],
    params:
        query_sets=lambda w: as_json(query_sets(w.backbone)),
        encoding=lambda w: as_json(query_encoding(w.backbone)),
    threads: 1  # query sets are small: one thread, so that two run side by side on a CPU
    resources:
        gpu=gpu_count(),
    log:
        "results/logs/encode_queries/{backbone}.{variant}.log",
    benchmark:
        "results/benchmarks/encode_queries/{backbone}.{variant}.tsv"
    conda:
        "../../envs/pipeline.yaml"
    shell:
        "splade-rescale encode-queries --model {input.model} --training-manifest {input.manifest} "
        "--query-sets {params.query_sets:q} --encoding {params.encoding:q} --runtime \"$SPLADE_RESCALE_RUNTIME\" "
        "--device \"$SPLADE_RESCALE_DEVICE\" --threads {threads} "
        "--out-dir results/encoded/{wildcards.backbone}/{wildcards.variant}/queries > {log} 2>&1"


rule impact_index:
    input:
        "results/encoded/{backbone}/{variant}/corpora/{corpus}",
    output:
        directory("results/indexes/{backbone}/{variant}/{corpus}"),
    threads: config["retrieval"]["threads"]
    log:
        "results/logs/index/{backbone}.{variant}.{corpus}.log",
    benchmark:
        "results/benchmarks/index/{backbone}.{variant}.{corpus}.tsv"
    conda:
        "../../envs/pipeline.yaml"
    shell:
        "splade-rescale index --collection {input} --threads {threads} --out {output} > {log} 2>&1"


rule bm25_index:
    input:
        prepared_corpus("{corpus}"),
    output:
        directory("results/indexes/bm25/{corpus}"),
    params:
        corpus=lambda w: as_json(CORPORA[w.corpus]),
    threads: config["retrieval"]["threads"]
    log:
        "results/logs/index/bm25.{corpus}.log",
    benchmark:
        "results/benchmarks/index/bm25.{corpus}.tsv"
    conda:
        "../../envs/pipeline.yaml"
    shell:
        "splade-rescale bm25-index --name {wildcards.corpus} --corpus {params.corpus:q} --prepared {input} "
        "--threads {threads} --out {output} > {log} 2>&1"
