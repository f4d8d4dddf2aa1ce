"""FedMGDA+ reproduction: `snakemake --cores N` builds every table and figure of the paper
(config/config.yaml); `--configfile config/quick.yaml` the offline quick profile. See
docs/workflow.md. Target rules live here (Snakemake ignores a default target in an include)."""


include: "workflow/Snakefile"


rule all:
    default_target: True
    input:
        TABLE_FILES,
        FIGURE_FILES,
        CLAIM_FILES,
        REPORT_FILES,


rule runs:
    input:
        ALL_RUNS,


rule tables:
    input:
        TABLE_FILES,


rule figures:
    input:
        FIGURE_FILES,


rule claims:
    input:
        CLAIM_FILES,


rule report:
    input:
        REPORT_FILES,
