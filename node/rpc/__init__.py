"""Local JSON-RPC 2.0 control API: registry, server, client, cookie and error mapping.

Import the submodules directly (``node.rpc.server``, ``node.rpc.client``...); this package
re-exports nothing so that the CLI's ``node.rpc.client`` import stays cheap.
"""
