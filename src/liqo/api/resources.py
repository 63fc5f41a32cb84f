"""The custom resources of liqo, as :class:`~liqo.kube.resources.Resource` descriptors (request paths)."""

from __future__ import annotations

from liqo.kube.resources import Resource

VERSION = "v1alpha1"
DISCOVERY = "discovery.liqo.io"
SHARING = "sharing.liqo.io"
VIRTUAL_KUBELET = "virtualkubelet.liqo.io"
OFFLOADING = "offloading.liqo.io"
NETWORKING = "networking.liqo.io"

FOREIGN_CLUSTERS = Resource(DISCOVERY, VERSION, "foreignclusters", "ForeignCluster", namespaced=False)
RESOURCE_REQUESTS = Resource(DISCOVERY, VERSION, "resourcerequests", "ResourceRequest", namespaced=True)
RESOURCE_OFFERS = Resource(SHARING, VERSION, "resourceoffers", "ResourceOffer", namespaced=True)
SHARING_POLICIES = Resource(SHARING, VERSION, "sharingpolicies", "SharingPolicy", namespaced=False)
VIRTUAL_NODES = Resource(VIRTUAL_KUBELET, VERSION, "virtualnodes", "VirtualNode", namespaced=True)
SHADOW_PODS = Resource(VIRTUAL_KUBELET, VERSION, "shadowpods", "ShadowPod", namespaced=True)
NAMESPACE_OFFLOADINGS = Resource(OFFLOADING, VERSION, "namespaceoffloadings", "NamespaceOffloading", namespaced=True)
NAMESPACE_MAPS = Resource(OFFLOADING, VERSION, "namespacemaps", "NamespaceMap", namespaced=True)
NETWORK_CONFIGS = Resource(NETWORKING, VERSION, "networkconfigs", "NetworkConfig", namespaced=True)
DISCOVERY_SOURCES = Resource(DISCOVERY, VERSION, "discoverysources", "DiscoverySource", namespaced=False)
WORKING_MODES = Resource(OFFLOADING, VERSION, "workingmodes", "WorkingMode", namespaced=False)

ALL = (
    FOREIGN_CLUSTERS,
    RESOURCE_REQUESTS,
    RESOURCE_OFFERS,
    SHARING_POLICIES,
    VIRTUAL_NODES,
    SHADOW_PODS,
    NAMESPACE_OFFLOADINGS,
    NAMESPACE_MAPS,
    NETWORK_CONFIGS,
    DISCOVERY_SOURCES,
    WORKING_MODES,
)
