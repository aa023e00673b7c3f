rule norms_backbone:
    input:
        model=res("backbones/{backbone}/model"),
        probe=[config["probe"]["queries"], config["probe"]["passages"]],
    output:
        res("norms/{backbone}.json"),
    params:
        probe=as_json(config["probe"]),
    log:
        res("logs/norms/{backbone}.log"),
    benchmark:
        res("benchmarks/norms/{backbone}.tsv")
    conda:
        "../../envs/pipeline.yaml"
    shell:
        "splade-rescale measure-norms --model {input.model} --probe {params.probe:q} --out {output} "
        "--label backbone={wildcards.backbone} --label variant=backbone > {log} 2>&1"


rule norms_variant:
    input:
        model=res("models/{backbone}/{variant}/init"),
        probe=[config["probe"]["queries"], config["probe"]["passages"]],
    output:
        res("norms/{backbone}/{variant}.json"),
    params:
        probe=as_json(config["probe"]),
    log:
        res("logs/norms/{backbone}.{variant}.log"),
    benchmark:
        res("benchmarks/norms/{backbone}.{variant}.tsv")
    conda:
        "../../envs/pipeline.yaml"
    shell:
        "splade-rescale measure-norms --model {input.model} --probe {params.probe:q} --out {output} "
        "--label backbone={wildcards.backbone} --label variant={wildcards.variant} > {log} 2>&1"


rule norms_table:
    input:
        norm_files(),
    output:
        md=res("tables/norms.md"),
        csv=res("tables/norms.csv"),
    log:
        res("logs/norms_table.log"),
    conda:
        "../../envs/pipeline.yaml"
    shell:
        "splade-rescale norms-table --inputs {input} --md {output.md} --csv {output.csv} > {log} 2>&1"
