# Korthikanti et al. 2022 at paper scale: per-layer accounting (fake tensors, fake process group), FLOPs,
# memory per GPU, modern layers. Runs on the CPU in seconds whatever config.device says.


rule korthikanti_experiment:
    output:
        "results/korthikanti/{name}.csv",
    wildcard_constraints:
        name="table2|items|flops|memory|modern|table4|figure8|table5",
    params:
        p=lambda wc: params_json("korthikanti", wc.name),
    log:
        "logs/korthikanti/{name}.log",
    benchmark:
        bench("korthikanti_experiment", "name"),
    conda:
        "../../envs/torch-cpu.yaml"
    shell:
        "remat experiment korthikanti-{wildcards.name} --params {params.p} --out {output} > {log} 2>&1"


rule korthikanti_figure:
    input:
        lambda wc: {
            "percent": "results/korthikanti/table2.csv",
            "memory": "results/korthikanti/memory.csv",
            "figure8": "results/korthikanti/figure8.csv",
        }[wc.name],
    output:
        png="figures/korthikanti_{name}.png",
        svg="figures/korthikanti_{name}.svg",
    wildcard_constraints:
        name="percent|memory|figure8",
    log:
        "logs/figures/korthikanti_{name}.log",
    benchmark:
        bench("korthikanti_figure", "name"),
    conda:
        "../../envs/reports.yaml"
    shell:
        "remat figure korthikanti-{wildcards.name} --inputs {input} --out {output.png} > {log} 2>&1"
