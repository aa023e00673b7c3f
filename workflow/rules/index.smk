rule encode_corpus:
    """A corpus is encoded once per model, whatever the number of query sets over it.

    The gzipped shards are temporary: Snakemake deletes them once the impact index exists.
    """
    input:
        manifest="results/models/{backbone}/{variant}/manifest.json",
        model="results/models/{backbone}/{variant}/final",
    output:
        corpus=temp(directory("results/encoded/{backbone}/{variant}/corpora/{corpus}")),
        stats="results/encoded/{backbone}/{variant}/corpora/{corpus}.stats.json",
    params:
        corpus=lambda w: as_json(CORPORA[w.corpus]),
        encoding=lambda w: as_json(corpus_encoding(w.backbone)),
        device=torch_device(),
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
        "--name {wildcards.corpus} --corpus {params.corpus:q} --encoding {params.encoding:q} "
        "--device {params.device} --threads {threads} --out {output.corpus} > {log} 2>&1"


rule encode_queries:
    """A dataset's judged queries, at its own query length (BEIR: encoding.beir_query_max_length)."""
    input:
        manifest="results/models/{backbone}/{variant}/manifest.json",
        model="results/models/{backbone}/{variant}/final",
    output:
        queries="results/encoded/{backbone}/{variant}/queries/{dataset}.jsonl",
        stats="results/encoded/{backbone}/{variant}/queries/{dataset}.jsonl.stats.json",
    params:
        dataset=lambda w: as_json(config["datasets"][w.dataset]),
        encoding=lambda w: as_json(query_encoding(w.backbone)),
        max_length=lambda w: dataset_query_length(w.backbone, w.dataset),
        device=torch_device(),
    threads: 1  # a query set is small: one thread, so that two run side by side on a CPU
    resources:
        gpu=gpu_count(),
    log:
        "results/logs/encode_queries/{backbone}.{variant}.{dataset}.log",
    benchmark:
        "results/benchmarks/encode_queries/{backbone}.{variant}.{dataset}.tsv"
    conda:
        "../../envs/pipeline.yaml"
    shell:
        "splade-rescale encode-queries --model {input.model} --training-manifest {input.manifest} "
        "--name {wildcards.dataset} --dataset {params.dataset:q} --encoding {params.encoding:q} "
        "--max-length {params.max_length} --device {params.device} --threads {threads} "
        "--out {output.queries} > {log} 2>&1"


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
        "splade-rescale bm25-index --name {wildcards.corpus} --corpus {params.corpus:q} --threads {threads} "
        "--out {output} > {log} 2>&1"
