# Reports: each reads results/ and figures/ (never runs an experiment) and renders reports/NAME.html.

REPORT_INPUTS = {
    "chen2016": expand("results/chen/{t}.csv", t=["check", "segments", "depth", "revolve", "graph-check", "resnet", "lstm"])
    + expand("figures/chen_{f}.png", f=["segments", "depth", "resnet", "lstm"])
    + chen_speed_tables(),
    "korthikanti2022": expand(
        "results/korthikanti/{t}.csv", t=["table2", "items", "flops", "memory", "modern", "table4", "figure8"]
    )
    + expand("figures/korthikanti_{f}.png", f=["percent", "memory", "figure8"]),
    "sweeps": [t for s in SWEEPS for t in sweep_tables(s)] + expand("figures/sweeps_{s}.png", s=SWEEPS),
    "offload": expand("results/offload/{d}/{t}.csv", d=OFFLOAD_DEVICE, t=["bandwidth", "steps", "breakeven"])
    + expand("figures/offload_{f}.png", f=["bandwidth", "breakeven"]),
    "planner": expand("results/planner/{t}.csv", t=["paper", "frontier"]) + validate_tables()
    + ["results/korthikanti/table5.csv"]
    + expand("figures/planner_{f}.png", f=["frontier", "measured", "peak"]),
}


rule report:
    input:
        qmd="reports/{name}.qmd",
        data=lambda wc: REPORT_INPUTS[wc.name],
    output:
        "reports/{name}.html",
    wildcard_constraints:
        name="|".join(REPORT_INPUTS),
    params:
        offload_device=OFFLOAD_DEVICE,  # whose offload tables the offload report reads (offload.report_device)
    log:
        "logs/reports/{name}.log",
    conda:
        "../../envs/reports.yaml"
    shell:
        "REMAT_OFFLOAD_DEVICE={params.offload_device} remat report {wildcards.name} --engine auto > {log} 2>&1"


rule report_index:
    input:
        qmd="reports/index.qmd",
        reports=expand("reports/{name}.html", name=config["reports"]),
    output:
        "reports/index.html",
    log:
        "logs/reports/index.log",
    conda:
        "../../envs/reports.yaml"
    shell:
        "remat report index --engine auto > {log} 2>&1"
