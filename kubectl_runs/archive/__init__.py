"""The lease archive: closed GPULeases as Parquet files (docs/archive.md), written and read with DuckDB.

``schema`` (the row of one lease, no DuckDB), ``manifest`` (the archive's table of contents), ``store`` (writing:
``leases archive``), ``reader`` (reading and checking: ``leases audit --archive``, ``leases archive --verify``), ``relation`` (the audit window as one DuckDB view, ``audit_leases``: archived ∪
live leases that held GPUs in the window, each once, instants clipped to it in epoch microseconds).
Only this package imports duckdb, and only the archive commands import this package, so ``kubectl runs --help``
and every other command start without it (tests/unit/test_fast_start.py).
"""
