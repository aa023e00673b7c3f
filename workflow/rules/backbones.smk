rule fetch_backbone:
    output:
        manifest="results/backbones/{backbone}/manifest.json",
        model=directory("results/backbones/{backbone}/model"),
    params:
        spec=lambda w: as_json(config["backbones"][w.backbone]),
    log:
        "results/logs/fetch_backbone/{backbone}.log",
    benchmark:
        "results/benchmarks/fetch_backbone/{backbone}.tsv"
    retries: 2
    conda:
        "../../envs/pipeline.yaml"
    shell:
        "splade-rescale fetch-backbone --name {wildcards.backbone} --spec {params.spec:q} "
        "--out results/backbones/{wildcards.backbone} > {log} 2>&1"
