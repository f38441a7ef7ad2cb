"""The asyncio shell around the sans-I/O core."""
