"""The network fabric: pods of peered clusters reach each other through a WireGuard gateway per peering.

Each cluster names a peer's networks on its own (:mod:`~liqo.network.ipam`), so two clusters may use the
same pod CIDR; each gateway rewrites its own cluster's addresses into the peer's names for them (double
NAT), and a node agent routes the peer's names to the gateway. What to write — nftables rulesets, routes,
``wg`` arguments — is computed by pure functions here; one small runner (:mod:`~liqo.network.runner`)
executes it, and tests replace it.
"""
