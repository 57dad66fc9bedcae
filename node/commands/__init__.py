"""The command layer: every user-facing command declared once, run in-process or over JSON-RPC.

``spec.py`` holds the declaration types, ``catalog.py`` the declarations, ``dispatch.py`` runs
a command on a home (daemon or in-process), ``cli.py`` generates the typer commands. The daemon
generates its RPC methods from the same declarations (``node/daemon/rpc_api.py``).
"""
