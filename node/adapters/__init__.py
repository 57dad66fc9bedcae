"""Adapters: the outside world behind the application layer's ports (``node/app/ports.py``).

Each module implements one port over real infrastructure — the libp2p gossip service, the
embedded IPFS node (Helia) or kubo over HTTP, pulls over the transfer protocols, the SQLite
state — and, where a node can run without that part, a disabled twin whose calls are harmless
no-ops or clear errors.
"""
