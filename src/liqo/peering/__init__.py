"""Peering: how two clusters come to trust each other and how a consumer gets in, and out, of a provider.

Authentication (:mod:`~liqo.peering.authprotocol`, :mod:`~liqo.peering.authserver`,
:mod:`~liqo.peering.authclient`, :mod:`~liqo.peering.provisioning`) turns a token given out of band into a
short-lived client certificate confined to the consumer's tenant namespace on the provider; the peering
controllers build on those identities. The design is docs/peering.md.
"""
