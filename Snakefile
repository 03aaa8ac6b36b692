# remat: replicate Chen et al. 2016 and Korthikanti et al. 2022, then render the reports.
#   snakemake --cores all                                   # CPU defaults (config/config.yaml)
#   snakemake --cores all --configfile config/gpu.yaml ...  # paper-like sizes on a GPU node (README)
# Rules live in workflow/rules/*.smk; each is a one-line shell calling `remat <subcommand>`, with a log.

from snakemake.utils import min_version

min_version("9.0")


configfile: "config/config.yaml"


include: "workflow/rules/config.smk"
include: "workflow/rules/common.smk"
include: "workflow/rules/chen.smk"
include: "workflow/rules/korthikanti.smk"
include: "workflow/rules/sweeps.smk"
include: "workflow/rules/offload.smk"
include: "workflow/rules/planner.smk"
include: "workflow/rules/reports.smk"


rule all:
    input:
        all_targets(),
    default_target: True
