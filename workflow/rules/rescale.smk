rule rescale_head:
    wildcard_constraints:
        variant=VARIANT_PATTERN,  # a variant's, shared by its seeds' runs
    input:
        unpack(rescale_norm_inputs),
        model="results/backbones/{backbone}/model",
    output:
        directory("results/models/{backbone}/{variant}/init"),
    params:
        spec=lambda w: as_json(config["variants"][w.variant]),
        options=rescale_options,
    log:
        "results/logs/rescale/{backbone}.{variant}.log",
    benchmark:
        "results/benchmarks/rescale/{backbone}.{variant}.tsv"
    conda:
        "../../envs/pipeline.yaml"
    shell:
        "splade-rescale rescale --backbone-dir {input.model} --variant {wildcards.variant} "
        "--spec {params.spec:q} {params.options} --out {output} > {log} 2>&1"
