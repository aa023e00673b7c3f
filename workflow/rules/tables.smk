TABLE_NAMES = ["in_domain", "beir", "efficiency", "training"]
TABLE_TARGETS = [f"results/tables/{t}.md" for t in TABLE_NAMES]


rule backbone_summary:
    """One backbone's whole chain: `snakemake results/summary/{backbone}.json` reruns just it."""
    input:
        lambda w: backbone_targets(w.backbone),
    output:
        "results/summary/{backbone}.json",
    log:
        "results/logs/summary/{backbone}.log",
    conda:
        "../../envs/pipeline.yaml"
    shell:
        "splade-rescale summary --backbone {wildcards.backbone} --inputs {input} --out {output} > {log} 2>&1"


rule tables:
    input:
        summaries=expand("results/summary/{backbone}.json", backbone=BACKBONES),
        bm25=expand("results/metrics/bm25/{dataset}.json", dataset=DATASETS),
        norms="results/tables/norms.csv",
    output:
        [f"results/tables/{t}.{ext}" for t in TABLE_NAMES for ext in ("md", "csv", "tex")],
    params:
        config=as_json(config),
    log:
        "results/logs/tables.log",
    conda:
        "../../envs/pipeline.yaml"
    shell:
        "splade-rescale tables --config {params.config:q} --summaries {input.summaries} "
        "--bm25 {input.bm25} --out-dir results/tables > {log} 2>&1"
