"""Example pipeline: simulated trades -> Spark (10-second VWAP and volume per symbol) -> broker + Parquet."""
