"""The long-running node daemon (``odf-node run``): services, pipelines, RPC and HTTP."""
