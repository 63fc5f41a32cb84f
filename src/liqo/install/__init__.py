"""Installing liqo on a cluster: manifests, and the launcher that fits the cluster."""
