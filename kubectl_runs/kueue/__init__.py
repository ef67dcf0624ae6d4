"""Kueue and Kaiwo, read into their own small model (not Budgets/envelopes: docs/kueue.md says where the two
differ). ``model`` holds the typed records, ``quota`` Kueue's quota arithmetic, ``usage`` and ``explain`` the
two reports; all pure."""
