"""Chen et al. 2016 on a general computation graph: the graph (ir), Algorithm 2's program with mirror
counts (program), §3's static memory plan (memory), Algorithm 3 and its comparisons (budget), the
strategies of Figure 5 (strategies), the numpy engine (engine, nets) and torch models traced under
FakeTensorMode (trace)."""
