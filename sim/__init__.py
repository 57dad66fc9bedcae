"""Network simulations of peer validation (discrete-event and real clusters)."""
