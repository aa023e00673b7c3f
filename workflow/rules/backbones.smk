from splade_rescale.rule_params import backbone_spec


rule fetch_backbone:
    input:
        local_backbone_files,
    output:
        manifest=res("backbones/{backbone}/manifest.json"),
        model=directory(res("backbones/{backbone}/model")),
    params:
        spec=lambda w: as_json(backbone_spec(config["backbones"][w.backbone])),
        out_dir=lambda w, output: Path(output.manifest).parent,
    log:
        res("logs/fetch_backbone/{backbone}.log"),
    benchmark:
        res("benchmarks/fetch_backbone/{backbone}.tsv")
    retries: 2
    conda:
        "../../envs/pipeline.yaml"
    shell:
        "splade-rescale fetch-backbone --name {wildcards.backbone} --spec {params.spec:q} "
        "--out {params.out_dir} > {log} 2>&1"
