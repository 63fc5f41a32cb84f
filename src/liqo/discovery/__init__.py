"""Discovery: how a cluster learns of others it may peer with, beyond being told (``liqoctl peer``).

A cluster announces itself (:mod:`~liqo.discovery.announcements`) on its LAN by multicast DNS, and its
operator may publish the same records in a DNS zone. What a cluster hears becomes, under its own policy,
a ForeignCluster like any other: discovery never weakens authentication, it only saves typing the peer's
endpoint and key fingerprint, which the handshake then demands that the peer prove.
"""
