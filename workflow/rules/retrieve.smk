from splade_rescale.retrieval.lucene import MEM_MB
from splade_rescale.rule_params import search_spec


rule impact_retrieve:
    """A dataset's run from a model's impact index. Its query vectors are an ancient input, so a
    rerun of the model's one query job (a dataset added) reruns no other dataset's search; what the
    vectors are made from is in the params instead (rule_params.search_spec)."""
    input:
        index=lambda w: res(f"indexes/{w.backbone}/{w.run}/{CORPUS_OF[w.dataset]}"),
        queries=ancient(res("encoded/{backbone}/{run}/queries/{dataset}.jsonl")),
        settings=lambda w: settings(f"query-encoding.{w.backbone}", f"queries.{w.dataset}",
                                    f"search.{w.dataset}"),
    output:
        run=res("runs/{backbone}/{run}/{dataset}.trec"),
        stats=res("runs/{backbone}/{run}/{dataset}.stats.json"),
    params:
        search=lambda w: as_json(search_spec(config, w.backbone, w.dataset)),
        k=config["retrieval"]["k"],
    threads: THREADS["lucene"]
    resources:
        mem_mb=MEM_MB["impact_retrieve"],
    log:
        res("logs/retrieve/{backbone}.{run}.{dataset}.log"),
    benchmark:
        res("benchmarks/retrieve/{backbone}.{run}.{dataset}.tsv")
    conda:
        "../../envs/pipeline.yaml"
    shell:
        "splade-rescale retrieve --index {input.index} --queries {input.queries} --name {wildcards.dataset} "
        "--dataset {params.search:q} --k {params.k} --threads {threads} --mem-mb {resources.mem_mb} --tag {wildcards.backbone}.{wildcards.run} "
        "--run {output.run} --stats {output.stats} > {log} 2>&1"


rule bm25_retrieve:
    """BM25's run of a dataset. Local query and qrels files are ancient inputs: their judged queries'
    digest is in the params (rule_params.search_spec), so a qrels edit that keeps them reruns no search."""
    input:
        index=lambda w: res(f"indexes/bm25/{CORPUS_OF[w.dataset]}"),
        local=lambda w: [ancient(f) for f in dataset_files(config["datasets"][w.dataset], "queries", "qrels")],
        settings=lambda w: settings(f"search.{w.dataset}"),
    output:
        run=res("runs/bm25/{dataset}.trec"),
        stats=res("runs/bm25/{dataset}.stats.json"),
    params:
        search=lambda w: as_json(search_spec(config, None, w.dataset)),
        k=config["retrieval"]["k"],
    threads: THREADS["lucene"]
    resources:
        mem_mb=MEM_MB["bm25_retrieve"],
    log:
        res("logs/retrieve/bm25.{dataset}.log"),
    benchmark:
        res("benchmarks/retrieve/bm25.{dataset}.tsv")
    conda:
        "../../envs/pipeline.yaml"
    shell:
        "splade-rescale bm25-retrieve --index {input.index} --name {wildcards.dataset} --dataset {params.search:q} "
        "--k {params.k} --threads {threads} --mem-mb {resources.mem_mb} --run {output.run} --stats {output.stats} > {log} 2>&1"
