"""The companion reconciler (``kubectl runs reconcile``): watches the jobtree.dev kinds and Nodes, evaluates the
same pure engine as the reports, and writes what it computed — status, and with ``--manage-leases`` the GPULease
ledger and Reservations — through a separate applier. The plan of writes is data (``actions.py``), so
``--dry-run`` renders it and tests can read it."""
