"""The lease archive: closed GPULeases as Parquet files (docs/archive.md), written and read with DuckDB.

``schema`` (the row of one lease, no DuckDB), ``manifest`` (the archive's table of contents), ``store`` (writing:
``leases archive``), ``reader`` (reading and checking: ``leases audit --archive``, ``leases archive --verify``).
Only this package imports duckdb, and only the archive commands import this package, so ``kubectl runs --help``
and every other command start without it (tests/unit/test_fast_start.py).
"""
