# Chen et al. 2016: the numpy engine (gradient checks, segments, depth, Revolve), memory planning on graphs
# (numpy nets executed; the paper's ResNet and LSTM traced under fake tensors).


rule chen_check:
    output:
        "results/chen/check.csv",
    params:
        p=params_json("chen", "check"),
    log:
        "logs/chen/check.log",
    benchmark:
        bench("chen_check"),
    # the remat CLI imports torch (and chen-resnet / chen-lstm trace torch models)
    conda:
        TORCH_ENV
    shell:
        "remat experiment chen-check --params {params.p} --out {output} > {log} 2>&1"


rule chen_sweep:
    output:
        "results/chen/{sweep}.csv",
    wildcard_constraints:
        sweep="segments|depth|revolve|graph-check|resnet|lstm",
    params:
        p=lambda wc: params_json("chen", wc.sweep),
    log:
        "logs/chen/{sweep}.log",
    benchmark:
        bench("chen_sweep", "sweep"),
    # the remat CLI imports torch (and chen-resnet / chen-lstm trace torch models)
    conda:
        TORCH_ENV
    shell:
        "remat experiment chen-{wildcards.sweep} --params {params.p} --out {output} > {log} 2>&1"


rule chen_figure:
    input:
        "results/chen/{sweep}.csv",
    output:
        png="figures/chen_{sweep}.png",
        svg="figures/chen_{sweep}.svg",
    wildcard_constraints:
        sweep="segments|depth|resnet|lstm",
    log:
        "logs/figures/chen_{sweep}.log",
    benchmark:
        bench("chen_figure", "sweep"),
    conda:
        "../../envs/reports.yaml"
    shell:
        "remat figure chen-{wildcards.sweep} --inputs {input} --out {output.png} > {log} 2>&1"


rule chen_speed:
    output:
        "results/chen/speed/{device}.csv",
    wildcard_constraints:
        device=config["device"],  # another device's table is an input only
    params:
        p=lambda wc: params_json("chen", "speed", device=wc.device),
    threads: ALONE  # times: alone on the machine (common.smk); intra-op threads while timing: chen.speed.threads
    priority: TIMED_FIRST
    resources:
        gpu=lambda wc: int(wc.device == "cuda"),
    log:
        "logs/chen/speed/{device}.log",
    benchmark:
        bench("chen_speed", "device"),
    conda:
        TORCH_ENV
    shell:
        "remat experiment chen-speed --params {params.p} --out {output} > {log} 2>&1"
