"""Script of the pack rules (workflow/rules/train.smk): trains a pack's runs in one process and
appends the pack's log to every run's train.log (fedmgda.packs.train_pack)."""

from fedmgda.packs import train_pack

train_pack(snakemake.params.train, snakemake.params.members, snakemake.log.pack,  # noqa: F821
           snakemake.threads)  # noqa: F821
