# Rescaling MLM-Head for Neural Sparse Retrieval: the whole experiment as one DAG.
#   snakemake --cores 16 all                                  (config/config.yaml, GPU + internet)
#   snakemake all --cores 2 --configfile config/demo.yaml     (offline CPU demo; `make demo`)
from snakemake.utils import min_version

min_version("9.0")

# The paper's experiment unless --configfile names another (a whole config, not a patch:
# backbone and dataset lists are replaced, not merged). Recipes always come from
# config/recipes.yaml; a config's own `recipes:` entries take precedence.
if not workflow.overwrite_configfiles:

    configfile: "config/config.yaml"


include: "workflow/rules/common.smk"
include: "workflow/rules/settings.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/backbones.smk"
include: "workflow/rules/norms.smk"
include: "workflow/rules/rescale.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/published.smk"
include: "workflow/rules/index.smk"
include: "workflow/rules/retrieve.smk"
include: "workflow/rules/evaluate.smk"
include: "workflow/rules/tables.smk"


rule all:
    input:
        all_targets(),
    default_target: True
