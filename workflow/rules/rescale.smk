rule rescale_head:
    input:
        unpack(rescale_norm_inputs),
        model=res("backbones/{backbone}/model"),
    output:
        directory(res("models/{backbone}/{variant}/init")),
    params:
        spec=lambda w: as_json(config["variants"][w.variant]),
        options=rescale_options,
        probe=rescale_probe,
    log:
        res("logs/rescale/{backbone}.{variant}.log"),
    benchmark:
        res("benchmarks/rescale/{backbone}.{variant}.tsv")
    conda:
        "../../envs/pipeline.yaml"
    shell:
        "splade-rescale rescale --backbone-dir {input.model} --variant {wildcards.variant} "
        "--spec {params.spec:q} {params.options} --probe={params.probe:q} --out {output} > {log} 2>&1"
