"""liqo.peering: authentication, identities, tenants, peer and unpeer, what a peer may send and write."""
