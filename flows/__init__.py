"""flows: the Prefect refresh flow, the Hub and snapshot sources, and the CLI."""
