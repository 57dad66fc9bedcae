"""Gossip layer: signed announcements, the sans-IO protocol core and the libp2p host."""
