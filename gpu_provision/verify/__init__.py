"""Controller side of verification: expectations per node, the agent bundle, collection and the fleet table."""
