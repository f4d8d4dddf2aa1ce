"""Raw files of the real datasets (CIFAR-10, F-MNIST, FEMNIST, Shakespeare, Adult), checked by
checksum and fetched when missing. Local rule: login nodes have the network, compute nodes may not.
The offline datasets (synthetic, digits) have no raw files."""


localrules:
    download,


rule download:
    output:
        download_marker("{dataset}"),
    params:
        raw_dir=lambda w: RAW_DIR,
        no_download="" if config["allow_download"] else "--no-download",
        wf=WORKFLOW_CLI,
    log:
        f"{LOGS}/download/{{dataset}}.log",
    conda:
        CONDA_ENV
    shell:
        "{params.wf} download --dataset {wildcards.dataset:q} --raw-dir {params.raw_dir:q} "
        "{params.no_download} --done {output:q} > {log:q} 2>&1"
