"""Wire schemas: ODF flatbuffers, engine gRPC, gossip messages, OpenRPC."""
