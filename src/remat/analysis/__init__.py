"""The analysis layer: result tables -> findings (``remat.analysis.findings``), the one judge of every claim.

    from remat.analysis import catalog, findings
    frame = catalog.read("korthikanti.table2")               # a result table by its id (catalog: one home of paths)
    F = findings.load("korthikanti2022")                      # results/findings/korthikanti2022.csv, by id
    F["table4.selective"].ours, F["table4.selective"].status

One module per report (``chen2016``, ``korthikanti2022``, ``sweeps``, ``offload``, ``planner``), each with
``findings(root) -> list[Finding]`` and the display tables its report shows; ``index`` collects the claims the
scorecard lists. Paper values live in ``remat.paper`` (a leaf: experiments write them beside their
measurements), tolerances in ``remat.analysis.tolerances``. Reports never judge: they look findings up.
"""
