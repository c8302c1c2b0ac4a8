"""Controller side of verification: expectations per node, collection and the fleet table."""
