rule encode:
    """One model load encodes a dataset's corpus and its judged queries."""
    input:
        manifest="results/models/{backbone}/{variant}/manifest.json",
        model="results/models/{backbone}/{variant}/final",
    output:
        corpus=directory("results/encoded/{backbone}/{variant}/{dataset}/corpus"),
        corpus_stats="results/encoded/{backbone}/{variant}/{dataset}/corpus.stats.json",
        queries="results/encoded/{backbone}/{variant}/{dataset}/queries.jsonl",
        query_stats="results/encoded/{backbone}/{variant}/{dataset}/queries.jsonl.stats.json",
    params:
        dataset=lambda w: as_json(config["datasets"][w.dataset]),
        encoding=as_json(config["encoding"]),
        device=torch_device(),
        out="results/encoded/{backbone}/{variant}/{dataset}",
    threads: 2
    resources:
        gpu=gpu_count(),
    log:
        "results/logs/encode/{backbone}.{variant}.{dataset}.log",
    benchmark:
        "results/benchmarks/encode/{backbone}.{variant}.{dataset}.tsv"
    conda:
        "../../envs/pipeline.yaml"
    shell:
        "splade-rescale encode --model {input.model} --training-manifest {input.manifest} "
        "--name {wildcards.dataset} --dataset {params.dataset:q} --encoding {params.encoding:q} "
        "--device {params.device} --threads {threads} --out {params.out} > {log} 2>&1"


rule impact_index:
    input:
        "results/encoded/{backbone}/{variant}/{dataset}/corpus",
    output:
        directory("results/indexes/{backbone}/{variant}/{dataset}"),
    threads: config["retrieval"]["threads"]
    log:
        "results/logs/index/{backbone}.{variant}.{dataset}.log",
    benchmark:
        "results/benchmarks/index/{backbone}.{variant}.{dataset}.tsv"
    conda:
        "../../envs/pipeline.yaml"
    shell:
        "splade-rescale index --collection {input} --threads {threads} --out {output} > {log} 2>&1"


rule bm25_index:
    output:
        directory("results/indexes/bm25/{dataset}"),
    params:
        dataset=lambda w: as_json(config["datasets"][w.dataset]),
    threads: config["retrieval"]["threads"]
    log:
        "results/logs/index/bm25.{dataset}.log",
    benchmark:
        "results/benchmarks/index/bm25.{dataset}.tsv"
    conda:
        "../../envs/pipeline.yaml"
    shell:
        "splade-rescale bm25-index --name {wildcards.dataset} --dataset {params.dataset:q} --threads {threads} --out {output} > {log} 2>&1"
