"""Fleet analysis (pure): many nodes' snapshots -> one verdict. Per-node verdicts from the single-node
engine, rank groups that span nodes joined and compared (``groups``, ``collective``), nodes folded into
classes (``fold``), and which nodes a sweep should look at again (``confirm``). The fan-out that
collects the snapshots is ``vllmdiag/sweep/``; drawing the result is ``vllmdiag/render/``."""
