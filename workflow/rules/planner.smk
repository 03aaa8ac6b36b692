# Planner: exact per-layer policies (none / selective / full / offload) for the paper's models on 80 GB GPUs,
# the Pareto frontier against the baselines (incl. torch's sac_milp), and plans applied to tiny models on
# config.device and measured.


rule planner_experiment:
    output:
        "results/planner/{name}.csv",
    wildcard_constraints:
        name="paper|frontier|validate",
    params:
        p=lambda wc: params_json("planner", wc.name, **({"device": config["device"]} if wc.name == "validate" else {})),
    threads: 1
    resources:
        gpu=lambda wc: int(wc.name == "validate" and config["device"] == "cuda"),
        timing=lambda wc: int(wc.name == "validate"),
    log:
        "logs/planner/{name}.log",
    conda:
        TORCH_ENV
    shell:
        "remat experiment planner-{wildcards.name} --params {params.p} --out {output} > {log} 2>&1"


rule planner_figure:
    input:
        lambda wc: "results/planner/frontier.csv" if wc.name == "frontier" else "results/planner/validate.csv",
    output:
        png="figures/planner_{name}.png",
        svg="figures/planner_{name}.svg",
    wildcard_constraints:
        name="frontier|measured|peak",
    log:
        "logs/figures/planner_{name}.log",
    conda:
        "../../envs/reports.yaml"
    shell:
        "remat figure planner-{wildcards.name} --inputs {input} --out {output.png} > {log} 2>&1"
