"""The paper's claims checked on the runs (fedmgda.claims): results/<profile>/claims.csv and
claims.md, from exactly the runs the claims read, so `snakemake results/<profile>/claims.md`
builds only those."""

from fedmgda.claim_parsing import claim_runs

if CLAIMS:

    rule check_claims:
        input:
            run_summaries(claim_runs(CLAIMS)),
        output:
            csv=report(f"{RESULTS}/claims.csv", caption=CAPTIONS["claims"], category="Claims",
                       labels={"file": "csv"}),
            md=report(f"{RESULTS}/claims.md", caption=CAPTIONS["claims"], category="Claims",
                      labels={"file": "markdown"}),
        params:
            spec=spec_to_json(CLAIMS),
            runs_dir=lambda w: RUNS_DIR,
            profile=PROFILE,
            wf=WORKFLOW_CLI,
        log:
            f"{LOGS}/claims.log",
        benchmark:
            f"{RESULTS}/benchmarks/claims.tsv"
        resources:
            mem_mb=2000,
            runtime=15,
        conda:
            CONDA_ENV
        shell:
            "printf '%s' {params.spec:q} | {params.wf} claims --spec - "
            "--runs-dir {params.runs_dir:q} --profile {params.profile:q} "
            "--csv {output.csv:q} --md {output.md:q} > {log:q} 2>&1"
