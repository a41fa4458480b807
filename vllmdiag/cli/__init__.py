"""The doors (ClusterShell's CLI/ shape): every command of ``vllmdiag`` lives here and nothing else imports
it. ``app`` is the entry point (``main``: the fast paths, then typer), ``options`` the one table of
options typer, the collector's argparse door and the fast triage path are built from."""
