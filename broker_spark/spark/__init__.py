"""The Spark data source ``broker``: spool, offsets, options and schemas it stands on."""
