"""liqo.network: the fabric's pods, tunnels and routes between clusters, ``liqoctl test network``, peer pools."""
