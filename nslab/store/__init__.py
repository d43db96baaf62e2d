"""Store: results on disk and what is drawn from them (records, provenance,
statistics, published reference data, plots, pictures, reports); reads stored files,
builds nothing."""
