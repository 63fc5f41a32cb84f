"""Resource sharing: what a provider can offer each consumer, and whether a consumer takes it.

The decisions are pure functions over objects as the API server returns them, so they are tested without a
cluster: :mod:`~liqo.sharing.capacity` (free capacity from Nodes and Pods), :mod:`~liqo.sharing.policy`
(SharingPolicy → ResourceOffer, and when to refresh it) and :mod:`~liqo.sharing.acceptance` (the consumer's
offer policy). The controllers around them (:mod:`~liqo.sharing.offers`, :mod:`~liqo.sharing.virtualnodes`)
only read caches, call these, and write the result. The design is docs/peering.md, "Negotiation".
"""
