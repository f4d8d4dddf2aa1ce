"""One partition file per (dataset, partition, options, seed) -- shared by every run that uses it.
Partitions that do not depend on the seed (domain, natural without shuffle) are built once ("fixed")."""


rule partition:
    input:
        partition_input,
    output:
        f"{RESULTS}/partitions/{{part}}.npz",
    params:
        dataset=lambda w: REGISTRY.partitions[w.part]["dataset"],
        scheme=lambda w: REGISTRY.partitions[w.part]["partition"] or "",
        seed=lambda w: REGISTRY.partitions[w.part]["seed"],
        options=lambda w: json.dumps(REGISTRY.partitions[w.part]["options"], sort_keys=True),
        raw_dir=lambda w: RAW_DIR,
        wf=WORKFLOW_CLI,
    log:
        f"{LOGS}/partitions/{{part}}.log",
    threads: 1
    resources:
        mem_mb=4000,
        runtime=30,
    conda:
        CONDA_ENV
    shell:
        "{params.wf} partition --dataset {params.dataset:q} --partition '{params.scheme}' "
        "--seed {params.seed} --options {params.options:q} --raw-dir {params.raw_dir:q} "
        "--out {output:q} > {log:q} 2>&1"
