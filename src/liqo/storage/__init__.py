"""Storage at home: the virtual StorageClass ``liqo``, whose claims get their volume where their first pod runs.

A provider's side of storage (what it offers, what a peer's claims may be, the budget) is in
:mod:`liqo.sharing` and :mod:`liqo.offloading`; a claim's copy into the twin is the virtual kubelet's.
"""
