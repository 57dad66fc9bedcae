"""The odf-node daemon: config, services, state DB, IPFS client, RPC, CLI."""
